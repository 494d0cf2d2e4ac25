"""Choosing an executor by its ``--backend`` name: ``local`` (the runner computes its batches itself),
``processes`` (worker processes on this machine) or ``ray`` (a Ray cluster).

Kept apart from the :class:`~arbibench.evaluation.executors.Executor` interface, which the implementations import:
this factory imports them (Ray only when ``--backend ray`` is chosen; it is an optional extra), so the interface
module stays free of any import of its implementations.
"""

from __future__ import annotations

import importlib.util
import os

from arbibench.evaluation.executors import Executor, ExecutorError

EXECUTORS = ("local", "processes", "ray")  # the choices of --backend
RAY_PIN = "ray==2.60.0"  # the version arbibench[ray] installs and the cluster tests run
RAY_MISSING = (
    "--backend ray needs Ray, an optional extra: pip install 'arbibench[ray]' (installs " + RAY_PIN + "); the "
    "cluster's nodes need the same Ray version and arbibench installed"
)


def get_executor(
    name: str = "local",
    *,
    address: str | None = None,
    workers: int | None = None,
    worker_threads: int | None = None,
    model_dir: str | os.PathLike[str] | None = None,
) -> Executor | None:
    """The executor called ``name`` (``--backend``): ``None`` for ``local`` (the runner computes its batches itself), a
    :class:`~arbibench.evaluation.process_executor.ProcessExecutor` for ``processes``, a
    :class:`~arbibench.evaluation.ray_executor.RayExecutor` for ``ray`` (``address``: a cluster's head,
    ``"auto"`` or ``$RAY_ADDRESS``; neither: a private Ray on this machine, on 127.0.0.1 only)."""
    if name not in EXECUTORS:
        raise ExecutorError(f"unknown backend {name!r}; choose one of: {', '.join(EXECUTORS)}")
    if name == "local":
        given = [flag for flag, v in (("--address", address), ("--workers", workers)) if v is not None]
        if given:
            raise ExecutorError(
                f"{' and '.join(given)} apply to --backend processes or ray; add --backend or drop them")
        return None
    if name == "processes":
        if address is not None:
            raise ExecutorError("--address applies to --backend ray; drop it for --backend processes")
        from arbibench.evaluation.process_executor import ProcessExecutor  # start-up: loads torch

        return ProcessExecutor(workers=workers, worker_threads=worker_threads, model_dir=model_dir)
    if importlib.util.find_spec("ray") is None:
        raise ExecutorError(RAY_MISSING)
    if address is None and not os.environ.get("RAY_ADDRESS"):
        # A private Ray for this run: Ray reads this when it is imported, and then advertises and binds 127.0.0.1
        # instead of the machine's interface address (it rewrites a plain --node-ip-address=127.0.0.1).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    # start-up: ray (an optional extra) is imported only when --backend ray is asked for, after the variable above
    from arbibench.evaluation.ray_executor import RayExecutor

    return RayExecutor(address=address, workers=workers, worker_threads=worker_threads, model_dir=model_dir)
