"""Where store batches are computed: here (``local``, the runner itself) or on a cluster (``ray``).

A backend receives evaluation plans (:class:`~arbibench.evaluation.runner.EvalPlan`), computes every batch the store
does not hold yet with :func:`~arbibench.evaluation.batch.compute_batch`, and hands each result back to the driver,
which alone writes the SQLite store (one transaction per batch). Clean passes come first (an attack batch needs its
images' clean outcomes), then the attack batches, longest first. Another engine fits behind the same
:class:`Backend` interface. Ray is an optional extra, imported only when ``--backend ray`` is chosen.
"""

from __future__ import annotations

import importlib.util
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.progress import Progress

if TYPE_CHECKING:
    from arbibench.evaluation.runner import EvalPlan

BACKENDS = ("local", "ray")
RAY_PIN = "ray==2.60.0"  # the version arbibench[ray] installs and the cluster tests run
RAY_MISSING = (
    "--backend ray needs Ray, an optional extra: pip install 'arbibench[ray]' (installs " + RAY_PIN + "); the "
    "cluster's nodes need the same Ray version and arbibench installed"
)


class BackendError(ValueError):
    """A backend cannot be used as asked (Ray not installed, options that apply to another backend)."""


class Backend(ABC):
    """Computes store batches outside the driver's runner; the driver commits each one to the store."""

    name: str

    @abstractmethod
    def run(self, plans: Sequence[EvalPlan], progress: Progress) -> None:
        """Compute and commit every batch of ``plans`` the store does not hold yet."""

    @abstractmethod
    def close(self) -> None:
        """Release the workers (a later :meth:`run` starts new ones)."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def get_backend(
    name: str = "local",
    *,
    address: str | None = None,
    workers: int | None = None,
    worker_threads: int | None = None,
    model_dir: str | os.PathLike[str] | None = None,
) -> Backend | None:
    """The backend called ``name``: ``None`` for ``local`` (the runner computes its batches itself), a
    :class:`~arbibench.evaluation.ray_backend.RayBackend` for ``ray`` (``address``: a cluster's head,
    ``"auto"`` or ``$RAY_ADDRESS``; neither: a private Ray on this machine, on 127.0.0.1 only)."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; choose one of: {', '.join(BACKENDS)}")
    if name == "local":
        given = [flag for flag, v in (("--address", address), ("--workers", workers)) if v is not None]
        if given:
            raise BackendError(f"{' and '.join(given)} apply to --backend ray; add --backend ray or drop them")
        return None
    if importlib.util.find_spec("ray") is None:
        raise BackendError(RAY_MISSING)
    if address is None and not os.environ.get("RAY_ADDRESS"):
        # A private Ray for this run: Ray reads this when it is imported, and then advertises and binds 127.0.0.1
        # instead of the machine's interface address (it rewrites a plain --node-ip-address=127.0.0.1).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    # start-up: ray (an optional extra) is imported only when --backend ray is asked for, after the variable above
    from arbibench.evaluation.ray_backend import RayBackend

    return RayBackend(address=address, workers=workers, worker_threads=worker_threads, model_dir=model_dir)


# The command-line help of the backend options, shared by `eval`, `protocol run` and `sweep`.
BACKEND_HELP = "Where the store batches are computed: local (this process) or ray (a Ray cluster; same results)."
ADDRESS_HELP = ("--backend ray: the cluster's head, host:port or 'auto' (default $RAY_ADDRESS; neither: a private "
                "Ray on this machine, on 127.0.0.1).")
WORKERS_HELP = "--backend ray: worker actors (default: the cluster's CPUs / --worker-threads)."
WORKER_THREADS_HELP = ("--backend ray: torch threads per worker (default: this process's, as a local run uses; "
                       "another count may round differently).")
