"""Build the static leaderboard site, atomically: everything is written into a temporary folder beside ``out`` and
swapped in by rename at the end, so a failed build leaves the previous site (or nothing), never half of one.

Layout::

    index.html                       leaderboards, figures, metric definitions
    figures/<name>.<fmt>             paper figures (acc_vs_rs, heatmap_<board>, eps_curves_<board>)
    models/<board>/<model>.html      one page per model; <model>.json is its card, <model>/ its example images
    .arbibench-site                  marks the folder as ours, so a rebuild may replace it
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from arbibench.cards import CLASS_NAMES, CorruptionCard, DeployCheckCard, shipped_sha256
from arbibench.faults import fault_point
from arbibench.files import pid_alive
from arbibench.leaderboard.cards import LeaderboardError, load_cards
from arbibench.leaderboard.corruptions import corruption_section, load_corruption_cards, write_corruption_figures
from arbibench.leaderboard.deploy import DEPLOY_ANCHOR, DEPLOY_TITLE, deploy_section, load_deploy_cards
from arbibench.leaderboard.examples import write_examples
from arbibench.leaderboard.figures import FigureFile, parse_formats, write_figures
from arbibench.leaderboard.pages import index_html, model_href, model_html
from arbibench.leaderboard.ranking import DATASET_NAMES, Board, build_boards
from arbibench.version import __version__

MARKER = ".arbibench-site"


@dataclass(frozen=True)
class BuildReport:
    """What a build produced."""

    out: Path
    n_cards: int
    boards: list[str]
    figures: list[Path]
    pages: list[Path]


def _class_names(dataset: str) -> tuple[str, ...] | None:
    return CLASS_NAMES.get(dataset.lower().replace("-", ""))


def _check_replaceable(out: Path) -> None:
    """Refuse to replace anything that is not a site from an earlier build (``--out .`` must not wipe a repo)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise LeaderboardError(f"output {out} exists and is not a folder")
    if any(out.iterdir()) and not (out / MARKER).is_file():
        raise LeaderboardError(
            f"refusing to replace {out}: it is not empty and was not built by `arbibench leaderboard build` "
            f"(no {MARKER} file); remove it or choose another --out"
        )


def _write_site(
    root: Path, boards: list[Board], formats: tuple[str, ...], n_cards: int,
    corruption_cards: list[CorruptionCard] | None = None,
    deploy_cards: list[DeployCheckCard] | None = None,
) -> BuildReport:
    figures: list[FigureFile] = write_figures(boards, root / "figures", formats)
    corruption_cards = corruption_cards or []
    figures += write_corruption_figures(corruption_cards, root / "figures", formats)
    pages = []
    for board in boards:
        classes = _class_names(board.dataset)
        for ranked in board.rows:
            card = ranked.card
            page = root / model_href(board, card)
            page.parent.mkdir(parents=True, exist_ok=True)
            examples = write_examples(card.examples, page.with_suffix(""), root) if card.examples else None
            page.write_text(model_html(board, ranked, examples, classes, figures), encoding="utf-8")
            page.with_suffix(".json").write_text(json.dumps(card.raw, indent=2) + "\n", encoding="utf-8")
            pages.append(page)
            fault_point("site.page")  # crash tests kill here, the site half written (arbibench.faults)
    index = root / "index.html"
    corruption_boards = tuple((f"{d}_corruptions", f"{DATASET_NAMES.get(d, d)} \u00b7 corruptions")
                              for d in sorted({c.dataset for c in corruption_cards}))
    panels = corruption_section(corruption_cards, figures)
    if deploy_cards:  # the deploy checks' panel follows the corruptions, with its own entry in the navigation
        panels += deploy_section(deploy_cards, shipped_sha256())
        corruption_boards += ((DEPLOY_ANCHOR, DEPLOY_TITLE),)
    index.write_text(index_html(boards, figures, n_cards, __version__, panels, corruption_boards), encoding="utf-8")
    (root / MARKER).write_text("built by arbibench leaderboard build; safe to delete with the site\n")
    written = [root / f"{f.stem}.{fmt}" for f in figures for fmt in f.formats]
    return BuildReport(root, n_cards, [b.key for b in boards], written, [index, *pages])


def _swap_in(tmp: Path, out: Path) -> None:
    """Put ``tmp`` at ``out``; the old site, if any, is moved aside first and deleted only after the swap."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
        out.rename(old)
    fault_point("site.swap")  # crash tests kill here: old site aside, new one not in place (arbibench.faults)
    try:
        tmp.rename(out)
    except OSError:
        if old is not None:
            old.rename(out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _remove_leftovers(out: Path) -> None:
    """Delete what a killed build left beside ``out``: its temporary folder, or the old site moved aside.

    A build's temporary folder carries its process id, so only folders of processes no longer alive are removed
    (a build running at the same time keeps its own).
    """
    for leftover in out.parent.glob(f".{out.name}.*"):
        kind, _, rest = leftover.name[len(out.name) + 2 :].partition("-")
        if kind == "old":
            shutil.rmtree(leftover, ignore_errors=True)
        elif kind == "building" and rest.partition("-")[0].isdigit() and not pid_alive(int(rest.partition("-")[0])):
            shutil.rmtree(leftover, ignore_errors=True)



def build_site(model_info: Path | str, out: Path | str, formats: str | tuple[str, ...] = ("png", "svg")) -> BuildReport:
    """Read the cards under ``model_info`` and write the site to ``out`` (replacing an earlier build there)."""
    fmts = parse_formats(formats)
    cards = load_cards(Path(model_info))
    corruption_cards = load_corruption_cards(Path(model_info))
    out = Path(out).absolute()
    _check_replaceable(out)
    boards = build_boards(cards)
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-{os.getpid()}-", dir=out.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a served site must be readable
        report = _write_site(tmp, boards, fmts, len(cards) + len(corruption_cards), corruption_cards,
                             load_deploy_cards(Path(model_info)))
        _swap_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    figures = [out / p.relative_to(tmp) for p in report.figures]
    return BuildReport(out, report.n_cards, report.boards, figures, [out / p.relative_to(tmp) for p in report.pages])
