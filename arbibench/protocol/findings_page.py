"""The dated findings page: ARBiBench's BNN-versus-FP-twin verdicts over stored results, as markdown for README to link.

The page is generated, never hand-edited, from ``protocol report --stored-only``: the models whose protocol is
complete in the store, each BNN paired with its FP twin on the same images. Given the JSON of an earlier report
(e.g. the quick protocol's), each verdict is set beside the earlier one, so a reader sees which conclusions the
larger protocol confirmed and which it moved. Models left out are listed with why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from typing import Any

from arbibench.evaluation.findings import NOT_DISTINGUISHABLE, TwinComparison, verdict_counts
from arbibench.protocol.claims import (
    CLAIM_DATASETS,
    SAME_VERDICT,
    UNTESTED,
    ClaimCheck,
    check_claims,
    claims_markdown,
    standard_twin,
    verdicts_from_json,
    verdicts_of,
)
from arbibench.protocol.presets import BLACK_BOX, WHITE_BOX, Protocol
from arbibench.protocol.report import eps_star_text
from arbibench.protocol.run import ALL, ModelEvaluation


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def _interval(value: float, low: float, high: float) -> str:
    return f"{value:+.3f} [{low:+.3f}, {high:+.3f}]"


def _protocol_lines(protocol: Protocol) -> list[str]:
    budgets = sorted({str(s.kwargs["max_queries"]) for s in protocol.black_box if "max_queries" in s.kwargs})
    return [
        f"- protocol `{protocol.label}`: {protocol.dataset}, {protocol.threat_model} eps {protocol.eps_text}",
        f"- white-box attacks ({', '.join(s.name for s in protocol.white_box)}) on "
        f"{protocol.subset_text(WHITE_BOX)}",
        f"- black-box attacks ({', '.join(s.name for s in protocol.black_box)}) on {protocol.subset_text(BLACK_BOX)}, "
        f"{' / '.join(budgets) or '-'} queries",
        f"- eps sweep: {protocol.sweep_attack} at {', '.join(protocol.sweep_eps) or '-'} on {protocol.n_sweep} images",
    ]


def _previous_verdicts(previous: Mapping[str, Any] | None, key: str = "findings"
                       ) -> dict[tuple[str, ...], dict[str, Any]]:
    """The earlier report's rows by (BNN, twin, setting), or with ``key="per_column"`` by (..., attack or eps)."""
    if previous is None:
        return {}
    return {_row_key(f, per_column=key == "per_column"): f for f in previous.get(key, [])}


def _row_key(row: Mapping[str, Any], *, per_column: bool) -> tuple[str, ...]:
    key = (row["model"], row["twin"], row["setting"])
    return (*key, *row["columns"]) if per_column else key


def _comparison_rows(rows: Sequence[TwinComparison], previous: Mapping[str, Any] | None, *, per_column: bool
                     ) -> tuple[list[str], int]:
    """The markdown table of ``rows`` (beside the earlier report's row where it has one) and how many verdicts moved."""
    earlier = _previous_verdicts(previous, "per_column" if per_column else "findings")
    label = previous.get("protocol", "earlier report") if previous is not None else None
    what = "attack or eps | " if per_column else ""
    head = f"| BNN | FP twin | setting | {what}images | BNN | FP | BNN - FP [95%] | verdict |"
    rule = "| --- | --- | --- | " + ("--- | " if per_column else "") + "---: | ---: | ---: | ---: | --- |"
    if label is not None:
        head += f" {label}: BNN - FP [95%] | {label}: verdict |"
        rule += " ---: | --- |"
    lines, moved = [head, rule], 0
    for f in rows:
        d = f.difference
        setting = f"{f.setting} | {f.columns[0]}" if per_column else f"{f.setting} ({len(f.columns)})"
        row = (f"| `{f.model}` | `{f.twin}` | {setting} | {f.n_examples} | "
               f"{f.bnn.value:.3f} | {f.fp.value:.3f} | {_interval(d.value, d.low, d.high)} | {f.verdict} |")
        if label is not None:
            old = earlier.get(_row_key(f.to_dict(), per_column=per_column))
            if old is None:
                row += " - | - |"
            else:
                moved += old["verdict"] != f.verdict
                row += f" {_interval(*old['difference'])} | {old['verdict']} |"
        lines.append(row)
    return lines, moved


def _claims_section(findings: Sequence[TwinComparison], protocol: Protocol,
                    previous: Mapping[str, Any] | None) -> list[str]:
    if protocol.dataset not in CLAIM_DATASETS:
        return []
    checks = check_claims(verdicts_of(findings), protocol.dataset)
    earlier = check_claims(verdicts_from_json(previous), protocol.dataset) if previous is not None else None
    label = previous.get("protocol", "earlier report") if previous is not None else None
    return [
        "", "## The paper's claims on this zoo", "",
        "ARBiBench's claims for standard-trained BNNs, each read off the verdicts above: a claim about direction "
        "holds when every BNN's interval says so, partly when some do; the similarity claim holds in a setting when "
        "every BNN got the same verdict. Pairs with an adversarially trained twin are not counted.",
        "", *claims_markdown(checks, earlier, label),
    ]


def _separating_columns(rows: Sequence[TwinComparison]) -> str:
    """Per setting, the attacks (or eps values) under which some pair's verdict is not "not distinguishable", of all
    compared: which columns the setting's verdicts can rest on. Empty without per-column rows."""
    parts = []
    for setting in dict.fromkeys(r.setting for r in rows):
        columns = list(dict.fromkeys(r.columns[0] for r in rows if r.setting == setting))
        separated = {r.columns[0] for r in rows if r.setting == setting and r.verdict != NOT_DISTINGUISHABLE}
        deciding = [c for c in columns if c in separated]  # the setting's own order, not the first pair's
        parts.append(f"{setting} {', '.join(deciding) or 'none'} ({len(deciding)} of {len(columns)})")
    if not parts:
        return ""
    return ("Where a BNN and its twin differ at all (some pair's interval excludes zero), per setting: "
            + "; ".join(parts) + ".")


def _autoattack_sentence(per_column: Sequence[TwinComparison], findings: Sequence[TwinComparison], *,
                         name_carried: bool = True) -> str:
    """How the pairs fare under AutoAttack alone, and (``name_carried``) which white-box verdicts it does not back:
    the family's mean lets weak attacks (FGSM most of all, which masked gradients mislead) outvote the ensemble
    RobustBench ranks by. Empty where AutoAttack was not run."""
    rows = [r for r in per_column if r.setting == WHITE_BOX and r.columns[0] == "autoattack"]
    if not rows:
        return ""
    counts = ", ".join(f"{v} {n}" for v, n in verdict_counts(rows).items() if n)
    unseparated = {(r.model, r.twin) for r in rows if r.verdict == NOT_DISTINGUISHABLE}
    carried = [r for r in findings
               if r.setting == WHITE_BOX and r.verdict != NOT_DISTINGUISHABLE and (r.model, r.twin) in unseparated]
    text = f"Under AutoAttack alone (the ensemble RobustBench ranks by), of {len(rows)} pairs: {counts}."
    if carried and name_carried:
        text += (f" For {len(carried)} of them the white-box row above says {_or(r.verdict for r in carried)} "
                 "while AutoAttack does not separate the two networks: that verdict comes from the weaker attacks.")
    return text


def _or(verdicts: Iterable[str]) -> str:
    """``"more robust"`` or ``"more robust" or "less robust"``: the distinct verdicts, quoted, in first-seen order."""
    return " or ".join(f'"{v}"' for v in dict.fromkeys(verdicts))


def _column_summary(rows: Sequence[TwinComparison]) -> list[str]:
    """Per setting and attack (or eps), how many BNN-twin pairs got each verdict: the zoo's answer at a glance."""
    order = list(dict.fromkeys((r.setting, r.columns[0]) for r in rows))
    verdicts = list(verdict_counts([]))
    lines = [f"| setting | attack or eps | pairs | {' | '.join(verdicts)} |",
             "| --- | --- | ---: |" + " ---: |" * len(verdicts)]
    for setting, column in order:
        counts = verdict_counts([r for r in rows if (r.setting, r.columns[0]) == (setting, column)])
        lines.append(f"| {setting} | {column} | {sum(counts.values())} | "
                     + " | ".join(str(n) for n in counts.values()) + " |")
    return lines


def _trained_pairs(findings: Sequence[TwinComparison]) -> list[tuple[str, str]]:
    """The (BNN, twin) pairs whose twin is not standard-trained (adversarially trained in the zoo), in report order."""
    return list(dict.fromkeys((f.model, f.twin) for f in findings if not standard_twin(f.twin)))


def _autoattack_row(per_column: Sequence[TwinComparison], pair: tuple[str, str]) -> TwinComparison | None:
    return next((r for r in per_column if (r.model, r.twin) == pair and r.setting == WHITE_BOX
                 and r.columns[0] == "autoattack"), None)


def _trained_pair_lines(findings: Sequence[TwinComparison], per_column: Sequence[TwinComparison],
                        previous: Mapping[str, Any] | None) -> list[str]:
    """What the page says of each adversarially trained pair: every setting's verdict with its interval (beside the
    earlier report's verdict), AutoAttack's on its own, and the white-box attacks that disagree, since there the
    family's mean can call a BNN that the strongest attack breaks "not distinguishable"."""
    earlier = _previous_verdicts(previous)
    label = previous.get("protocol", "earlier report") if previous is not None else None
    lines = []
    for pair in _trained_pairs(findings):
        parts = []
        for f in (f for f in findings if (f.model, f.twin) == pair):
            d, old = f.difference, earlier.get(_row_key(f.to_dict(), per_column=False))
            was = "" if old is None else f", {'the same' if old['verdict'] == f.verdict else old['verdict']} in {label}"
            parts.append(f"{f.setting} {f.verdict}, {_interval(d.value, d.low, d.high)}{was}")
        if (aa := _autoattack_row(per_column, pair)) is not None:
            d = aa.difference
            parts.append(f"AutoAttack alone {aa.verdict}, {_interval(d.value, d.low, d.high)}")
        line = f"- `{pair[0]}` against `{pair[1]}`: " + "; ".join(parts) + "."
        white = [r for r in per_column if (r.model, r.twin) == pair and r.setting == WHITE_BOX]
        by_verdict: dict[str, list[str]] = {}
        for r in white:
            if r.verdict != NOT_DISTINGUISHABLE:
                by_verdict.setdefault(r.verdict, []).append(r.columns[0])
        if len(by_verdict) > 1:
            line += (" Its white-box attacks disagree: " + "; ".join(f"{v} under {', '.join(cols)}"
                                                                     for v, cols in by_verdict.items())
                     + ". Read the strongest attack's verdict, not the family's mean.")
        lines.append(line)
    if not lines:
        return []
    return ["", "## Adversarially trained pairs", "",
            "The paper's claims concern standard training. A BNN trained adversarially against its FP twin trained "
            "the same way answers another question, the one asked before shipping a robust BNN: what does "
            "binarizing cost once both networks are defended. Per pair, each setting's verdict with its interval "
            "and AutoAttack's on its own:", "", *lines]


def findings_markdown(
    results: Sequence[ModelEvaluation],
    findings: Sequence[TwinComparison],
    protocol: Protocol,
    *,
    command: str,
    left_out: Mapping[str, str] | None = None,
    previous: Mapping[str, Any] | None = None,
    per_column: Sequence[TwinComparison] = (),
    today: date | None = None,
) -> str:
    """The page: what was evaluated, the models, each BNN against its twin (beside ``previous``'s verdict when given),
    the same ``per_column`` (each attack and eps on its own) and the models ``left_out`` with why."""
    day = (today or date.today()).isoformat()
    lines = [
        f"# Findings: BNNs against their FP twins, protocol {protocol.label}, {day}",
        "",
        f"Generated by `{command}` from the stored outcomes of each model's complete protocol run; do not edit by "
        "hand. Each difference is the BNN's mean ACC_norm minus its FP twin's over the same images, with a paired "
        "95% bootstrap interval; the verdict follows the interval (above zero: more robust, below: less robust, "
        "else not distinguishable).",
        "",
        *_protocol_lines(protocol),
        "",
        "## Models",
        "",
        "| model | checkpoint sha256 | clean accuracy | RS white-box | RS black-box | RS all | worst case | "
        "median eps*, correct images [95%] | flags |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in sorted(results, key=lambda r: r.model_name):
        sha = f"`{r.checkpoint_sha256[:12]}`" if r.checkpoint_sha256 else "-"
        clean = r.clean_acc.get(WHITE_BOX, r.clean_acc.get(BLACK_BOX, 0.0))
        lines.append(
            f"| `{r.model_name}` | {sha} | {_pct(clean)} | {r.rs.get(WHITE_BOX, 0.0):.3f} | "
            f"{r.rs.get(BLACK_BOX, 0.0):.3f} | {r.rs.get(ALL, 0.0):.3f} | "
            f"{_pct(r.worst_case.get(ALL, r.worst_case.get(WHITE_BOX, 0.0)))} | {eps_star_text(r.eps_star)} | "
            f"{', '.join(r.flags) or '-'} |"
        )
    lines += ["", "## Each BNN against its FP twin", ""]
    if not findings:
        lines.append("No BNN's protocol is complete together with its FP twin's yet.")
    else:
        label = previous.get("protocol", "earlier report") if previous is not None else None
        table, moved = _comparison_rows(findings, previous, per_column=False)
        lines += table
        counts = ", ".join(f"{v}: {n}" for v, n in verdict_counts(findings).items())
        lines += ["", f"Verdicts: {counts}."]
        if label is not None:
            lines.append(f"Verdicts that differ from {label}'s: {moved} of {len(findings)}.")
    if per_column:  # these read the table above, so they stand right under it
        lines += ["", _separating_columns(per_column) + " The attack-by-attack comparison is in the section 'Each "
                  "attack and each eps on its own' below."]
        if strongest := _autoattack_sentence(per_column, findings):
            lines += ["", strongest]
    lines += _claims_section(findings, protocol, previous)
    lines += _trained_pair_lines(findings, per_column, previous)
    if per_column:
        lines += [
            "", "## Each attack and each eps on its own", "",
            "Each row of 'Each BNN against its FP twin' averages ACC_norm over its setting's attacks (or eps "
            "values), so one attack can carry its verdict: where every iterative attack takes both networks to 0%, "
            "the single-step FGSM alone decides the white-box row, and a sweep's mean can hide opposite verdicts at "
            "small and large eps. The same comparison for each attack and each eps of the sweep, first counted over "
            "the pairs, then pair by pair:", "",
        ]
        lines += [*_column_summary(per_column), "", "Each pair:", ""]
        earlier_columns = previous if previous is not None and previous.get("per_column") else None
        table, moved = _comparison_rows(per_column, earlier_columns, per_column=True)
        lines += table
        counts = ", ".join(f"{v}: {n}" for v, n in verdict_counts(per_column).items())
        lines += ["", f"Verdicts: {counts}."]
        if earlier_columns is not None:
            label = earlier_columns.get("protocol", "earlier report")
            lines.append(f"Verdicts that differ from {label}'s: {moved} of {len(per_column)}.")
    if left_out:
        lines += ["", "## Left out", ""]
        lines += [f"- `{name}`: {why}" for name, why in sorted(left_out.items())]
    return "\n".join(lines) + "\n"


def _claim_phrase(check: ClaimCheck) -> str:
    """The claim as README names it: the direction claims carry their setting, the similarity claim gets it."""
    if check.expected == SAME_VERDICT:
        return f"{check.claim[:1].lower()}{check.claim[1:]} under {check.setting} attacks"
    return check.claim.removesuffix(" on CIFAR-10").removesuffix(" on ImageNet")


FINDINGS_BEGIN = "<!-- findings page of protocol report -->"
FINDINGS_END = "<!-- end of findings page -->"


def findings_readme_markdown(
    results: Sequence[ModelEvaluation],
    findings: Sequence[TwinComparison],
    protocol: Protocol,
    *,
    link: str,
    left_out: Mapping[str, str] | None = None,
    per_column: Sequence[TwinComparison] = (),
    today: date | None = None,
) -> str:
    """README's paragraph on the page at ``link``: what it compares, which of the paper's claims hold and (given
    ``per_column``) which attacks the verdicts rest on, so a reader sees the headline without opening the page."""
    day = (today or date.today()).isoformat()
    counts = ", ".join(f"{v} {n}" for v, n in verdict_counts(findings).items() if n)
    text = (f"**[Findings, protocol {protocol.label}, {day}]({link})**: {len(findings)} BNN-versus-twin comparisons "
            f"over the {len(results)} models whose run is complete ({counts or 'none yet'}).")
    if protocol.dataset in CLAIM_DATASETS:
        tested = [c for c in check_claims(verdicts_of(findings), protocol.dataset) if c.status != UNTESTED]
        if tested:
            claims = "; ".join(f"{_claim_phrase(c)}: {c.summary()}" for c in tested)
            text += f" The paper's claims on them: {claims}."
        else:
            text += (" None of the paper's claims is tested yet: they concern standard-trained BNNs, and none has a "
                     "complete run beside its twin.")
    if per_column:
        text += " " + _separating_columns(per_column)
        if strongest := _autoattack_sentence(per_column, findings, name_carried=False):
            text += " " + strongest
    if trained := _trained_pair_sentence(findings, per_column):
        text += " " + trained
    if left_out:
        text += f" Not complete yet: {', '.join(f'`{m}`' for m in sorted(left_out))}."
    return text


def _trained_pair_sentence(findings: Sequence[TwinComparison], per_column: Sequence[TwinComparison]) -> str:
    """README's line on the adversarially trained pairs: their verdicts alone, the page has the intervals."""
    pairs = []
    for pair in _trained_pairs(findings):
        parts = [f"{f.setting} {f.verdict}" for f in findings if (f.model, f.twin) == pair]
        if (aa := _autoattack_row(per_column, pair)) is not None:
            parts.append(f"AutoAttack alone {aa.verdict}")
        pairs.append(f"`{pair[0]}` against `{pair[1]}`: {', '.join(parts)}")
    if not pairs:
        return ""
    return "Adversarially trained pairs, outside the paper's claims: " + "; ".join(pairs) + "."
