"""The result of a benchmark: ARBiBench metrics, per-sample outcomes, flags, and how to show or save them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from arbibench.attacks import ATTACKS, BLACK_BOX, WHITE_BOX, access_group
from arbibench.cards import ModelCard, percent
from arbibench.evaluation.cards import attack_row, eps_star_fields, model_identity
from arbibench.evaluation.metrics import RobustnessReport
from arbibench.evaluation.min_perturbation import MinimalPerturbation
from arbibench.evaluation.store import Outcomes, hash_indices
from arbibench.files import atomic_write_json
from arbibench.inference import Inference

ALL = "all"  # a card's key for the whole subset (every attack of both families)


def format_eps(eps: float) -> str:
    """8/255 rather than 0.031372549, when eps is a small fraction of 255."""
    frac = Fraction(eps).limit_denominator(255)
    if frac.denominator == 255 and abs(float(frac) - eps) < 1e-12:
        return f"{frac.numerator}/255"
    return f"{eps:g}"


def _eps_text(value: float, floor: float = 0.0) -> str:
    """eps* in units of 1/255 (how Linf budgets are read); ``not fooled`` for an image no attack fooled, ``<= floor``
    where the search was censored (fooled even at its floor)."""
    if value != value:
        return "-"
    if value == float("inf"):
        return "not fooled"
    return f"\u2264 {floor * 255:.3g}/255" if 0 < value <= floor else f"{value * 255:.3g}/255"


def query_summary(out: Outcomes) -> dict[str, Any]:
    """Median queries at success over the samples a black-box attack fooled, and mean queries per attacked sample.

    Both are None for white-box attacks (no queries recorded).
    """
    recorded = out.clean_correct & (out.queries >= 0)
    if not recorded.any():
        return {"median_queries": None, "mean_queries": None}
    fooled = recorded & ~out.adv_correct
    return {
        "median_queries": float(np.median(out.queries[fooled])) if fooled.any() else None,
        "mean_queries": float(out.queries[recorded].mean()),
    }


@dataclass
class BenchmarkResult:
    model_name: str
    dataset: str
    threat_model: str
    eps: float
    indices: np.ndarray
    subset: str  # how the samples were chosen, in words
    report: RobustnessReport
    clean: Outcomes
    outcomes: dict[str, Outcomes]
    seconds: dict[str, float]
    flags: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    # what each attack ran with (as hashed by the store)
    attack_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # e.g. ensemble components that were not available
    min_perturbation: MinimalPerturbation | None = None  # eps* per image, when benchmark() was asked for it
    checkpoint_sha256: str | None = None  # of the checkpoint file measured (a zoo model loaded by name)
    inference: Inference = Inference.SIMULATION  # the network whose answers count (arbibench.inference)
    grid: str = "float"  # or "uint8": every adversarial example on the k/255 grid (arbibench.attacks.threat)
    machine: str | None = None  # what computed the batches, so its seconds can be read (arbibench.machine)

    @property
    def clean_acc(self) -> float:
        return self.report.acc

    @property
    def robust_acc(self) -> float:
        """Worst case over the attacks, per sample (RobustBench's robust accuracy)."""
        return self.report.worst_case_acc

    def to_dict(self) -> dict[str, Any]:
        attacks = {}
        for m in self.report.to_dict()["attacks"]:
            out = self.outcomes[m["attack"]]
            attacked = out.clean_correct
            finite = attacked & np.isfinite(out.perturbation)
            m["mean_perturbation"] = float(out.perturbation[finite].mean()) if finite.any() else 0.0
            m.update(query_summary(out))
            m["seconds"] = round(self.seconds.get(m["attack"], 0.0), 3)
            m["config"] = self.attack_configs.get(m["attack"], {})
            attacks[m["attack"]] = m
        report = self.report.to_dict()
        report["attacks"] = attacks
        return {
            "model": self.model_name,
            "inference": str(self.inference),  # simulation or deployed: whose answers decided every outcome
            "dataset": self.dataset,
            "threat_model": self.threat_model,
            "eps": self.eps,
            "eps_text": format_eps(self.eps),
            "grid": self.grid,
            "subset": self.subset,
            "seed": self.seed,
            "n_examples": int(len(self.indices)),
            "indices": self.indices.tolist(),
            **report,
            "flags": self.flags,
            "notes": self.notes,
            "machine": self.machine,
            "eps_star": None if self.min_perturbation is None else self.min_perturbation.to_dict(),
        }

    def to_card(self) -> ModelCard:
        """The model card of this result (``benchmark(..., to_disk=True)`` writes it).

        One subset for every attack, so ACC_norm of both families divides by the same clean accuracy.
        """
        r = self.report
        rows = {}
        for m in r.attacks:
            cls = ATTACKS.get(m.attack.partition("@")[0])
            rows[m.attack] = attack_row(
                m.attack, WHITE_BOX if cls is None else access_group(cls.family), m.acc_star, m.acc_norm, m.interval,
                m.n, query_summary(self.outcomes[m.attack])["median_queries"],
                round(self.seconds.get(m.attack, 0.0), 3),
            )
        rs: dict[str, float] = {}
        rs_mean: dict[str, float] = {}
        for family in (WHITE_BOX, BLACK_BOX):
            norms = [a.acc_norm for a in rows.values() if a.family == family]
            if norms:
                rs[family], rs_mean[family] = round(sum(norms), 4), round(sum(norms) / len(norms), 4)
        rs[ALL], rs_mean[ALL] = round(r.rs, 4), round(r.rs_mean, 4)
        auto = rows.get("autoattack")
        return ModelCard(
            **model_identity(self.model_name, self.dataset, self.checkpoint_sha256),
            inference=str(self.inference),
            grid=None if self.grid == "float" else self.grid,
            eps=self.eps,
            eps_text=format_eps(self.eps),
            threat_model=self.threat_model,
            clean_acc=percent(r.acc),
            autoattack_acc=None if auto is None else auto.acc_star,
            unreliable=bool(self.flags),
            footnote="; ".join(list(self.notes) + [f"flag {k}" for k in self.flags]) or None,
            protocol=None,
            quick=None,
            subset=self.subset,
            attacks=rows,
            rs=rs,
            rs_mean=rs_mean,
            worst_case_acc=percent(r.worst_case_acc),
            flags=dict(self.flags),
            data_indices_hash={ALL: hash_indices(self.indices)},
            n_examples={ALL: len(self.indices)},
            sweep=(),
            machine=self.machine,
            **eps_star_fields(self.min_perturbation),
        )

    def save_json(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_dict` atomically (a crash never leaves half a file)."""
        return atomic_write_json(self.to_dict(), path)

    def table(self) -> Table:
        r = self.report
        title = f"{self.model_name} — {self.dataset}, {self.subset}, {self.threat_model} eps={format_eps(self.eps)}"
        if self.grid != "float":
            title += f" on the {self.grid} grid"
        title += f"; {self.inference} inference"  # a deployed network's run never reads like a simulation's
        t = Table(title=title, title_justify="left")
        t.add_column("attack")
        t.add_column("accuracy", justify="right")
        t.add_column("95% CI", justify="right")
        t.add_column("ACC_norm", justify="right")
        queries = {name: query_summary(out)["median_queries"] for name, out in self.outcomes.items()}
        black_box = {name for name, out in self.outcomes.items() if bool((out.queries >= 0).any())}
        if black_box:
            t.add_column("median queries", justify="right")
        t.add_column("time", justify="right")

        def q(name: str) -> list[str]:
            if not black_box:
                return []
            return [f"{queries[name]:.0f}" if queries.get(name) is not None else ("-" if name in black_box else "")]

        def ci(iv: tuple[float, float]) -> str:
            return f"[{iv[0]:.3f}, {iv[1]:.3f}]"

        t.add_row(
            "clean (ACC)", f"{r.acc:.4f}", ci(r.acc_interval), "", *q("clean"), f"{self.seconds.get('clean', 0):.0f} s"
        )
        for m in r.attacks:
            t.add_row(
                f"{m.attack} (ACC*)",
                f"{m.acc_star:.4f}",
                ci(m.interval),
                f"{m.acc_norm:.4f}",
                *q(m.attack),
                f"{self.seconds.get(m.attack, 0):.0f} s",
            )
        t.add_section()
        t.add_row(
            "worst case", f"{r.worst_case_acc:.4f}", ci(r.worst_case_interval), f"{r.worst_case_acc_norm:.4f}",
            *q("worst"), ""
        )
        n = len(r.attacks)
        t.add_section()
        t.add_row(f"RS (sum over {n} attacks, max {n})", "", "", f"{r.rs:.4f}", *q("rs"), "")
        t.add_row("RS_mean (RS / attacks)", "", "", f"{r.rs_mean:.4f}", *q("rs"), "")
        mp = self.min_perturbation
        if mp is not None:
            t.add_section()
            for over, median, (lo, hi) in (("correct images", mp.median_correct, mp.median_correct_interval()),
                                           ("all images", mp.median, mp.median_interval())):
                f = mp.eps_floor
                t.add_row(f"median eps*, {over} ({', '.join(mp.attacks)})", _eps_text(median, f),
                          f"[{_eps_text(lo, f)}, {_eps_text(hi, f)}]", "", *q("eps"), "")
        return t
