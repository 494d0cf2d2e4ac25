"""Compile ``kernel.c`` with the system C compiler on first use, and cache the library safely.

The cache key is the sha256 of the kernel's source, the compiler flags and this CPU's feature flags
(``/proc/cpuinfo``, else the platform's description): a cache folder shared by machines with different CPUs (Ray
nodes on a network file system) never loads a library built on another CPU. A library already in the cache is used
without a compiler (a machine can be given one built at install time). Several processes may compile at once
(Ray workers, pytest-xdist): each compiles into its own temporary file in the cache folder and renames it into place
(an atomic replace on POSIX), so the folder always holds one complete library under the key and never a partial one.

The folder: ``$ARBIBENCH_CACHE/kernels``, else ``~/.cache/arbibench/kernels``. The compiler: ``$CC``, else ``cc``,
``gcc`` or ``clang`` on PATH; ``CC=`` (empty) means none.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from arbibench.deploy.threads import share_openmp
from arbibench.machine import cpuinfo_value

SOURCE = Path(__file__).with_name("kernel.c")
ABI_VERSION = 5  # kernel.c's ABK_VERSION: a library answering another number is rebuilt
# -ffp-contract=off: the epilogue's multiply and add must round separately (kernel.c, step 4). No -march=native:
# the AVX2 code is chosen at run time, so the same library serves CPUs with and without it.
FLAGS = ("-O3", "-std=c99", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math", "-pthread")
COMPILE_TIMEOUT_S = 120


class KernelUnavailableError(RuntimeError):
    """No compiled kernel on this machine (no C compiler, a failed build, an unsupported platform)."""


def cache_dir() -> Path:
    """``$ARBIBENCH_CACHE/kernels``, else ``~/.cache/arbibench/kernels``."""
    root = os.environ.get("ARBIBENCH_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "arbibench") / "kernels"


@functools.cache
def cpu_flags() -> str:
    """This CPU's feature flags (x86 ``flags``, ARM ``Features``), else the platform's processor description."""
    flags = cpuinfo_value("flags", "Features")
    if flags is not None:
        return " ".join(sorted(flags.split()))
    return f"{platform.processor()} {platform.platform()}"


def compiler() -> list[str]:
    """The C compiler command: ``$CC`` if set (empty: none), else ``cc``, ``gcc`` or ``clang``; else raises."""
    env = os.environ.get("CC")
    if env is not None:
        cmd = shlex.split(env)
        if cmd and shutil.which(cmd[0]):
            return [shutil.which(cmd[0]) or cmd[0], *cmd[1:]]
        raise KernelUnavailableError(f"CC={env!r} names no compiler on PATH; set CC to a C compiler (gcc, clang)")
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return [found]
    raise KernelUnavailableError("no C compiler on PATH (cc, gcc, clang); install one or set CC")


@functools.cache
def _source_bytes() -> bytes:
    return SOURCE.read_bytes()


def library_path() -> Path:
    """Where the library for this source, flags and CPU lives (it may not exist yet)."""
    h = hashlib.sha256()
    for part in (_source_bytes(), " ".join(FLAGS).encode(), cpu_flags().encode(), platform.machine().encode(),
                 str(ABI_VERSION).encode()):
        h.update(part)
        h.update(b"\0")
    suffix = ".dll" if sys.platform == "win32" else ".so"
    return cache_dir() / f"arbibench_kernel_{h.hexdigest()[:24]}{suffix}"


def build_library(force: bool = False) -> Path:
    """The compiled library, compiled now if the cache has none for this source, compiler and CPU."""
    if sys.byteorder != "little":
        raise KernelUnavailableError("the packed layout assumes a little-endian CPU")
    path = library_path()
    if path.exists() and not force:
        return path
    cc = compiler()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem + ".", suffix=".tmp")
    os.close(fd)
    try:
        proc = subprocess.run(
            [*cc, *FLAGS, str(SOURCE), "-o", tmp], capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S
        )
        if proc.returncode != 0:
            raise KernelUnavailableError(f"{cc[0]} failed on {SOURCE.name}: {proc.stderr.strip()[-800:]}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)  # atomic: other processes see the old file, the new one, never half of one
    except (OSError, subprocess.SubprocessError) as e:
        raise KernelUnavailableError(f"compiling {SOURCE.name} with {cc[0]} failed: {e}") from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def load_library() -> ctypes.CDLL:
    """The kernel library for this machine (built on first use), loaded once per path, its functions typed."""
    return _load(build_library())


@functools.cache
def _load(path: Path) -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise KernelUnavailableError(f"cannot load {path}: {e}") from e
    if lib.abk_version() != ABI_VERSION:
        raise KernelUnavailableError(f"{path} answers ABI {lib.abk_version()}, expected {ABI_VERSION}; delete it")
    i64, i32, ptr = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
    lib.abk_binary_conv2d.restype = i32
    lib.abk_binary_conv2d.argtypes = [
        ptr, i64, i64, i64, i64, i32,  # x, N, C, H, W, alphabet
        ptr, ptr, i64, i64, i64,  # wval, wmask, O, KH, KW
        i64, i64, i64, i64, i32,  # sh, sw, ph, pw, pad_value
        ptr, ptr, ptr, ptr, i32, ptr,  # mul, add, thresh, residual, act, act_params
        ptr, i64, i64,  # out, OH, OW
        i32, i32,  # threads, isa
    ]
    lib.abk_resolve_isa.restype = i32
    lib.abk_resolve_isa.argtypes = [i32]
    share_openmp(lib)  # torch's OpenMP workers run its threads where there are some
    return lib
