"""The ARBiBench protocol as presets: which attacks, with which parameters, on which images, at which eps.

ARBiBench (Zhao et al., arXiv:2312.13575) evaluates white-box attacks on the full CIFAR-10 test set and black-box
attacks on 500 seeded CIFAR-10 test images; on ImageNet every attack runs on 1000 images. The Linf budgets are
8/255 (CIFAR-10) and 4/255 (ImageNet); the L2 variants use eps 0.5. Every number that defines a preset lives in
:data:`PROTOCOLS`, so ``arbibench protocol show`` prints exactly what ``arbibench protocol run`` does.

``quick=True`` is a laptop variant (smaller subsets, smaller query budgets); every result it produces says so.

The black-box subset is drawn *from* the white-box subset with a fixed seed, so both families have outcomes on
the black-box images and the worst case over all attacks is computed there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from arbibench.attacks import ACCESS_GROUPS as ACCESS_GROUPS  # re-exported: the protocol's two attack groups
from arbibench.attacks import BLACK_BOX as BLACK_BOX
from arbibench.attacks import WHITE_BOX as WHITE_BOX
from arbibench.attacks import get_attack, get_threat_model
from arbibench.data.cifar10c import CORRUPTIONS


@dataclass(frozen=True)
class AttackSpec:
    """One attack of a preset: registry name, family and the parameters that differ from its defaults."""

    name: str
    family: str
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.params)
        return f"{self.name}({args})" if args else self.name


def _spec(name: str, family: str, **params: Any) -> AttackSpec:
    return AttackSpec(name, family, tuple(sorted(params.items())))


@dataclass(frozen=True)
class Protocol:
    """A complete evaluation preset for one dataset and threat model."""

    name: str
    dataset: str
    threat_model: str
    eps: float
    eps_text: str
    attacks: tuple[AttackSpec, ...]
    n_white_box: int | None  # None: the whole test set
    n_black_box: int
    subset_seed: int = 0  # draws the black-box images from the white-box ones
    seed: int = 0  # the attacks' randomness
    batch_size: int = 200
    sweep_attack: str = "apgd_ce"
    sweep_eps: tuple[str, ...] = ()
    n_sweep: int = 1000
    # eps*: the smallest perturbation per image at which these attacks fool it, on the black-box images: random sign
    # corners first at every radius, a descent from eps_star_factor * eps to eps_star_floor, then eps_star_rounds
    # bisection rounds (resolution 2 ** (1 / 2**rounds); see arbibench.evaluation.min_perturbation)
    eps_star_attacks: tuple[str, ...] = ("apgd_ce",)
    eps_star_rounds: int = 3
    eps_star_factor: float = 2.0
    eps_star_floor: float = 1e-3 / 255
    eps_star_draws: int = 50
    # a verifier's certified radius per eps* image, the lower end of each image's eps* (slow; off unless asked)
    eps_star_certify: bool = False
    quick: bool = False
    demo: bool = False  # the few-minute first look of ``make demo`` (also ``quick``: a laptop variant)
    notes: tuple[str, ...] = field(default_factory=tuple)
    grid: str = "float"  # or "uint8": every adversarial example on the k/255 grid (see on_grid)

    @property
    def white_box(self) -> tuple[AttackSpec, ...]:
        return tuple(a for a in self.attacks if a.family == WHITE_BOX)

    @property
    def black_box(self) -> tuple[AttackSpec, ...]:
        return tuple(a for a in self.attacks if a.family == BLACK_BOX)

    @property
    def label(self) -> str:
        """The preset's name as printed on every output (``cifar10 (quick)`` for the laptop variant)."""
        label = f"{self.name} (demo)" if self.demo else f"{self.name} (quick)" if self.quick else self.name
        return label if self.grid == "float" else f"{label} on the {self.grid} grid"

    def subset_text(self, family: str) -> str:
        if family == WHITE_BOX:
            return "the whole test set" if self.n_white_box is None else f"the first {self.n_white_box} test images"
        return f"{self.n_black_box} images drawn with seed {self.subset_seed} from the white-box images"


def on_grid(protocol: Protocol, grid: str) -> Protocol:
    """``protocol`` with every adversarial example on the input ``grid`` ("float": unchanged; "uint8": the k/255
    grid of 8-bit images, Linf only). eps* is searched on float inputs only, so a grid run leaves it out, and says so.
    """
    get_threat_model(protocol.threat_model, protocol.eps, grid)  # a grid the threat model cannot have: one error
    if grid == "float":
        return protocol
    note = f"{grid} grid: every adversarial example on the k/255 grid inside the eps box; eps* not searched"
    return replace(protocol, grid=grid, eps_star_attacks=(), notes=(*protocol.notes, note))


def _eps_value(text: str) -> float:
    return float(Fraction(text))


def _white_box(norm: str) -> tuple[AttackSpec, ...]:
    if norm == "Linf":
        names = ("fgsm", "pgd", "mifgsm", "cw_linf", "apgd_ce", "autoattack")
    else:
        names = ("fgsm", "pgd", "cw_l2", "deepfool", "apgd_ce", "autoattack")
    return tuple(_spec(n, WHITE_BOX) for n in names)


def _black_box(norm: str, queries: dict[str, int]) -> tuple[AttackSpec, ...]:
    specs = [
        _spec("transfer", BLACK_BOX, attack="pgd"),
        _spec("square", BLACK_BOX, max_queries=queries["square"]),
        _spec("simba", BLACK_BOX, max_queries=queries["simba"]),
        _spec("nes", BLACK_BOX, max_queries=queries["nes"]),
        _spec("hsja", BLACK_BOX, max_queries=queries["hsja"]),
    ]
    if norm == "Linf":
        specs.append(_spec("rays", BLACK_BOX, max_queries=queries["rays"]))
    return tuple(specs)


FULL_QUERIES = {"square": 5000, "simba": 5000, "nes": 5000, "hsja": 5000, "rays": 5000}
QUICK_QUERIES = {"square": 1000, "simba": 1000, "nes": 1000, "hsja": 1000, "rays": 1000}


def _preset(name: str, dataset: str, norm: str, eps_text: str, n_white: int | None, n_black: int) -> Protocol:
    sweep = ("1/255", "2/255", "4/255", "8/255", "16/255") if norm == "Linf" else ("0.125", "0.25", "0.5", "1")
    return Protocol(
        name=name,
        dataset=dataset,
        threat_model=norm,
        eps=_eps_value(eps_text),
        eps_text=eps_text,
        attacks=_white_box(norm) + _black_box(norm, FULL_QUERIES),
        n_white_box=n_white,
        n_black_box=n_black,
        sweep_eps=sweep,
        n_sweep=1000,
    )


PROTOCOLS: dict[str, Protocol] = {
    p.name: p
    for p in (
        _preset("cifar10", "cifar10", "Linf", "8/255", None, 500),
        _preset("cifar10-l2", "cifar10", "L2", "0.5", None, 500),
        _preset("imagenet", "imagenet", "Linf", "4/255", 1000, 1000),
        _preset("imagenet-l2", "imagenet", "L2", "0.5", 1000, 1000),
    )
}

# The laptop variant: what changes, in one place.
QUICK = {"n_white_box": 500, "n_black_box": 100, "n_sweep": 200}


@dataclass(frozen=True)
class CorruptionProtocol:
    """The common-corruptions preset: clean accuracy of each model on every CIFAR-10-C (corruption, severity) cell.

    RobustBench's threat model ``corruptions``: 15 corruptions x 5 severities, the mean accuracy over the 75 cells
    (mCA, RobustBench's ``corruptions_acc``), plus arbibench's ratios to the model's own clean accuracy and to its
    full-precision twin, every one with a 95% interval. ``n_examples=None`` evaluates every image the CIFAR-10-C
    folder holds per cell (10,000 official, N regenerated).
    """

    name: str
    dataset: str
    corruptions: tuple[str, ...]
    severities: tuple[int, ...] = (1, 2, 3, 4, 5)
    n_examples: int | None = None
    batch_size: int = 250
    n_bootstrap: int = 2000
    bootstrap_seed: int = 0
    threat_model: str = "corruptions"
    quick: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def label(self) -> str:
        return f"{self.name} (quick)" if self.quick else self.name

    def subset_text(self) -> str:
        n = "every image of the CIFAR-10-C folder" if self.n_examples is None else f"the first {self.n_examples}"
        return f"{n} per (corruption, severity) cell, and the same clean test images"


def _corruption_presets() -> dict[str, CorruptionProtocol]:
    return {"cifar10-c": CorruptionProtocol("cifar10-c", "cifar10", CORRUPTIONS)}


CORRUPTION_PROTOCOLS: dict[str, CorruptionProtocol] = _corruption_presets()
QUICK_CORRUPTIONS = 500  # images per cell in the laptop variant


# The first look of ``make demo``: a BNN against its FP twin in a few minutes on a laptop CPU. Representative
# attacks: single-step, iterative and AutoAttack's APGD (white-box); transfer from the FP twin and score-based Square
# (black-box). The decision-based attacks are left out: RayS alone took longer than all the others together (its
# label queries come in many small batches), so the demo would not be a first look any more.
DEMO = {"n_white_box": 200, "n_black_box": 50, "n_sweep": 100}
DEMO_WHITE_BOX = ("fgsm", "pgd", "apgd_ce")
DEMO_QUERIES = 500


def _demo(p: Protocol) -> Protocol:
    black = tuple(a for a in _black_box(p.threat_model, dict.fromkeys(FULL_QUERIES, DEMO_QUERIES))
                  if a.name in ("transfer", "square"))
    return replace(
        p,
        attacks=tuple(_spec(n, WHITE_BOX) for n in DEMO_WHITE_BOX) + black,
        n_white_box=DEMO["n_white_box"] if p.n_white_box is None else min(DEMO["n_white_box"], p.n_white_box),
        n_black_box=DEMO["n_black_box"],
        n_sweep=DEMO["n_sweep"],
        sweep_attack="pgd",
        sweep_eps=p.sweep_eps[:4] if p.threat_model == "Linf" else p.sweep_eps,
        eps_star_attacks=("pgd",),
        eps_star_rounds=2,
        quick=True,
        demo=True,
        notes=(
            f"demo variant: {DEMO['n_white_box']} white-box and {DEMO['n_black_box']} black-box images, "
            f"{len(DEMO_WHITE_BOX)} white-box and 2 black-box attacks (Square: {DEMO_QUERIES} queries); a first "
            "look, not the ARBiBench protocol",
        ),
    )


def get_protocol(name: str, quick: bool = False, demo: bool = False) -> Protocol | CorruptionProtocol:
    """The preset ``name`` (``cifar10``, ``cifar10-l2``, ``imagenet``, ``imagenet-l2``, ``cifar10-c``), or its
    quick variant, or its few-minute demo variant."""
    if quick and demo:
        raise ValueError("choose one variant: --quick or --demo")
    if demo:
        if name not in PROTOCOLS:
            raise ValueError(f"the demo variant exists for the attack presets {', '.join(PROTOCOLS)}; not {name!r}")
        return _demo(PROTOCOLS[name])
    if name in CORRUPTION_PROTOCOLS:
        c = CORRUPTION_PROTOCOLS[name]
        if not quick:
            return c
        return replace(c, n_examples=QUICK_CORRUPTIONS, quick=True, notes=(
            f"quick variant: the first {QUICK_CORRUPTIONS} images per corruption and severity",))
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; known: {', '.join([*PROTOCOLS, *CORRUPTION_PROTOCOLS])}")
    p = PROTOCOLS[name]
    if not quick:
        return p
    black = _black_box(p.threat_model, QUICK_QUERIES)
    n_white = QUICK["n_white_box"] if p.n_white_box is None else min(QUICK["n_white_box"], p.n_white_box)
    return replace(
        p,
        attacks=p.white_box + black,
        n_white_box=n_white,
        n_black_box=QUICK["n_black_box"],
        n_sweep=QUICK["n_sweep"],
        eps_star_attacks=("pgd",),
        eps_star_rounds=2,
        sweep_eps=p.sweep_eps[:4] if p.threat_model == "Linf" else p.sweep_eps,
        quick=True,
        notes=(
            f"quick variant: {n_white} white-box and {QUICK['n_black_box']} black-box images, black-box budgets "
            f"{QUICK_QUERIES['square']} queries; not the full ARBiBench protocol",
        ),
    )


def describe(protocol: Protocol | CorruptionProtocol) -> list[tuple[str, str]]:
    """Every number of the preset as (field, value) rows, for ``arbibench protocol show``."""
    if isinstance(protocol, CorruptionProtocol):
        return [
            ("protocol", protocol.label),
            ("dataset", f"{protocol.dataset} test set under common corruptions (CIFAR-10-C layout)"),
            ("threat model", protocol.threat_model),
            ("corruptions", ", ".join(protocol.corruptions)),
            ("severities", ", ".join(map(str, protocol.severities))),
            ("images", protocol.subset_text()),
            ("batch size", str(protocol.batch_size)),
            ("scores", "accuracy per cell (Wilson 95%); per corruption, mCA (mean over the cells), mCA / clean "
             "accuracy and mCA / mCA of the FP twin (bootstrap over images, 95%)"),
            ("bootstrap", f"{protocol.n_bootstrap} resamples, seed {protocol.bootstrap_seed}"),
            ("data", "official CIFAR-10-C, or the set of `arbibench corruptions generate` (labelled regenerated)"),
            *[("note", n) for n in protocol.notes],
        ]
    rows = [
        ("protocol", protocol.label),
        ("dataset", protocol.dataset),
        ("threat model", f"{protocol.threat_model}, eps = {protocol.eps_text} ({protocol.eps:.6f})"
         + ("" if protocol.grid == "float" else f", on the {protocol.grid} grid")),
        ("white-box images", protocol.subset_text(WHITE_BOX)),
        ("black-box images", protocol.subset_text(BLACK_BOX)),
        ("attack seed", str(protocol.seed)),
        ("batch size", str(protocol.batch_size)),
    ]
    for group in ACCESS_GROUPS:
        for spec in (protocol.white_box if group == WHITE_BOX else protocol.black_box):
            rows.append((f"{group} attack", _describe_attack(spec)))
    rows.append(
        ("eps sweep", f"{protocol.sweep_attack} at {', '.join(protocol.sweep_eps)} on the first {protocol.n_sweep}")
    )
    if protocol.eps_star_attacks:
        attacks = ", ".join(protocol.eps_star_attacks)
        rows.append(
            ("eps*", f"smallest fooling perturbation per image on the black-box images: {protocol.eps_star_draws} "
             f"random sign corners, then {attacks}, at radii from {protocol.eps_star_factor:g} x eps down to "
             f"{protocol.eps_star_floor * 255:g}/255 (an image fooled there is censored), then "
             f"{protocol.eps_star_rounds} bisection rounds")
        )
    rows += [("note", n) for n in protocol.notes]
    return rows


def _describe_attack(spec: AttackSpec) -> str:
    """The attack with every config value it runs with (registry defaults plus the preset's overrides)."""
    attack = get_attack(spec.name, **spec.kwargs)
    config = {k: v for k, v in attack.config_dict().items() if k != "name"}
    if spec.name == "autoattack":
        config = {"components": ", ".join(c["name"] for c in config.get("components", []))}
    return f"{spec.name}: " + ", ".join(f"{k}={v}" for k, v in config.items())
