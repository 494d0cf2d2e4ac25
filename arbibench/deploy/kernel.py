"""The compiled kernel, called through ctypes on tensor memory: packed weights once per layer, one call per forward.

The weights of each output channel are packed the way kernel.c lays out a patch: for each kernel row, its ``KW``
taps end to end, ``C`` bits each (bit ``kx * C + c``), in ``SW = ceil(KW * C / 64)`` 64-bit words; the ``KH`` rows
one after the other, ``KH * SW`` words per output channel.
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass

import numpy as np
import torch

from arbibench.deploy.build import KernelUnavailableError, load_library
from arbibench.deploy.semantics import ALPHABETS, BinaryConvSpec, Glue

ISAS: dict[str, int] = {"auto": 0, "scalar": 1, "avx2": 2, "avx512": 3}
ISA_NAMES = {1: "scalar", 2: "avx2", 3: "avx512"}
MAX_WORDS = 256  # kernel.c's ABK_MAX_WORDS: KH * SW words per patch


@dataclass(frozen=True)
class PackedWeights:
    """A layer's kernel as kernel.c reads it (int64 tensors holding the uint64 words)."""

    value: torch.Tensor  # (O, KH * SW) words: bit set where the weight is +1
    mask: torch.Tensor | None  # same layout: bit set where the weight is not 0; None for the dense form
    mul: torch.Tensor  # float32 (O,): the epilogue
    add: torch.Tensor


def _words(bits: np.ndarray, kh: int, seg_words: int) -> torch.Tensor:
    """(O, KH, KW * C) booleans -> (O, KH * SW) words; bit i of word k = bit 64 k + i of its row (little-endian)."""
    o = bits.shape[0]
    padded = np.zeros((o, kh, seg_words * 64), dtype=np.uint8)
    padded[:, :, : bits.shape[2]] = bits
    words = np.packbits(padded.reshape(o, -1), axis=1, bitorder="little").view("<u8").reshape(o, kh * seg_words)
    return torch.from_numpy(np.ascontiguousarray(words).view(np.int64))


def pack_weights(spec: BinaryConvSpec) -> PackedWeights:
    """The packed form of ``spec``'s kernel (computed once per spec by :func:`packed`)."""
    signs = spec.signs.detach().cpu().numpy()
    o, c, kh, kw = signs.shape
    taps = signs.transpose(0, 2, 3, 1).reshape(o, kh, kw * c)  # bit kx * C + c of row ky
    seg_words = (kw * c + 63) // 64
    if kh * seg_words > MAX_WORDS:
        raise KernelUnavailableError(
            f"{spec.name}: {kh} x {seg_words} words per patch, the kernel holds {MAX_WORDS}; use the emulator"
        )
    return PackedWeights(
        _words(taps > 0, kh, seg_words),
        _words(taps != 0, kh, seg_words) if spec.masked else None,
        spec.mul.detach().to(torch.float32).contiguous(),
        spec.add.detach().to(torch.float32).contiguous(),
    )


_PACKED: weakref.WeakKeyDictionary[BinaryConvSpec, PackedWeights] = weakref.WeakKeyDictionary()


def packed(spec: BinaryConvSpec) -> PackedWeights:
    hit = _PACKED.get(spec)
    if hit is None:
        hit = _PACKED[spec] = pack_weights(spec)
    return hit


def resolve_isa(isa: str = "auto") -> str:
    """The popcount the kernel uses for ``isa`` ("auto", "scalar", "avx2", "avx512"); KernelUnavailableError."""
    if isa not in ISAS:
        raise ValueError(f"unknown isa {isa!r}; known: {', '.join(ISAS)}")
    got = int(load_library().abk_resolve_isa(ISAS[isa]))
    if got < 0:
        raise KernelUnavailableError(f"this CPU has no {isa}; use isa='auto' or 'scalar'")
    return ISA_NAMES[got]


def kernel_conv(
    d: torch.Tensor,
    spec: BinaryConvSpec,
    threads: int = 1,
    isa: str = "auto",
    lib: ctypes.CDLL | None = None,
    *,
    threshold: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    glue: Glue | None = None,
) -> torch.Tensor:
    """The deployed output of ``spec`` for the input ``d`` (N, C, H, W), computed by kernel.c.

    ``threshold``: (N, C) float32, the sign's threshold (``d >= t`` is ``d - t >= 0``), else 0; ``residual``: added
    after the epilogue; ``glue``: the activation after that. ``lib``: the loaded library (default: looked up).
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
    if threshold is not None:
        threshold = threshold.to(torch.float32).expand(n, c).contiguous()
    if residual is not None:
        if residual.shape != out.shape or residual.dtype != torch.float32:
            raise ValueError(f"{spec.name}: residual {tuple(residual.shape)} does not match the output "
                             f"{tuple(out.shape)}")
        residual = residual.contiguous()
    params = None if glue is None else glue.params.contiguous()
    p = packed(spec)
    rc = lib.abk_binary_conv2d(
        x.data_ptr(), n, c, h, w, ALPHABETS[spec.alphabet],
        p.value.data_ptr(), None if p.mask is None else p.mask.data_ptr(), o, kh, kw,
        spec.stride[0], spec.stride[1], spec.padding[0], spec.padding[1], spec.pad_value,
        p.mul.data_ptr(), p.add.data_ptr(),
        None if threshold is None else threshold.data_ptr(), None if residual is None else residual.data_ptr(),
        0 if glue is None else glue.code, None if params is None else params.data_ptr(),
        out.data_ptr(), oh, ow, max(1, int(threads)), ISAS[isa],
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
