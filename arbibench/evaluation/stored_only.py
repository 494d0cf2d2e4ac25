"""An executor that computes nothing: results are read from the store or the evaluation stops.

A findings page or a report over a full-protocol store must never start hours of attacks because one batch is
missing (a run killed mid-way, a model still on the queue). Behind this executor, every plan is checked against the
store first; a missing batch raises :class:`MissingResultsError` naming the model, the evaluation and how many of its
batches are stored, and nothing is computed or written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.progress import Progress

from arbibench.evaluation.executors import Executor

if TYPE_CHECKING:
    from arbibench.evaluation.plan import EvalPlan


class MissingResultsError(LookupError):
    """An evaluation the caller asked to read is not complete in the store."""


class StoredOnlyExecutor(Executor):
    """Refuses to compute: :meth:`run` returns only when the store holds every batch of every plan."""

    name = "stored"

    def run(self, plans: Sequence[EvalPlan], progress: Progress) -> None:
        for plan in plans:
            ctx = plan.ctx
            n_batches = -(-len(ctx.y) // ctx.batch_size)
            for attack in (None, *plan.attacks):
                key = ctx.store_key(attack)
                done = len(ctx.store.done_batches(key))
                if done < n_batches:
                    what = "clean pass" if attack is None else attack.name
                    raise MissingResultsError(
                        f"{ctx.model_name}: {what} on {len(ctx.y)} images has {done} of its {n_batches} batches in "
                        f"{ctx.store.path}; finish it with `arbibench protocol run` (same preset and --store) first"
                    )

    def close(self) -> None:
        """Nothing to release."""
