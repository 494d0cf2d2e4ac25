"""The attack contract: a small configured object whose every result is verified before anyone can count it.

An attack is a name, a frozen config dataclass (hashed by the store through :meth:`Attack.config_dict`), a flag
saying whether it needs gradients, and :meth:`Attack.run`. Callers go through :meth:`Attack.output`, which
validates the inputs, runs the attack and then checks the result against the threat model, so an out-of-budget
perturbation raises instead of being reported as a success. It returns an :class:`AttackOutput`: the adversarial
images and what the attack knows about them (queries per image, smallest perturbation found); ``attack(...)``
(:meth:`Attack.__call__`) is the same call returning the images only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, is_dataclass, replace
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from arbibench.attacks.losses import LOSSES, LossFn
from arbibench.attacks.threat import ThreatModel

# -- families: what the attacker sees of the model ----------------------------------------------------------------
WHITE_BOX = "white-box"  # the model's gradients
SCORE_BASED = "score-based"  # the model's scores (logits / probabilities), one query at a time
DECISION_BASED = "decision-based"  # only the predicted label
TRANSFER = "transfer"  # nothing but one label query: the examples are crafted on a surrogate model
FAMILIES = (WHITE_BOX, SCORE_BASED, DECISION_BASED, TRANSFER)
BLACK_BOX = "black-box"  # the protocol's (and the cards') group of every family but white-box
ACCESS_GROUPS = (WHITE_BOX, BLACK_BOX)  # the protocol's two groups of families (a card's attack "family")
NORMS = ("Linf", "L2")


def access_group(family: str) -> str:
    """``white-box`` or ``black-box``: the protocol group (and card ``family``) of an attack family."""
    return WHITE_BOX if family == WHITE_BOX else BLACK_BOX


# -- config validation: each check names the parameter, so a bad value is easy to trace back to a CLI flag --------
def require_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def require_positive_float(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def require_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def require_choice(name: str, value: Any, choices: tuple[str, ...] | list[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def require_loss(name: str, value: Any) -> None:
    require_choice(name, value, list(LOSSES))


@dataclass(frozen=True)
class NoConfig:
    """Config of an attack without parameters."""


# -- gradients and predictions -------------------------------------------------------------------------------------
def loss_gradient(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient of the summed per-sample loss w.r.t. the input only, and the logits of that same forward pass.

    ``torch.autograd.grad`` w.r.t. ``x`` leaves every parameter's ``.grad`` untouched, and ``enable_grad`` makes
    the attack work when the caller evaluates under ``torch.no_grad()``. Non-finite gradient entries (a model that
    overflows) become 0 / +-max so one bad pixel cannot turn the whole iterate into NaN.
    """
    with torch.enable_grad():
        x_req = x.detach().requires_grad_(True)
        logits = model(x_req)
        loss = loss_fn(logits, y)
        (grad,) = torch.autograd.grad(loss.sum(), x_req)
    return torch.nan_to_num(grad.detach(), nan=0.0), logits.detach()


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Labels the deployed model gives (no-grad forward: exact binary activations, no surrogate arithmetic)."""
    logits: torch.Tensor = model(x)
    return logits.argmax(dim=1)


# -- the contract --------------------------------------------------------------------------------------------------
def confirmed_misclassified(model: nn.Module, x: torch.Tensor, y: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """Indices of ``x`` that the deployed model misclassifies, among those ``logits`` (from a gradient pass) flag.

    The no-grad forward confirms each candidate: surrogate arithmetic can differ from the deployed model by
    rounding, and only what the deployed model gets wrong may end a sample's attack (early exit).
    """
    candidates = (logits.argmax(dim=1) != y).nonzero().squeeze(1)
    if candidates.numel() == 0:
        return candidates
    return candidates[predict(model, x[candidates]) != y[candidates]]


def most_likely_other_classes(logits: torch.Tensor, y: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` most likely wrong classes per sample ([N, k], most likely first): the targets of APGD-T and FAB-T.

    ``k`` is capped at the number of classes minus one; ties keep class order so the choice is deterministic.
    """
    others = logits.masked_fill(F.one_hot(y, logits.shape[1]).bool(), -math.inf)
    ranked = others.sort(dim=1, descending=True, stable=True).indices
    return ranked[:, : min(k, logits.shape[1] - 1)]


@dataclass(frozen=True)
class AttackOutput:
    """What an attack returns for one batch, verified against the threat model before anyone reads it.

    The per-image fields travel with the images instead of being left on the attack object, so one attack object
    can serve several batches at once (pooled query attacks, a remote worker) without one overwriting another.
    """

    x_adv: torch.Tensor  # adversarial images, detached, same shape as the input, inside the threat model
    # int64 [N], black-box attacks only: queries at success (fooled within eps) or spent (the others)
    queries: torch.Tensor | None = None
    # float64 [N], attacks that search for the smallest adversarial perturbation (FAB, DeepFool, black-box):
    # the smallest one found per image, measured in the threat model's norm, possibly beyond eps; inf where none
    min_distance: torch.Tensor | None = None
    discrepancies: int = 0  # query answers of the fused path the reference model contradicted
    fusion_note: str | None = None  # why the reference model answered the queries, when it did


class Attack:
    """Base of all attacks. Subclasses set ``name``, ``family``, ``norms``, ``Config`` and implement :meth:`run`
    (or :meth:`run_output`).

    ``family`` (one of :data:`FAMILIES`) and ``norms`` (the threat models the attack supports) are declared on the
    class, so the registry, the protocol and ``arbibench attacks list`` read them instead of guessing; a threat model
    outside ``norms`` is refused in :meth:`output` before the attack runs. Attacks that know the smallest
    adversarial perturbation they found set ``reports_min_distance`` and implement :meth:`run_output`.
    """

    name: ClassVar[str] = ""
    family: ClassVar[str] = WHITE_BOX
    norms: ClassVar[tuple[str, ...]] = NORMS
    needs_gradients: ClassVar[bool] = True
    reports_min_distance: ClassVar[bool] = False  # AttackOutput.min_distance is set (see run_output)
    Config: ClassVar[type] = NoConfig
    config: Any  # an instance of Config, frozen
    # Bumped when a change to the algorithm changes its results under the same config: a store then computes the
    # attack afresh instead of reading back results of the earlier algorithm. Part of the identity from 1 on, so
    # results of attacks never revised keep their keys.
    revision: ClassVar[int] = 0

    @property
    def gradient_only(self) -> bool:
        """Whether every step of this attack follows the model's gradients: what a gradient-free attack is compared
        against when the masking checks look for ``gradient_free_stronger`` (an ensemble with a gradient-free part,
        such as AutoAttack with Square, is not)."""
        return self.needs_gradients

    def __init__(self, config: Any | None = None, **params: Any) -> None:
        if config is not None:
            if params:
                raise ValueError(f"{self.name}: pass either a config object or keyword parameters, not both")
            if not isinstance(config, self.Config):
                raise ValueError(f"{self.name}: config must be a {self.Config.__name__}, got {type(config).__name__}")
            self.config = config
            return
        known = [f.name for f in fields(self.Config)]
        for key in params:
            if key not in known:
                raise ValueError(
                    f"unknown parameter {key!r} for attack {self.name!r}; known: {', '.join(known) or 'none'}"
                )
        self.config = self.Config(**params)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not (is_dataclass(cls.Config) and cls.Config.__dataclass_params__.frozen):  # type: ignore[attr-defined]
            raise TypeError(f"{cls.__name__}.Config must be a frozen dataclass so that it can be hashed")
        if any(f.name == "name" for f in fields(cls.Config)):
            raise TypeError(f"{cls.__name__}.Config may not have a field called 'name' (config_dict uses it)")
        if cls.family not in FAMILIES:
            raise TypeError(f"{cls.__name__}.family must be one of {', '.join(FAMILIES)}, got {cls.family!r}")
        unknown = [n for n in cls.norms if n not in NORMS]
        if unknown or not cls.norms:
            raise TypeError(f"{cls.__name__}.norms must be a non-empty subset of {NORMS}, got {cls.norms!r}")
        if cls.name and cls.run is Attack.run and cls.run_output is Attack.run_output:
            # Each defaults to the other: an attack that overrides neither would recurse without end.
            raise TypeError(f"{cls.__name__} must implement run or run_output")

    @property
    def box(self) -> str:
        """``white-box`` or ``black-box``: the attack's protocol group (see :func:`access_group`)."""
        return access_group(self.family)

    def config_dict(self) -> dict[str, Any]:
        """The attack's identity for the store: its name, every config value (JSON-serialisable) and, once the
        algorithm was revised, its ``revision``."""
        identity = {"name": self.name, **asdict(self.config)}
        return {**identity, "revision": self.revision} if self.revision else identity

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in asdict(self.config).items())
        return f"{type(self).__name__}({params})"

    def __call__(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> torch.Tensor:
        """Validated, verified attack: returns ``x_adv`` (detached, same shape) or raises; see :meth:`output`."""
        return self.output(model, x, y, threat, generator).x_adv

    def output(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> AttackOutput:
        """Validated, verified attack: the adversarial images with the attack's per-image findings, or raises."""
        _validate_inputs(model, x, y, threat, generator)
        if threat.norm not in self.norms:
            raise ValueError(
                f"attack {self.name!r} supports the {' and '.join(self.norms)} threat model"
                f"{'s' if len(self.norms) > 1 else ''}, not {threat.norm}; pick another attack or threat model "
                "(`arbibench attacks list` shows each attack's norms)"
            )
        x = x.detach()
        if x.shape[0] == 0:
            nothing = torch.zeros(0, dtype=torch.int64)
            return AttackOutput(
                x.clone(),
                queries=None if self.family == WHITE_BOX else nothing,
                min_distance=nothing.double() if self.reports_min_distance else None,
            )
        modes = [m.training for m in model.modules()] if isinstance(model, nn.Module) else []
        out = self.run_output(model, x, y, threat, generator)
        if isinstance(model, nn.Module) and [m.training for m in model.modules()] != modes:
            raise RuntimeError(f"attack {self.name!r} changed the model's train/eval mode; attacks must not")
        # on a grid, what an attack returned off it (a minimum-norm attack's own point) is rounded onto it; the
        # verification below still refuses anything the rounding could not fix
        out = replace(out, x_adv=threat.round_to_grid(out.x_adv.detach(), x))
        threat.verify(out.x_adv, x)
        _check_output(self, out, x.shape[0])
        return out

    def run(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> torch.Tensor:
        """The attack itself on a non-empty, validated batch; callers use :meth:`output`, which verifies.

        An attack implements this or :meth:`run_output`; each defaults to the other (see ``__init_subclass__``)."""
        return self.run_output(model, x, y, threat, generator).x_adv

    def run_output(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> AttackOutput:
        """:meth:`run` with the attack's per-image findings; attacks that have some override this one."""
        return AttackOutput(self.run(model, x, y, threat, generator))


def _check_output(attack: Attack, out: AttackOutput, n: int) -> None:
    """The per-image fields hold one entry per image, and ``min_distance`` is there iff the attack declares it."""
    if (out.min_distance is not None) != attack.reports_min_distance:
        raise RuntimeError(
            f"attack {attack.name!r} {'did not report' if attack.reports_min_distance else 'reported'} min_distance, "
            f"but its reports_min_distance is {attack.reports_min_distance}"
        )
    per_image = (("queries", out.queries, torch.int64), ("min_distance", out.min_distance, torch.float64))
    for field_name, value, dtype in per_image:
        if value is not None and (value.shape != (n,) or value.dtype != dtype):
            raise RuntimeError(
                f"attack {attack.name!r} returned {field_name} as {value.dtype} {tuple(value.shape)}, "
                f"expected {dtype} ({n},)"
            )


def _validate_inputs(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, threat: ThreatModel, generator: torch.Generator
) -> None:
    if not callable(model):
        raise TypeError(f"model must be callable (an nn.Module), got {type(model).__name__}")
    if isinstance(model, nn.Module) and any(m.training for m in model.modules()):
        raise ValueError(
            "model (or one of its submodules) is in training mode: call model.eval() first, otherwise batch norm "
            "statistics change during the attack and dropout makes the model random"
        )
    if not isinstance(x, torch.Tensor) or x.dim() != 4 or not x.is_floating_point():
        desc = f"{x.dtype} tensor of shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be a 4-D float tensor [N, C, H, W], got {desc}")
    if not isinstance(y, torch.Tensor) or y.dim() != 1 or y.dtype != torch.int64:
        desc = f"{y.dtype} tensor of shape {tuple(y.shape)}" if isinstance(y, torch.Tensor) else type(y).__name__
        raise ValueError(f"y must be a 1-D int64 tensor of labels, got {desc}")
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"x has {x.shape[0]} samples but y has {y.shape[0]} labels")
    if y.device != x.device:
        raise ValueError(f"x is on {x.device} but y is on {y.device}")
    if x.numel() and (not bool(torch.isfinite(x).all()) or float(x.min()) < 0.0 or float(x.max()) > 1.0):
        raise ValueError("x must be finite images in [0, 1] (normalisation belongs inside the model)")
    if not isinstance(threat, ThreatModel):
        raise TypeError(f"threat must be a ThreatModel (Linf, L2), got {type(threat).__name__}")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a CPU torch.Generator, got {type(generator).__name__}")
