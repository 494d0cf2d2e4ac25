"""The model-card schema: one declaration of every field that a card file holds, read and written by the same code.

A model card is the JSON file ``model_info/<dataset>/<threat>/<name>.json`` that RobustBench's ``model_info`` has
(link, name, authors, additional_data, number_forward_passes, dataset, venue, architecture, eps, clean_acc,
reported, autoattack_acc, unreliable, footnote; numbers as numbers) plus arbibench's results. The evaluation layer
builds a :class:`ModelCard` (attack cards) or :class:`CorruptionCard` (``threat_model: corruptions``) and writes it
with :func:`card_json`; the leaderboard reads it back with :func:`parse_card` / :func:`parse_corruption_card`. Each
dataclass field says its JSON type in its metadata, so the writer and the reader cannot drift apart, and
``parse_card(path, card_json(card)) == card`` is tested.

Units: every accuracy is in percent (:func:`percent` converts a ratio), as on RobustBench's leaderboard; ``acc_norm``,
``rs`` and ``rs_mean`` are plain ratios; ``eps`` and eps* are in input units.

Versions: ``schema_version`` 2 is the current layout. Version 1 cards (key ``card_version``, or no version key)
have the same fields and read unchanged. A card from a newer arbibench is refused with the fix (upgrade).

A card records the sha256 of the checkpoint it measured; :func:`stale_checkpoint` tells a card of replaced weights
from a current one against the shipped checkpoint cards (:func:`shipped_sha256`).

This module imports only the standard library, so reading cards never loads torch. (The name "model card" also
appears for the checkpoint record that ``arbibench train --export`` writes beside a safetensors file; that is a
different document, owned by :mod:`arbibench.models.zoo`.)
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar, overload

SCHEMA_VERSION = 2
#: Label names of the datasets whose adversarial examples a card's examples file shows (index = label).
CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "cifar10": ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
}
#: The ``threat_model`` of RobustBench's common-corruptions cards (their own leaderboard panel).
CORRUPTIONS_THREAT = "corruptions"

__all__ = [
    "CLASS_NAMES",
    "CORRUPTIONS_THREAT",
    "SCHEMA_VERSION",
    "SHIPPED_CHECKPOINTS",
    "AttackResult",
    "CardError",
    "CorruptionCard",
    "CorruptionResult",
    "EpsStar",
    "Estimate",
    "ModelCard",
    "Ratio",
    "SweepPoint",
    "card_json",
    "card_version",
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
# kind: how a value is checked on read: text, number, percent, integer, boolean, flag (bool or null), ratios
# (family -> ratio with an 'all' entry), map (key -> value of kind ``of``), pair (two numbers of kind ``of``), list
# (values of kind ``of``), record (a nested dataclass ``of``), records (name -> record), record_list, examples.
def _field(kind: str, *, required: bool = False, omit_none: bool = False, of: Any = None, lo: float | None = None,
           default: Any = None, factory: Callable[[], Any] | None = None, key: str | None = None) -> Any:
    meta = {"kind": kind, "required": required, "omit_none": omit_none, "of": of, "lo": lo, "key": key}
    if required:
        return field(metadata=meta)
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _local(**kw: Any) -> Any:
    """A field that is not written to the file (where the card was read from, the decoded JSON)."""
    return field(compare=False, repr=False, metadata={"kind": None}, **kw)


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
    """Robust accuracy (percent) of the eps* curve at one eps."""

    eps: float = _field("number", required=True, lo=0.0)
    robust_acc: float | None = _field("percent")


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
        """Whether a median or interval end of this search means "<= eps_floor"."""
        return self.eps_floor is not None and value <= self.eps_floor


@dataclass(frozen=True, kw_only=True)
class ModelCard:
    """An attack card (one model, dataset and threat model). Accuracies are percent; ACC_norm and RS are ratios."""

    path: Path | None = _local(default=None)
    raw: Mapping[str, Any] = _local(default_factory=dict)
    schema_version: int = _field("integer", lo=1, default=SCHEMA_VERSION)
    # RobustBench's identity fields
    name: str = _field("text", required=True)
    link: str | None = _field("text")
    authors: str | None = _field("text")
    additional_data: bool = _field("boolean", default=False)
    number_forward_passes: int | None = _field("integer", lo=1)
    dataset: str = _field("text", required=True)
    venue: str | None = _field("text")
    architecture: str | None = _field("text")
    # RobustBench's results
    eps: float | None = _field("number", lo=0.0)
    eps_text: str | None = _field("text")
    threat_model: str = _field("text", required=True)
    clean_acc: float = _field("percent", required=True)
    reported: float | None = _field("percent")
    autoattack_acc: float | None = _field("percent")
    unreliable: bool = _field("boolean", default=False)
    footnote: str | None = _field("text")
    # arbibench's: the method, how the numbers were made, and the ARBiBench metrics
    method: str | None = _field("text")
    method_paper: str | None = _field("text")
    bits_weights: int | None = _field("integer", lo=1)
    bits_activations: int | None = _field("integer", lo=1)
    fp_twin: str | None = _field("text")
    # sha256 of the checkpoint measured: a card of replaced weights says so (zoo models only)
    checkpoint_sha256: str | None = _field("text", omit_none=True)
    # the network whose answers count (clean pass, black-box queries, every verified example): "simulation", the
    # float model, or "deployed", the bit-packed network of a BNN; cards without the field measured the simulation
    inference: str | None = _field("text", omit_none=True)
    # the input grid of every adversarial example: "uint8" (pixels k/255, what a camera, a PNG file and a deployed
    # network's first layer see); cards without the field measured float inputs
    grid: str | None = _field("text", omit_none=True)
    protocol: str | None = _field("text")
    quick: bool | None = _field("flag")
    clean_acc_by_family: dict[str, float] | None = _field("map", of="percent", omit_none=True)
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
class CorruptionCard:
    """A common-corruptions card (RobustBench's ``clean_acc`` and ``corruptions_acc``, in percent, plus arbibench's
    per-corruption and per-severity accuracies, ratios and intervals, and where the CIFAR-10-C data came from)."""

    path: Path | None = _local(default=None)
    raw: Mapping[str, Any] = _local(default_factory=dict)
    schema_version: int = _field("integer", lo=1, default=SCHEMA_VERSION)
    name: str = _field("text", required=True)
    link: str | None = _field("text")
    authors: str | None = _field("text")
    additional_data: bool = _field("boolean", default=False)
    number_forward_passes: int | None = _field("integer", lo=1)
    dataset: str = _field("text", required=True)
    venue: str | None = _field("text")
    architecture: str | None = _field("text")
    eps: float | None = _field("number", lo=0.0)
    threat_model: str = _field("text", default=CORRUPTIONS_THREAT)
    clean_acc: float = _field("percent", required=True)
    reported: float | None = _field("percent")
    corruptions_acc: float = _field("percent", required=True)
    unreliable: bool = _field("boolean", default=False)
    footnote: str | None = _field("text")
    method: str | None = _field("text")
    method_paper: str | None = _field("text")
    bits_weights: int | None = _field("integer", lo=1)
    bits_activations: int | None = _field("integer", lo=1)
    fp_twin: str | None = _field("text")
    checkpoint_sha256: str | None = _field("text", omit_none=True)
    protocol: str | None = _field("text")
    quick: bool | None = _field("flag")
    corruptions_source: str = _field("text", required=True)
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
    seconds: float | None = _field("number", lo=0.0, omit_none=True)

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
    if kind == "examples":
        return Path(value).name
    if kind in ("pair", "list"):
        return list(value)
    if kind in ("map", "ratios"):
        return dict(value)
    return value


def _record_json(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(obj):
        kind = f.metadata.get("kind")
        if kind is None:
            continue
        value = getattr(obj, f.name)
        if value is None and f.metadata["omit_none"]:
            continue
        out[f.name] = SCHEMA_VERSION if f.name == "schema_version" else _dump(value, kind)
    return out


def card_json(card: ModelCard | CorruptionCard) -> dict[str, Any]:
    """The card as the JSON object written to its file (current ``schema_version``, fields in schema order)."""
    return _record_json(card)


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
        if kind == "text":
            if not isinstance(v, str):
                raise self.fail(key, f"expected a non-empty string, got {_kind_of(v)}")
            return v
        if kind in ("number", "percent"):
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise self.fail(key, f"expected a number, got {_kind_of(v)}")
            if not math.isfinite(v):
                raise self.fail(key, f"expected a finite number, got {v}")
            lo, hi = (0.0, 100.0) if kind == "percent" else (lo, None)
            if (lo is not None and v < lo) or (hi is not None and v > hi):
                span = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
                unit = " (accuracies are in percent)" if hi == 100 else ""
                raise self.fail(key, f"{v} is outside {span}{unit}")
            return float(v)
        if kind == "integer":
            if isinstance(v, bool) or not isinstance(v, int):
                raise self.fail(key, f"expected an integer, got {_kind_of(v)}")
            if lo is not None and v < lo:
                raise self.fail(key, f"{v} is below {int(lo)}")
            return v
        if kind in ("boolean", "flag"):
            if not isinstance(v, bool):
                raise self.fail(key, f"expected true or false, got {_kind_of(v)}")
            return v
        if kind == "examples":
            return self.examples(key, v)
        if kind in ("pair", "list"):
            if not isinstance(v, list) or (kind == "pair" and len(v) != 2):
                shape = "[low, high]" if kind == "pair" else "a list"
                raise self.fail(key, f"expected {shape}, got {_kind_of(v)}")
            sub = _Reader(self.path, {f"[{i}]": item for i, item in enumerate(v)}, self.prefix + key)
            return tuple(sub.value(f"[{i}]", of) for i in range(len(v)))
        if kind == "record_list":
            if not isinstance(v, list):
                raise self.fail(key, f"expected a list, got {_kind_of(v)}")
            return tuple(_parse_record(of, self.path, item, f"{self.prefix}{key}[{i}].") for i, item in enumerate(v))
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
    for f in fields(cls):  # type: ignore[arg-type]
        kind = f.metadata.get("kind")
        if kind is None:
            continue
        if f.name not in reader.data:
            if f.metadata["required"]:
                raise reader.fail(f.name, "is missing")
            continue
        value = reader.value(f.name, kind, of=f.metadata["of"], lo=f.metadata["lo"])
        if value is None:
            if f.metadata["required"]:
                raise reader.fail(f.name, "expected a number, got null" if kind in ("number", "percent")
                                  else "is null")
            if f.default is not MISSING and f.default is not None:
                continue  # a null boolean reads as its default (false)
            if f.default_factory is not MISSING:
                continue
        elif kind == "text" and f.metadata["required"] and not value.strip():
            raise reader.fail(f.name, f"expected a non-empty string, got {_kind_of(value)}")
        values[f.name] = value
    return cls(**values)


def card_version(path: Path, data: Any) -> int:
    """The schema version of a decoded card: ``schema_version``, the older ``card_version``, or 1 when neither."""
    reader = _Reader(path, data)
    for key in ("schema_version", "card_version"):
        if key in reader.data:
            version = reader.value(key, "integer", lo=1)
            if version is None:
                raise reader.fail(key, "expected an integer, got null")
            if version > SCHEMA_VERSION:
                raise reader.fail(key, f"version {version} was written by a newer arbibench (this one reads up to "
                                  f"{SCHEMA_VERSION}): upgrade arbibench (pip install -U arbibench)")
            return int(version)
    return 1


def _with_version(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    version = card_version(path, data)
    data = {k: v for k, v in data.items() if k != "card_version"}
    data["schema_version"] = version
    return data


def parse_card(path: Path, data: Any) -> ModelCard:
    """Check one decoded attack card and turn it into a :class:`ModelCard`; :class:`CardError` on the first
    problem, naming the file and the field."""
    checked = _with_version(path, _Reader(path, data).data)
    return _parse_record(ModelCard, path, checked, path=path, raw=data)


def parse_corruption_card(path: Path, data: Any) -> CorruptionCard:
    """Check a decoded corruptions card; :class:`CardError` naming the file and the field on the first problem."""
    checked = _with_version(path, _Reader(path, data).data)
    card = _parse_record(CorruptionCard, path, checked, path=path, raw=data)
    if not card.corruptions:
        raise CardError(path, "corruptions", "holds no corruption")
    if card.corruptions_source not in ("official", "regenerated"):
        raise CardError(path, "corruptions_source",
                        f"must be 'official' or 'regenerated', got {card.corruptions_source!r}")
    return card


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


def card_text(card: ModelCard | CorruptionCard) -> str:
    """The file text of a card: indented JSON, numbers as numbers, never NaN."""
    return json.dumps(card_json(card), indent=2, allow_nan=False) + "\n"


# -- staleness -----------------------------------------------------------------------------------------------------
#: The shipped checkpoints and their checkpoint cards (``<name>.safetensors`` and ``<name>.json``), read as JSON here.
SHIPPED_CHECKPOINTS = Path(__file__).resolve().parent / "models" / "checkpoints"


def shipped_sha256(folder: Path = SHIPPED_CHECKPOINTS) -> dict[str, str]:
    """Model name -> the sha256 its checkpoint card records, for every checkpoint card in ``folder`` (the zoo's
    shipped checkpoints by default). Torch-free, so the leaderboard and ``zoo list`` can tell a stale card."""
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.json")):
        data = read_card_json(path)
        sha = data.get("sha256") if isinstance(data, dict) else None
        if isinstance(sha, str) and (folder / f"{path.stem}.safetensors").exists():
            out[path.stem] = sha
    return out


def stale_checkpoint(card: ModelCard | CorruptionCard, shipped: Mapping[str, str]) -> str | None:
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
