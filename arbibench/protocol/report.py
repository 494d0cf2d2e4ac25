"""The findings report, computed: one JSON document per ``protocol report`` holding every number its page and README
paragraph show, so that the leaderboard renders them (:mod:`arbibench.leaderboard.findings`) without the protocol.

The document is what ``protocol report --json`` writes: the fields of :class:`arbibench.cards.FindingsDocument`
(``protocol``, ``findings``, ``per_column``: what an earlier report's ``--compare`` reads), then what the page
reads: the date, the preset's setup, one row per model, the paper's claims checked on the verdicts, the twins that
are standard-trained (the pairs the claims speak of), the models left out with why, and the page it was written to.
Where the compared models have grid-check cards, ``grid`` holds each one's ACC* in float and on the 8-bit grid per eps
(:func:`grid_findings`), so the page can say what the grid changes for the BNNs and for their twins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from datetime import date
from pathlib import Path
from typing import Any

from arbibench.cards import FindingsDocument, GridCheckCard, GridFinding, Interval, stale_checkpoint
from arbibench.evaluation.findings import TwinComparison
from arbibench.protocol.claims import (
    CLAIM_DATASETS,
    Verdict,
    check_claims,
    standard_twin,
    verdicts_from_json,
    verdicts_of,
)
from arbibench.protocol.presets import BLACK_BOX, WHITE_BOX, Protocol
from arbibench.protocol.run import ALL, ModelEvaluation


def claim_rows(verdicts: Sequence[Verdict], dataset: str) -> list[dict[str, Any]] | None:
    """The paper's claims for ``dataset`` read off ``verdicts``, each with its summary; None where the paper makes no
    claim about the dataset."""
    if dataset not in CLAIM_DATASETS:
        return None
    return [{**asdict(c), "summary": c.summary()} for c in check_claims(verdicts, dataset)]


def earlier_claims(previous: Mapping[str, Any], dataset: str) -> list[dict[str, Any]] | None:
    """The claims as an earlier report's ``--json`` (e.g. the quick protocol's) reads them."""
    return claim_rows(verdicts_from_json(previous), dataset)


def _setup(protocol: Protocol) -> dict[str, Any]:
    """What was evaluated: the threat, each family's attacks and images, the query budgets, the eps sweep."""
    budgets = sorted({str(s.kwargs["max_queries"]) for s in protocol.black_box if "max_queries" in s.kwargs})
    return {
        "dataset": protocol.dataset, "threat_model": protocol.threat_model, "eps": protocol.eps_text,
        "white_box": [s.name for s in protocol.white_box], "white_box_images": protocol.subset_text(WHITE_BOX),
        "black_box": [s.name for s in protocol.black_box], "black_box_images": protocol.subset_text(BLACK_BOX),
        "queries": budgets, "sweep_attack": protocol.sweep_attack, "sweep_eps": list(protocol.sweep_eps),
        "sweep_images": protocol.n_sweep,
    }


def _model_row(r: ModelEvaluation) -> dict[str, Any]:
    """One model's line of the page: checkpoint, clean accuracy, RS per family and overall, worst case, eps*, flags."""
    return {
        "model": r.model_name, "checkpoint_sha256": r.checkpoint_sha256,
        "clean_acc": r.clean_acc.get(WHITE_BOX, r.clean_acc.get(BLACK_BOX, 0.0)),
        "rs": {f: r.rs.get(f, 0.0) for f in (WHITE_BOX, BLACK_BOX, ALL)},
        "worst_case": r.worst_case.get(ALL, r.worst_case.get(WHITE_BOX, 0.0)),
        "eps_star": r.eps_star, "flags": list(r.flags),
    }


def grid_findings(cards: Iterable[GridCheckCard], pairs: Iterable[tuple[str, str]], dataset: str,
                  pins: Mapping[str, str]) -> tuple[list[GridFinding], list[str]]:
    """The grid-check rows of the compared models (``pairs``: (BNN, FP twin)) on ``dataset``, BNNs first, and the
    names of those whose card measured weights the zoo has replaced (``pins``: name -> shipped sha256), left out."""
    roles: dict[str, str | None] = dict(pairs)  # a BNN -> its twin, an FP twin -> None
    roles.update({t: None for t in list(roles.values()) if t is not None and t not in roles})
    chosen = [c for c in cards if c.dataset == dataset and c.name in roles]
    stale = sorted(c.name for c in chosen if stale_checkpoint(c, pins) is not None)
    rows = []
    for card in sorted((c for c in chosen if c.name not in stale), key=lambda c: (roles[c.name] is None, c.name)):
        for r in card.rows:
            rows.append(GridFinding(
                model=card.name, twin=roles[card.name], eps_text=r.eps_text, attack=card.attack_name,
                n_images=r.n_images, acc_float=r.acc_float.value, acc_grid=r.acc_grid.value,
                difference=r.difference, float_fooled=r.float_fooled, survived=r.survived,
                survival=None if r.survival is None else Interval(value=r.survival.value, low=r.survival.low,
                                                                  high=r.survival.high),
            ))
    return rows, stale


def findings_document(
    results: Sequence[ModelEvaluation],
    findings: Sequence[TwinComparison],
    protocol: Protocol,
    *,
    per_column: Sequence[TwinComparison] = (),
    left_out: Mapping[str, str] | None = None,
    page: Path | None = None,
    today: date | None = None,
    grid_cards: Sequence[GridCheckCard] = (),
    pins: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The report of ``results``: each BNN against its twin (``findings``, and ``per_column`` each attack and eps on
    its own) with all the page needs; ``page`` is where its markdown goes, for README's link. ``grid_cards``: the
    grid checks to read for the compared models (``pins``: which checkpoints ship now); none, no ``grid``."""
    twins = {f.twin for f in (*findings, *per_column)}
    pairs = [(f.model, f.twin) for f in findings]
    grid, grid_stale = grid_findings(grid_cards, pairs, protocol.dataset, pins or {})
    return FindingsDocument(
        protocol=protocol.label, findings=tuple(f.to_row() for f in findings),
        per_column=tuple(f.to_row() for f in per_column),
        grid=tuple(grid) if grid or grid_stale else None,
        grid_stale=tuple(grid_stale) if grid or grid_stale else None,
        date=(today or date.today()).isoformat(),
        setup=_setup(protocol),
        models=tuple(_model_row(r) for r in sorted(results, key=lambda r: r.model_name)),
        claims=None if (claims := claim_rows(verdicts_of(findings), protocol.dataset)) is None else tuple(claims),
        standard_twins=tuple(sorted(t for t in twins if standard_twin(t))),
        left_out=dict(sorted((left_out or {}).items())),
        page=None if page is None else page.as_posix(),
    ).to_dict()
