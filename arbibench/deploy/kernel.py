"""The compiled kernel, called through ctypes on tensor memory: packed weights once per layer, one call per forward.

The weights of each output channel are packed the way kernel.c lays out a patch: the ``KH * KW`` taps end to end,
``C`` bits each (bit ``t * C + c``), in ``L = ceil(KH * KW * C / 64)`` 64-bit words; four output channels are
interleaved word by word so that one AVX2 vector holds the same word of four channels.
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass

import numpy as np
import torch

from arbibench.deploy.build import KernelUnavailableError, load_library
from arbibench.deploy.semantics import ALPHABETS, BinaryConvSpec

ISAS: dict[str, int] = {"auto": 0, "scalar": 1, "avx2": 2}
ISA_NAMES = {1: "scalar", 2: "avx2"}


@dataclass(frozen=True)
class PackedWeights:
    """A layer's kernel as kernel.c reads it (int64 tensors holding the uint64 words)."""

    value: torch.Tensor  # (O4 / 4, L, 4) words: bit set where the weight is +1
    mask: torch.Tensor | None  # same layout: bit set where the weight is not 0; None for the dense form
    tap_popcount: torch.Tensor  # int32 (O, KH * KW): +1 weights per tap, for exact zero padding


def _words(bits: np.ndarray, length: int) -> np.ndarray:
    """(O, nbits) booleans -> (O, length) uint64 words, bit i of word k = bit 64 k + i (little-endian)."""
    o = bits.shape[0]
    padded = np.zeros((o, length * 64), dtype=np.uint8)
    padded[:, : bits.shape[1]] = bits
    return np.packbits(padded, axis=1, bitorder="little").view("<u8").reshape(o, length)


def _interleave(words: np.ndarray) -> torch.Tensor:
    o, length = words.shape
    o4 = (o + 3) // 4 * 4
    full = np.zeros((o4, length), dtype=np.uint64)
    full[:o] = words
    return torch.from_numpy(np.ascontiguousarray(full.reshape(o4 // 4, 4, length).transpose(0, 2, 1)).view(np.int64))


def pack_weights(spec: BinaryConvSpec) -> PackedWeights:
    """The packed form of ``spec``'s kernel (computed once per spec by :func:`packed`)."""
    signs = spec.signs.detach().cpu().numpy()
    o, c, kh, kw = signs.shape
    taps = signs.transpose(0, 2, 3, 1)  # (O, KH, KW, C): bit t * C + c
    length = (kh * kw * c + 63) // 64
    value = _words((taps > 0).reshape(o, -1), length)
    mask = _words((taps != 0).reshape(o, -1), length) if spec.masked else None
    tap_pop = torch.from_numpy((taps > 0).reshape(o, kh * kw, c).sum(axis=2).astype(np.int32))
    return PackedWeights(_interleave(value), None if mask is None else _interleave(mask), tap_pop.contiguous())


_PACKED: weakref.WeakKeyDictionary[BinaryConvSpec, PackedWeights] = weakref.WeakKeyDictionary()


def packed(spec: BinaryConvSpec) -> PackedWeights:
    hit = _PACKED.get(spec)
    if hit is None:
        hit = _PACKED[spec] = pack_weights(spec)
    return hit


def resolve_isa(isa: str = "auto") -> str:
    """The popcount this machine's kernel uses for ``isa`` ("auto", "scalar", "avx2"); KernelUnavailableError."""
    if isa not in ISAS:
        raise ValueError(f"unknown isa {isa!r}; known: {', '.join(ISAS)}")
    got = int(load_library().abk_resolve_isa(ISAS[isa]))
    if got < 0:
        raise KernelUnavailableError(f"this CPU has no {isa}; use isa='auto' or 'scalar'")
    return ISA_NAMES[got]


def kernel_conv(
    d: torch.Tensor, spec: BinaryConvSpec, threads: int = 1, isa: str = "auto", lib: ctypes.CDLL | None = None
) -> torch.Tensor:
    """The deployed output of ``spec`` for the sign's argument ``d`` (N, C, H, W), computed by kernel.c.

    ``lib``: the loaded library (:func:`build.load_library`, which checks the cache on every call, by default).
    """
    lib = load_library() if lib is None else lib
    if d.dtype != torch.float32 or d.dim() != 4 or d.device.type != "cpu":
        raise ValueError(f"{spec.name}: the kernel takes a float32 (N, C, H, W) CPU tensor, got {d.dtype} {d.shape}")
    o, c, kh, kw = spec.signs.shape
    n, cin, h, w = d.shape
    if cin != c:
        raise ValueError(f"{spec.name}: input has {cin} channels, the kernel {c}")
    oh, ow = spec.output_size(h, w)
    x = d.contiguous()
    out = torch.empty((n, o, oh, ow), dtype=torch.float32)
    p = packed(spec)
    mul, add = spec.mul.contiguous(), spec.add.contiguous()
    rc = lib.abk_binary_conv2d(
        x.data_ptr(), n, c, h, w, ALPHABETS[spec.alphabet],
        p.value.data_ptr(), None if p.mask is None else p.mask.data_ptr(), p.tap_popcount.data_ptr(), o, kh, kw,
        spec.stride[0], spec.stride[1], spec.padding[0], spec.padding[1], spec.pad_value,
        mul.data_ptr(), add.data_ptr(), out.data_ptr(), oh, ow,
        max(1, int(threads)), ISAS[isa],
    )
    if rc < 0:
        reason = {-1: f"this CPU has no {isa}", -2: "out of memory", -3: "arguments refused"}.get(rc, f"error {rc}")
        raise KernelUnavailableError(f"{spec.name}: the kernel failed: {reason}")
    return out


def kernel_available() -> tuple[bool, str]:
    """``(True, isa)`` if the kernel builds and loads here, else ``(False, why)``."""
    try:
        return True, resolve_isa("auto")
    except KernelUnavailableError as e:
        return False, str(e)


__all__ = ["ISAS", "PackedWeights", "kernel_available", "kernel_conv", "pack_weights", "packed", "resolve_isa"]
