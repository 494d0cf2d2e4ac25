"""The card schema: one declaration of every field that a card file holds, read and written by the same code.

Five documents are cards, each a frozen dataclass here with ``to_dict()`` and ``parse(path, data)``:

- :class:`ModelCard`, the attack card ``model_info/<dataset>/<threat>/<name>.json``: RobustBench's ``model_info``
  (link, name, authors, additional_data, number_forward_passes, dataset, venue, architecture, eps, clean_acc,
  reported, autoattack_acc, unreliable, footnote; numbers as numbers) plus arbibench's results;
- :class:`CorruptionCard`, the common-corruptions card (``threat_model: corruptions``); it shares with the attack card
  the identity fields of :class:`CardIdentity` (which model and checkpoint, by which protocol);
- :class:`DeployCheckCard`, ``model_info/<dataset>/deploy/<name>.json``: does robustness measured on the simulation
  hold for the deployed BNN (``arbibench protocol deploy-check``);
- :class:`GridCheckCard`, ``model_info/<dataset>/grid_check/<name>.json``: does robustness measured on float inputs
  hold on 8-bit images (``arbibench protocol grid-check``);
- :class:`CheckpointCard`, ``models/checkpoints/<name>.json`` beside each shipped checkpoint: what the weights are
  (method, recipe, history, sha256, the versions they replaced), written by ``arbibench train --export``;
- :class:`FindingsDocument`, the ``--json`` of ``arbibench protocol report`` (``docs/measurements/findings_*.json``):
  each BNN against its FP twin.

Each dataclass field says its JSON type in its metadata, so the writer and the reader cannot drift apart, and
``Card.parse(path, card.to_dict()) == card`` is tested for every card file in the repository. A parser raises one
:class:`CardError` naming the file and the first bad field as a path (``clean_agreement[1].n_images``).

Units: every accuracy of a result card is in percent (:func:`percent` converts a ratio), as on RobustBench's
leaderboard; ``acc_norm``, ``rs`` and ``rs_mean`` are plain ratios; ``eps`` and eps* are in input units. The deploy
and grid checks, the checkpoint card and the findings hold ratios in [0, 1].

Versions: every card writes ``schema_version``. Result cards are at 2; version 1 (key ``card_version``, or no
version key) has the same fields and reads unchanged. Deploy-check, checkpoint and findings files written before
they had a version key read as version 1 (a deploy card's clean rows then say which padding and images they measured
by their place in the list; a grid check, an entry of ``protocol grid-check --json``, named its model ``model_name``).
A card from a newer arbibench is refused with the fix (upgrade).

Which checkpoints ship is the pin file ``models/checkpoints/SHA256SUMS`` alone (:func:`shipped_sha256`); a result
card records the sha256 of the checkpoint it measured, and :func:`stale_checkpoint` tells a card of replaced weights
from a current one.

This module imports only the standard library, so reading cards never loads torch.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, TypeVar, overload

SCHEMA_VERSION = 2
#: Label names of the datasets whose adversarial examples a card's examples file shows (index = label).
CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "cifar10": ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
}
#: The ``threat_model`` of RobustBench's common-corruptions cards (their own leaderboard panel).
CORRUPTIONS_THREAT = "corruptions"

__all__ = [
    "CLASS_NAMES",
    "CHECK_FOLDERS",
    "CORRUPTIONS_THREAT",
    "DEPLOY_CHECK",
    "GRID_CHECK",
    "ONES_PADDING",
    "PIN_FILE",
    "PROTOCOL_IMAGES",
    "SCHEMA_VERSION",
    "SHIPPED_CHECKPOINTS",
    "TEST_SET_IMAGES",
    "ZERO_PADDING",
    "AttackResult",
    "Card",
    "CardError",
    "CardIdentity",
    "CheckpointCard",
    "CleanAgreement",
    "CorruptionCard",
    "CorruptionResult",
    "DeployCheckCard",
    "DirectAttack",
    "EpsStar",
    "Estimate",
    "Finding",
    "FindingsDocument",
    "GridCheckCard",
    "GridCheckRow",
    "GridFinding",
    "Interval",
    "ModelCard",
    "PreviousVersion",
    "Proportion",
    "Ratio",
    "SweepPoint",
    "TrainingAttempt",
    "TrainingThreat",
    "TransferToDeployment",
    "card_json",
    "card_text",
    "card_version",
    "check_card_files",
    "check_card_path",
    "parse_card",
    "parse_corruption_card",
    "percent",
    "ratio",
    "read_card_json",
    "shipped_sha256",
    "stale_checkpoint",
]


class CardError(ValueError):
    """A model card (or its examples file) is malformed; names the file and the field."""

    def __init__(self, path: Path, field_name: str | None, problem: str) -> None:
        self.path, self.field, self.problem = path, field_name, problem
        where = f"{path}: field '{field_name}'" if field_name else str(path)
        super().__init__(f"{where}: {problem}")


@overload
def percent(value: float) -> float: ...
@overload
def percent(value: None) -> None: ...
@overload
def percent(value: float | None) -> float | None: ...
def percent(value: float | None) -> float | None:
    """A ratio in [0, 1] as the percent a card holds (two decimals); None stays None."""
    return None if value is None else round(100.0 * float(value), 2)


@overload
def ratio(value: float, digits: int = 4) -> float: ...
@overload
def ratio(value: None, digits: int = 4) -> None: ...
@overload
def ratio(value: float | None, digits: int = 4) -> float | None: ...
def ratio(value: float | None, digits: int = 4) -> float | None:
    """A plain ratio (ACC_norm, RS) as a card holds it."""
    return None if value is None else round(float(value), digits)


# -- field declarations --------------------------------------------------------------------------------------------
# kind: how a value is checked on read: text, sha256 (64 hex digits), number, percent ([0, 100]), fraction ([0, 1]),
# integer, boolean, flag (bool or null), ratios (family -> ratio with an 'all' entry), map (key -> value of kind
# ``of``), pair (two numbers of kind ``of``), interval ([value, low, high] as an :class:`Interval`), list (values of
# kind ``of``), object (a JSON object kept as it is), objects (a list of them), record (a nested dataclass ``of``),
# records (name -> record), record_list, examples. ``after``: the file holds this field (and those declared after it)
# behind the field it names, so a card's own fields can stand among those of its base (:func:`_layout`).
def _field(kind: str, *, required: bool = False, omit_none: bool = False, of: Any = None, lo: float | None = None,
           default: Any = None, factory: Callable[[], Any] | None = None, after: str | None = None) -> Any:
    meta = {"kind": kind, "required": required, "omit_none": omit_none, "of": of, "lo": lo, "after": after}
    if required:
        return field(metadata=meta)
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _local(**kw: Any) -> Any:
    """A field that is not written to the file (where the card was read from, the decoded JSON)."""
    return field(compare=False, repr=False, metadata={"kind": None}, **kw)


_LAYOUTS: dict[type, tuple[Field[Any], ...]] = {}


def _layout(cls: type) -> tuple[Field[Any], ...]:
    """The written fields of ``cls`` in file order: declaration order, except that a field declared with ``after=``
    and the fields declared after it (up to the next ``after=``) stand behind the field ``after`` names."""
    if cls not in _LAYOUTS:
        _LAYOUTS[cls] = _file_order(fields(cls))
    return _LAYOUTS[cls]


def _file_order(declared: tuple[Field[Any], ...]) -> tuple[Field[Any], ...]:
    order: list[Field[Any]] = []
    anchor: str | None = None
    for f in declared:
        if f.metadata.get("kind") is None:
            continue
        anchor = f.metadata.get("after") or anchor
        if anchor is None or f.name in {g.name for g in order}:
            order.append(f)
            continue
        order.insert(next(i for i, g in enumerate(order) if g.name == anchor) + 1, f)
        anchor = f.name
    return tuple(order)


C = TypeVar("C", bound="Card")


class Record:
    """A dataclass of declared fields (a card, or a row of one) that writes itself as its JSON object."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written to the file (a card's ``schema_version`` the current one, fields in file order)."""
        return _record_json(self)


@dataclass(frozen=True, kw_only=True)
class Card(Record):
    """What every card file has: where it was read from, its decoded JSON, and its ``schema_version``.

    ``VERSION`` is the layout this arbibench writes; ``schema_version`` the one a parsed file was written in."""

    VERSION: ClassVar[int] = SCHEMA_VERSION  # every card type writes layout 2; a type whose layout moves on says so
    path: Path | None = _local(default=None)
    raw: Mapping[str, Any] = _local(default_factory=dict)
    schema_version: int = _field("integer", lo=1, default=0)

    def __post_init__(self) -> None:
        if not self.schema_version:  # a card built in memory is in the current layout
            object.__setattr__(self, "schema_version", self.VERSION)

    @classmethod
    def parse(cls: type[C], path: Path, data: Any) -> C:
        """Check one decoded card file and turn it into a card; :class:`CardError` on the first problem, naming the
        file and the field."""
        reader = _Reader(path, data)
        version = card_version(path, reader.data, cls.VERSION)
        checked = cls._upgraded({k: v for k, v in reader.data.items() if k != "card_version"}, version)
        checked["schema_version"] = version
        card = _parse_record(cls, path, checked, path=path, raw=data)
        card._check()
        return card

    @classmethod
    def read(cls: type[C], path: Path) -> C:
        """The card in the file ``path``."""
        return cls.parse(path, read_card_json(path))

    @classmethod
    def _upgraded(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        """A file of an older ``version`` in the current layout (the same, where the layouts read alike)."""
        return data

    def _check(self) -> None:
        """Rules across fields, beyond each field's own type; :class:`CardError` naming the field."""

    def _fail(self, field_name: str, problem: str) -> CardError:
        return CardError(self.path or Path("<card>"), field_name, problem)


@dataclass(frozen=True, kw_only=True)
class Interval:
    """A value with its 95% interval; the file holds ``[value, low, high]``."""

    value: float = _field("number", required=True)
    low: float = _field("number", required=True)
    high: float = _field("number", required=True)

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


@dataclass(frozen=True, kw_only=True)
class AttackResult:
    """One attack's row of a card: robust accuracy (percent), its ratio to clean accuracy, interval, cost."""

    name: str = _local(default="")  # the key of the row in ``attacks``
    family: str = _field("text", required=True)
    acc_star: float = _field("percent", required=True)
    acc_norm: float = _field("number", required=True, lo=0.0)
    ci_low: float | None = _field("percent")
    ci_high: float | None = _field("percent")
    n_examples: int | None = _field("integer", lo=1)
    median_queries: float | None = _field("number", lo=0.0)
    seconds: float | None = _field("number", lo=0.0, omit_none=True)


@dataclass(frozen=True, kw_only=True)
class SweepPoint:
    """Robust accuracy of one attack at one budget, for the accuracy-vs-eps curves."""

    attack: str = _field("text", required=True)
    eps: float = _field("number", required=True, lo=0.0)
    eps_text: str | None = _field("text", omit_none=True)
    acc_star: float = _field("percent", required=True)
    acc_norm: float | None = _field("number", lo=0.0, omit_none=True)
    interval: tuple[float, float] | None = _field("pair", of="percent", omit_none=True)
    n_examples: int | None = _field("integer", lo=1, omit_none=True)


@dataclass(frozen=True, kw_only=True)
class CurvePoint:
    """Robust accuracy (percent) of the eps* curve at one eps: the share of images no example was found for within
    eps, and (where the card has it) its low end, the share the search attacked at a radius of at least eps without
    fooling them. The attacks' own curve lies between the two: the gap is the search's resolution."""

    eps: float = _field("number", required=True, lo=0.0)
    robust_acc: float | None = _field("percent")
    robust_acc_low: float | None = _field("percent", omit_none=True)


@dataclass(frozen=True, kw_only=True)
class EpsStar:
    """How eps* (the smallest fooling perturbation per image) was searched, and the curve it gives.

    Cards without ``search`` hold the earlier bisection of ``[0, eps_max]``, whose median often sat on its first
    step. ``search: "descent"`` cards add the floor and the median over the correctly classified images; there a
    median or interval end at or below ``eps_floor`` means "<= eps_floor" (censored: fooled even at the floor),
    never a measurement of the floor (:meth:`is_censored`).
    """

    attacks: tuple[str, ...] = _field("list", of="text", factory=tuple)
    eps_max: float | None = _field("number", lo=0.0)
    search_rounds: int | None = _field("integer", lo=0)
    n_examples: int | None = _field("integer", lo=0)
    not_fooled_up_to_eps_max: float | None = _field("percent")
    curve: tuple[CurvePoint, ...] = _field("record_list", of=CurvePoint, factory=tuple)
    search: str | None = _field("text", omit_none=True)
    eps_floor: float | None = _field("number", lo=0.0, omit_none=True)
    probe_draws: int | None = _field("integer", lo=0, omit_none=True)  # random sign corners per image and radius
    n_correct: int | None = _field("integer", lo=0, omit_none=True)
    censored: float | None = _field("percent", omit_none=True)  # of the correctly classified images
    median_correct: float | None = _field("number", lo=0.0, omit_none=True)  # over correctly classified images
    median_correct_ci95: tuple[float | None, float | None] | None = _field("pair", of="number", omit_none=True)
    # a certified lower bound on the correct-image median (no example exists below it), where a verifier ran
    median_certified: float | None = _field("number", lo=0.0, omit_none=True)

    def is_censored(self, value: float) -> bool:
        """Whether a median or interval end of this search means "<= eps_floor": never where no image was censored
        (on the 8-bit grid the floor, one grey level, is exact)."""
        return self.eps_floor is not None and value <= self.eps_floor and self.censored != 0


@dataclass(frozen=True, kw_only=True)
class CardIdentity(Card):
    """What every result card (attack or corruptions) says of the model it measured and how: RobustBench's identity
    fields, the method and the checkpoint's sha256, and the protocol."""

    # RobustBench's identity fields
    name: str = _field("text", required=True)
    link: str | None = _field("text")
    authors: str | None = _field("text")
    additional_data: bool = _field("boolean", default=False)
    number_forward_passes: int | None = _field("integer", lo=1)
    dataset: str = _field("text", required=True)
    venue: str | None = _field("text")
    architecture: str | None = _field("text")
    eps: float | None = _field("number", lo=0.0)
    unreliable: bool = _field("boolean", default=False)
    footnote: str | None = _field("text")
    # arbibench's: the method and how the numbers were made
    method: str | None = _field("text")
    method_paper: str | None = _field("text")
    bits_weights: int | None = _field("integer", lo=1)
    bits_activations: int | None = _field("integer", lo=1)
    fp_twin: str | None = _field("text")
    # sha256 of the checkpoint measured: a card of replaced weights says so (zoo models only)
    checkpoint_sha256: str | None = _field("text", omit_none=True)
    protocol: str | None = _field("text")
    quick: bool | None = _field("flag")


@dataclass(frozen=True, kw_only=True)
class ModelCard(CardIdentity):
    """An attack card (one model, dataset and threat model). Accuracies are percent; ACC_norm and RS are ratios."""

    # RobustBench's results
    eps_text: str | None = _field("text", after="eps")
    threat_model: str = _field("text", required=True)
    clean_acc: float = _field("percent", required=True)
    reported: float | None = _field("percent")
    autoattack_acc: float | None = _field("percent")
    # arbibench's: how the numbers were made, and the ARBiBench metrics
    # the network whose answers count (clean pass, black-box queries, every verified example): "simulation", the
    # float model, or "deployed", the bit-packed network of a BNN; cards without the field measured the simulation
    inference: str | None = _field("text", omit_none=True, after="checkpoint_sha256")
    # the input grid of every adversarial example: "uint8" (pixels k/255, what a camera, a PNG file and a deployed
    # network's first layer see); cards without the field measured float inputs
    grid: str | None = _field("text", omit_none=True)
    clean_acc_by_family: dict[str, float] | None = _field("map", of="percent", omit_none=True, after="quick")
    subset: str | None = _field("text", omit_none=True)
    attacks: dict[str, AttackResult] = _field("records", of=AttackResult, required=True)
    rs: dict[str, float] = _field("ratios", required=True)
    rs_mean: dict[str, float] = _field("ratios", required=True)
    worst_case_acc: float = _field("percent", required=True)
    worst_case_by_family: dict[str, float] | None = _field("map", of="percent", omit_none=True)
    flags: dict[str, str] = _field("map", of="text", factory=dict)
    data_indices_hash: dict[str, str] = _field("map", of="text", factory=dict)
    n_examples: dict[str, int] = _field("map", of="integer", factory=dict)
    sweep: tuple[SweepPoint, ...] = _field("record_list", of=SweepPoint, factory=tuple)
    seconds: float | None = _field("number", lo=0.0, omit_none=True)
    # what computed the batches (CPU model, cores and threads, or the GPU): the seconds are read on it; where several
    # did (a run resumed elsewhere, a cluster), each one's share of the batch seconds. Cards without it do not say.
    machine: str | None = _field("text", omit_none=True)
    # input units, like eps; over every image (misclassified ones at 0); eps_star holds the correct-image median
    median_eps_star: float | None = _field("number", lo=0.0, omit_none=True)
    median_eps_star_ci95: tuple[float | None, float | None] | None = _field("pair", of="number", omit_none=True)
    eps_star: EpsStar | None = _field("record", of=EpsStar, omit_none=True)
    examples: Path | None = _field("examples", omit_none=True)  # adversarial examples file beside the card

    @property
    def eps_star_median(self) -> tuple[float | None, tuple[float | None, float | None] | None, bool]:
        """``(median eps*, its 95% interval, over the correctly classified images only)``: the descent search's
        correct-image median where the card has one, else the all-image median of an older card (misclassified
        images at 0). ``None`` values: not fooled up to eps_max (or no eps* at all)."""
        found = self.eps_star
        if found is not None and found.median_correct_ci95 is not None:
            return found.median_correct, found.median_correct_ci95, True
        return self.median_eps_star, self.median_eps_star_ci95, False

    @property
    def group(self) -> tuple[str, str]:
        """The leaderboard this card belongs to: (dataset, threat model)."""
        return self.dataset, self.threat_model

    @property
    def families(self) -> list[str]:
        """Attack families of this card, in display order."""
        return order_families({a.family for a in self.attacks.values()})


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """An accuracy (percent) with its 95% interval."""

    acc: float = _field("percent", required=True)
    ci_low: float | None = _field("percent")
    ci_high: float | None = _field("percent")


@dataclass(frozen=True, kw_only=True)
class Ratio:
    """A ratio with its 95% interval."""

    value: float = _field("number", required=True, lo=0.0)
    ci_low: float = _field("number", required=True, lo=0.0)
    ci_high: float = _field("number", required=True, lo=0.0)


@dataclass(frozen=True, kw_only=True)
class CorruptionResult:
    """One corruption: accuracy over its severities, and per severity ("1" .. "5")."""

    acc: float = _field("percent", required=True)
    ci_low: float | None = _field("percent")
    ci_high: float | None = _field("percent")
    severities: dict[str, Estimate] = _field("records", of=Estimate, factory=dict)


@dataclass(frozen=True, kw_only=True)
class CorruptionCard(CardIdentity):
    """A common-corruptions card (RobustBench's ``clean_acc`` and ``corruptions_acc``, in percent, plus arbibench's
    per-corruption and per-severity accuracies, ratios and intervals, and where the CIFAR-10-C data came from)."""

    threat_model: str = _field("text", default=CORRUPTIONS_THREAT, after="eps")
    clean_acc: float = _field("percent", required=True)
    reported: float | None = _field("percent")
    corruptions_acc: float = _field("percent", required=True)
    corruptions_source: str = _field("text", required=True, after="quick")
    corruptions_regenerated: bool | None = _field("flag")
    corruptions_generator_seed: int | None = _field("integer", lo=0)
    corruptions_data_sha256: str | None = _field("text", omit_none=True)  # one digest over the measured cells
    clean_acc_interval: tuple[float, float] | None = _field("pair", of="percent")
    corruptions_acc_interval: tuple[float, float] | None = _field("pair", of="percent")
    corruptions_acc_norm: Ratio | None = _field("record", of=Ratio)
    corruptions_acc_vs_fp_twin: Ratio | None = _field("record", of=Ratio)
    corruptions: dict[str, CorruptionResult] = _field("records", of=CorruptionResult, required=True)
    flags: dict[str, str] = _field("map", of="text", factory=dict)
    data_indices_hash: dict[str, str] = _field("map", of="text", factory=dict)
    n_examples: dict[str, int] = _field("map", of="integer", factory=dict)
    seconds: float | None = _field("number", lo=0.0, omit_none=True)  # the cells' compute time, as their store holds it
    machine: str | None = _field("text", omit_none=True)  # what computed the cells: the seconds' clock, as ModelCard's

    @property
    def regenerated(self) -> bool:
        return self.corruptions_source != "official"

    @property
    def corruption_means(self) -> dict[str, float]:
        """Accuracy per corruption (mean over its severities), percent."""
        return {name: c.acc for name, c in self.corruptions.items()}

    @property
    def n_per_cell(self) -> int | None:
        return self.n_examples.get("per_cell")

    def _check(self) -> None:
        if not self.corruptions:
            raise self._fail("corruptions", "holds no corruption")
        if self.corruptions_source not in ("official", "regenerated"):
            raise self._fail("corruptions_source",
                             f"must be 'official' or 'regenerated', got {self.corruptions_source!r}")


# -- the deploy check -----------------------------------------------------------------------------------------------
DEPLOY_CHECK = "deploy_check"  # the ``kind`` of a deploy-check card
ZERO_PADDING, ONES_PADDING = "zero", "+1"  # how a deployed network pads: exactly as the simulation, or with +1
PROTOCOL_IMAGES, TEST_SET_IMAGES = "clean", "clean_full"  # the keys of a deploy card's ``images``


@dataclass(frozen=True, kw_only=True)
class CleanAgreement:
    """(a) of the deploy check: predictions of the simulation and of one deployed network on the same clean images.
    ``padding`` says which deployed network, ``images`` which images (a key of the card's ``images``)."""

    DERIVED: ClassVar[tuple[str, ...]] = ("agreement",)
    variant: str = _field("text", required=True)
    n_images: int = _field("integer", required=True, lo=1)
    agree: int = _field("integer", required=True, lo=0)
    interval: tuple[float, float] = _field("pair", of="fraction", required=True)  # Wilson 95% of the agreement
    acc_simulation: float = _field("fraction", required=True)
    acc_deployed: float = _field("fraction", required=True)
    max_logit_difference: float = _field("number", required=True, lo=0.0)
    padding: str = _field("text", required=True)
    images: str = _field("text", required=True)

    @property
    def agreement(self) -> float:
        return self.agree / self.n_images


@dataclass(frozen=True, kw_only=True)
class TransferToDeployment:
    """(b): of the adversarial examples one attack found against the simulation, how many also fool the deployed
    network."""

    DERIVED: ClassVar[tuple[str, ...]] = ("share",)
    attack: str = _field("text", required=True)
    family: str = _field("text", required=True)
    attacked: int = _field("integer", required=True, lo=0)  # images both networks classify correctly
    fooled_simulation: int = _field("integer", required=True, lo=0)
    also_fool_deployed: int = _field("integer", required=True, lo=0)
    interval: tuple[float, float] | None = _field("pair", of="fraction")  # None when nothing fooled the simulation

    @property
    def share(self) -> float | None:
        return None if self.fooled_simulation == 0 else self.also_fool_deployed / self.fooled_simulation


@dataclass(frozen=True, kw_only=True)
class DirectAttack:
    """(c): one query attack run against each network on the same images: ACC* of each and the paired difference."""

    attack: str = _field("text", required=True)
    attacked: int = _field("integer", required=True, lo=0)
    acc_star_simulation: float = _field("fraction", required=True)
    acc_star_deployed: float = _field("fraction", required=True)
    difference: Interval = _field("interval", required=True)  # deployed - simulation, paired over images


@dataclass(frozen=True, kw_only=True)
class DeployCheckCard(Card):
    """Does robustness measured on the float simulation of a BNN hold for its deployed, bit-packed network
    (:mod:`arbibench.protocol.deploy_check`)? Shares are ratios in [0, 1]."""

    name: str = _field("text", required=True)
    kind: str = _field("text", default=DEPLOY_CHECK)
    protocol: str = _field("text", required=True)
    checkpoint_sha256: str = _field("sha256", required=True)
    deployed_backend: str | None = _field("text")
    semantics: str | None = _field("text")
    images: dict[str, str] = _field("map", of="text", factory=dict)  # which images each measurement used
    clean_agreement: tuple[CleanAgreement, ...] = _field("record_list", of=CleanAgreement, required=True)
    transfer_to_deployed: tuple[TransferToDeployment, ...] = _field("record_list", of=TransferToDeployment,
                                                                    required=True)
    direct_attacks: tuple[DirectAttack, ...] = _field("record_list", of=DirectAttack, required=True)

    def clean(self, padding: str = ZERO_PADDING, images: str = PROTOCOL_IMAGES) -> CleanAgreement | None:
        """The clean agreement of the network padded with ``padding`` on ``images``; None where not measured."""
        return next((r for r in self.clean_agreement if (r.padding, r.images) == (padding, images)), None)

    @classmethod
    def _upgraded(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        """Version 1 rows say by their place what they measured: zero padding and +1 padding on the protocol's
        clean images, then (where measured) zero padding on the first test images."""
        rows = data.get("clean_agreement")
        if version > 1 or not isinstance(rows, list):
            return data
        places = ((ZERO_PADDING, PROTOCOL_IMAGES), (ONES_PADDING, PROTOCOL_IMAGES), (ZERO_PADDING, TEST_SET_IMAGES))
        upgraded = [{"padding": padding, "images": images, **row} if isinstance(row, dict) else row
                    for row, (padding, images) in zip(rows, places, strict=False)]
        return {**data, "clean_agreement": upgraded + rows[len(places):]}

    def _check(self) -> None:
        if self.kind != DEPLOY_CHECK:
            raise self._fail("kind", f"expected {DEPLOY_CHECK!r}, got {self.kind!r}")
        if self.clean() is None:
            raise self._fail("clean_agreement", f"has no row of the {ZERO_PADDING}-padded network on the "
                             f"{PROTOCOL_IMAGES!r} images; run `arbibench protocol deploy-check` again")


# -- the 8-bit grid check -------------------------------------------------------------------------------------------
GRID_CHECK = "grid_check"  # the ``kind`` of a grid-check card


@dataclass(frozen=True, kw_only=True)
class Proportion:
    """A share of images (a ratio in [0, 1]) with its 95% interval; the file holds ``{"value", "low", "high"}``."""

    value: float = _field("fraction", required=True)
    low: float = _field("fraction", required=True)
    high: float = _field("fraction", required=True)


@dataclass(frozen=True, kw_only=True)
class GridCheckRow:
    """One eps of the grid check: ACC* in float and on the uint8 grid over all images (Wilson 95%), their paired
    difference (bootstrap 95%), and how many float adversarial examples still fool once rounded to 8 bits."""

    eps_text: str = _field("text", required=True)
    eps: float = _field("number", required=True, lo=0.0)
    n_images: int = _field("integer", required=True, lo=1)
    acc_float: Proportion = _field("record", of=Proportion, required=True)
    acc_grid: Proportion = _field("record", of=Proportion, required=True)  # neither the grid attack nor rounding fools
    acc_grid_attack: Proportion = _field("record", of=Proportion, required=True)  # the attack on the grid alone
    difference: Interval = _field("record", of=Interval, required=True)  # acc_grid - acc_float, paired over images
    float_fooled: int = _field("integer", required=True, lo=0)  # images the float attack fooled
    survived: int = _field("integer", required=True, lo=0)  # of those, still fooling once rounded to the grid
    survival: Proportion | None = _field("record", of=Proportion)  # survived / float_fooled; null: none fooled
    seconds: float | None = _field("number", lo=0.0)


@dataclass(frozen=True, kw_only=True)
class GridCheckCard(Card):
    """Does robustness measured on float inputs hold on the 8-bit images a deployed network is fed
    (:mod:`arbibench.protocol.grid_check`)? One model, one attack, every eps; shares are ratios in [0, 1]."""

    name: str = _field("text", required=True)
    kind: str = _field("text", default=GRID_CHECK)
    dataset: str = _field("text", required=True)
    checkpoint_sha256: str = _field("sha256", required=True)
    attack: dict[str, Any] = _field("object", required=True)  # the attack's config, as the result store hashes it
    n_images: int = _field("integer", required=True, lo=1)  # the first N test images
    clean_acc: Proportion = _field("record", of=Proportion, required=True)
    seed: int = _field("integer", required=True, lo=0)
    batch_size: int = _field("integer", required=True, lo=1)
    machine: str | None = _field("text")
    rows: tuple[GridCheckRow, ...] = _field("record_list", of=GridCheckRow, required=True)

    @property
    def attack_name(self) -> str:
        return str(self.attack.get("name", "?"))

    def row(self, eps_text: str) -> GridCheckRow | None:
        """The row of ``eps_text`` ("1/255"); None where it was not measured."""
        return next((r for r in self.rows if r.eps_text == eps_text), None)

    @classmethod
    def _upgraded(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        """Version 1, an entry of ``protocol grid-check --json`` before the card, named the model ``model_name``."""
        if version > 1 or "name" in data or "model_name" not in data:
            return data
        return {("name" if k == "model_name" else k): v for k, v in data.items()}

    def _check(self) -> None:
        if self.kind != GRID_CHECK:
            raise self._fail("kind", f"expected {GRID_CHECK!r}, got {self.kind!r}")
        if not self.rows:
            raise self._fail("rows", "holds no eps; run `arbibench protocol grid-check` again")
        for i, r in enumerate(self.rows):
            if not r.survived <= r.float_fooled <= r.n_images:
                raise self._fail(f"rows[{i}].survived", f"{r.survived} survived of {r.float_fooled} fooled on "
                                 f"{r.n_images} images: expected survived <= float_fooled <= n_images")
            if (r.survival is None) != (r.float_fooled == 0):
                raise self._fail(f"rows[{i}].survival", "must be null exactly when float_fooled is 0")


# -- where the per-model check cards live ---------------------------------------------------------------------------
#: The folder beside the threat-model folders that holds each check's cards, by the card's ``kind``.
CHECK_FOLDERS = {DEPLOY_CHECK: "deploy", GRID_CHECK: "grid_check"}


def check_card_path(model_info: str | Path, dataset: str, kind: str, name: str) -> Path:
    """Where the card of the check ``kind`` (deploy_check, grid_check) of model ``name`` is written and read:
    ``<model_info>/<dataset>/<folder>/<name>.json``, beside the result cards and never in their rankings."""
    return Path(model_info) / dataset / CHECK_FOLDERS[kind] / f"{name}.json"


def check_card_files(model_info: str | Path, kind: str) -> list[Path]:
    """Every card file of the check ``kind`` under ``model_info``, every dataset, in name order."""
    return sorted(Path(model_info).glob(f"*/{CHECK_FOLDERS[kind]}/*.json"))


# -- the checkpoint card --------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TrainingThreat:
    """The threat model an adversarially trained checkpoint was trained against."""

    norm: str = _field("text", required=True)
    eps: float = _field("number", required=True, lo=0.0)


@dataclass(frozen=True, kw_only=True)
class PreviousVersion:
    """A checkpoint a re-export replaced: its sha256, clean accuracy (ratio), recipe and (since cards keep learning
    curves across continuations) its run's per-epoch history."""

    sha256: str = _field("sha256", required=True)
    clean_acc: float | None = _field("fraction")
    clean_acc_n_examples: int | None = _field("integer", lo=1)
    recipe: dict[str, Any] | None = _field("object")
    train_time_s: float | None = _field("number", lo=0.0)
    history: tuple[dict[str, Any], ...] | None = _field("objects", omit_none=True)  # its run's per-epoch record


@dataclass(frozen=True, kw_only=True)
class TrainingAttempt:
    """A finished training run that did not replace the checkpoint (``compared_with``): it was not better on the
    held-out images (or, without a held-out split, on the test set). Kept so that its learning curve can say whether
    more epochs of its recipe help: a miss explained by a run that did not ship is still explained."""

    date: str = _field("text", required=True)  # YYYY-MM-DD (UTC), when the run was compared and kept out
    compared_with: str = _field("sha256", required=True)  # the shipped checkpoint it did not beat
    recipe: dict[str, Any] = _field("object", required=True)
    history: tuple[dict[str, Any], ...] = _field("objects", factory=tuple)  # its per-epoch record
    train_time_s: float | None = _field("number", lo=0.0)
    trained_on: str | None = _field("text")
    clean_acc: float | None = _field("fraction")  # on the 10,000 test images, measured once at the run's end
    val_examples: int | None = _field("integer", lo=1)
    val_acc: float | None = _field("fraction")  # its chosen epoch on the held-out images
    shipped_val_acc: float | None = _field("fraction")  # the shipped checkpoint on the same held-out images

    @property
    def best_val(self) -> tuple[int, float] | None:
        """(epoch, held-out accuracy) of its best epoch; None without a held-out curve."""
        points = [(int(h["epoch"]), float(h["val_acc"])) for h in self.history if h.get("val_acc") is not None]
        return max(points, key=lambda p: (p[1], -p[0])) if points else None


@dataclass(frozen=True, kw_only=True)
class CheckpointCard(Card):
    """What a shipped checkpoint is (``models/checkpoints/<name>.json``): backbone, method, its sha256, its clean
    accuracy (a ratio), how it was trained, and every version it replaced. The recipe, the training history and the
    held-out selection are kept as the training run wrote them (:mod:`arbibench.train`)."""

    name: str = _field("text", required=True)
    dataset: str = _field("text", required=True)
    architecture: str = _field("text", required=True)
    method: str = _field("text", required=True)
    paper: str | None = _field("text")
    bits_weights: int | None = _field("integer", lo=1)
    bits_activations: int | None = _field("integer", lo=1)
    binary_layers: int | None = _field("integer", lo=0)
    params: int | None = _field("integer", lo=1)
    checkpoint: str = _field("text", required=True)  # the safetensors file beside the card
    sha256: str = _field("sha256", required=True)
    clean_acc: float = _field("fraction", required=True)
    clean_acc_n_examples: int = _field("integer", lo=1, default=10_000)
    clean_acc_first500: float | None = _field("fraction")
    recipe: dict[str, Any] = _field("object", factory=dict)
    train_time_s: float | None = _field("number", lo=0.0)
    trained_on: str | None = _field("text")
    history: tuple[dict[str, Any], ...] = _field("objects", factory=tuple)
    epoch_seconds: tuple[dict[str, Any], ...] | None = _field("objects", omit_none=True)  # wall time per epoch
    init_sha256: str | None = _field("sha256", omit_none=True)  # the weights recipe.init_from named at the start
    clean_acc_before_bn_recalibration: float | None = _field("fraction", omit_none=True)
    recalibrated_from_sha256: str | None = _field("sha256", omit_none=True)  # ``arbibench recalibrate``
    training: str | None = _field("text", omit_none=True)  # "adversarial"; standard training without the field
    threat_model: TrainingThreat | None = _field("record", of=TrainingThreat, omit_none=True)
    robust_check: dict[str, Any] | None = _field("object", omit_none=True)
    validation: dict[str, Any] | None = _field("object", omit_none=True)  # held-out selection
    published: dict[str, Any] | None = _field("object", omit_none=True)  # the paper's own figure and the gap
    previous_versions: tuple[PreviousVersion, ...] = _field("record_list", of=PreviousVersion, factory=tuple)
    # runs that did not replace it (or an earlier version), oldest first; absent until the first one
    attempts: tuple[TrainingAttempt, ...] | None = _field("record_list", of=TrainingAttempt, omit_none=True)

    @property
    def adversarial(self) -> bool:
        return self.training == "adversarial"

    @property
    def attempts_on_this(self) -> tuple[TrainingAttempt, ...]:
        """The attempts that were compared with these weights (not with a version this one replaced)."""
        return tuple(a for a in self.attempts or () if a.compared_with == self.sha256)


    def replaced(self) -> PreviousVersion:
        """This card's version as the card of a re-export that replaces it records it."""
        return PreviousVersion(sha256=self.sha256, clean_acc=self.clean_acc,
                               clean_acc_n_examples=self.clean_acc_n_examples, recipe=self.recipe,
                               train_time_s=self.train_time_s, history=self.history or None)

    def _check(self) -> None:
        if self.path is not None and self.checkpoint != f"{self.path.stem}.safetensors":
            raise self._fail("checkpoint", f"names {self.checkpoint!r}, but the card is {self.path.name}: a card "
                             f"describes {self.path.stem}.safetensors beside it; export the run again")


# -- the findings ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Finding(Record):
    """A BNN against its FP twin in one setting: mean ACC_norm of each and their paired difference, with 95%
    intervals, and the verdict the difference's interval gives."""

    model: str = _field("text", required=True)
    twin: str = _field("text", required=True)
    setting: str = _field("text", required=True)  # "white-box", "black-box", or "sweep <attack>"
    columns: tuple[str, ...] = _field("list", of="text", required=True)  # the attacks (or eps values) averaged
    n_examples: int = _field("integer", required=True, lo=1)
    bnn_mean_acc_norm: Interval = _field("interval", required=True)
    fp_mean_acc_norm: Interval = _field("interval", required=True)
    difference: Interval = _field("interval", required=True)  # BNN - FP, paired over images
    verdict: str = _field("text", required=True)

    def key(self, *, per_column: bool = False) -> tuple[str, ...]:
        """What a row of another report is matched on: (BNN, twin, setting), and with ``per_column`` its column."""
        return (self.model, self.twin, self.setting, *(self.columns if per_column else ()))


@dataclass(frozen=True, kw_only=True)
class GridFinding(Record):
    """One compared model at one eps of its grid check, as the findings page reads it: ACC* in float and on the
    uint8 grid (ratios over all images), their paired difference, and the float examples surviving rounding."""

    model: str = _field("text", required=True)
    twin: str | None = _field("text")  # a BNN's FP twin; null on an FP twin's own row
    eps_text: str = _field("text", required=True)
    attack: str = _field("text", required=True)
    n_images: int = _field("integer", required=True, lo=1)
    acc_float: float = _field("fraction", required=True)
    acc_grid: float = _field("fraction", required=True)
    difference: Interval = _field("interval", required=True)  # grid - float, paired over images
    float_fooled: int = _field("integer", required=True, lo=0)
    survived: int = _field("integer", required=True, lo=0)
    survival: Interval | None = _field("interval")  # survived / float_fooled with its Wilson 95%; null: none fooled


@dataclass(frozen=True, kw_only=True)
class FindingsDocument(Card):
    """The ``--json`` of ``arbibench protocol report``: every BNN against its twin per setting (``findings``) and per
    attack or eps (``per_column``), and what the 8-bit grid changes for each of them (``grid``)."""

    protocol: str = _field("text", required=True)
    findings: tuple[Finding, ...] = _field("record_list", of=Finding, required=True)
    per_column: tuple[Finding, ...] = _field("record_list", of=Finding, factory=tuple)
    # what the 8-bit grid changes, from the grid-check cards of the compared models; absent where none was read
    grid: tuple[GridFinding, ...] | None = _field("record_list", of=GridFinding, omit_none=True)
    grid_stale: tuple[str, ...] | None = _field("list", of="text", omit_none=True)  # cards of replaced weights
    # what the page reads beside the comparisons; absent from documents written before the page was generated
    date: str | None = _field("text", omit_none=True)  # the day the report ran
    setup: dict[str, Any] | None = _field("object", omit_none=True)  # the protocol's attacks, eps and images
    models: tuple[dict[str, Any], ...] | None = _field("objects", omit_none=True)  # one line per model
    # the literature's claims, judged; null where the paper makes none about the dataset
    claims: tuple[dict[str, Any], ...] | None = _field("objects")
    standard_twins: tuple[str, ...] | None = _field("list", of="text", omit_none=True)
    left_out: dict[str, str] | None = _field("map", of="text", omit_none=True)  # model -> why it is not compared
    page: str | None = _field("text", omit_none=True)  # where the markdown page went, for README's link


FAMILY_ORDER = ("white-box", "black-box")


def order_families(families: set[str] | list[str]) -> list[str]:
    """White-box first, black-box second, any other family (e.g. transfer) after them alphabetically."""
    return sorted(set(families), key=lambda f: (FAMILY_ORDER.index(f) if f in FAMILY_ORDER else len(FAMILY_ORDER), f))


# -- writing -------------------------------------------------------------------------------------------------------
def _dump(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "record":
        return _record_json(value)
    if kind == "records":
        return {k: _record_json(v) for k, v in value.items()}
    if kind == "record_list":
        return [_record_json(v) for v in value]
    if kind == "interval":
        return [value.value, value.low, value.high]
    if kind == "examples":
        return Path(value).name
    if kind in ("pair", "list", "objects"):
        return [dict(v) for v in value] if kind == "objects" else list(value)
    if kind in ("map", "ratios", "object"):
        return dict(value)
    return value


def _record_json(obj: Any) -> dict[str, Any]:
    """``obj``'s written fields in file order (a card's ``schema_version`` as the current one), then the values
    its class derives from them for readers of the file (``DERIVED``)."""
    out: dict[str, Any] = {}
    for f in _layout(type(obj)):
        value = getattr(obj, f.name)
        if value is None and f.metadata["omit_none"]:
            continue
        out[f.name] = obj.VERSION if f.name == "schema_version" else _dump(value, f.metadata["kind"])
    out.update((name, getattr(obj, name)) for name in getattr(obj, "DERIVED", ()))
    return out


def card_json(card: Card) -> dict[str, Any]:
    """The card as the JSON object written to its file (current ``schema_version``, fields in schema order)."""
    return card.to_dict()


# -- reading -------------------------------------------------------------------------------------------------------
def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"{type(value).__name__} {value!r}"


_SHA256 = re.compile(r"[0-9a-f]{64}")
_BOUNDS: dict[str, tuple[float, float, str]] = {
    "percent": (0.0, 100.0, " (accuracies are in percent)"), "fraction": (0.0, 1.0, " (a ratio, not percent)")}


class _Reader:
    """Typed reads from one JSON object of a card; every failure raises :class:`CardError` with a dotted field."""

    def __init__(self, path: Path, data: Any, prefix: str = "") -> None:
        self.path, self.prefix = path, prefix
        if not isinstance(data, dict):
            raise CardError(path, prefix.rstrip(".") or None, f"expected a JSON object, got {_kind_of(data)}")
        self.data: dict[str, Any] = data

    def fail(self, key: str, problem: str) -> CardError:
        return CardError(self.path, self.prefix + key, problem)

    def value(self, key: str, kind: str, *, of: Any = None, lo: float | None = None) -> Any:
        """``self.data[key]`` checked as ``kind``; None (JSON null) is returned as is."""
        v = self.data[key]
        if v is None:
            return None
        if kind in ("number", "percent", "fraction"):
            return self.number(key, v, *_BOUNDS.get(kind, (lo, None, "")))
        if kind in ("text", "sha256", "integer", "boolean", "flag", "object"):
            return self.scalar(key, kind, v, lo)
        if kind == "examples":
            return self.examples(key, v)
        if kind in ("pair", "list", "interval", "objects"):
            return self.sequence(key, kind, v, of)
        if kind == "record_list":
            if not isinstance(v, list):
                raise self.fail(key, f"expected a list, got {_kind_of(v)}")
            return tuple(_parse_record(of, self.path, item, f"{self.prefix}{key}[{i}].") for i, item in enumerate(v))
        return self.mapping(key, kind, v, of)

    def number(self, key: str, v: Any, lo: float | None, hi: float | None, unit: str) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(key, f"expected a number, got {_kind_of(v)}")
        if not math.isfinite(v):
            raise self.fail(key, f"expected a finite number, got {v}")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            span = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
            raise self.fail(key, f"{v} is outside {span}{unit}")
        return float(v)

    def scalar(self, key: str, kind: str, v: Any, lo: float | None) -> Any:
        if kind in ("text", "sha256") and not isinstance(v, str):
            raise self.fail(key, f"expected a non-empty string, got {_kind_of(v)}")
        if kind == "sha256" and not _SHA256.fullmatch(v):
            raise self.fail(key, f"expected a sha256 (64 lowercase hex digits), got {_kind_of(v)}")
        if kind == "integer":
            if isinstance(v, bool) or not isinstance(v, int):
                raise self.fail(key, f"expected an integer, got {_kind_of(v)}")
            if lo is not None and v < lo:
                raise self.fail(key, f"{v} is below {int(lo)}")
        if kind in ("boolean", "flag") and not isinstance(v, bool):
            raise self.fail(key, f"expected true or false, got {_kind_of(v)}")
        if kind == "object" and not isinstance(v, dict):
            raise self.fail(key, f"expected a JSON object, got {_kind_of(v)}")
        return v

    def sequence(self, key: str, kind: str, v: Any, of: Any) -> Any:
        size = {"pair": 2, "interval": 3}.get(kind)
        if not isinstance(v, list) or (size is not None and len(v) != size):
            shape = {"pair": "[low, high]", "interval": "[value, low, high]"}.get(kind, "a list")
            raise self.fail(key, f"expected {shape}, got {_kind_of(v)}")
        item_kind = {"interval": "number", "objects": "object"}.get(kind, of)
        sub = _Reader(self.path, {f"[{i}]": item for i, item in enumerate(v)}, self.prefix + key)
        items = tuple(sub.value(f"[{i}]", item_kind) for i in range(len(v)))
        if kind in ("interval", "objects") and None in items:
            raise sub.fail(f"[{items.index(None)}]", "is null")
        return Interval(value=items[0], low=items[1], high=items[2]) if kind == "interval" else items

    def mapping(self, key: str, kind: str, v: Any, of: Any) -> Any:
        sub = _Reader(self.path, v, f"{self.prefix}{key}.")
        if kind == "record":
            return _parse_record(of, self.path, v, sub.prefix)
        if kind == "records":
            keyed = any(f.name == "name" and f.metadata.get("kind") is None for f in fields(of))
            return {k: _parse_record(of, self.path, item, f"{sub.prefix}{k}.", **({"name": k} if keyed else {}))
                    for k, item in v.items()}
        if kind == "map":
            out = {k: sub.value(k, of) for k in v}
            if of == "text" and any(not x for x in out.values()):
                bad = next(k for k, x in out.items() if not x)
                raise sub.fail(bad, f"expected a non-empty string, got {_kind_of(v[bad])}")
            return out
        if kind == "ratios":
            out = {k: sub.value(k, "number", lo=0.0) for k in v}
            if "all" not in out:
                raise self.fail(key, "has no 'all' entry (the score over every attack)")
            if any(x is None for x in out.values()):
                bad = next(k for k, x in out.items() if x is None)
                raise sub.fail(bad, "expected a number, got null")
            return out
        raise AssertionError(f"unknown field kind {kind!r}")

    def examples(self, key: str, name: str) -> Path:
        if not isinstance(name, str):
            raise self.fail(key, f"expected a string, got {_kind_of(name)}")
        pure = PurePosixPath(name)
        if pure.is_absolute() or len(pure.parts) != 1 or name in (".", "..") or "\\" in name:
            raise self.fail(key, f"must be a file name beside the card, got {name!r}")
        target = self.path.parent / name
        if not target.is_file():
            raise self.fail(key, f"names {target}, which does not exist")
        return target


R = TypeVar("R")


def _parse_record(cls: type[R], where: Path, data: Any, prefix: str = "", **local: Any) -> R:
    """``data`` checked field by field against the dataclass ``cls``; ``local`` sets its fields that are not read."""
    reader = _Reader(where, data, prefix)
    values: dict[str, Any] = dict(local)
    for f in _layout(cls):
        kind = f.metadata["kind"]
        if f.name not in reader.data:
            if f.metadata["required"]:
                raise reader.fail(f.name, "is missing")
            continue
        value = reader.value(f.name, kind, of=f.metadata["of"], lo=f.metadata["lo"])
        if value is None:
            if f.metadata["required"]:
                raise reader.fail(f.name, "expected a number, got null" if kind in ("number", "percent", "fraction")
                                  else "is null")
            if f.default is not MISSING and f.default is not None:
                continue  # a null boolean reads as its default (false)
            if f.default_factory is not MISSING:
                continue
        elif kind == "text" and f.metadata["required"] and not value.strip():
            raise reader.fail(f.name, f"expected a non-empty string, got {_kind_of(value)}")
        values[f.name] = value
    return cls(**values)


def card_version(path: Path, data: Any, current: int = SCHEMA_VERSION) -> int:
    """The schema version of a decoded card: ``schema_version``, the older ``card_version``, or 1 when neither; a
    version above ``current`` (what this arbibench writes) is refused."""
    reader = _Reader(path, data)
    for key in ("schema_version", "card_version"):
        if key in reader.data:
            version = reader.value(key, "integer", lo=1)
            if version is None:
                raise reader.fail(key, "expected an integer, got null")
            if version > current:
                raise reader.fail(key, f"version {version} was written by a newer arbibench (this one reads up to "
                                  f"{current}): upgrade arbibench (pip install -U arbibench)")
            return int(version)
    return 1


def parse_card(path: Path, data: Any) -> ModelCard:
    """Check one decoded attack card and turn it into a :class:`ModelCard`; :class:`CardError` on the first
    problem, naming the file and the field."""
    return ModelCard.parse(path, data)


def parse_corruption_card(path: Path, data: Any) -> CorruptionCard:
    """Check a decoded corruptions card; :class:`CardError` naming the file and the field on the first problem."""
    return CorruptionCard.parse(path, data)


def read_card_json(path: Path) -> Any:
    """The decoded JSON of a card file; :class:`CardError` for text that is not UTF-8 JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CardError(path, None, f"is not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CardError(path, None, f"is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None


def card_text(card: Card) -> str:
    """The file text of a card: indented JSON, numbers as numbers, never NaN."""
    return json.dumps(card.to_dict(), indent=2, allow_nan=False) + "\n"


# -- what ships, and staleness ----------------------------------------------------------------------------------------
#: The shipped checkpoints (``<name>.safetensors``), their checkpoint cards (``<name>.json``) and the pin file.
SHIPPED_CHECKPOINTS = Path(__file__).resolve().parent / "models" / "checkpoints"
#: The one list of what ships: ``<sha256>  <name>.safetensors`` a line (the format ``sha256sum -c`` reads).
PIN_FILE = SHIPPED_CHECKPOINTS / "SHA256SUMS"
_PIN_LINE = re.compile(r"^([0-9a-f]{64})  (\S+)\.safetensors$")


def shipped_sha256(pins: Path = PIN_FILE) -> dict[str, str]:
    """Which checkpoints ship and the sha256 of each: model name -> sha256, in the pin file's order (the zoo's
    ``SHA256SUMS`` by default). A malformed line is an error naming it. Torch-free, so the leaderboard and ``zoo
    list`` can tell a stale card."""
    out: dict[str, str] = {}
    for n, line in enumerate(pins.read_text().splitlines(), 1):
        if not line.strip():
            continue
        m = _PIN_LINE.match(line)
        if m is None:
            raise ValueError(f"{pins}:{n}: expected '<sha256>  <name>.safetensors', got {line!r}")
        out[m.group(2)] = m.group(1)
    return out


def stale_checkpoint(card: CardIdentity | DeployCheckCard | GridCheckCard,
                     shipped: Mapping[str, str]) -> str | None:
    """Why ``card`` may not describe the checkpoint shipped under its name (``shipped``: name -> sha256), or None
    when it records that very checkpoint or its model is not shipped."""
    current = shipped.get(card.name)
    if current is None or card.checkpoint_sha256 == current:
        return None
    if card.checkpoint_sha256 is None:
        return (f"this card records no checkpoint sha256, so it may describe weights other than the shipped "
                f"{current[:12]}; rerun the evaluation")
    return (f"measured checkpoint {card.checkpoint_sha256[:12]}, but the zoo now ships {current[:12]}: these numbers "
            "describe replaced weights; rerun the evaluation")
