"""Terminal tables for protocol results: per model, the zoo summary, each BNN against its FP twin, the paper's
claims, the corruption preset's accuracies (the commands print them; the markdown of the same findings is the
leaderboard's, :mod:`arbibench.leaderboard.findings`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from arbibench.evaluation.findings import LESS_ROBUST, MORE_ROBUST, TwinComparison, verdict_counts
from arbibench.leaderboard.eps_star import eps_star_text
from arbibench.protocol.claims import CLAIM_DATASETS, DOES_NOT_HOLD, HOLDS, SAME_VERDICT, check_claims, verdicts_of
from arbibench.protocol.presets import ACCESS_GROUPS, BLACK_BOX, WHITE_BOX, Protocol
from arbibench.protocol.run import ALL, ModelEvaluation

if TYPE_CHECKING:
    from arbibench.protocol.corruptions import CorruptionEvaluation


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def model_table(r: ModelEvaluation) -> Table:
    """Per attack: family, ACC*, its 95% interval, ACC_norm and median queries; RS and worst case in the caption."""
    p = r.protocol
    t = Table(title=f"{r.model_name} — protocol {p.label}, {p.threat_model} eps {p.eps_text}")
    for col in ("attack", "family", "n", "ACC*", "95% CI", "ACC_norm", "median queries"):
        t.add_column(col, justify="left" if col in ("attack", "family") else "right")
    for family in ACCESS_GROUPS:
        if family in r.clean_acc:
            lo, hi = r.clean_interval[family]
            t.add_row("clean (ACC)", family, str(r.n_examples[family]), _pct(r.clean_acc[family]),
                      f"{_pct(lo)}–{_pct(hi)}", "", "", style="dim")
    for a in r.attacks:
        q = "" if a.median_queries is None else f"{a.median_queries:.0f}"
        t.add_row(a.name, a.family, str(a.n_examples), _pct(a.acc_star),
                  f"{_pct(a.interval[0])}–{_pct(a.interval[1])}", f"{a.acc_norm:.3f}", q)
    parts = [f"RS {f} {r.rs[f]:.3f} (mean {r.rs_mean[f]:.3f})" for f in (*ACCESS_GROUPS, ALL) if f in r.rs]
    worst = [f"worst case {f} {_pct(v)}" for f, v in r.worst_case.items()]
    eps_star = [] if r.eps_star is None else [
        f"median eps* ({', '.join(r.eps_star['attacks'])}, the {r.eps_star.get('n_correct', '')} correctly "
        f"classified of {r.eps_star['n_examples']} black-box images) "
        f"{eps_star_text(r.eps_star)}"
    ]
    t.caption = "; ".join(parts + worst + eps_star)
    return t


def summary_table(results: Sequence[ModelEvaluation], protocol: Protocol) -> Table:
    """One row per model: ACC, RS and RS_mean per family and overall, worst case, flags."""
    t = Table(title=f"protocol {protocol.label}: {protocol.dataset}, {protocol.threat_model} eps {protocol.eps_text}")
    cols = ("model", "ACC", "RS white", "RS black", "RS all", "RS_mean all", "AutoAttack", "median eps* (correct)",
            "worst case", "flags")
    width = max((len(r.model_name) for r in results), default=5)
    for col in cols:
        t.add_column(col, justify="left" if col in ("model", "flags") else "right",
                     no_wrap=col == "model", min_width=width if col == "model" else None)
    for r in sorted(results, key=lambda r: -r.rs.get(ALL, 0.0)):
        t.add_row(
            r.model_name,
            _pct(r.clean_acc.get(WHITE_BOX, r.clean_acc.get(BLACK_BOX, 0.0))),
            f"{r.rs.get(WHITE_BOX, 0.0):.3f}",
            f"{r.rs.get(BLACK_BOX, 0.0):.3f}",
            f"{r.rs.get(ALL, 0.0):.3f}",
            f"{r.rs_mean.get(ALL, 0.0):.3f}",
            next((_pct(a.acc_star) for a in r.attacks if a.name == "autoattack"), "-"),
            eps_star_text(r.eps_star),
            _pct(r.worst_case.get(ALL, r.worst_case.get(WHITE_BOX, 0.0))),
            ", ".join(r.flags) or "-",
        )
    if protocol.quick:
        t.caption = protocol.notes[0]
    return t


def findings_table(rows: Sequence[TwinComparison], *, per_column: bool = False) -> Table:
    """ARBiBench's question per BNN: more or less robust than its FP twin, per setting, with paired 95% intervals;
    ``per_column``: the rows of :func:`~arbibench.evaluation.findings.column_findings`, one attack or eps each."""
    counts = verdict_counts(rows)
    t = Table(
        title="BNN vs FP twin, each attack and eps on its own: ACC_norm (95% interval), paired over the same images"
        if per_column else "BNN vs FP twin: mean ACC_norm (95% interval), paired over the same images",
        caption=", ".join(f"{v}: {n}" for v, n in counts.items()) + ("" if per_column else "; (k): attacks or eps "
        "values averaged") + "; a transfer attack whose surrogate is the FP twin itself is white-box against it and "
        "left out",
        box=box.SIMPLE_HEAD,
    )
    for col in ("model", "FP twin", "setting", "n", "BNN", "FP", "BNN - FP [95%]", "verdict"):
        # numbers never wrap; names and the verdict may, so the table fits an 80-column log
        numeric = col in ("n", "BNN", "FP", "BNN - FP [95%]")
        t.add_column(col, justify="right" if numeric else "left", no_wrap=numeric, overflow="fold")
    names = _short_names([n for r in rows for n in (r.model, r.twin)])
    for i, r in enumerate(rows):
        style = {MORE_ROBUST: "green", LESS_ROBUST: "red"}.get(r.verdict, "dim")
        diff = r.difference
        setting = f"{r.setting}: {r.columns[0]}" if per_column else f"{r.setting} ({len(r.columns)})"
        t.add_row(names[2 * i], names[2 * i + 1], setting, str(r.n_examples),
                  f"{r.bnn.value:.3f}",
                  f"{r.fp.value:.3f}", f"{diff.value:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}]",
                  f"[{style}]{r.verdict}[/]")
    return t


def claims_table(findings: Sequence[TwinComparison], dataset: str) -> Table | None:
    """The paper's claims, each read off the standard-trained BNNs' verdicts (:mod:`arbibench.protocol.claims`);
    None for a dataset the paper makes no claim about."""
    if dataset not in CLAIM_DATASETS:
        return None
    t = Table(title="ARBiBench's claims on these models (standard-trained pairs)", box=box.SIMPLE_HEAD)
    for col in ("claim", "setting", "BNNs", "as claimed", "opposite", "on these models"):
        t.add_column(col, justify="right" if col in ("BNNs", "as claimed", "opposite") else "left", overflow="fold")
    for c in check_claims(verdicts_of(findings), dataset):
        style = {HOLDS: "green", DOES_NOT_HOLD: "red"}.get(c.status, "dim")
        t.add_row(c.claim, c.setting, str(c.n_models), str(c.as_claimed),
                  "-" if c.expected == SAME_VERDICT else str(c.opposite), f"[{style}]{c.summary()}[/]")
    return t


def _short_names(names: Sequence[str]) -> list[str]:
    """Model names without the prefix they all share (``resnet20_``), so a zoo fits across a terminal."""
    parts = [n.split("_", 1) for n in names]
    if len(names) > 1 and all(len(p) == 2 for p in parts) and len({p[0] for p in parts}) == 1:
        return [p[1] for p in parts]
    return list(names)


def corruption_model_table(r: CorruptionEvaluation) -> Table:
    """One model: accuracy per corruption and severity, the mean per corruption with its 95% interval."""
    sev = r.protocol.severities
    t = Table(title=f"{r.model_name} \u2014 {r.protocol.label}, {r.source} CIFAR-10-C, {r.n_examples} images per cell")
    for col in ("corruption", *map(str, sev), "mean", "95% CI"):
        t.add_column(col, justify="left" if col == "corruption" else "right")
    for name, est in r.corruption.items():
        t.add_row(name, *(_pct(r.cells[name][s].value) for s in sev), _pct(est.value),
                  f"{_pct(est.low)}\u2013{_pct(est.high)}")
    parts = [f"clean {_pct(r.clean.value)}", f"mCA {_pct(r.mca.value)} ({_pct(r.mca.low)}\u2013{_pct(r.mca.high)})",
             f"mCA/clean {r.relative_clean.value:.3f} ({r.relative_clean.low:.3f}\u2013{r.relative_clean.high:.3f})"]
    if r.relative_fp is not None:
        parts.append(f"mCA/{r.fp_twin} {r.relative_fp.value:.3f} ({r.relative_fp.low:.3f}\u2013"
                     f"{r.relative_fp.high:.3f})")
    t.caption = "; ".join(parts)
    return t


def corruption_zoo_table(results: Sequence[CorruptionEvaluation]) -> Table:
    """Rows: corruptions (mean accuracy over the severities); columns: models; then clean, mCA and the ratios."""
    names = [r.model_name for r in results]
    short = _short_names(names)
    first = results[0]
    t = Table(title=f"{first.protocol.label}: accuracy per corruption (mean of severities "
                    f"{first.protocol.severities[0]}-{first.protocol.severities[-1]}), {first.source} CIFAR-10-C, "
                    f"{first.n_examples} images per cell")
    t.add_column("corruption", no_wrap=True)
    for s in short:
        t.add_column(s, justify="right", no_wrap=True)
    for name in first.protocol.corruptions:
        t.add_row(name, *(_pct(r.corruption[name].value) for r in results))
    t.add_row("clean", *(_pct(r.clean.value) for r in results), style="dim", end_section=True)
    t.add_row("mCA", *(_pct(r.mca.value) for r in results), style="bold")
    t.add_row("mCA 95% CI", *(f"{100 * r.mca.low:.1f}\u2013{100 * r.mca.high:.1f}" for r in results))
    t.add_row("mCA / clean", *(f"{r.relative_clean.value:.3f}" for r in results))
    t.add_row("  95% CI", *(f"{r.relative_clean.low:.2f}\u2013{r.relative_clean.high:.2f}" for r in results))
    t.add_row("mCA / FP twin", *("-" if r.relative_fp is None else f"{r.relative_fp.value:.3f}" for r in results))
    t.add_row("  95% CI", *("-" if r.relative_fp is None else f"{r.relative_fp.low:.2f}\u2013{r.relative_fp.high:.2f}"
                            for r in results))
    if first.source == "regenerated":
        t.caption = ("regenerated CIFAR-10-C (arbibench generator, seed "
                     f"{first.generator_seed}): not the official files; mCA = mean accuracy over the "
                     f"{len(first.protocol.corruptions) * len(first.protocol.severities)} cells")
    return t
