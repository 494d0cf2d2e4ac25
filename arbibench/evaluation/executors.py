"""Where store batches are computed: here (``local``, the runner itself) or on a cluster (``ray``).

An executor (what ``--backend`` names) receives evaluation plans (:class:`~arbibench.evaluation.plan.EvalPlan`),
computes every batch the store does not hold yet with :func:`~arbibench.evaluation.batch.compute_batch`, and hands each
result back to the driver, which alone writes the SQLite store (one transaction per batch). Clean passes come first (an
attack batch needs its images' clean outcomes), then the attack batches, longest first. Another engine fits behind the
same :class:`Executor` interface; :func:`arbibench.evaluation.executor_registry.get_executor` picks one by name (this
module is the interface alone, so an implementation can import it without a circle).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.progress import Progress

if TYPE_CHECKING:
    from arbibench.evaluation.plan import EvalPlan


class ExecutorError(ValueError):
    """An executor cannot be used as asked (Ray not installed, options that apply to another ``--backend``)."""


class Executor(ABC):
    """Computes store batches outside the driver's runner; the driver commits each one to the store."""

    name: str

    @abstractmethod
    def run(self, plans: Sequence[EvalPlan], progress: Progress) -> None:
        """Compute and commit every batch of ``plans`` the store does not hold yet."""

    @abstractmethod
    def close(self) -> None:
        """Release the workers (a later :meth:`run` starts new ones)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
