"""The numba fallback of the deployed convolution, for machines without a C compiler (the ``deploy`` extra).

The same arithmetic as kernel.c, written in the masked form that covers every case: each pixel's channels packed
into 64-bit words (value bit ``d >= 0``, mask bit "counts": always for {-1,+1}, ``d != 0`` for torch.sign's three
levels, ``d >= 0`` for {0,1}), each output ``acc = popcount(m) - 2 * popcount(m AND (a XOR w))`` summed over the taps
inside the image (exact zero padding; +-1 padding fills border taps), then the epilogue's two float32 roundings.
Compiled by numba on first use, parallel over (image, output row) pairs.
"""

from __future__ import annotations

import importlib.util
import weakref
from typing import Any

import numpy as np
import torch

from arbibench.deploy.semantics import PM1, PM1_ZERO, BinaryConvSpec


class NumbaUnavailableError(RuntimeError):
    """numba is not installed (pip install 'arbibench[deploy]')."""


def check_numba() -> None:
    if importlib.util.find_spec("numba") is None:
        raise NumbaUnavailableError("numba is not installed (pip install 'arbibench[deploy]', or choose the kernel "
                                    "or emulator backend)")


def channel_words(bits: np.ndarray) -> np.ndarray:
    """(..., C) booleans -> (..., ceil(C / 64)) uint64 words, bit c of word c // 64 (little-endian)."""
    c = bits.shape[-1]
    nw = (c + 63) // 64
    padded = np.zeros((*bits.shape[:-1], nw * 64), dtype=np.uint8)
    padded[..., :c] = bits
    return np.packbits(padded, axis=-1, bitorder="little").view("<u8")


_COMPILED: dict[str, Any] = {}
_WEIGHTS: weakref.WeakKeyDictionary[BinaryConvSpec, tuple[np.ndarray, np.ndarray]] = weakref.WeakKeyDictionary()


def _compile() -> Any:
    if "conv" in _COMPILED:
        return _COMPILED["conv"]
    check_numba()
    numba: Any = importlib.import_module("numba")  # start-up: optional, and compiling takes seconds

    def swar_popcount(v: Any) -> Any:  # SWAR popcount of a uint64
        v = v - ((v >> np.uint64(1)) & np.uint64(0x5555555555555555))
        v = (v & np.uint64(0x3333333333333333)) + ((v >> np.uint64(2)) & np.uint64(0x3333333333333333))
        v = (v + (v >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
        return np.int64((v * np.uint64(0x0101010101010101)) >> np.uint64(56))

    popcount = numba.njit(inline="always")(swar_popcount)

    def body(val: Any, msk: Any, wval: Any, wmask: Any, ones: Any, kh: Any, kw: Any, sh: Any, sw: Any, ph: Any,
             pw: Any, pad_value: Any, mul: Any, add: Any, out: Any) -> None:
        n_img, h, w, nw = val.shape
        o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
        for unit in numba.prange(n_img * oh):
            n = unit // oh
            oy = unit % oh
            for ox in range(ow):
                for oc in range(o):
                    cnt = 0
                    pop = 0
                    for ky in range(kh):
                        iy = oy * sh - ph + ky
                        for kx in range(kw):
                            ix = ox * sw - pw + kx
                            inside = 0 <= iy < h and 0 <= ix < w
                            if not inside and pad_value == 0:
                                continue  # exact zero padding: the tap contributes nothing
                            t = ky * kw + kx
                            for q in range(nw):
                                if inside:
                                    av = val[n, iy, ix, q]
                                    am = msk[n, iy, ix, q]
                                else:
                                    am = ones[q]
                                    av = ones[q] if pad_value > 0 else np.uint64(0)
                                m = am & wmask[oc, t, q]
                                cnt += popcount(m)
                                pop += popcount(m & (av ^ wval[oc, t, q]))
                    acc = cnt - 2 * pop
                    scaled = np.float32(np.float32(acc) * mul[oc])  # rounded to float32 here ...
                    out[n, oc, oy, ox] = np.float32(scaled + add[oc])  # ... and again here

    conv = numba.njit(parallel=True)(body)
    _COMPILED["conv"] = conv
    return conv


def _weights(spec: BinaryConvSpec) -> tuple[np.ndarray, np.ndarray]:
    hit = _WEIGHTS.get(spec)
    if hit is None:
        signs = spec.signs.detach().cpu().numpy()
        o, c, kh, kw = signs.shape
        taps = signs.transpose(0, 2, 3, 1).reshape(o, kh * kw, c)
        hit = _WEIGHTS[spec] = (channel_words(taps > 0), channel_words(taps != 0))
    return hit


def numba_conv(d: torch.Tensor, spec: BinaryConvSpec, threads: int = 1) -> torch.Tensor:
    """The deployed output of ``spec`` for the sign's argument ``d``, computed by numba."""
    conv = _compile()
    numba: Any = importlib.import_module("numba")
    o, c, kh, kw = spec.signs.shape
    n, _, h, w = d.shape
    oh, ow = spec.output_size(h, w)
    x = d.detach().permute(0, 2, 3, 1).numpy()  # (N, H, W, C)
    val = channel_words(x >= 0)
    if spec.alphabet == PM1:
        msk = channel_words(np.ones_like(x, dtype=bool))
    elif spec.alphabet == PM1_ZERO:
        msk = channel_words(x != 0)
    else:
        msk = val
    ones = channel_words(np.ones(c, dtype=bool))
    wval, wmask = _weights(spec)
    out = np.empty((n, o, oh, ow), dtype=np.float32)
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    conv(val, msk, wval, wmask, ones, kh, kw, spec.stride[0], spec.stride[1], spec.padding[0], spec.padding[1],
         spec.pad_value, spec.mul.numpy(), spec.add.numpy(), out)
    return torch.from_numpy(out)
