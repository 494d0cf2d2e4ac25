"""The leaderboard as GitHub markdown, for a README or a paper's supplement: the same ranking as the site.

RobustBench keeps its leaderboards as markdown tables beside the code; ``arbibench leaderboard table`` prints one
per (dataset, threat model) from the model cards, so a README's numbers are regenerated rather than retyped.
"""

from __future__ import annotations

from arbibench.leaderboard.cards import ModelCard
from arbibench.leaderboard.ranking import Board
from arbibench.models.zoo import ZOO

DASH = "-"


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f}%"


def _ratio(value: float | None, digits: int = 3) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def eps_star_markdown(card: ModelCard) -> str:
    """Median eps* with its 95% interval, in 1/255 for Linf (``inf``: more than half the images never fooled)."""
    if card.median_eps_star is None:
        return DASH
    scale, unit = (255.0, "/255") if card.threat_model == "Linf" else (1.0, "")

    def one(v: float | None) -> str:
        return "inf" if v is None or v == float("inf") else f"{v * scale:.2f}"

    text = f"{one(card.median_eps_star)}{unit}"
    if card.median_eps_star_ci95 is not None:
        lo, hi = card.median_eps_star_ci95
        text += f" [{one(lo)}, {one(hi)}]"
    return text


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def summary_markdown(board: Board) -> str:
    """One row per model in rank order: ACC, RS per family and overall, AutoAttack, median eps*, worst case, flags.

    A model the gradient-masking checks flagged gets a warning sign beside its rank, as on the site."""
    families = board.families
    header = ["rank", "model", "method", "ACC", *[f"RS {f}" for f in families], "RS all", "RS_mean all",
              "AutoAttack", "median eps* [95% CI]", "worst case", "flags"]
    lines = [_row(header), _row(["---", "---", "---", *["---:"] * (len(header) - 4), "---"])]
    for ranked in board.rows:
        card = ranked.card
        aa = card.autoattack_acc
        if aa is None and "autoattack" in card.attacks:
            aa = card.attacks["autoattack"].acc_star
        lines.append(_row([
            f"{ranked.rank}{' ⚠' if card.flags else ''}",
            f"`{card.name}`",
            card.method or DASH,
            _pct(card.clean_acc),
            *[_ratio(card.rs.get(f)) for f in families],
            _ratio(card.rs.get("all")),
            _ratio(card.rs_mean.get("all")),
            _pct(aa),
            eps_star_markdown(card),
            _pct(card.worst_case_acc),
            ", ".join(card.flags) or DASH,
        ]))
    return "\n".join(lines)


def acc_norm_markdown(board: Board) -> str:
    """ACC_norm per attack (columns grouped by family), one row per model in rank order."""
    attacks = [name for name, _ in board.attacks]
    lines = [_row(["model", *attacks]), _row(["---", *["---:"] * len(attacks)])]
    for ranked in board.rows:
        card = ranked.card
        cells = [_ratio(card.attacks[a].acc_norm, 2) if a in card.attacks else DASH for a in attacks]
        lines.append(_row([f"`{card.name}`", *cells]))
    return "\n".join(lines)


def replaced_checkpoints(board: Board) -> list[str]:
    """Names of the zoo models whose card records a checkpoint sha256 other than the one the zoo now pins: their
    numbers describe weights that are no longer shipped."""
    out = []
    for ranked in board.rows:
        card, entry = ranked.card, ZOO.get(ranked.card.name)
        if entry is not None and card.checkpoint_sha256 and card.checkpoint_sha256 != entry.sha256:
            out.append(f"`{card.name}`")
    return out


def board_markdown(board: Board, *, per_attack: bool = True) -> str:
    """A titled section for one leaderboard: the ranking, then (optionally) ACC_norm per attack."""
    quick = any(r.card.quick for r in board.rows)
    parts = [f"### {board.title} ({', '.join(board.eps_texts) or 'eps not given'})"]
    if quick:
        parts.append("Quick-variant results (smaller subsets and query budgets; not the full protocol).")
    parts.append(summary_markdown(board))
    replaced = replaced_checkpoints(board)
    if replaced:
        parts.append(f"Measured on checkpoints the zoo has since replaced (rerun the protocol): {', '.join(replaced)}.")
    if per_attack:
        parts += ["ACC_norm per attack:", acc_norm_markdown(board)]
    return "\n\n".join(parts) + "\n"
