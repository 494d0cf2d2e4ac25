"""The dated findings page: ARBiBench's BNN-versus-FP-twin verdicts over stored results, as markdown for README to link.

The page is generated, never hand-edited, from ``protocol report --stored-only``: the models whose protocol is
complete in the store, each BNN paired with its FP twin on the same images. Given the JSON of an earlier report
(e.g. the quick protocol's), each verdict is set beside the earlier one, so a reader sees which conclusions the
larger protocol confirmed and which it moved. Models left out are listed with why.

Everything here is rendered from the findings document the protocol computed (:mod:`arbibench.protocol.report`,
the JSON of ``protocol report --json``): the leaderboard writes the markdown and computes nothing, so it reads the
verdicts by their names and imports no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from arbibench.cards import FAMILY_ORDER
from arbibench.leaderboard.eps_star import eps_star_separation, eps_star_text

# the verdict names of the findings document, in the order they are counted (arbibench.evaluation.findings)
MORE_ROBUST, LESS_ROBUST, NOT_DISTINGUISHABLE = "more robust", "less robust", "not distinguishable"
VERDICTS = (MORE_ROBUST, LESS_ROBUST, NOT_DISTINGUISHABLE)
WHITE_BOX, BLACK_BOX = FAMILY_ORDER
ALL = "all"  # the RS over both families
UNTESTED = "not tested"  # a claim's status where no standard-trained BNN was compared (arbibench.protocol.claims)

Row = Mapping[str, Any]  # one BNN-versus-twin comparison of the document (``TwinComparison.to_dict()``)


def verdict_counts(rows: Iterable[Row]) -> dict[str, int]:
    """How many comparisons came out each way, every verdict named (0 where none)."""
    verdicts = [r["verdict"] for r in rows]
    return {v: verdicts.count(v) for v in VERDICTS}


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def _interval(value: float, low: float, high: float) -> str:
    return f"{value:+.3f} [{low:+.3f}, {high:+.3f}]"


def _protocol_lines(label: str, setup: Mapping[str, Any]) -> list[str]:
    return [
        f"- protocol `{label}`: {setup['dataset']}, {setup['threat_model']} eps {setup['eps']}",
        f"- white-box attacks ({', '.join(setup['white_box'])}) on {setup['white_box_images']}",
        f"- black-box attacks ({', '.join(setup['black_box'])}) on {setup['black_box_images']}, "
        f"{' / '.join(setup['queries']) or '-'} queries",
        f"- eps sweep: {setup['sweep_attack']} at {', '.join(setup['sweep_eps']) or '-'} on {setup['sweep_images']} "
        "images",
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


def _comparison_rows(rows: Sequence[Row], previous: Mapping[str, Any] | None, *, per_column: bool
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
        setting = f"{f['setting']} | {f['columns'][0]}" if per_column else f"{f['setting']} ({len(f['columns'])})"
        row = (f"| `{f['model']}` | `{f['twin']}` | {setting} | {f['n_examples']} | "
               f"{f['bnn_mean_acc_norm'][0]:.3f} | {f['fp_mean_acc_norm'][0]:.3f} | {_interval(*f['difference'])} | "
               f"{f['verdict']} |")
        if label is not None:
            old = earlier.get(_row_key(f, per_column=per_column))
            if old is None:
                row += " - | - |"
            else:
                moved += old["verdict"] != f["verdict"]
                row += f" {_interval(*old['difference'])} | {old['verdict']} |"
        lines.append(row)
    return lines, moved


def _claims_section(checks: Sequence[Row] | None, earlier: Sequence[Row] | None,
                    previous: Mapping[str, Any] | None) -> list[str]:
    if checks is None:
        return []
    label = previous.get("protocol", "earlier report") if previous is not None else None
    return [
        "", "## The paper's claims on this zoo", "",
        "ARBiBench's claims for standard-trained BNNs, each read off the verdicts above: a claim about direction "
        "holds when every BNN's interval says so, partly when some do; the similarity claim holds in a setting when "
        "every BNN got the same verdict. Pairs with an adversarially trained twin are not counted.",
        "", *claims_markdown(checks, earlier, label),
    ]


def claims_markdown(checks: Sequence[Row], earlier: Sequence[Row] | None = None,
                    earlier_label: str | None = None) -> list[str]:
    """The page's section: one row per claim and setting, beside the earlier report's status when given."""
    head = "| the paper's claim | setting | predicts per BNN | BNNs | as claimed | opposite | on this zoo |"
    rule = "| --- | --- | --- | ---: | ---: | ---: | --- |"
    if earlier is not None:
        head += f" {earlier_label or 'earlier report'} |"
        rule += " --- |"
    lines = [head, rule]
    before = {(c["claim"], c["setting"]): c for c in earlier or []}
    for c in checks:
        opposite = str(c["opposite"]) if c["expected"] in VERDICTS else "-"  # the similarity claim has no opposite
        row = (f"| {c['claim']} | {c['setting']} | {c['expected']} | {c['n_models']} | {c['as_claimed']} | "
               f"{opposite} | {c['summary']} |")
        if earlier is not None:
            old = before.get((c["claim"], c["setting"]))
            row += f" {old['summary'] if old is not None else '-'} |"
        lines.append(row)
    return lines


def _separating_columns(rows: Sequence[Row]) -> str:
    """Per setting, the attacks (or eps values) under which some pair's verdict is not "not distinguishable", of all
    compared: which columns the setting's verdicts can rest on. Empty without per-column rows."""
    parts = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        columns = list(dict.fromkeys(r["columns"][0] for r in rows if r["setting"] == setting))
        separated = {r["columns"][0] for r in rows if r["setting"] == setting and r["verdict"] != NOT_DISTINGUISHABLE}
        deciding = [c for c in columns if c in separated]  # the setting's own order, not the first pair's
        parts.append(f"{setting} {', '.join(deciding) or 'none'} ({len(deciding)} of {len(columns)})")
    if not parts:
        return ""
    return ("Where a BNN and its twin differ at all (some pair's interval excludes zero), per setting: "
            + "; ".join(parts) + ".")


def _autoattack_sentence(per_column: Sequence[Row], findings: Sequence[Row], *,
                         name_carried: bool = True) -> str:
    """How the pairs fare under AutoAttack alone, and (``name_carried``) which white-box verdicts it does not back:
    the family's mean lets weak attacks (FGSM most of all, which masked gradients mislead) outvote the ensemble
    RobustBench ranks by. Empty where AutoAttack was not run."""
    rows = [r for r in per_column if r["setting"] == WHITE_BOX and r["columns"][0] == "autoattack"]
    if not rows:
        return ""
    counts = ", ".join(f"{v} {n}" for v, n in verdict_counts(rows).items() if n)
    unseparated = {(r["model"], r["twin"]) for r in rows if r["verdict"] == NOT_DISTINGUISHABLE}
    carried = [r for r in findings if r["setting"] == WHITE_BOX and r["verdict"] != NOT_DISTINGUISHABLE
               and (r["model"], r["twin"]) in unseparated]
    text = f"Under AutoAttack alone (the ensemble RobustBench ranks by), of {len(rows)} pairs: {counts}."
    if carried and name_carried:
        text += (f" For {len(carried)} of them the white-box row above says {_or(r['verdict'] for r in carried)} "
                 "while AutoAttack does not separate the two networks: that verdict comes from the weaker attacks.")
    return text


def _or(verdicts: Iterable[str]) -> str:
    """``"more robust"`` or ``"more robust" or "less robust"``: the distinct verdicts, quoted, in first-seen order."""
    return " or ".join(f'"{v}"' for v in dict.fromkeys(verdicts))


def _column_summary(rows: Sequence[Row]) -> list[str]:
    """Per setting and attack (or eps), how many BNN-twin pairs got each verdict: the zoo's answer at a glance."""
    order = list(dict.fromkeys((r["setting"], r["columns"][0]) for r in rows))
    verdicts = list(VERDICTS)
    lines = [f"| setting | attack or eps | pairs | {' | '.join(verdicts)} |",
             "| --- | --- | ---: |" + " ---: |" * len(verdicts)]
    for setting, column in order:
        counts = verdict_counts(r for r in rows if (r["setting"], r["columns"][0]) == (setting, column))
        lines.append(f"| {setting} | {column} | {sum(counts.values())} | "
                     + " | ".join(str(n) for n in counts.values()) + " |")
    return lines


def _trained_pairs(findings: Sequence[Row], standard_twins: Iterable[str]) -> list[tuple[str, str]]:
    """The (BNN, twin) pairs whose twin is not standard-trained (adversarially trained in the zoo), in report order."""
    standard = set(standard_twins)
    return list(dict.fromkeys((f["model"], f["twin"]) for f in findings if f["twin"] not in standard))


def _autoattack_row(per_column: Sequence[Row], pair: tuple[str, str]) -> Row | None:
    return next((r for r in per_column if (r["model"], r["twin"]) == pair and r["setting"] == WHITE_BOX
                 and r["columns"][0] == "autoattack"), None)


def _trained_pair_lines(findings: Sequence[Row], per_column: Sequence[Row], previous: Mapping[str, Any] | None,
                        standard_twins: Iterable[str]) -> list[str]:
    """What the page says of each adversarially trained pair: every setting's verdict with its interval (beside the
    earlier report's verdict), AutoAttack's on its own, and the white-box attacks that disagree, since there the
    family's mean can call a BNN that the strongest attack breaks "not distinguishable"."""
    earlier = _previous_verdicts(previous)
    label = previous.get("protocol", "earlier report") if previous is not None else None
    lines = []
    for pair in _trained_pairs(findings, standard_twins):
        parts = []
        for f in (f for f in findings if (f["model"], f["twin"]) == pair):
            old = earlier.get(_row_key(f, per_column=False))
            same = old is not None and old["verdict"] == f["verdict"]
            was = "" if old is None else f", {'the same' if same else old['verdict']} in {label}"
            parts.append(f"{f['setting']} {f['verdict']}, {_interval(*f['difference'])}{was}")
        if (aa := _autoattack_row(per_column, pair)) is not None:
            parts.append(f"AutoAttack alone {aa['verdict']}, {_interval(*aa['difference'])}")
        line = f"- `{pair[0]}` against `{pair[1]}`: " + "; ".join(parts) + "."
        white = [r for r in per_column if (r["model"], r["twin"]) == pair and r["setting"] == WHITE_BOX]
        by_verdict: dict[str, list[str]] = {}
        for r in white:
            if r["verdict"] != NOT_DISTINGUISHABLE:
                by_verdict.setdefault(r["verdict"], []).append(r["columns"][0])
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


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _points(d: Sequence[float]) -> str:
    """A paired difference of ratios ``[value, low, high]`` in points: ``+2.0 [+0.7, +3.7]``."""
    return f"{100 * d[0]:+.1f} [{100 * d[1]:+.1f}, {100 * d[2]:+.1f}]"


def _excludes_zero(r: Row) -> bool:
    return bool(r["difference"][1] > 0 or r["difference"][2] < 0)


def _grid_group_cells(rows: Sequence[Row]) -> list[str]:
    """One group's cells at one eps: the largest shift (model, points [95%]), how many intervals exclude zero, and
    the lowest and highest share of float examples surviving rounding."""
    if not rows:
        return ["-", "-", "-"]
    top = max(rows, key=lambda r: abs(r["difference"][0]))
    shares = [r["survival"][0] for r in rows if r["survival"] is not None]
    low, high = (min(shares), max(shares)) if shares else (None, None)
    survive = "-" if low is None or high is None else (
        f"{100 * low:.0f}%" if round(100 * low) == round(100 * high) else f"{100 * low:.0f}-{100 * high:.0f}%")
    return [f"`{top['model']}` {_points(top['difference'])}", f"{sum(map(_excludes_zero, rows))} of {len(rows)}",
            survive]


def _grid_shift_sentence(rows: Sequence[Row]) -> str:
    """Which differences exclude zero, named with their numbers, or that none does."""
    moved = [r for r in rows if _excludes_zero(r)]
    models = list(dict.fromkeys(r["model"] for r in rows))
    if not moved:
        return (f"No model's ACC* on the grid differs from its float ACC* beyond the 95% interval at any eps "
                f"({len(models)} models): on these images the 8-bit grid does not measurably change the robustness "
                f"of the BNNs{' or of their FP twins' if any(r['twin'] is None for r in rows) else ''}.")
    parts = []
    for label, group in (("BNNs", [r for r in moved if r["twin"] is not None]),
                         ("FP twins", [r for r in moved if r["twin"] is None])):
        named = ", ".join(f"`{r['model']}` at {r['eps_text']} {_points(r['difference'])}" for r in group)
        parts.append(f"{label}: {named or 'none'}")
    return (f"The grid moves ACC* beyond the 95% interval in {len(moved)} of {len(rows)} model-eps pairs ("
            + "; ".join(parts) + ", in points; positive: more robust on the grid); every other difference is within "
            "its interval. Each interval is one model's own: the page does not test whether the grid moves a BNN more "
            "than its twin.")


def _grid_survival_sentence(rows: Sequence[Row], eps: Sequence[str]) -> str:
    """Where the share of float examples surviving rounding separates every BNN from every FP twin (Wilson 95%
    intervals apart), and in which direction; empty without both groups."""
    if not any(r["twin"] is None for r in rows) or not any(r["twin"] is not None for r in rows):
        return ""
    apart: dict[str, list[str]] = {"fewer": [], "more": []}
    for e in eps:
        bnn = [r["survival"] for r in rows if r["eps_text"] == e and r["twin"] is not None and r["survival"]]
        fp = [r["survival"] for r in rows if r["eps_text"] == e and r["twin"] is None and r["survival"]]
        if not bnn or not fp:
            continue
        if max(b[2] for b in bnn) < min(f[1] for f in fp):
            apart["fewer"].append(e)
        elif min(b[1] for b in bnn) > max(f[2] for f in fp):
            apart["more"].append(e)
    if not apart["fewer"] and not apart["more"]:
        return ("The share of float adversarial examples that survive rounding does not separate the BNNs from the FP "
                "twins at any eps (their Wilson 95% intervals overlap).")
    text = []
    for way, undoes in (("fewer", "more"), ("more", "fewer")):
        if apart[way]:
            text.append(f"At {', '.join(apart[way])}, rounding to 8 bits undoes {undoes} of every BNN's float "
                        f"adversarial examples than of any FP twin's (Wilson 95% intervals apart)")
    return "; ".join(text) + "."


def _grid_section(document: Mapping[str, Any]) -> list[str]:
    """What the 8-bit grid changes for the compared BNNs and their FP twins, from their grid-check cards; nothing
    where the report read none."""
    rows, stale = document.get("grid"), document.get("grid_stale") or []
    if rows is None:
        return []
    lines = ["", "## On 8-bit inputs", ""]
    gone = "Left out, their grid-check cards measured weights the zoo has replaced since: " + ", ".join(
        f"`{m}`" for m in stale) + "; rerun `arbibench protocol grid-check --model-info`."
    if not rows:
        return [*lines, gone]
    eps = list(dict.fromkeys(r["eps_text"] for r in rows))
    n_bnn = len({r["model"] for r in rows if r["twin"] is not None})
    n_fp = len({r["model"] for r in rows if r["twin"] is None})
    attacks = ", ".join(sorted({r["attack"] for r in rows}))
    images = "/".join(str(n) for n in sorted({r["n_images"] for r in rows}))
    lines += [
        f"What the grid of 8-bit images (pixels k/255, as a camera, a PNG file or a deployed first layer gives them) "
        f"changes, from the grid checks of {_plural(n_bnn, 'BNN')} and {_plural(n_fp, 'FP twin')} compared above "
        "(`arbibench protocol "
        f"grid-check`: {attacks} on the first {images} test images, not this protocol's images or attacks). Per eps "
        "and group: the model whose ACC* on the grid lies furthest from its float ACC* (grid - float in points, "
        "paired 95% bootstrap interval), how many of the group's intervals exclude zero, and the lowest and highest "
        "share of float adversarial examples that still fool once rounded to 8 bits.",
        "",
        "| eps | BNNs: largest grid - float | excluding 0 | surviving rounding | FP twins: largest grid - float | "
        "excluding 0 | surviving rounding |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: |",
    ]
    for e in eps:
        at = [r for r in rows if r["eps_text"] == e]
        cells = [*_grid_group_cells([r for r in at if r["twin"] is not None]),
                 *_grid_group_cells([r for r in at if r["twin"] is None])]
        lines.append(f"| {e} | " + " | ".join(cells) + " |")
    lines += ["", _grid_shift_sentence(rows)]
    if survival := _grid_survival_sentence(rows, eps):
        lines += ["", survival]
    if stale:
        lines += ["", gone]
    return lines


def _models_section(models: Sequence[Row]) -> list[str]:
    """One row per model: checkpoint, clean accuracy, RS per family and overall, worst case, eps*, flags."""
    lines = [
        "## Models",
        "",
        "| model | checkpoint sha256 | clean accuracy | RS white-box | RS black-box | RS all | worst case | "
        "median eps*, correct images [95%] | flags |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in models:
        sha = f"`{r['checkpoint_sha256'][:12]}`" if r["checkpoint_sha256"] else "-"
        lines.append(
            f"| `{r['model']}` | {sha} | {_pct(r['clean_acc'])} | {r['rs'][WHITE_BOX]:.3f} | "
            f"{r['rs'][BLACK_BOX]:.3f} | {r['rs'][ALL]:.3f} | "
            f"{_pct(r['worst_case'])} | {eps_star_text(r['eps_star'])} | "
            f"{', '.join(r['flags']) or '-'} |"
        )
    return lines


def _eps_star_separation(models: Sequence[Row], findings: Sequence[Row]) -> str:
    """Whether the models table's median eps* tells apart the BNNs compared with one twin (disjoint 95% intervals
    of the correct-image median), as the leaderboard says it under each ranking."""
    intervals = {r["model"]: (r["eps_star"] or {}).get("median_eps_star_correct_ci95") for r in models}
    pairs = dict.fromkeys((f["model"], f["twin"]) for f in findings)
    return eps_star_separation((bnn, twin, *ci) for bnn, twin in pairs if (ci := intervals.get(bnn)) is not None)


def findings_markdown(
    document: Mapping[str, Any],
    *,
    command: str,
    previous: Mapping[str, Any] | None = None,
    earlier_claims: Sequence[Row] | None = None,
) -> str:
    """The page of ``document`` (:func:`arbibench.protocol.report.findings_document`): what was evaluated, the
    models, each BNN against its twin (beside ``previous``'s verdict, and its claims ``earlier_claims``, when given),
    what the 8-bit grid changes for them (where the document read grid-check cards), the same each attack and eps on
    its own, and the models left out with why."""
    findings, per_column, left_out = document["findings"], document["per_column"], document["left_out"]
    lines = [
        f"# Findings: BNNs against their FP twins, protocol {document['protocol']}, {document['date']}",
        "",
        f"Generated by `{command}` from the stored outcomes of each model's complete protocol run; do not edit by "
        "hand. Each difference is the BNN's mean ACC_norm minus its FP twin's over the same images, with a paired "
        "95% bootstrap interval; the verdict follows the interval (above zero: more robust, below: less robust, "
        "else not distinguishable).",
        "",
        *_protocol_lines(document["protocol"], document["setup"]),
        "",
        *_models_section(document["models"]),
    ]
    if separation := _eps_star_separation(document["models"], findings):
        lines += ["", separation]
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
    lines += _claims_section(document["claims"], earlier_claims, previous)
    lines += _trained_pair_lines(findings, per_column, previous, document["standard_twins"])
    lines += _grid_section(document)
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


def _claim_phrase(check: Row) -> str:
    """The claim as README names it: the direction claims carry their setting, the similarity claim gets it."""
    claim: str = check["claim"]
    if check["expected"] not in VERDICTS:  # one verdict for every BNN: the similarity claim
        return f"{claim[:1].lower()}{claim[1:]} under {check['setting']} attacks"
    return claim.removesuffix(" on CIFAR-10").removesuffix(" on ImageNet")


FINDINGS_BEGIN = "<!-- findings page of protocol report -->"
FINDINGS_END = "<!-- end of findings page -->"


def findings_readme_markdown(document: Mapping[str, Any], *, link: str) -> str:
    """README's paragraph on the page of ``document`` at ``link``: what it compares, which of the paper's claims
    hold and (given per-column rows) which attacks the verdicts rest on, so a reader sees the headline without
    opening the page."""
    findings, per_column, left_out = document["findings"], document["per_column"], document["left_out"]
    counts = ", ".join(f"{v} {n}" for v, n in verdict_counts(findings).items() if n)
    text = (f"**[Findings, protocol {document['protocol']}, {document['date']}]({link})**: {len(findings)} "
            f"BNN-versus-twin comparisons over the {len(document['models'])} models whose run is complete "
            f"({counts or 'none yet'}).")
    if document["claims"] is not None:
        tested = [c for c in document["claims"] if c["status"] != UNTESTED]
        if tested:
            claims = "; ".join(f"{_claim_phrase(c)}: {c['summary']}" for c in tested)
            text += f" The paper's claims on them: {claims}."
        else:
            text += (" None of the paper's claims is tested yet: they concern standard-trained BNNs, and none has a "
                     "complete run beside its twin.")
    if per_column:
        text += " " + _separating_columns(per_column)
        if strongest := _autoattack_sentence(per_column, findings, name_carried=False):
            text += " " + strongest
    if trained := _trained_pair_sentence(findings, per_column, document["standard_twins"]):
        text += " " + trained
    if left_out:
        text += f" Not complete yet: {', '.join(f'`{m}`' for m in sorted(left_out))}."
    return text


def _trained_pair_sentence(findings: Sequence[Row], per_column: Sequence[Row], standard_twins: Iterable[str]) -> str:
    """README's line on the adversarially trained pairs: their verdicts alone, the page has the intervals."""
    pairs = []
    for pair in _trained_pairs(findings, standard_twins):
        parts = [f"{f['setting']} {f['verdict']}" for f in findings if (f["model"], f["twin"]) == pair]
        if (aa := _autoattack_row(per_column, pair)) is not None:
            parts.append(f"AutoAttack alone {aa['verdict']}")
        pairs.append(f"`{pair[0]}` against `{pair[1]}`: {', '.join(parts)}")
    if not pairs:
        return ""
    return "Adversarially trained pairs, outside the paper's claims: " + "; ".join(pairs) + "."


def replaced_weights(document: dict[str, Any], shipped: dict[str, str]) -> list[str]:
    """One line per model of a findings document (``protocol report --json``) measured at weights other than the
    ones shipped now: its paragraph in README would speak for checkpoints a reader can no longer download."""
    lines = []
    for row in document.get("models", []):
        now = shipped.get(str(row.get("model")))
        measured = str(row.get("checkpoint_sha256") or "")
        if now is not None and measured != now:
            lines.append(f"{row['model']} at {measured[:12] or 'unknown weights'}, shipped {now[:12]}")
    return lines
