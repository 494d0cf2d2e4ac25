"""Which conv kernel computes a deployed convolution: the C kernel, numba, or the torch emulator; and the fallback.

The user picks one by name with ``backend=`` (``deploy(model, backend=...)``, ``deploy-check --backend``); here a
:class:`ConvKernel` is that program, distinct from an evaluation's executor (:mod:`arbibench.evaluation.executors`).

``auto`` takes the C kernel, else numba (the optional ``deploy`` extra) when the kernel cannot be built here, else
the emulator. A fallback is said once per process and reason (a warning on the ``arbibench.deploy`` logger), never
silently slower; the deployed model names the backend it runs on (``DeployedModel.backend``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from arbibench.deploy.build import KernelUnavailableError, load_library
from arbibench.deploy.emulator import emulate_conv
from arbibench.deploy.kernel import MAX_WORDS, kernel_conv, resolve_isa
from arbibench.deploy.semantics import BinaryConvSpec, Glue

CONV_KERNELS = ("auto", "kernel", "numba", "emulator")
LOG = logging.getLogger("arbibench.deploy")
_SAID: set[str] = set()


def say_once(message: str) -> None:
    """Log ``message`` as a warning the first time this process meets it."""
    if message not in _SAID:
        _SAID.add(message)
        LOG.warning(message)


# (input, spec, threshold (N, C) or None, residual or None, glue or None) -> output with the glue applied
FusedConv = Callable[
    [torch.Tensor, BinaryConvSpec, "torch.Tensor | None", "torch.Tensor | None", "Glue | None"], torch.Tensor
]


@dataclass(frozen=True)
class ConvKernel:
    """A conv kernel, a named convolution program: ``conv(d, spec)`` -> the deployed output; ``fused`` also takes
    the sign's threshold, the residual and the activation into its epilogue (the C kernel), else the layer applies
    them."""

    name: str
    conv: Callable[[torch.Tensor, BinaryConvSpec], torch.Tensor]
    note: str = ""  # why this backend and not the kernel, when it is a fallback
    fused: FusedConv | None = None
    max_words: int | None = None  # the most 64-bit words of one packed patch it holds (None: no limit)


def call_threads(threads: int | None) -> int:
    """The threads of one call: ``threads`` when the deployment fixed them, else torch's at the time of the call, so
    that ``torch.set_num_threads`` after ``deploy()`` still sets them (one thread under load, not the count at
    deploy time)."""
    return max(1, torch.get_num_threads() if threads is None else int(threads))


def _kernel(threads: int | None, isa: str) -> ConvKernel:
    chosen = resolve_isa(isa)  # builds and loads the library now, so a failure shows at deploy time
    lib = load_library()

    def conv(d: torch.Tensor, spec: BinaryConvSpec) -> torch.Tensor:
        return kernel_conv(d, spec, call_threads(threads), isa, lib)

    def fused(x: torch.Tensor, spec: BinaryConvSpec, threshold: torch.Tensor | None, residual: torch.Tensor | None,
              glue: Glue | None) -> torch.Tensor:
        return kernel_conv(x, spec, call_threads(threads), isa, lib, threshold=threshold, residual=residual,
                           glue=glue)

    return ConvKernel(f"kernel ({chosen})", conv, fused=fused, max_words=MAX_WORDS)


def _numba(threads: int | None) -> ConvKernel:
    from arbibench.deploy.numba_kernel import check_numba, numba_conv  # start-up: numba is an optional extra

    check_numba()  # NumbaUnavailableError when numba is not installed

    def conv(d: torch.Tensor, spec: BinaryConvSpec) -> torch.Tensor:
        return numba_conv(d, spec, call_threads(threads))

    return ConvKernel("numba", conv)


def get_conv_kernel(name: str = "auto", threads: int | None = None, isa: str = "auto") -> ConvKernel:
    """The conv kernel ``name`` (``--backend``); ``auto`` falls back kernel -> numba -> emulator, saying so once."""
    if name not in CONV_KERNELS:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(CONV_KERNELS)}")
    if threads is not None and (isinstance(threads, bool) or int(threads) < 1):
        raise ValueError(f"threads={threads!r}: give a positive count, or None for torch's at each call")
    n = None if threads is None else int(threads)
    if name == "emulator":
        return ConvKernel("emulator", emulate_conv)
    if name == "kernel":
        return _kernel(n, isa)
    if name == "numba":
        return _numba(n)
    try:
        return _kernel(n, isa)
    except KernelUnavailableError as e:
        kernel_reason = str(e)
    from arbibench.deploy.numba_kernel import NumbaUnavailableError  # start-up: only on the fallback path

    try:
        backend = _numba(n)
    except NumbaUnavailableError:
        note = (f"deployed inference runs on the torch emulator (same logits, slower): no C kernel "
                f"({kernel_reason}) and no numba (pip install 'arbibench[deploy]')")
        say_once(note)
        return ConvKernel("emulator", emulate_conv, note)
    note = f"deployed inference runs on numba (same logits, slower than the C kernel): {kernel_reason}"
    say_once(note)
    return ConvKernel(backend.name, backend.conv, note, max_words=backend.max_words)
