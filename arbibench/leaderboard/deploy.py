"""The deploy-check cards on the leaderboard: does robustness measured on the simulation hold for the deployed BNN?

``arbibench protocol deploy-check`` writes one card per model to ``model_info/<dataset>/deploy/<name>.json``
(:mod:`arbibench.protocol.deploy_check`). This module reads them as :class:`arbibench.cards.DeployCheckCard` (no
torch) and renders the table that LEADERBOARD.md and README show: clean agreement of the deployed network with the
simulation, the share of each attack's adversarial examples that also fool it, and the query attacks run against it
directly.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path

from arbibench.cards import (
    DEPLOY_CHECK,
    ONES_PADDING,
    TEST_SET_IMAGES,
    CardError,
    DeployCheckCard,
    Interval,
    TransferToDeployment,
    check_card_files,
    read_card_json,
    stale_checkpoint,
)
from arbibench.leaderboard.cards import LeaderboardError


def load_deploy_cards(model_info: Path) -> list[DeployCheckCard]:
    """Every deploy-check card under ``model_info`` (``*/deploy/*.json``), sorted by name; a malformed one is an
    error naming the file and the field."""
    cards = []
    for path in check_card_files(model_info, DEPLOY_CHECK):
        try:
            data = read_card_json(path)
            if isinstance(data, dict) and data.get("kind") == DEPLOY_CHECK:
                cards.append(DeployCheckCard.parse(path, data))
        except CardError as e:
            raise LeaderboardError(f"{e}; run `arbibench protocol deploy-check` again") from e
    return sorted(cards, key=lambda c: c.name)


def _share(row: TransferToDeployment) -> str:
    if row.share is None or row.interval is None:
        return "-"
    low, high = row.interval
    return f"{100 * row.share:.1f}% [{100 * low:.1f}, {100 * high:.1f}] of {row.fooled_simulation}"


def _points(d: Interval) -> str:
    return f"{100 * d.value:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]"


def _current(card: DeployCheckCard, pins: Mapping[str, str]) -> bool:
    return stale_checkpoint(card, pins) is None


def deploy_markdown(cards: list[DeployCheckCard], pins: Mapping[str, str] | None = None) -> str:
    """One row per model: clean agreement (zero padding, +1 padding, all test images when measured), the attack whose
    adversarial examples transfer worst to the deployed network, and deployed minus simulation ACC* per query attack.
    A card of a checkpoint the zoo has replaced is marked."""
    pins = pins or {}
    header = ["model", "clean agreement", "pad=+1 agreement", "whole test set", "lowest transfer to deployed",
              "ACC* deployed - simulation (Square, HSJA, RayS)"]
    lines = ["| " + " | ".join(header) + " |", "| --- | ---: | ---: | ---: | --- | --- |"]
    for card in cards:
        zero, padded, full = card.clean(), card.clean(ONES_PADDING), card.clean(images=TEST_SET_IMAGES)
        transfers = [t for t in card.transfer_to_deployed if t.share is not None]
        worst = min(transfers, key=lambda t: t.share or 0.0, default=None)
        direct = ", ".join(f"{d.attack} {_points(d.difference)}" for d in card.direct_attacks)
        name = f"`{card.name}`" + ("" if _current(card, pins) else " (stale: measured replaced weights)")
        lines.append("| " + " | ".join([
            name,
            "-" if zero is None else f"{100 * zero.agreement:.2f}% of {zero.n_images}",
            "-" if padded is None else f"{100 * padded.agreement:.2f}%",
            "-" if full is None else f"{100 * full.agreement:.2f}% of {full.n_images:,}",
            "-" if worst is None else f"{worst.attack}: {_share(worst)}",
            direct or "-",
        ]) + " |")
    return "\n".join(lines)


def _span(values: list[int] | list[float], fmt: str) -> str:
    low, high = min(values), max(values)
    return format(low, fmt) if low == high else f"{format(low, fmt)}-{format(high, fmt)}"


def deploy_summary_markdown(cards: list[DeployCheckCard], pins: Mapping[str, str] | None = None) -> str:
    """README's paragraph on the deploy checks, from the cards of the checkpoints shipped now (a card of replaced
    weights is left out and named): clean agreement, how many of the simulation's adversarial examples fool the
    deployed network, the direct attacks' ACC* differences, the +1-padded network, and the verdict they support."""
    pins = pins or {}
    current = [c for c in cards if _current(c, pins)]
    stale = sorted(c.name for c in cards if not _current(c, pins))
    if not current:
        return "No deploy check has measured a checkpoint the zoo ships now."
    names = ", ".join(f"`{c.name}`" for c in current)
    zero = [row for c in current if (row := c.clean()) is not None]
    padded = [row.agreement for c in current if (row := c.clean(ONES_PADDING)) is not None]
    full = [row for c in current if (row := c.clean(images=TEST_SET_IMAGES)) is not None]
    transfers = [t for c in current for t in c.transfer_to_deployed]
    fooled = sum(t.fooled_simulation for t in transfers)
    also = sum(t.also_fool_deployed for t in transfers)
    direct = [d.difference for c in current for d in c.direct_attacks]
    excluding = sum(1 for d in direct if d.excludes_zero)
    n500 = {z.n_images for z in zero}
    text = (f"On the quick protocol's images, for {len(current)} zoo BNNs ({names}; table in "
            f"[LEADERBOARD.md](LEADERBOARD.md)): the deployed network predicts what the simulation predicts on "
            f"{_span([z.agree for z in zero], ',')} of the first {'/'.join(str(n) for n in sorted(n500))} test "
            "images")
    if full:
        text += (f" and on {_span([f.agree for f in full], ',')} of all {max(f.n_images for f in full):,}"
                 + ("" if len(full) == len(current) else f" ({len(full)} of them measured there)"))
    text += (f"; {also:,} of the {fooled:,} adversarial examples that fooled the simulation (every attack of the "
             "preset) also fool it")
    if direct:
        text += (f"; Square, HopSkipJump and RayS run against it directly leave its ACC* within "
                 f"{100 * min(d.value for d in direct):+.1f} to {100 * max(d.value for d in direct):+.1f} points of "
                 f"the simulation's, {'no' if not excluding else excluding} difference{'s' if excluding > 1 else ''} "
                 "excluding zero at 95%")
    text += "."
    if fooled and also / fooled >= 0.99 and not excluding:
        text += " So robustness measured on the simulation holds for the exact deployed network of these checkpoints."
    else:
        text += (" So robustness measured on the simulation does not carry over to the deployed network of every one "
                 "of these checkpoints: read the table.")
    if padded:
        text += (f" It does not hold for hardware that pads with +1 instead of zero: that network agrees with the "
                 f"simulation on only {_span([round(100 * a) for a in padded], 'd')}% of clean images, a different "
                 "network altogether.")
    if stale:
        text += f" Left out, their cards measured weights the zoo has replaced since: {', '.join(stale)}."
    return textwrap.fill(text, 118, break_long_words=False, break_on_hyphens=False)


DEPLOY_ANCHOR, DEPLOY_TITLE = "deployed", "Deployed network"


def deploy_section(cards: list[DeployCheckCard], pins: Mapping[str, str] | None = None) -> str:
    """The site's panel of the deploy checks: the table of :func:`deploy_markdown` as HTML; empty without cards."""
    if not cards:
        return ""
    from html import escape  # start-up: the site only

    lines = [line for line in deploy_markdown(cards, pins).splitlines() if not line.startswith("| ---")]
    rows = [[cell.strip().strip("`") for cell in line.strip("|").split(" | ")] for line in lines]
    head = "".join(f"<th>{escape(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
    return (f'<section class="panel" id="{DEPLOY_ANCHOR}"><h2>{DEPLOY_TITLE}</h2>'
            '<p class="lede">Does robustness measured on the float simulation hold for the bit-packed network that '
            "ships? Clean agreement of the two networks, the attack whose adversarial examples transfer worst to the "
            "deployed network (Wilson 95%), and Square, HSJA and RayS run against each (ACC* of the deployed minus "
            "the simulation, points, paired 95%). From <code>arbibench protocol deploy-check</code>.</p>"
            f'<div class="table-scroll"><table class="deploy"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div></section>")
