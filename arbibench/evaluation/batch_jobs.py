"""The store batches an executor still has to compute, what a worker computes for one, and the executors' base.

Shared by the executors that compute batches outside the runner (worker processes on this machine, Ray actors): the
driver lists the missing batches of its plans (every clean pass first, since an attack batch needs its images' clean
outcomes, then the attack batches, longest first so that no long batch starts last, and each evaluation's from its
last batch down, so that a local run of the same store working up from the first (the machine's queue, while a lent
GPU takes the same job) meets it once instead of computing the same batches), cuts each batch's images out
of the plan, and names the model by zoo name and identity. A worker loads that model itself and refuses one whose
checkpoint or weights are not the driver's: a batch computed on other weights would be stored under the wrong key.
A :class:`BatchTask` is one batch as sent to a worker; :class:`WorkerExecutor` is what the two executors share.
"""

from __future__ import annotations

import os
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from rich.progress import Progress, TaskID
from torch import nn

from arbibench.attacks import Attack, ThreatModel
from arbibench.attacks.query import BlackBoxAttack
from arbibench.clock import active_clock
from arbibench.evaluation.batch import BatchOutcome, compute_batch, layout
from arbibench.evaluation.executors import Executor, ExecutorError
from arbibench.evaluation.inputs import resolve_device
from arbibench.evaluation.plan import CLEAN, EvalPlan, oracle_of
from arbibench.evaluation.store import Outcomes, hash_model
from arbibench.files import sha256_file
from arbibench.inference import Inference
from arbibench.machine import computed_on
from arbibench.models.zoo import get_entry, load_model, verified_checkpoint

QUERY_ATTACK_FIRST = 1e9  # a query attack's batch outranks every white-box batch in the longest-first order


@dataclass(frozen=True)
class ModelSpec:
    """How a worker loads the model: zoo name, dataset, user model folder, and the identities it must match."""

    name: str
    dataset: str
    model_dir: str | None
    sha256: str  # of the checkpoint file the driver loaded
    model_hash: str  # hash_model of the weights: the store key's model identity
    inference: Inference = Inference.SIMULATION  # DEPLOYED: the worker builds (and compiles the kernel of) its own


def model_spec(plan: EvalPlan, model_dir: str | None, backend: str) -> ModelSpec:
    """The :class:`ModelSpec` of ``plan``'s model, or one ExecutorError when it is not a zoo or imported model."""
    ctx = plan.ctx
    try:
        entry = get_entry(ctx.model_name, ctx.dataset, model_dir)
    except (KeyError, ValueError) as e:
        raise ExecutorError(
            f"the {backend} backend loads each model on its workers by zoo name, and {ctx.model_name!r} is not a zoo "
            f"or imported model ({e}); evaluate it with --backend local"
        ) from e
    sha = sha256_file(verified_checkpoint(entry, model_dir))
    return ModelSpec(ctx.model_name, ctx.dataset, model_dir, sha, ctx.model_hash, ctx.inference)


def load_spec(spec: ModelSpec, device: torch.device) -> nn.Module:
    """The model of ``spec`` on ``device``, checked against the driver's checkpoint sha256 and weights hash."""
    path = verified_checkpoint(get_entry(spec.name, spec.dataset, spec.model_dir), spec.model_dir)
    got = sha256_file(path)
    if got != spec.sha256:
        raise ExecutorError(
            f"worker pid {os.getpid()}: checkpoint {path} of {spec.name} has sha256 {got}, the driver loaded "
            f"{spec.sha256}; install the same arbibench (and model folder) wherever the workers run"
        )
    model = load_model(spec.name, spec.model_dir, spec.dataset, device=device)
    if hash_model(model) != spec.model_hash:
        raise ExecutorError(
            f"the model the driver evaluates as {spec.name!r} is not that zoo checkpoint's weights; a backend loads "
            "models by zoo name: evaluate the zoo model itself, or use --backend local"
        )
    return model


def attack_cost(config: Mapping[str, Any]) -> float:
    """Rough relative cost of one batch of an attack with ``config`` (its ``config_dict``): queries or steps, times
    restarts and target classes, summed over an ensemble's components."""
    if "components" in config:
        return sum(attack_cost(c) for c in config["components"])
    steps = float(config.get("max_queries") or config.get("steps") or 1)
    return steps * max(1, int(config.get("restarts") or 1)) * max(1, int(config.get("n_target_classes") or 1))


@dataclass
class BatchJob:
    """One missing store batch: the plan and evaluation key it belongs to, its attack (None: the clean pass), its
    index, and the clean outcomes its images are attacked from."""

    plan: EvalPlan
    key: str
    attack: Attack | None
    batch_index: int
    clean: Outcomes | None
    attempts: int = 0

    @property
    def cost(self) -> float:
        """Rough relative cost, for longest-first scheduling: query attacks first, then by budget."""
        if self.attack is None:
            return 0.0
        bonus = QUERY_ATTACK_FIRST if isinstance(self.attack, BlackBoxAttack) else 0.0
        return attack_cost(self.attack.config_dict()) + bonus

    @property
    def size(self) -> int:
        """Images in the batch (the last batch of an evaluation may be short)."""
        ctx = self.plan.ctx
        return min(ctx.batch_size, len(ctx.y) - self.batch_index * ctx.batch_size)

    def task(self, spec: ModelSpec) -> BatchTask:
        """What a worker needs to compute the batch (but the attack, which executors ship each their own way): the
        images, labels and clean outcomes as CPU copies (a view would carry the whole tensor along)."""
        ctx = self.plan.ctx
        s = slice(self.batch_index * ctx.batch_size, (self.batch_index + 1) * ctx.batch_size)
        x, y = ctx.x[s].cpu().clone(), ctx.y[s].cpu().clone()
        clean = None if self.clean is None else torch.from_numpy(self.clean.clean_correct[s].copy())
        return BatchTask(spec, ctx.threat, ctx.seed, self.batch_index, x, y, clean, layout(x), str(ctx.device))


@dataclass(frozen=True)
class BatchTask:
    """One store batch as sent to a worker: the model to load, the threat model, seed and batch index, the images
    with the layout the driver sent them in, their clean outcomes (None: the clean pass) and the device."""

    spec: ModelSpec
    threat: ThreatModel
    seed: int
    batch_index: int
    x: torch.Tensor
    y: torch.Tensor
    clean_correct: torch.Tensor | None
    layout: tuple[str, tuple[int, ...], tuple[int, ...]]
    device: str

    def compute(
        self, attack: Attack | None, models: dict[tuple[str, str, str], nn.Module]
    ) -> tuple[BatchOutcome, float, str]:
        """The batch's columns, compute seconds and what computed them, in a worker that caches its models in
        ``models`` (refusing images whose layout changed on the way: a BNN's sign can flip on other rounding)."""
        t0 = active_clock().now()
        if layout(self.x) != self.layout:
            raise ExecutorError(f"batch {self.batch_index} arrived as {layout(self.x)}, the driver sent {self.layout}")
        dev = resolve_device(self.device)
        cache_key = (self.spec.name, self.spec.sha256, str(dev))
        if cache_key not in models:
            models[cache_key] = load_spec(self.spec, dev)
        net = models[cache_key]
        # the driver's plan decided the inference; each worker builds that oracle itself (a deployed one's kernel is
        # compiled for, and cached by, the worker's own CPU)
        oracle = oracle_of(net, self.spec.inference, self.spec.name)
        out = compute_batch(net, attack, self.threat, self.seed, self.batch_index, self.x, self.y, self.clean_correct,
                            dev, oracle=oracle)  # fmt: skip
        return out, active_clock().now() - t0, computed_on(dev)


def missing_batches(plan: EvalPlan, key: str) -> list[int]:
    """Batch indices of evaluation ``key`` that the plan's store does not hold yet."""
    n_batches = -(-len(plan.ctx.y) // plan.ctx.batch_size)
    done = plan.ctx.store.done_batches(key)
    return [b for b in range(n_batches) if b not in done]


def clean_jobs(plans: Sequence[EvalPlan]) -> list[BatchJob]:
    """The missing clean-pass batches of ``plans`` (each once, however many plans share an evaluation)."""
    jobs: dict[tuple[str, int], BatchJob] = {}
    for plan in plans:
        key = plan.ctx.store.register(plan.ctx.model_hash, plan.ctx.model_name, CLEAN, plan.ctx.spec(None))
        for b in missing_batches(plan, key):
            jobs.setdefault((key, b), BatchJob(plan, key, None, b, None))
    return list(jobs.values())


def attack_jobs(plans: Sequence[EvalPlan]) -> list[BatchJob]:
    """The missing attack batches of ``plans``, longest first and each evaluation's last batch first; call it once
    their clean passes are stored."""
    jobs: dict[tuple[str, int], BatchJob] = {}
    for plan in plans:
        ctx = plan.ctx
        clean: Outcomes | None = None
        for attack in plan.attacks:
            key = ctx.store.register(ctx.model_hash, ctx.model_name, attack.name, ctx.spec(attack))
            missing = missing_batches(plan, key)
            if missing and clean is None:
                clean_key = ctx.store.register(ctx.model_hash, ctx.model_name, CLEAN, ctx.spec(None))
                clean = ctx.store.outcomes(clean_key)
            for b in reversed(missing):
                jobs.setdefault((key, b), BatchJob(plan, key, attack, b, clean))
    return sorted(jobs.values(), key=lambda j: -j.cost)  # stable: evaluations of one cost keep the plans' order


def pending_samples(plans: Sequence[EvalPlan]) -> int:
    """Images in every batch of ``plans`` that the store lacks, clean passes and attacks together (registers the
    evaluations, as running them would)."""
    total = sum(j.size for j in clean_jobs(plans))
    for plan in plans:
        ctx = plan.ctx
        for attack in plan.attacks:
            key = ctx.store.register(ctx.model_hash, ctx.model_name, attack.name, ctx.spec(attack))
            total += sum(BatchJob(plan, key, attack, b, None).size for b in missing_batches(plan, key))
    return total


def run_in_two_waves(
    plans: Sequence[EvalPlan],
    progress: Progress,
    label: str,
    start: Callable[[], None],
    run_jobs: Callable[[list[BatchJob], Progress, TaskID], None],
) -> None:
    """An executor's run: nothing when the store holds every batch; else ``start()`` (its workers, before any progress
    bar, so that a backend that cannot start fails with nothing shown), then ``run_jobs`` on every missing clean-pass
    batch, then on every missing attack batch, longest first."""
    total = pending_samples(plans)
    if total == 0:
        return
    start()
    task = progress.add_task(label, total=total)
    run_jobs(clean_jobs(plans), progress, task)
    run_jobs(attack_jobs(plans), progress, task)


class WorkerExecutor(Executor):
    """An executor whose workers load each model by zoo name and compute the batches the driver lists; the driver
    commits them. Subclasses start the workers (:meth:`_start`) and keep them fed (:meth:`_run_jobs`)."""

    def __init__(
        self, workers: int | None, worker_threads: int | None, model_dir: str | os.PathLike[str] | None
    ) -> None:
        for flag, value in (("--workers", workers), ("--worker-threads", worker_threads)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ExecutorError(f"{flag} must be a positive integer, got {value!r}")
        self.worker_threads = worker_threads or torch.get_num_threads()
        self.model_dir = None if model_dir is None else str(model_dir)
        self._models: dict[tuple[str, str, str], ModelSpec] = {}

    @abstractmethod
    def _start(self) -> None:
        """Start the workers (nothing when they run): called before the first batch, so a failure shows no bar."""

    @abstractmethod
    def _run_jobs(self, jobs: list[BatchJob], progress: Progress, task: TaskID) -> None:
        """Compute and commit every job."""

    def _model_spec(self, plan: EvalPlan) -> ModelSpec:
        ctx = plan.ctx
        cache_key = (ctx.model_name, ctx.model_hash, ctx.inference)
        if cache_key not in self._models:
            self._models[cache_key] = model_spec(plan, self.model_dir, self.name)
        return self._models[cache_key]

    def run(self, plans: Sequence[EvalPlan], progress: Progress) -> None:
        """Clean passes of every plan first, then all their attack batches, longest first."""
        for plan in plans:
            self._model_spec(plan)  # a model the workers cannot load fails here, before any work
        run_in_two_waves(plans, progress, self.name, self._start, self._run_jobs)
