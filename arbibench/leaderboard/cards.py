"""Model cards: load ``model_info/**/*.json`` and check every field, so a bad card fails the build by file and field.

The site and figures trust these objects completely; all checking happens here, once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any


class LeaderboardError(ValueError):
    """A problem with the leaderboard's input or output that the user can fix (shown without a traceback)."""


class CardError(LeaderboardError):
    """A model card (or its examples file) is malformed; names the file and the field."""

    def __init__(self, path: Path, field_name: str | None, problem: str) -> None:
        self.path, self.field, self.problem = path, field_name, problem
        where = f"{path}: field '{field_name}'" if field_name else str(path)
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class AttackResult:
    """One attack's row of a card: robust accuracy (percent) and its ratio to clean accuracy."""

    name: str
    family: str
    acc_star: float
    acc_norm: float
    ci_low: float | None = None
    ci_high: float | None = None
    n_examples: int | None = None
    median_queries: float | None = None


@dataclass(frozen=True)
class SweepPoint:
    """Robust accuracy of one attack at one budget, for the accuracy-vs-eps curves."""

    attack: str
    eps: float
    acc_star: float
    eps_text: str | None = None


@dataclass(frozen=True)
class ModelCard:
    """A validated model card. Accuracies are percent; ``acc_norm``, ``rs`` and ``rs_mean`` are plain ratios."""

    path: Path
    name: str
    dataset: str
    threat_model: str
    clean_acc: float
    attacks: dict[str, AttackResult]
    rs: dict[str, float]
    rs_mean: dict[str, float]
    worst_case_acc: float
    link: str | None = None
    authors: str | None = None
    venue: str | None = None
    architecture: str | None = None
    method: str | None = None
    method_paper: str | None = None
    eps: float | None = None
    eps_text: str | None = None
    reported: float | None = None
    autoattack_acc: float | None = None
    median_eps_star: float | None = None  # median smallest adversarial perturbation (input units, like eps)
    unreliable: bool = False
    footnote: str | None = None
    additional_data: bool = False
    number_forward_passes: int | None = None
    bits_weights: int | None = None
    bits_activations: int | None = None
    protocol: str | None = None
    quick: bool = False
    flags: dict[str, str] = field(default_factory=dict)
    fp_twin: str | None = None
    sweep: tuple[SweepPoint, ...] = ()
    examples: Path | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def group(self) -> tuple[str, str]:
        """The leaderboard this card belongs to: (dataset, threat model)."""
        return self.dataset, self.threat_model

    @property
    def families(self) -> list[str]:
        """Attack families of this card, in display order."""
        return order_families({a.family for a in self.attacks.values()})


FAMILY_ORDER = ("white-box", "black-box")


def order_families(families: set[str] | list[str]) -> list[str]:
    """White-box first, black-box second, any other family (e.g. transfer) after them alphabetically."""
    return sorted(set(families), key=lambda f: (FAMILY_ORDER.index(f) if f in FAMILY_ORDER else len(FAMILY_ORDER), f))


class _Fields:
    """Typed reads from one JSON object of a card; every failure raises :class:`CardError` with a dotted field."""

    def __init__(self, path: Path, data: Any, prefix: str = "") -> None:
        self.path, self.prefix = path, prefix
        if not isinstance(data, dict):
            raise CardError(path, prefix.rstrip(".") or None, f"expected a JSON object, got {_kind(data)}")
        self.data: dict[str, Any] = data

    def fail(self, key: str, problem: str) -> CardError:
        return CardError(self.path, self.prefix + key, problem)

    def _get(self, key: str, required: bool) -> Any:
        if key not in self.data:
            if required:
                raise self.fail(key, "is missing")
            return None
        return self.data[key]

    def string(self, key: str, required: bool = False) -> str | None:
        value = self._get(key, required)
        if value is None and not required:
            return None
        if not isinstance(value, str) or (required and not value.strip()):
            raise self.fail(key, f"expected a non-empty string, got {_kind(value)}")
        return value

    def number(
        self, key: str, required: bool = False, lo: float | None = None, hi: float | None = None
    ) -> float | None:
        value = self._get(key, required)
        if value is None and not required:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"expected a number, got {_kind(value)}")
        if not math.isfinite(value):
            raise self.fail(key, f"expected a finite number, got {value}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            span = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
            unit = " (accuracies are in percent)" if hi == 100 else ""
            raise self.fail(key, f"{value} is outside {span}{unit}")
        return float(value)

    def percent(self, key: str, required: bool = False) -> float | None:
        return self.number(key, required, 0.0, 100.0)

    def integer(self, key: str, required: bool = False, lo: int = 0) -> int | None:
        value = self._get(key, required)
        if value is None and not required:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, got {_kind(value)}")
        if value < lo:
            raise self.fail(key, f"{value} is below {lo}")
        return value

    def boolean(self, key: str) -> bool:
        value = self._get(key, False)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {_kind(value)}")
        return value

    def ratios(self, key: str) -> dict[str, float]:
        """A mapping family -> ratio (``rs``, ``rs_mean``) that must hold the total under ``all``."""
        sub = _Fields(self.path, self._get(key, True), f"{self.prefix}{key}.")
        out = {k: sub.number(k, True, 0.0) for k in sub.data}
        if "all" not in out:
            raise self.fail(key, "has no 'all' entry (the score over every attack)")
        return out  # type: ignore[return-value]


def _kind(value: Any) -> str:
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


def _attack(path: Path, name: str, data: Any) -> AttackResult:
    f = _Fields(path, data, f"attacks.{name}.")
    ci_low, ci_high = f.percent("ci_low"), f.percent("ci_high")
    if ci_low is not None and ci_high is not None and ci_low > ci_high:
        raise f.fail("ci_low", f"{ci_low} is above ci_high {ci_high}")
    queries = f.number("median_queries", lo=0.0)
    return AttackResult(
        name=name,
        family=f.string("family", True),  # type: ignore[arg-type]
        acc_star=f.percent("acc_star", True),  # type: ignore[arg-type]
        acc_norm=f.number("acc_norm", True, lo=0.0),  # type: ignore[arg-type]
        ci_low=ci_low,
        ci_high=ci_high,
        n_examples=f.integer("n_examples", lo=1),
        median_queries=queries,
    )


def _sweep(path: Path, data: Any) -> tuple[SweepPoint, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        raise CardError(path, "sweep", f"expected a list of points, got {_kind(data)}")
    points = []
    for i, item in enumerate(data):
        f = _Fields(path, item, f"sweep[{i}].")
        points.append(
            SweepPoint(
                attack=f.string("attack", True),  # type: ignore[arg-type]
                eps=f.number("eps", True, lo=0.0),  # type: ignore[arg-type]
                acc_star=f.percent("acc_star", True),  # type: ignore[arg-type]
                eps_text=f.string("eps_text"),
            )
        )
    return tuple(points)


def _examples(path: Path, f: _Fields) -> Path | None:
    name = f.string("examples")
    if name is None:
        return None
    pure = PurePosixPath(name)
    if pure.is_absolute() or len(pure.parts) != 1 or name in (".", "..") or "\\" in name:
        raise f.fail("examples", f"must be a file name beside the card, got {name!r}")
    target = path.parent / name
    if not target.is_file():
        raise f.fail("examples", f"names {target}, which does not exist")
    return target


def parse_card(path: Path, data: Any) -> ModelCard:
    """Check one decoded card and turn it into a :class:`ModelCard`; raise :class:`CardError` on the first problem."""
    f = _Fields(path, data)
    attacks_raw = f._get("attacks", True)
    if not isinstance(attacks_raw, dict):
        raise f.fail("attacks", f"expected an object mapping attack name to results, got {_kind(attacks_raw)}")
    attacks = {name: _attack(path, name, value) for name, value in attacks_raw.items()}
    flags_f = _Fields(path, f._get("flags", False) or {}, "flags.")
    flags = {k: flags_f.string(k, True) for k in flags_f.data}
    return ModelCard(
        path=path,
        name=f.string("name", True),  # type: ignore[arg-type]
        dataset=f.string("dataset", True),  # type: ignore[arg-type]
        threat_model=f.string("threat_model", True),  # type: ignore[arg-type]
        clean_acc=f.percent("clean_acc", True),  # type: ignore[arg-type]
        attacks=attacks,
        rs=f.ratios("rs"),
        rs_mean=f.ratios("rs_mean"),
        worst_case_acc=f.percent("worst_case_acc", True),  # type: ignore[arg-type]
        link=f.string("link"),
        authors=f.string("authors"),
        venue=f.string("venue"),
        architecture=f.string("architecture"),
        method=f.string("method"),
        method_paper=f.string("method_paper"),
        eps=f.number("eps", lo=0.0),
        eps_text=f.string("eps_text"),
        reported=f.percent("reported"),
        autoattack_acc=f.percent("autoattack_acc"),
        median_eps_star=f.number("median_eps_star", lo=0.0),
        unreliable=f.boolean("unreliable"),
        footnote=f.string("footnote"),
        additional_data=f.boolean("additional_data"),
        number_forward_passes=f.integer("number_forward_passes", lo=1),
        bits_weights=f.integer("bits_weights", lo=1),
        bits_activations=f.integer("bits_activations", lo=1),
        protocol=f.string("protocol"),
        quick=f.boolean("quick"),
        flags=flags,  # type: ignore[arg-type]
        fp_twin=f.string("fp_twin"),
        sweep=_sweep(path, f._get("sweep", False)),
        examples=_examples(path, f),
        raw=data,
    )


#: The ``threat_model`` of RobustBench's common-corruptions cards; they have their own leaderboard
#: (:mod:`arbibench.leaderboard.corruptions`) and are left out of the attack leaderboards.
CORRUPTIONS_THREAT = "corruptions"


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


def load_card(path: Path) -> ModelCard:
    """Read and check one card file."""
    return parse_card(path, read_card_json(path))


def card_files(model_info: Path) -> list[Path]:
    """Every card file under ``model_info`` (any depth, ``*.json``, not hidden); one clear error if there is none."""
    model_info = Path(model_info)
    if not model_info.exists():
        raise LeaderboardError(
            f"model-info folder {model_info} does not exist (the protocol runner writes cards to "
            "model_info/<dataset>/<threat>/<name>.json; pass --model-info to point elsewhere)"
        )
    if not model_info.is_dir():
        raise LeaderboardError(f"model-info path {model_info} is not a folder")
    # Hidden files and folders are skipped: they are a writer's temporaries, not finished cards.
    files = sorted(
        p for p in model_info.rglob("*.json")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(model_info).parts)
    )
    if not files:
        raise LeaderboardError(f"no model cards (*.json) under {model_info}: run the protocol runner first")
    return files


def load_cards(model_info: Path) -> list[ModelCard]:
    """All attack cards under ``model_info`` (corruptions cards are read by
    :func:`arbibench.leaderboard.corruptions.load_corruption_cards`), checked; names unique per leaderboard."""
    files = card_files(model_info)
    decoded = [(p, read_card_json(p)) for p in files]
    cards = [parse_card(p, d) for p, d in decoded
             if not (isinstance(d, dict) and d.get("threat_model") == CORRUPTIONS_THREAT)]
    seen: dict[tuple[str, str, str], Path] = {}
    for card in cards:
        key = (*card.group, card.name)
        if key in seen:
            raise CardError(
                card.path, "name", f"{card.name!r} is also the name of {seen[key]} on the same leaderboard "
                f"({card.dataset}, {card.threat_model})"
            )
        seen[key] = card.path
    return cards
