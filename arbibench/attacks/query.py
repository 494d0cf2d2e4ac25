"""Query-only access to a model, the only thing a black-box attack is given.

A :class:`QueryModel` answers either scores (logits) or only the top-1 label, never gradients, and counts every
query per sample. Budgets are per sample: a query that would take any sample past its budget raises
:class:`QueryBudgetExceeded` before the model is run, so an attack cannot overspend by accident and a bug shows up
as an error, not as an inflated success rate. The oracle also records, per sample, the query count at which it
first answered for an input that is misclassified *and* inside the threat model (within eps, in [0, 1]): "queries
at success", so every black-box attack reports query counts the same way whatever its internal bookkeeping.

The oracle answers from the model's fused path (:func:`arbibench.nn.fused.fused_path`: the same
logits bit for bit, without re-binarizing the kernels at every query) and confirms on the reference model every
answer that would end a sample's attack (misclassified within the threat model). Should the two ever disagree, the
attack is given the reference's answer and carries on, and ``discrepancies`` counts it: a disagreement can cost
queries, never a robustness number.

Attacks are written as *query steps*: a generator that yields the inputs it wants answered and receives their
logits (``logits = yield from oracle.query_scores(x, idx)``). Run alone (:func:`drive`), that is an ordinary
attack; run side by side (:func:`run_pooled`), the still-robust images of several store batches share one forward
batch. Each step sequence depends only on its own images, generator and answers, and a model's answer for an image
does not depend on the other images of the forward batch (single-image forwards are padded to two rows, because
PyTorch's one-image convolution path rounds differently), so pooled and unpooled runs give the same numbers for
the same seed.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, ClassVar

import torch
from torch import nn

from arbibench.attacks.base import (
    SCORE_BASED,
    Attack,
    AttackOutput,
    _check_output,
    _validate_inputs,
    require_choice,
    require_int,
)
from arbibench.attacks.threat import ThreatModel
from arbibench.nn.fused import fused_path

ACCESS = ("scores", "labels")
# Largest batch sent to the model at once. On a CPU the cost per image grows once a batch's activations fall out
# of the caches: the fused resnet20_bnn forward took 1.18 ms per image in calls of 64 images and 1.94 ms in calls of
# 256 (2 threads, 1.52 vs 2.10 ms with 1; benchmarks/forward_chunk.py, BENCHMARKS.md). An accelerator wants large
# calls; there the chunk only bounds memory (NES asks for thousands of probes at once).
QUERY_CHUNK = 64
QUERY_CHUNK_ACCELERATOR = 1024
POOL_ROWS = 256  # rows per forward batch that run_pooled keeps live by default


def query_chunk(device: torch.device) -> int:
    """Images per model call for queries on ``device``."""
    return QUERY_CHUNK if device.type == "cpu" else QUERY_CHUNK_ACCELERATOR


# A query step sequence: yields inputs to answer, receives their logits, returns its result.
QuerySteps = Generator[torch.Tensor, torch.Tensor, Any]


@torch.no_grad()
def forward_queries(model: nn.Module | Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Logits of ``x`` in chunks of :func:`query_chunk` images; a one-image chunk runs as two copies (see module
    doc)."""
    if len(x) == 0:
        return model(x).detach()
    parts = []
    for part in torch.split(x, query_chunk(x.device)):
        parts.append(model(part.expand(2, *part.shape[1:]))[:1] if len(part) == 1 else model(part))
    return torch.cat(parts).detach()


def drive(steps: QuerySteps, answer: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Run one query step sequence to its end, answering each request with ``answer``; returns its result."""
    try:
        request = next(steps)
        while True:
            request = steps.send(answer(request))
    except StopIteration as finished:
        return finished.value


def run_pooled(
    sessions: Iterable[tuple[Any, QuerySteps]],
    answer: Callable[[torch.Tensor], torch.Tensor],
    target_rows: int = POOL_ROWS,
) -> Iterator[tuple[Any, Any]]:
    """Run many step sequences with one forward per round; yields ``(key, result)`` as each sequence finishes.

    Sequences are started in order while the round's forward batch holds fewer than ``target_rows`` inputs, so the
    batch stays full as images are fooled and leave. Every sequence gets exactly the answers it would get alone.
    """
    todo = iter(sessions)
    live: list[tuple[Any, QuerySteps, torch.Tensor]] = []
    exhausted = False
    while True:
        while not exhausted and sum(len(r) for _, _, r in live) < target_rows:
            nxt = next(todo, None)
            if nxt is None:
                exhausted = True
                break
            key, steps = nxt
            try:
                live.append((key, steps, next(steps)))
            except StopIteration as finished:
                yield key, finished.value
        if not live:
            return
        logits = answer(torch.cat([r for _, _, r in live]))
        answers = torch.split(logits, [len(r) for _, _, r in live])
        still: list[tuple[Any, QuerySteps, torch.Tensor]] = []
        for (key, steps, _), got in zip(live, answers, strict=True):
            try:
                still.append((key, steps, steps.send(got)))
            except StopIteration as finished:
                yield key, finished.value
        live = still


class QueryBudgetExceeded(RuntimeError):  # noqa: N818 - reads as the event it reports
    """An attack asked for more queries than a sample's budget allows."""


class QueryAccessError(PermissionError):
    """An attack asked for something its access level does not grant (scores from a labels-only oracle)."""


class QueryModel:
    """Scores or labels of a model for a fixed batch of originals ``x``, with per-sample query accounting.

    Every call names which originals the queried inputs belong to (``idx``, one entry per input, indices into the
    batch), so a batch that shrinks as samples fall still charges the right samples.
    """

    def __init__(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        *,
        access: str = "scores",
        max_queries: int,
    ) -> None:
        require_choice("access", access, ACCESS)
        require_int("max_queries", max_queries, 1)
        self.reference = model
        self._model, self.fusion_note = fused_path(model)
        self.discrepancies = 0  # fused answers the reference contradicted (see the module docstring)
        self.x0, self.y, self.threat = x.detach(), y, threat
        self.access, self.max_queries = access, max_queries
        n = x.shape[0]
        self.queries = torch.zeros(n, dtype=torch.int64)  # queries spent per sample so far
        self.success_queries = torch.full((n,), -1, dtype=torch.int64)  # -1: never fooled within eps

    def __len__(self) -> int:
        return self.x0.shape[0]

    def remaining(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        """Queries each sample (all, or those in ``idx``) may still spend."""
        left = self.max_queries - self.queries
        return left if idx is None else left[idx.cpu()]

    def answer(self, x: torch.Tensor) -> torch.Tensor:
        """The model's logits for a forward batch (no accounting): what :func:`drive` answers requests with."""
        return forward_queries(self._model, x)

    def scores(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Logits [len(idx), classes] for inputs ``x`` belonging to originals ``idx``; one query each."""
        logits: torch.Tensor = drive(self.query_scores(x, idx), self.answer)
        return logits

    def labels(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Top-1 labels for inputs ``x`` belonging to originals ``idx``; one query each."""
        labels: torch.Tensor = drive(self.query_labels(x, idx), self.answer)
        return labels

    def is_adversarial(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Whether each input is misclassified (label access is enough); one query each."""
        adversarial: torch.Tensor = drive(self.query_adversarial(x, idx), self.answer)
        return adversarial

    # -- the same three as query steps (``yield from``), for attacks written as step sequences -----------------------
    def query_scores(self, x: torch.Tensor, idx: torch.Tensor) -> Generator[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.access != "scores":
            raise QueryAccessError("this oracle answers labels only (decision-based access); scores are hidden")
        return (yield from self._query(x, idx))

    def query_labels(self, x: torch.Tensor, idx: torch.Tensor) -> Generator[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (yield from self._query(x, idx)).argmax(dim=1)

    def query_adversarial(
        self, x: torch.Tensor, idx: torch.Tensor
    ) -> Generator[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (yield from self.query_labels(x, idx)) != self.y[torch.as_tensor(idx).to(self.y.device)]

    def _query(self, x: torch.Tensor, idx: torch.Tensor) -> Generator[torch.Tensor, torch.Tensor, torch.Tensor]:
        if x.requires_grad:
            raise QueryAccessError("a black-box oracle gives no gradients: pass detached inputs")
        idx = torch.as_tensor(idx, dtype=torch.int64).cpu()
        if idx.dim() != 1 or idx.shape[0] != x.shape[0]:
            raise ValueError(f"idx must name one original per input: {tuple(idx.shape)} for {x.shape[0]} inputs")
        cost = torch.bincount(idx, minlength=len(self))
        over = (self.queries + cost) > self.max_queries
        if bool(over.any()):
            raise QueryBudgetExceeded(
                f"{int(over.sum())} samples would exceed their budget of {self.max_queries} queries "
                f"(sample {int(over.nonzero()[0])} has {int(self.remaining()[over][0])} left)"
            )
        logits = yield x.detach()
        # Charge query by query in input order, so "queries at success" is exact when one sample has several inputs:
        # position[j] is 1 + the number of earlier inputs of the same sample (vectorised: no per-sample Python loop).
        order = torch.sort(idx, stable=True).indices
        first_of_group = torch.cumsum(cost, 0) - cost
        position = torch.empty_like(idx)
        position[order] = torch.arange(1, idx.shape[0] + 1) - first_of_group[idx[order]]
        dev = self.x0.device
        fooled = (logits.argmax(dim=1) != self.y[idx.to(dev)]).cpu()
        dist = self.threat.distance(x.detach().double(), self.x0[idx.to(dev)].double()).cpu()
        flat = x.detach().reshape(x.shape[0], -1)
        in_box = ((flat >= -1e-6) & (flat <= 1.0 + 1e-6)).all(dim=1).cpu()  # what ThreatModel.verify accepts
        within = (dist <= self.threat.eps + 1e-6) & in_box & self.threat.on_grid(x).cpu()
        hit = fooled & within & (self.success_queries[idx] < 0)
        if bool(hit.any()) and self._model is not self.reference:
            logits, hit = self._confirm(x, idx, logits, hit)
        if bool(hit.any()):  # the first hit per sample wins
            first = torch.full((len(self),), torch.iinfo(torch.int64).max, dtype=torch.int64)
            first.scatter_reduce_(0, idx[hit], position[hit], reduce="amin")
            new = first < torch.iinfo(torch.int64).max
            self.success_queries[new] = self.queries[new] + first[new]
        self.queries += cost
        return logits

    @torch.no_grad()
    def _confirm(
        self, x: torch.Tensor, idx: torch.Tensor, logits: torch.Tensor, hit: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Re-ask the reference model about the hits; where it disagrees, its logits replace the fused ones."""
        rows = hit.nonzero().flatten()
        dev = x.device
        ref = forward_queries(self.reference, x[rows.to(dev)].detach())
        agree = (ref.argmax(dim=1) != self.y[idx[rows].to(dev)]).cpu()
        if not bool(agree.all()):
            self.discrepancies += int((~agree).sum())
            logits = logits.clone()
            logits[rows[~agree].to(logits.device)] = ref[~agree.to(ref.device)].to(logits)
            hit = hit.clone()
            hit[rows[~agree]] = False
        return logits, hit


class BlackBoxAttack(Attack):
    """Base of score- and decision-based attacks: :meth:`attack` sees a :class:`QueryModel`, never the model.

    Its :class:`~arbibench.attacks.base.AttackOutput` carries per image the queries at success (for images fooled
    within eps) or the queries spent (for the others), and the smallest adversarial perturbation the attack found
    (``inf`` where none was found); the runner stores both. Subclasses' configs need ``max_queries``.
    """

    family: ClassVar[str] = SCORE_BASED
    needs_gradients: ClassVar[bool] = False
    reports_min_distance: ClassVar[bool] = True
    access: ClassVar[str] = "scores"

    def run_output(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> AttackOutput:
        oracle = QueryModel(model, x, y, threat, access=self.access, max_queries=self.config.max_queries)
        output: AttackOutput = drive(self._steps_with_bookkeeping(oracle, x, y, threat, generator), oracle.answer)
        return output

    def session(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> QuerySteps:
        """The attack on one batch as query steps (for :func:`run_pooled`), returning an ``AttackOutput``.

        The same checks as :meth:`Attack.output`: inputs validated, the result verified against the threat model.
        The steps' requests must be answered with ``forward_queries(fused_path(model)[0], request)``.
        """
        _validate_inputs(model, x, y, threat, generator)
        x = x.detach()
        oracle = QueryModel(model, x, y, threat, access=self.access, max_queries=self.config.max_queries)
        output: AttackOutput = yield from self._steps_with_bookkeeping(oracle, x, y, threat, generator)
        threat.verify(output.x_adv, x)
        _check_output(self, output, x.shape[0])
        return output

    def _steps_with_bookkeeping(
        self, oracle: QueryModel, x: torch.Tensor, y: torch.Tensor, threat: ThreatModel, generator: torch.Generator
    ) -> QuerySteps:
        found: list[torch.Tensor] = []  # a decision-based attack's min_distance, reported through the list
        x_adv = threat.round_to_grid((yield from self.steps(oracle, x, y, threat, generator, found)), x)
        fooled_within = oracle.success_queries >= 0
        min_distance = found[0] if found else torch.where(
            fooled_within, threat.distance(x_adv, x).cpu().double(), torch.inf
        )
        return AttackOutput(
            x_adv.detach(),
            queries=torch.where(fooled_within, oracle.success_queries, oracle.queries),
            min_distance=min_distance,
            discrepancies=oracle.discrepancies,
            fusion_note=oracle.fusion_note,
        )

    def attack(
        self,
        oracle: QueryModel,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> torch.Tensor:
        """Return ``x_adv`` within ``threat`` (the originals where no adversarial within eps was found)."""
        x_adv: torch.Tensor = drive(self.steps(oracle, x, y, threat, generator, []), oracle.answer)
        return x_adv

    def steps(
        self,
        oracle: QueryModel,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
        min_distance: list[torch.Tensor],
    ) -> QuerySteps:
        """The attack as query steps; returns ``x_adv`` within ``threat`` (the originals where none was found).

        Decision-based attacks that search beyond eps append the smallest perturbation they found per sample to
        ``min_distance`` before returning. A subclass that implements only :meth:`attack` (blocking oracle calls)
        still works everywhere; its batches just never share a forward batch, and its ``min_distance`` is the
        distance of its result where that fools within eps (an attack that searches beyond eps implements this).
        """
        if type(self).attack is BlackBoxAttack.attack:
            raise NotImplementedError(f"{type(self).__name__} implements neither steps() nor attack()")
        return self.attack(oracle, x, y, threat, generator)
        yield  # a generator, though it never asks for a pooled forward
