"""The deployed convolution's programs agree bit for bit: C kernel (AVX2 and scalar popcount) == torch emulator.

Property tests over random shapes (input channels 1-130, not only multiples of 64; 1x1 and 3x3; stride 1 and 2;
padding 0 and 1 with exact zero padding or +-1 padding; batch 1-5; the {-1,+1}, {-1,0,+1} and {0,1} alphabets;
kernels with and without zeros), the kernel cache's safety when two processes compile at once, and the fallbacks.
"""

from __future__ import annotations

import ctypes
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arbibench.deploy import build
from arbibench.deploy.build import KernelUnavailableError
from arbibench.deploy.conv_kernels import get_conv_kernel
from arbibench.deploy.emulator import emulate_conv
from arbibench.deploy.kernel import kernel_available, kernel_conv, resolve_isa
from arbibench.deploy.semantics import (
    ALPHABETS,
    PM1,
    PM1_ZERO,
    ZERO_ONE,
    BinaryConvSpec,
    activation_values,
    glue_of,
)
from arbibench.nn.activations import RPReLU
from arbibench.nn.quantizers import RSign, SignQuantizer
from arbibench.nn.zero_sign import CentredSign, ZeroRSign, ZeroSign

AVAILABLE, ISA = kernel_available()
needs_kernel = pytest.mark.skipif(not AVAILABLE, reason=f"no C kernel on this machine: {ISA}")


def _isas() -> list[str]:
    """Every popcount this CPU runs: scalar always, AVX2 and AVX-512 where present."""
    found = []
    for isa in ("scalar", "avx2", "avx512"):
        try:
            found.append(resolve_isa(isa))
        except KernelUnavailableError:
            pass
    return found


ISAS = _isas() if AVAILABLE else []


def random_case(seed: int, c: int, o: int, k: int, stride: int, padding: int, n: int, alphabet: str, pad: int,
                zero_weights: bool) -> tuple[torch.Tensor, BinaryConvSpec]:
    g = torch.Generator().manual_seed(seed)
    h = int(torch.randint(max(1, k - 2 * padding), 9, (), generator=g))
    w = int(torch.randint(max(1, k - 2 * padding), 9, (), generator=g))
    signs = torch.randint(0, 2, (o, c, k, k), generator=g).float().mul_(2).sub_(1)
    if zero_weights:
        signs[torch.rand(signs.shape, generator=g) < 0.2] = 0.0
    d = torch.randn(n, c, h, w, generator=g)
    d[torch.rand(d.shape, generator=g) < 0.15] = 0.0  # exact zeros: torch.sign's third level
    mul, add = torch.randn(o, generator=g), torch.randn(o, generator=g)
    return d, BinaryConvSpec(signs, mul, add, (stride, stride), (padding, padding), alphabet, pad)


@needs_kernel
@settings(max_examples=120, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31 - 1),
    c=st.integers(1, 130),
    o=st.integers(1, 13),
    k=st.sampled_from([1, 3]),
    stride=st.sampled_from([1, 2]),
    padding=st.sampled_from([0, 1]),
    n=st.integers(1, 5),
    alphabet=st.sampled_from(list(ALPHABETS)),
    pad=st.sampled_from([0, 0, 1, -1]),
    zero_weights=st.booleans(),
    threads=st.sampled_from([1, 2]),
    threshold=st.sampled_from(["none", "channel", "sample"]),
    residual=st.booleans(),
    act=st.sampled_from(["none", "hardtanh", "prelu", "rprelu"]),
)
def test_kernel_equals_emulator_bit_for_bit(seed: int, c: int, o: int, k: int, stride: int, padding: int, n: int,
                                            alphabet: str, pad: int, zero_weights: bool, threads: int,
                                            threshold: str, residual: bool, act: str) -> None:
    x, spec = random_case(seed, c, o, k, stride, padding, n, alphabet, pad, zero_weights)
    g = torch.Generator().manual_seed(seed + 1)
    t = None
    if threshold == "channel":  # RSign's t_c, some of them equal to inputs: x - t is then exactly 0
        t = torch.randn(1, c, generator=g) * 0.5
        t[0, : c // 2] = x[0, : c // 2, 0, 0]
    elif threshold == "sample":  # a centred sample's mean
        t = x.mean(dim=(1, 2, 3)).reshape(n, 1)
    d = x if t is None else x - t.reshape(*t.shape, 1, 1)  # the simulation's argument of the sign
    want = emulate_conv(d, spec)
    r = torch.randn(want.shape, generator=g) if residual else None
    glue = None
    if act != "none":
        module = {"hardtanh": torch.nn.Hardtanh(), "prelu": torch.nn.PReLU(o), "rprelu": RPReLU(o)}[act]
        with torch.no_grad():
            for p in module.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
        glue = glue_of(module, o)
    if r is not None:
        want = want + r
    if glue is not None:
        with torch.no_grad():
            want = glue.module(want)
    for isa in ISAS:
        got = kernel_conv(x, spec, threads=threads, isa=isa, threshold=t, residual=r, glue=glue)
        assert got.shape == want.shape
        assert torch.equal(got, want), f"{isa}: max difference {(got - want).abs().max().item()}"


def test_emulator_accumulates_exact_integers() -> None:
    """The emulator's accumulator is the integer sum of +-1 products: checked against int64 arithmetic."""
    d, spec = random_case(7, 130, 5, 3, 1, 1, 2, PM1_ZERO, 0, True)
    ones = BinaryConvSpec(spec.signs, torch.ones(5), torch.zeros(5), spec.stride, spec.padding, PM1_ZERO)
    a = activation_values(d, PM1_ZERO).to(torch.int64)
    unfold = torch.nn.functional.unfold(a.double(), 3, padding=1).to(torch.int64)  # (N, C*9, L)
    exact = torch.einsum("ok,nkl->nol", spec.signs.reshape(5, -1).to(torch.int64), unfold)
    assert torch.equal(emulate_conv(d, ones).reshape(2, 5, -1), exact.to(torch.float32))


def test_activation_values_are_the_quantizers() -> None:
    """The deployed alphabet of each quantizer's argument is that quantizer's output, zeros included."""
    x = torch.tensor([[-2.0, -0.0, 0.0, 1e-45, 3.0, -1e-45]]).view(1, 6, 1, 1)
    assert torch.equal(activation_values(x, PM1), SignQuantizer()(x))
    assert torch.equal(activation_values(x, PM1_ZERO), ZeroSign()(x))
    assert torch.equal(activation_values(x, ZERO_ONE), (x >= 0).float())
    r, zr = RSign(6), ZeroRSign(6)
    with torch.no_grad():
        r.threshold.copy_(x.view(1, 6, 1, 1))
        zr.threshold.copy_(x.view(1, 6, 1, 1))
    assert torch.equal(activation_values(x - r.threshold, PM1), r(x))
    assert torch.equal(activation_values(x - zr.threshold, PM1_ZERO), zr(x))  # every input equals its threshold: 0
    centred = x - x.mean(dim=(1, 2, 3), keepdim=True)
    assert torch.equal(activation_values(centred, PM1_ZERO), CentredSign()(x))


@needs_kernel
def test_two_processes_compiling_at_once_leave_one_valid_library(tmp_path: Path) -> None:
    env = {**os.environ, "ARBIBENCH_CACHE": str(tmp_path)}
    # build.py by path, stdlib only: the two compilers start within milliseconds of each other
    path = str(Path(build.__file__))
    script = (f"import importlib.util as u; s = u.spec_from_file_location('b', {path!r}); "
              "b = u.module_from_spec(s); s.loader.exec_module(b); print(b.build_library())")
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    paths = [p.communicate(timeout=180)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert paths[0] == paths[1]
    files = sorted(f.name for f in (tmp_path / "kernels").iterdir())
    assert files == [Path(paths[0]).name], files  # one library, no temporary file left behind
    lib = ctypes.CDLL(paths[0])
    assert lib.abk_version() == build.ABI_VERSION


def test_cache_key_holds_the_cpu_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    here = build.library_path()
    monkeypatch.setattr(build, "cpu_flags", lambda: "fpu sse2")  # another CPU sharing the cache folder
    assert build.library_path() != here


def test_no_compiler_falls_back_to_the_emulator_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("ARBIBENCH_CACHE", str(tmp_path))  # nothing cached
    monkeypatch.setenv("CC", "")
    with pytest.raises(build.KernelUnavailableError, match="CC"):
        get_conv_kernel("kernel")
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc, gcc or clang on PATH
    with pytest.raises(build.KernelUnavailableError, match="no C compiler"):
        get_conv_kernel("kernel")
    import arbibench.deploy.conv_kernels as conv_kernels

    conv_kernels._SAID.clear()
    with caplog.at_level(logging.WARNING, logger="arbibench.deploy"):
        first, second = get_conv_kernel("auto"), get_conv_kernel("auto")
    assert first.name == second.name == "emulator"
    notes = [r.getMessage() for r in caplog.records if r.name == "arbibench.deploy"]
    assert len(notes) == 1 and "no C kernel" in notes[0] and "numba" in notes[0]  # said once, with both reasons


@needs_kernel
def test_kernel_refuses_a_missing_instruction_set_or_bad_input() -> None:
    d, spec = random_case(3, 5, 2, 3, 1, 1, 1, PM1, 0, False)
    with pytest.raises(ValueError, match="float32"):
        kernel_conv(d.double(), spec)
    with pytest.raises(ValueError, match="channels"):
        kernel_conv(d[:, :3], spec)


def _large_case(n: int, seed: int = 11) -> tuple[torch.Tensor, BinaryConvSpec]:
    """A convolution with work enough for several threads (kernel.c gives a thread 2^19 word operations at least);
    the random cases above are too small to start a second one."""
    g = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (64, 64, 3, 3), generator=g).float().mul_(2).sub_(1)
    spec = BinaryConvSpec(signs, torch.randn(64, generator=g), torch.randn(64, generator=g), (1, 1), (1, 1), PM1)
    return torch.randn(n, 64, 32, 32, generator=g), spec


@pytest.fixture(params=["openmp", "pthreads"])
def thread_source(request: pytest.FixtureRequest) -> object:
    """The kernel's threads from torch's OpenMP runtime, or its own (where no runtime is found)."""
    from arbibench.deploy.threads import share_openmp

    lib = build.load_library()
    if request.param == "pthreads":
        lib.abk_use_openmp(None, None, None)
    elif not share_openmp(lib).startswith("openmp"):
        pytest.skip("no OpenMP runtime loaded in this process")
    yield request.param
    share_openmp(lib)


@needs_kernel
@pytest.mark.parametrize(("n", "threads"), [(1, 2), (2, 2), (3, 2), (2, 3), (5, 4)])
def test_threads_change_nothing(thread_source: str, n: int, threads: int) -> None:
    """Whole images per thread (n >= threads) and shared rows (n < threads), on either kind of thread: the same
    floats as one thread and as the emulator."""
    x, spec = _large_case(n)
    want = emulate_conv(x, spec)
    one = kernel_conv(x, spec, threads=1)
    assert torch.equal(one, want)
    for _ in range(3):  # OpenMP's workers reused across calls
        assert torch.equal(kernel_conv(x, spec, threads=threads), want)



@needs_kernel
def test_kernel_threads_come_from_torchs_openmp_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """Torch's own OpenMP runtime runs the kernel's threads where the process has one; the variable opts out."""
    from arbibench.deploy.threads import loaded_openmp_runtime, share_openmp

    lib = build.load_library()
    try:
        monkeypatch.setenv("ARBIBENCH_KERNEL_OPENMP", "0")
        assert share_openmp(lib) == "pthreads"
        monkeypatch.delenv("ARBIBENCH_KERNEL_OPENMP")
        runtime = loaded_openmp_runtime()
        assert share_openmp(lib) == ("pthreads" if runtime is None else f"openmp {runtime.name}")
        bundled = sorted((Path(torch.__file__).parent / "lib").glob("libgomp*"))
        if sys.platform == "linux" and bundled:  # the wheel's own runtime, not another library's
            assert runtime is not None and runtime.resolve().parent == bundled[0].resolve().parent
    finally:
        share_openmp(lib)
