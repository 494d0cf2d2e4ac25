"""Paper figures from the leaderboards: ACC vs RS, per-attack ACC_norm heatmaps, robust accuracy vs eps curves.

Figures are built on the object-oriented matplotlib API with the Agg canvas (no pyplot, no global backend state),
and saved with fixed SVG ids and no timestamps, so rebuilding from the same cards gives the same files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib as mpl
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from arbibench.leaderboard.cards import LeaderboardError
from arbibench.leaderboard.ranking import Board, slug

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType  # matplotlib >= 3.9; annotations only

FORMATS = ("png", "svg", "pdf")
# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
STYLE: dict[RcKeyType, Any] = {  # matplotlib rc parameters, as rc_context takes them
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e3e6ea",
    "grid.linewidth": 0.6,
    "axes.edgecolor": "#59606b",
    "axes.labelcolor": "#2b2f36",
    "xtick.color": "#3d434c",
    "ytick.color": "#3d434c",
    "svg.hashsalt": "arbibench-leaderboard",
    "text.parse_math": False,  # a model name with "$" is a name, not TeX (bad TeX would fail the build)
    "svg.fonttype": "path",
    "savefig.dpi": 200,
}


@dataclass(frozen=True)
class FigureFile:
    """A written figure: its stem (``figures/heatmap_cifar10_Linf``), caption and the formats written."""

    stem: str
    caption: str
    formats: tuple[str, ...]
    board: str | None = None
    model: str | None = None  # a figure of one model's page (its name), else a board's or the site's



def parse_formats(text: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``"png,svg"`` -> ``("png", "svg")``; unknown formats are an error, not silently skipped."""
    items = text.split(",") if isinstance(text, str) else list(text)
    formats = tuple(dict.fromkeys(f.strip().lower().lstrip(".") for f in items if f.strip()))
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise LeaderboardError(f"--format must be a comma-separated list of {', '.join(FORMATS)}; got {text!r}")
    return formats


def method_colours(boards: list[Board]) -> dict[str, str]:
    """The same colour for a method in every figure."""
    methods = sorted({r.card.method or r.card.name for b in boards for r in b.rows})
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(methods)}


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _board_title(board: Board) -> str:
    eps = ", ".join(board.eps_texts)
    return f"{board.title}" + (f"  (\u03b5 = {eps})" if eps else "")


def acc_vs_rs(boards: list[Board], colours: dict[str, str]) -> Figure:
    """Clean accuracy against RS, one panel per leaderboard; a dotted line joins a BNN to its full-precision twin."""
    n = len(boards)
    cols = min(n, 2)
    rows = math.ceil(n / cols)
    fig = _new_figure(5.2 * cols, 4.0 * rows)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    for ax, board in zip(axes, boards, strict=False):
        for row in board.rows:
            card = row.card
            twin = board.find(card.fp_twin)
            if twin is not None and twin is not card:
                ax.plot([twin.clean_acc, card.clean_acc], [twin.rs["all"], card.rs["all"]], ls=":", lw=1, c="#9aa1ab")
        seen: set[str] = set()
        for row in board.rows:
            card = row.card
            key = card.method or card.name
            ax.scatter(
                card.clean_acc, card.rs["all"], s=46, color=colours[key], edgecolor="white", linewidth=0.8, zorder=3,
                marker="X" if card.unreliable else "o", label=None if key in seen else key,
            )
            seen.add(key)
            ax.annotate(card.name, (card.clean_acc, card.rs["all"]), xytext=(5, 4), textcoords="offset points",
                        fontsize=7, color="#3d434c")
        n_attacks = len(board.attacks)
        ax.set_title(_board_title(board))
        ax.set_xlabel("clean accuracy ACC (%)")
        ax.set_ylabel(f"RS  (sum of ACC_norm over {n_attacks} attack{'s' * (n_attacks != 1)})")
        ax.set_ylim(bottom=0, top=max(max(r.card.rs["all"] for r in board.rows) * 1.15, 0.1))
        ax.legend(fontsize=7, frameon=False, loc="best", title="method", title_fontsize=7)
    return fig


def heatmap(board: Board) -> Figure | None:
    """ACC_norm of every model (rows, in rank order) under every attack (columns, grouped by family)."""
    attacks = board.attacks
    if not attacks:
        return None
    names = [r.card.name for r in board.rows]
    values = np.full((len(names), len(attacks)), np.nan)
    for i, row in enumerate(board.rows):
        for j, (attack, _) in enumerate(attacks):
            if attack in row.card.attacks:
                values[i, j] = row.card.attacks[attack].acc_norm
    fig = _new_figure(max(4.5, 1.6 + 0.62 * len(attacks)), max(2.4, 1.4 + 0.34 * len(names)))
    ax = fig.subplots()
    ax.grid(False)
    cmap = mpl.colormaps["YlGnBu"].with_extremes(bad="#eceef1")
    vmax = max(1.0, float(np.nanmax(values)) if np.isfinite(values).any() else 1.0)
    im = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            v = values[i, j]
            if np.isnan(v):
                text, colour = "\u2013", "#8a919c"
            else:
                text, colour = f"{v:.2f}", ("white" if v > 0.55 * vmax else "#1f2329")
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color=colour)
    ax.set_xticks(range(len(attacks)), [a for a, _ in attacks], rotation=40, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    # Family names on a top axis (so the layout makes room for them), centred over their columns.
    families = [f for _, f in attacks]
    centres, labels, start = [], [], 0
    for j in range(1, len(families) + 1):
        if j == len(families) or families[j] != families[start]:
            centres.append((start + j - 1) / 2)
            labels.append(families[start])
            if j < len(families):
                ax.axvline(j - 0.5, color="white", lw=2.5)
            start = j
    top = ax.secondary_xaxis("top")
    top.set_xticks(centres, labels, fontsize=8, color="#59606b", fontweight="bold")
    top.tick_params(length=0)
    top.spines["top"].set_visible(False)
    ax.set_title(f"ACC_norm per attack \u2014 {_board_title(board)}")
    fig.colorbar(im, ax=ax, shrink=0.85, label="ACC_norm")
    return fig


def eps_curves(board: Board, colours: dict[str, str]) -> Figure | None:
    """Robust accuracy against the budget, one panel per swept attack; eps = 0 is the clean accuracy.

    Budgets are placed evenly (they are usually doubling: 1, 2, 4, 8, 16 /255), so the small ones stay readable.
    """
    attacks = list(dict.fromkeys(p.attack for r in board.rows for p in r.card.sweep))
    if not attacks:
        return None
    # Budgets are matched by their text ("1/255"), so 0.00392 on one card and 1/255 on another share a tick.
    budget: dict[str, float] = {"0": 0.0}
    for row in board.rows:
        for p in row.card.sweep:
            key = _eps_key(p.eps, p.eps_text)
            budget[key] = min(budget.get(key, p.eps), p.eps)
    order = sorted(budget, key=lambda k: budget[k])
    position = {k: i for i, k in enumerate(order)}
    fig = _new_figure(max(5.0, 4.2 * len(attacks)) + 1.6, 3.4)
    axes = fig.subplots(1, len(attacks), squeeze=False, sharey=True).ravel()
    for ax, attack in zip(axes, attacks, strict=True):
        for k, row in enumerate(board.rows):
            card = row.card
            points = {_eps_key(p.eps, p.eps_text): p.acc_star for p in card.sweep if p.attack == attack}
            if not points:
                continue
            points.setdefault("0", card.clean_acc)
            xs = sorted(points, key=position.__getitem__)
            ax.plot([position[x] for x in xs], [points[x] for x in xs], marker=MARKERS[k % len(MARKERS)], ms=4, lw=1.5,
                    color=colours[card.method or card.name], label=card.name)
        ax.set_title(f"{attack} \u2014 {board.title}")
        ax.set_xlabel("budget \u03b5")
        ax.set_ylim(0, 100)
        ax.set_xticks(list(position.values()), order, rotation=30 if len(position) > 6 else 0)
    axes[0].set_ylabel("robust accuracy ACC* (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="outside right center", fontsize=7, frameon=False)
    return fig


def eps_star_curve(board: Board, name: str, colours: dict[str, str]) -> Figure | None:
    """A model's robust accuracy against eps as derived from its per-image eps* (the share of images whose smallest
    fooling perturbation exceeds eps), drawn against its FP twin's curve when the twin is on the same board; where
    the cards hold the curve's low end, the band between them is the search's resolution."""
    cards = {r.card.name: r.card for r in board.rows}
    card = cards[name]
    if card.eps_star is None or not card.eps_star.curve:
        return None
    twin = cards.get(card.fp_twin) if card.fp_twin and card.fp_twin != name else None
    fig = _new_figure(5.2, 3.3)
    ax = fig.subplots()
    unit = 255 if board.threat_model == "Linf" else 1
    for k, c in enumerate([card, twin]):
        if c is None or c.eps_star is None or not c.eps_star.curve:
            continue
        points = [(p.eps * unit, p.robust_acc, p.robust_acc_low) for p in c.eps_star.curve if p.robust_acc is not None]
        colour = colours.get(c.method or c.name, PALETTE[k])
        ax.step([e for e, _, _ in points], [a for _, a, _ in points], where="post", lw=1.8 if k == 0 else 1.4,
                ls="-" if k == 0 else "--", color=colour, label=c.name + ("" if k == 0 else " (FP twin)"))
        band = [(e, a, low) for e, a, low in points if low is not None]
        if points and len(band) == len(points):  # the search's resolution, as a band under the curve
            ax.fill_between([e for e, _, _ in band], [low for _, _, low in band], [a for _, a, _ in band],
                            step="post", color=colour, alpha=0.18, lw=0)
    if card.eps is not None:
        ax.axvline(card.eps * unit, color="#8a919c", lw=0.8, ls=":")
    ax.set_xlabel("budget ε" + (" (× 1/255)" if unit == 255 else ""))
    ax.set_ylabel("robust accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_xlim(left=0)
    ax.set_title(f"{card.name}: robust accuracy from ε*")
    ax.legend(fontsize=7, frameon=False)
    return fig


def _eps_key(eps: float, text: str | None) -> str:
    return "0" if eps == 0 else (text or f"{eps:.4g}")


def save(fig: Figure, stem: Path, formats: tuple[str, ...]) -> list[Path]:
    """Write ``stem.<fmt>`` for each format without timestamps, so rebuilds are byte-stable."""
    written = []
    meta = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}}
    with mpl.rc_context(STYLE):  # savefig reads some settings (svg ids) at save time
        for fmt in formats:
            path = stem.with_name(f"{stem.name}.{fmt}")
            fig.savefig(path, format=fmt, metadata=meta[fmt], facecolor="white")
            written.append(path)
    return written


def write_figures(boards: list[Board], folder: Path, formats: tuple[str, ...]) -> list[FigureFile]:
    """All figures into ``folder``: ``acc_vs_rs``, ``heatmap_<board>``, ``eps_curves_<board>``."""
    folder.mkdir(parents=True, exist_ok=True)
    colours = method_colours(boards)
    out: list[FigureFile] = []
    with mpl.rc_context(STYLE):
        made: list[tuple[str, Figure | None, str, str | None]] = [
            ("acc_vs_rs", acc_vs_rs(boards, colours), "Clean accuracy against RS; dotted lines join a binarized "
             "model to its full-precision twin. Up and to the right is better.", None)
        ] if boards else []  # a site of corruptions cards alone has no attack leaderboard
        for board in boards:
            made.append((f"heatmap_{board.key}", heatmap(board), "ACC_norm per attack: the share of clean "
                         "accuracy that survives each attack (1 = untouched, 0 = broken).", board.key))
            made.append((f"eps_curves_{board.key}", eps_curves(board, colours), "Robust accuracy as the budget "
                         "grows; \u03b5 = 0 is the clean accuracy.", board.key))
    for name, fig, caption, key in made:
        if fig is None:
            continue
        save(fig, folder / name, formats)
        out.append(FigureFile(f"{folder.name}/{name}", caption, formats, key))
    with mpl.rc_context(STYLE):
        for board in boards:
            for row in board.rows:
                fig = eps_star_curve(board, row.card.name, colours)
                if fig is None:
                    continue
                name = f"eps_star_{board.key}_{slug(row.card.name)}"
                save(fig, folder / name, formats)
                out.append(FigureFile(
                    f"{folder.name}/{name}", "Robust accuracy against ε derived from each image's smallest "
                    "fooling perturbation ε* (step at each image's ε*); dashed: the FP twin on the same "
                    "images; dotted line: the protocol's ε.", formats, board.key, row.card.name))
    return out
