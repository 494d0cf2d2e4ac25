"""Query-only access to a model, the only thing a black-box attack is given.

A :class:`QueryModel` answers either scores (logits) or only the top-1 label, never gradients, and counts every
query per sample. Budgets are per sample: a query that would take any sample past its budget raises
:class:`QueryBudgetExceeded` before the model is run, so an attack cannot overspend by accident and a bug shows up
as an error, not as an inflated success rate. The oracle also records, per sample, the query count at which it
first answered for an input that is misclassified *and* inside the threat model (within eps, in [0, 1]): "queries
at success", so every black-box attack reports query counts the same way whatever its internal bookkeeping.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import torch
from torch import nn

from arbibench.attacks.base import SCORE_BASED, Attack, require_choice, require_int
from arbibench.attacks.threat import ThreatModel

ACCESS = ("scores", "labels")
# Largest batch sent to the model at once: attacks that query many probes per sample (NES) would otherwise run
# batches of thousands of images, slower per image on CPU (activations fall out of cache) and heavy on memory.
QUERY_CHUNK = 256


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
        self._model = model
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

    def scores(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Logits [len(idx), classes] for inputs ``x`` belonging to originals ``idx``; one query each."""
        if self.access != "scores":
            raise QueryAccessError("this oracle answers labels only (decision-based access); scores are hidden")
        return self._query(x, idx)

    def labels(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Top-1 labels for inputs ``x`` belonging to originals ``idx``; one query each."""
        return self._query(x, idx).argmax(dim=1)

    def is_adversarial(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Whether each input is misclassified (label access is enough); one query each."""
        return self.labels(x, idx) != self.y[idx]

    @torch.no_grad()
    def _query(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
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
        parts = x.split(QUERY_CHUNK) if len(x) else (x,)
        logits = torch.cat([self._model(part).detach() for part in parts])
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
        within = (dist <= self.threat.eps + 1e-6) & in_box
        hit = fooled & within & (self.success_queries[idx] < 0)
        if bool(hit.any()):  # the first hit per sample wins
            first = torch.full((len(self),), torch.iinfo(torch.int64).max, dtype=torch.int64)
            first.scatter_reduce_(0, idx[hit], position[hit], reduce="amin")
            new = first < torch.iinfo(torch.int64).max
            self.success_queries[new] = self.queries[new] + first[new]
        self.queries += cost
        return logits


class BlackBoxAttack(Attack):
    """Base of score- and decision-based attacks: :meth:`attack` sees a :class:`QueryModel`, never the model.

    After each call, ``query_counts`` holds per sample the queries at success (for samples fooled within eps) or
    the queries spent (for the others), and ``min_distance`` the smallest adversarial perturbation the attack
    found (``inf`` where none was found); the runner stores both. Subclasses' configs need ``max_queries``.
    """

    family: ClassVar[str] = SCORE_BASED
    needs_gradients: ClassVar[bool] = False
    access: ClassVar[str] = "scores"

    def __init__(self, config: Any | None = None, **params: Any) -> None:
        super().__init__(config, **params)
        self.query_counts: torch.Tensor | None = None
        self.min_distance: torch.Tensor | None = None

    def run(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> torch.Tensor:
        self.query_counts, self.min_distance = None, None
        oracle = QueryModel(model, x, y, threat, access=self.access, max_queries=self.config.max_queries)
        x_adv = self.attack(oracle, x, y, threat, generator)
        fooled_within = oracle.success_queries >= 0
        self.query_counts = torch.where(fooled_within, oracle.success_queries, oracle.queries)
        if self.min_distance is None:
            self.min_distance = torch.where(fooled_within, threat.distance(x_adv, x).cpu().double(), torch.inf)
        return x_adv

    @abstractmethod
    def attack(
        self,
        oracle: QueryModel,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> torch.Tensor:
        """Return ``x_adv`` within ``threat`` (the originals where no adversarial within eps was found).

        Decision-based attacks that search beyond eps set ``self.min_distance`` to the smallest perturbation they
        found per sample before returning.
        """
