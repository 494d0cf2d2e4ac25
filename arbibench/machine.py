"""The machine a measurement ran on, named the same way in checkpoint cards, benchmarks and notes, and the float32 a
GPU computes in (:func:`full_float32`, for evaluation and training alike)."""

from __future__ import annotations

import functools
import os
import platform
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def cpuinfo_value(*keys: str) -> str | None:
    """The value of the first ``/proc/cpuinfo`` line whose key is one of ``keys``; None where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in keys:
                    return value.strip()
    except OSError:
        pass
    return None


@functools.cache
def cpu_model() -> str:
    """The CPU's model name, else the platform's description: a timing without it is unreadable."""
    return cpuinfo_value("model name") or platform.processor() or platform.machine()


def describe(threads: int) -> str:
    """One line for a card: CPU model, cores and the threads a job used, e.g. ``AMD EPYC (x86_64, 2 cores), 2
    threads``."""
    plural = "" if threads == 1 else "s"
    return f"{cpu_model()} ({platform.machine()}, {os.cpu_count()} cores), {threads} thread{plural}"


def computed_on(device: torch.device) -> str:
    """What computed on ``device``: the GPU's name, or :func:`describe` of this CPU at torch's thread count. A card's
    seconds are read on it: the same protocol ran 1.5-1.8x slower per attack step on one 2-core CPU than on another
    (BENCHMARKS.md)."""
    import torch  # start-up: only a measurement asks

    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} ({device})"
    return describe(torch.get_num_threads())


def full_float32() -> None:
    """Make CUDA convolutions and matrix products compute in full float32, not TF32.

    cuDNN convolutions default to TF32 on Ampere and newer GPUs (10-bit mantissas): the network evaluated (or
    trained) would not be the float32 network its card names, and a BNN's signs flip on such rounding. Set once per
    process, through torch's newer per-backend precision settings where they exist (reading the older flags after a
    mix raises).
    """
    import torch  # start-up: only a run on a GPU asks

    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        conv.fp32_precision = "ieee"
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    else:  # torch before 2.9
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False


UNRECORDED = "not recorded (stored by an older arbibench)"

# computed_on's name of a GPU: "<device name> (cuda)" or "(cuda:N)"; a CPU's ends in its thread count
_GPU_SUFFIX = re.compile(r"\(cuda(:\d+)?\)$")


def on_gpu(machine: str | None) -> bool:
    """Whether a batch's recorded machine (:func:`computed_on`) is a GPU: a batch a lent GPU computed is done, but its
    seconds were read on another clock and price nothing that a CPU queue has left to compute."""
    return machine is not None and _GPU_SUFFIX.search(machine) is not None


def provenance(seconds_by_machine: Mapping[str | None, float]) -> str | None:
    """One line for a card: the machine that computed all its batches, else each machine's share of the batch
    seconds, largest first (key None: batches stored without a machine); None when no batch names one."""
    if not any(m is not None for m in seconds_by_machine):
        return None
    if len(seconds_by_machine) == 1:
        return next(iter(seconds_by_machine))
    total = sum(seconds_by_machine.values()) or 1.0
    shares = sorted(seconds_by_machine.items(), key=lambda kv: -kv[1])
    return "; ".join(f"{m or UNRECORDED}: {100 * s / total:.0f}% of batch seconds" for m, s in shares)


def cgroup_cpu_limit(root: str = "/sys/fs/cgroup") -> float | None:
    """The CPU quota of this process's cgroup in cores (v2 ``cpu.max``, v1 ``cfs_quota_us``), None when unlimited."""
    for quota_file, period_file in ((f"{root}/cpu.max", None),
                                    (f"{root}/cpu/cpu.cfs_quota_us", f"{root}/cpu/cpu.cfs_period_us")):
        try:
            with open(quota_file, encoding="ascii") as f:
                fields = f.read().split()
            if period_file is not None:
                with open(period_file, encoding="ascii") as f:
                    fields.append(f.read().strip())
        except OSError:
            continue
        if len(fields) < 2 or fields[0] in ("max", "-1"):
            return None
        try:
            quota, period = float(fields[0]), float(fields[1])
        except ValueError:
            return None
        return quota / period if quota > 0 and period > 0 else None
    return None


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by its cgroup's quota (a container limited to 2 of
    64 cores has 2). ``os.cpu_count()`` counts the whole machine, and threads past this number only wait."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = cgroup_cpu_limit()
    if limit is not None:
        cores = min(cores, max(1, int(limit + 0.5)))
    return max(1, cores)


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def default_threads(environ: Mapping[str, str] | None = None) -> int | None:
    """The torch thread count arbibench's CLI sets, or None to leave torch's own: the cores the process may use
    (:func:`available_cores`), unless the user chose a count with ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS``.

    Torch starts one OpenMP worker per core it sees on the machine; in a container or under ``taskset`` with fewer
    cores, the extra workers only take time slices from the working ones (BENCHMARKS.md, thread oversubscription)."""
    env = os.environ if environ is None else environ
    if any(env.get(name) for name in THREAD_VARIABLES):
        return None
    return available_cores()


def wait_policy(environ: Mapping[str, str] | None = None, load: float | None = None,
                cores: int | None = None) -> str | None:
    """``"PASSIVE"`` when the CLI should tell OpenMP's idle workers to sleep instead of spin, else None (leave it).

    Spinning workers cost nothing on an idle machine but take the time slices of another job's threads, and theirs
    take ours: beside a 2-thread training on 2 cores, a fused forward at 2 threads took 3.0x and a gradient step 3.4x
    longer spinning than sleeping, while sleeping cost 23-36% on the idle machine (docs/benchmarks/threads.md). So:
    sleep when at least half the cores were busy over the last minute (the 1-minute load average, read at start,
    before this process adds to it), unless the user chose a policy with ``OMP_WAIT_POLICY``."""
    env = os.environ if environ is None else environ
    if env.get("OMP_WAIT_POLICY"):
        return None
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:
            return None
    cores = available_cores() if cores is None else cores
    return "PASSIVE" if load >= max(1.0, cores / 2) else None
