"""Which threads run the kernel's work: torch's OpenMP workers where the process has them, else its own pthreads.

Torch's OpenMP workers keep spinning for milliseconds after every torch operation. On a machine with as many cores
as threads (2 here), threads of the kernel's own then share the cores with spinning workers, and 2 threads measured
no faster than 1 for a whole deployed forward. Handing the kernel the OpenMP runtime that torch loaded
(``GOMP_parallel``, the libgomp ABI that Intel's and LLVM's runtimes also export) lets those awake workers run its
slices instead. The kernel stays C99 with no OpenMP or torch dependency: it receives three function addresses.
``ARBIBENCH_KERNEL_OPENMP=0`` keeps the kernel on threads of its own (where a runtime misbehaves, or to compare).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

# Shared-library names of OpenMP runtimes that export the GOMP_* entry points.
RUNTIMES = ("libgomp", "libiomp5", "libomp")
_CHOSEN: dict[str, str] = {}  # library path -> what runs its threads, as share_openmp last set it


def loaded_openmp_runtime() -> Path | None:
    """The OpenMP runtime already loaded in this process, from ``/proc/self/maps`` (None elsewhere): torch's own where
    another library loaded a second one."""
    import torch  # start-up: build.py needs no torch; the runtime to find is the one torch loads

    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    found = []
    for line in maps.splitlines():
        parts = line.split()
        if len(parts) >= 6 and Path(parts[-1]).name.startswith(RUNTIMES) and Path(parts[-1]) not in found:
            found.append(Path(parts[-1]))
    torch_dir = Path(torch.__file__).resolve().parent
    return next((p for p in found if torch_dir in p.resolve().parents), found[0] if found else None)


def share_openmp(lib: ctypes.CDLL) -> str:
    """Give ``lib`` the process's OpenMP runtime; returns what runs its threads, ``"openmp <file name>"`` (e.g.
    ``"openmp libgomp.so.1"``) or ``"pthreads"``."""
    lib.abk_use_openmp.restype = ctypes.c_int
    lib.abk_use_openmp.argtypes = [ctypes.c_void_p] * 3
    chosen = "pthreads"
    runtime = None if os.environ.get("ARBIBENCH_KERNEL_OPENMP", "1") == "0" else loaded_openmp_runtime()
    fns: list[int | None] = [None, None, None]
    if runtime is not None:
        try:
            omp = ctypes.CDLL(str(runtime))  # already loaded: the same handle, no second runtime
            fns = [ctypes.cast(getattr(omp, name), ctypes.c_void_p).value
                   for name in ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads")]
        except (OSError, AttributeError):
            fns = [None, None, None]
    if lib.abk_use_openmp(*fns) == 1 and runtime is not None:
        chosen = f"openmp {runtime.name}"  # the file name: records stay free of machine paths
    _CHOSEN[str(lib._name)] = chosen
    return chosen


def kernel_threads(lib: ctypes.CDLL) -> str:
    """What runs ``lib``'s threads now: ``"openmp <file name>"`` or ``"pthreads"`` (for benchmark records)."""
    return _CHOSEN.get(str(lib._name), "pthreads")
