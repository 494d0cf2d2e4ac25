"""The numba fallback of the deployed convolution, for machines without a C compiler (the ``deploy`` extra).

The same packed layout and arithmetic as kernel.c (:mod:`arbibench.deploy.kernel` packs the weights): the taps of a
patch laid end to end, ``acc = K - 2 * popcount(patch XOR w)`` (masked: ``popcount(m) - 2 popcount(m AND (patch
XOR w))``), exact zero padding, then the epilogue's two float32 roundings. Compiled by numba on first use, parallel
over (image, output row) pairs.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import torch

from arbibench.deploy.kernel import packed  # the weights packed exactly as the C kernel reads them
from arbibench.deploy.semantics import ALPHABETS, BinaryConvSpec


class NumbaUnavailableError(RuntimeError):
    """numba is not installed (pip install 'arbibench[deploy]')."""


def check_numba() -> None:
    if importlib.util.find_spec("numba") is None:
        raise NumbaUnavailableError("numba is not installed")


_COMPILED: dict[str, Any] = {}


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

    def body(x: Any, alphabet: Any, wval: Any, wmask: Any, wpop: Any, masked: Any, kh: Any, kw: Any, sh: Any,
             sw: Any, ph: Any, pw: Any, pad_value: Any, mul: Any, add: Any, out: Any) -> None:
        n_img, c, h, w = x.shape
        o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
        length = wval.shape[1]
        taps = kh * kw
        for unit in numba.prange(n_img * oh):
            n = unit // oh
            oy = unit % oh
            patch = np.zeros(length + 1, dtype=np.uint64)
            pmask = np.zeros(length + 1, dtype=np.uint64)
            for ox in range(ow):
                patch[:] = 0
                pmask[:] = 0
                valid = 0
                invalid = np.zeros(taps, dtype=np.int64)
                ninvalid = 0
                for ky in range(kh):
                    iy = oy * sh - ph + ky
                    for kx in range(kw):
                        ix = ox * sw - pw + kx
                        t = ky * kw + kx
                        inside = 0 <= iy < h and 0 <= ix < w
                        if not inside and pad_value == 0:
                            invalid[ninvalid] = t
                            ninvalid += 1
                            continue
                        valid += 1
                        for ch in range(c):
                            if inside:
                                v = x[n, ch, iy, ix]
                                vb = v >= 0
                                mb = (v != 0) if alphabet == 1 else (vb if alphabet == 2 else True)
                            else:
                                vb = pad_value > 0
                                mb = True
                            bit = t * c + ch
                            word, sft = bit >> 6, np.uint64(bit & 63)
                            if vb:
                                patch[word] |= np.uint64(1) << sft
                            if mb:
                                pmask[word] |= np.uint64(1) << sft
                for oc in range(o):
                    if masked:
                        cnt = 0
                        pop = 0
                        for k in range(length):
                            m = pmask[k] & wmask[oc, k]
                            cnt += popcount(m)
                            pop += popcount(m & (patch[k] ^ wval[oc, k]))
                        acc = cnt - 2 * pop
                    else:
                        pop = 0
                        for k in range(length):
                            pop += popcount(patch[k] ^ wval[oc, k])
                        for i in range(ninvalid):
                            pop -= wpop[oc, invalid[i]]
                        kk = c * (valid if pad_value == 0 else taps)
                        acc = kk - 2 * pop
                    scaled = np.float32(np.float32(acc) * mul[oc])
                    out[n, oc, oy, ox] = np.float32(scaled + add[oc])

    conv = numba.njit(parallel=True)(body)
    _COMPILED["conv"] = conv
    return conv


def numba_conv(d: torch.Tensor, spec: BinaryConvSpec, threads: int = 1) -> torch.Tensor:
    """The deployed output of ``spec`` for the sign's argument ``d``, computed by numba."""
    conv = _compile()
    numba: Any = importlib.import_module("numba")

    o, c, kh, kw = spec.signs.shape
    n, _, h, w = d.shape
    oh, ow = spec.output_size(h, w)
    p = packed(spec)
    length = p.value.shape[1]

    def rows(words: torch.Tensor) -> np.ndarray:  # (O / lanes, L, lanes) interleaved -> (O, L)
        out: np.ndarray = words.numpy().view(np.uint64).transpose(0, 2, 1).reshape(-1, length)[:o].copy()
        return out

    wval = rows(p.value)
    wmask = wval if p.mask is None else rows(p.mask)
    out = np.empty((n, o, oh, ow), dtype=np.float32)
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    conv(d.detach().contiguous().numpy(), ALPHABETS[spec.alphabet], wval, wmask, p.tap_popcount.numpy(),
         p.mask is not None, kh, kw, spec.stride[0], spec.stride[1], spec.padding[0], spec.padding[1],
         spec.pad_value, spec.mul.numpy(), spec.add.numpy(), out)
    return torch.from_numpy(out)
