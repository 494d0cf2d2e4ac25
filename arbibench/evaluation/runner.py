"""The runner: clean pass and attacks, batch by batch, every batch verified and committed to the store.

Only samples the model classifies correctly are attacked (a misclassified sample is already not robust). Each batch
draws its randomness from a generator seeded by ``(seed, batch index)``, so a batch computed after a crash is the
same batch an uninterrupted run would have computed, and resumed results equal uninterrupted ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text
from torch import nn

from arbibench.attacks import Attack, ThreatModel
from arbibench.attacks.query import POOL_ROWS, BlackBoxAttack, QuerySteps, forward_queries, run_pooled
from arbibench.clock import active_clock
from arbibench.evaluation.batch import batch_generator, compute_batch, outcome_columns
from arbibench.evaluation.checks import run_checks
from arbibench.evaluation.plan import CLEAN, EvalPlan, EvaluationContext, commit_outcome, plan_evaluation
from arbibench.evaluation.settings import RunSettings
from arbibench.evaluation.store import Outcomes, ResultStore
from arbibench.inference import Inference
from arbibench.machine import computed_on
from arbibench.nn.fused import fused_path

if TYPE_CHECKING:
    from arbibench.evaluation.executors import Executor


class RateColumn(ProgressColumn):
    """Images per second of the current attack (resumed batches are not counted as speed)."""

    def render(self, task: Task) -> Text:
        return Text("" if task.speed is None else f"{task.speed:.1f} img/s", style="progress.data.speed")


def make_progress(console: Console | None = None, enabled: bool = True) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
    )


def run_attack(
    ctx: EvaluationContext, attack: Attack | None, progress: Progress, clean: Outcomes | None = None
) -> tuple[str, Outcomes]:
    """Evaluate ``attack`` on every batch not yet in the store; returns (key, outcomes).

    ``attack=None`` is the clean pass. An attack is handed the samples that ``clean`` (the clean pass's outcomes)
    found correctly classified, so the clean prediction is computed once per sample, not once per attack.
    """
    if attack is not None and clean is None:
        raise ValueError("run_attack needs the clean pass's outcomes to know which samples to attack")
    name = CLEAN if attack is None else attack.name
    key = ctx.store.register(ctx.model_hash, ctx.model_name, name, ctx.spec(attack))
    done = ctx.store.done_batches(key)
    n, bs = len(ctx.y), ctx.batch_size
    starts = list(range(0, n, bs))
    already = sum(min(bs, n - starts[b]) for b in done if b < len(starts))
    task = progress.add_task(name, total=n, completed=already)
    pending = []
    for b, start in enumerate(starts):
        if b in done or ctx.store.has_batch(key, b):  # finished here earlier, or by another process on this store
            if b not in done:
                progress.advance(task, min(bs, n - start))
            continue
        pending.append(b)
    machine = computed_on(ctx.device)
    if isinstance(attack, BlackBoxAttack) and ctx.pool and clean is not None:
        _run_pooled(ctx, attack, key, pending, clean, progress, task, machine)
    else:
        for b in pending:
            if ctx.store.has_batch(key, b):
                continue
            t0 = active_clock().now()
            start, stop = b * bs, (b + 1) * bs
            clean_b = None if clean is None else torch.from_numpy(clean.clean_correct[start:stop])
            outcome = compute_batch(
                ctx.model, attack, ctx.threat, ctx.seed, b, ctx.x[start:stop], ctx.y[start:stop], clean_b, ctx.device,
                oracle=ctx.oracle,
            )
            commit_outcome(ctx, key, outcome, active_clock().now() - t0, machine)
            progress.advance(task, len(outcome.clean_correct))
    outcomes = ctx.store.outcomes(key)
    if len(outcomes.sample_index) != n or not (outcomes.sample_index == ctx.indices.numpy()).all():
        raise RuntimeError(
            f"the store {ctx.store.path} holds {len(outcomes.sample_index)} outcomes for {name}, expected {n}: it was "
            "modified by hand or by another version; use a fresh --store"
        )
    return key, outcomes


@dataclass
class _Batch:
    """One store batch of a pooled run: its images on the device, which were classified correctly, and the ones
    handed to the attack."""

    index: int
    x: torch.Tensor
    y: torch.Tensor
    clean_ok: torch.Tensor
    attacked: torch.Tensor

    @property
    def x0(self) -> torch.Tensor:
        return self.x[self.attacked]

    @property
    def y0(self) -> torch.Tensor:
        return self.y[self.attacked]


def _prepare(ctx: EvaluationContext, b: int, clean: Outcomes) -> _Batch:
    start = b * ctx.batch_size
    xb = ctx.x[start : start + ctx.batch_size].to(ctx.device)
    yb = ctx.y[start : start + ctx.batch_size].to(ctx.device)
    clean_ok = torch.from_numpy(clean.clean_correct[start : start + ctx.batch_size]).to(ctx.device)
    return _Batch(b, xb, yb, clean_ok, clean_ok.nonzero().flatten())


def _run_pooled(
    ctx: EvaluationContext,
    attack: BlackBoxAttack,
    key: str,
    pending: list[int],
    clean: Outcomes,
    progress: Progress,
    task: TaskID,
    machine: str,
) -> None:
    """Black-box batches side by side: the still-robust images of several store batches share each forward
    batch (the next batch joins as images are fooled), and each batch is committed alone as soon as it is done.
    Each batch keeps its own generator and oracle, so the stored rows are the unpooled run's."""
    # the queries go to the oracle's fused path, as each session's QueryModel would send them
    fused = fused_path(ctx.oracle)[0]
    started: dict[int, _Batch] = {}

    def sessions() -> Iterator[tuple[int, QuerySteps]]:
        for b in pending:
            if ctx.store.has_batch(key, b):  # committed meanwhile by another process on this store
                continue
            batch = _prepare(ctx, b, clean)
            if len(batch.attacked) == 0:
                outcome = outcome_columns(ctx.oracle, ctx.threat, attack.name, b, batch.x, batch.y, batch.clean_ok,
                                          None)
                commit_outcome(ctx, key, outcome, 0.0, machine)
                progress.advance(task, len(batch.y))
                continue
            started[b] = batch
            yield b, attack.session(ctx.oracle, batch.x0, batch.y0, ctx.threat, batch_generator(ctx.seed, b))

    # At least POOL_ROWS live rows, whatever the store batch size, so small store batches start side by side. Each
    # batch still runs its own attack steps: four store batches of 50 ran Square at 0.84x the speed of one of 200
    # (BENCHMARKS.md), so the default store batch stays 200.
    rows = max(ctx.batch_size, POOL_ROWS)
    last_commit = active_clock().now()
    for b, output in run_pooled(sessions(), lambda q: forward_queries(fused, q), target_rows=rows):
        batch = started.pop(b)
        # seconds: the active time (queue pauses left out) since the previous commit of this pooled run. Pooled
        # batches overlap, so each one's own start-to-commit time would count the shared forward passes several times
        # over (a full card's 500 black-box images in three pooled batches summed to 2-3x the run's wall time); these
        # shares add up to it.
        now = active_clock().now()
        outcome = outcome_columns(ctx.oracle, ctx.threat, attack.name, b, batch.x, batch.y, batch.clean_ok, output)
        commit_outcome(ctx, key, outcome, now - last_commit, machine)
        last_commit = now
        progress.advance(task, len(batch.y))


class Evaluation(NamedTuple):
    """What :func:`evaluate` returns; a named tuple, so ``clean, outcomes, seconds, flags = evaluate(...)`` works."""

    clean: Outcomes  # the clean pass
    outcomes: dict[str, Outcomes]  # per attack
    seconds: dict[str, float]  # per attack, compute time
    flags: dict[str, str]  # gradient-masking checks that fired: name -> meaning


def evaluate(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    indices: torch.Tensor | None = None,
    *,
    attacks: Sequence[str | Attack] = ("fgsm", "pgd"),
    threat: ThreatModel,
    dataset: str = "custom",
    model_name: str = "model",
    seed: int = 0,
    batch_size: int = 200,
    device: str | torch.device | None = None,
    store: ResultStore,
    progress: bool = True,
    console: Console | None = None,
    checks: bool = True,
    pool: bool = True,
    backend: Executor | None = None,
    inference: Inference | str = Inference.SIMULATION,
) -> Evaluation:
    """Clean pass then each attack, resumable through ``store``; then the gradient-masking checks.

    Returns the clean outcomes, per-attack outcomes, per-attack compute seconds, and flags (name -> meaning).

    ``pool`` runs the black-box attacks' store batches side by side so that each forward batch stays full. What
    holds either way: the same seed gives the same stored numbers (outcomes, perturbations, query counts), pooled or
    not, resumed or not, because each batch draws from its own generator seeded by (seed, batch index) and a
    model's answer for an image does not depend on the other images it is batched with (``tests/test_pooled.py``).
    Pooled batches overlap in time, so each stores its share of the wall time (the time since the previous commit):
    an attack's stored seconds add up to the time it took.

    ``backend`` (an :class:`~arbibench.evaluation.executors.Executor`, e.g.
    :class:`~arbibench.evaluation.ray_executor.RayExecutor`) computes the missing batches elsewhere with
    :func:`~arbibench.evaluation.batch.compute_batch`, and this process commits them: the same rows as a local run.
    ``None`` computes them here. The gradient-masking checks always run here.
    """
    settings = RunSettings(dataset=dataset, seed=seed, batch_size=batch_size, device=device,
                           inference=Inference.parse(inference), pool=pool)
    plan = plan_evaluation(model, x, y, indices, attacks=attacks, threat=threat, settings=settings,
                           model_name=model_name, store=store)
    return execute(plan, progress=progress, console=console, checks=checks, executor=backend)


def execute(
    plan: EvalPlan,
    *,
    progress: bool = True,
    console: Console | None = None,
    checks: bool = True,
    executor: Executor | None = None,
) -> Evaluation:
    """Carry out ``plan``: the batches the store lacks (computed by ``executor`` first when given, else here), every
    outcome read back from the store, then the gradient-masking checks (``checks``), here in any case."""
    ctx, store = plan.ctx, plan.ctx.store
    flags = dict(plan.flags)
    with make_progress(console, progress) as bar:
        if executor is not None:
            executor.run([plan], bar)
        clean_key, clean = run_attack(ctx, None, bar)
        per_attack: dict[str, Outcomes] = {}
        seconds: dict[str, float] = {}
        keys = [clean_key]
        for attack in plan.attacks:
            key, out = run_attack(ctx, attack, bar, clean)
            keys.append(key)
            per_attack[attack.name] = out
            seconds[attack.name] = store.batch_seconds(key)
        seconds[CLEAN] = store.batch_seconds(clean_key)
    say = console or Console(stderr=True)
    for note in sorted(ctx.notes):
        say.print(f"[yellow]note[/]: {ctx.model_name}: {note}")
    if ctx.discrepancies:
        say.print(f"[yellow]note[/]: {ctx.model_name}: the reference model contradicted {ctx.discrepancies} fused-path "
                  "answers (each cost its attack queries, never a result)")
    if checks:
        acc_star = {name: float(o.adv_correct.mean()) for name, o in per_attack.items()}
        gradient_free = {a.name for a in plan.attacks if not a.needs_gradients}
        gradient_only = {a.name for a in plan.attacks if a.gradient_only}
        flags.update(run_checks(ctx.model, ctx.x, ctx.y, ctx.threat, acc_star, gradient_free, ctx.device,
                                seed=ctx.seed, gradient_only=gradient_only))
    for key in keys:  # every evaluation that took part carries the flags raised on it
        for flag, detail in flags.items():
            store.add_flag(key, flag, detail)
    return Evaluation(clean, per_attack, seconds, flags)
