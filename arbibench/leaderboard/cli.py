"""``arbibench leaderboard build|serve|table|markdown``: turn model cards into the static site, preview it locally,
and write the markdown leaderboards (``LEADERBOARD.md``).

The cards are read by the card schema (:mod:`arbibench.cards`); which checkpoints the zoo ships comes from the pin file
(:func:`arbibench.cards.shipped_sha256`) and the checkpoint cards (:mod:`arbibench.models.markdown`), both torch-free,
so no command here loads torch."""

from __future__ import annotations

import json
import os
import re
from datetime import date as date_cls
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import typer

from arbibench.cards import shipped_sha256
from arbibench.evaluation.cli import check_outputs
from arbibench.files import atomic_write_text
from arbibench.leaderboard.cards import CardError, LeaderboardError, load_cards
from arbibench.leaderboard.findings import (
    FINDINGS_BEGIN,
    FINDINGS_END,
    findings_readme_markdown,
    replaced_weights,
)
from arbibench.leaderboard.markdown import (
    DEPLOY_BEGIN,
    DEPLOY_END,
    ZOO_BEGIN,
    ZOO_END,
    board_markdown,
    leaderboard_document,
    with_block,
    with_top_rows,
)
from arbibench.leaderboard.ranking import build_boards
from arbibench.models.markdown import shipped_cards, zoo_markdown, zoo_readme_markdown
from arbibench.terminal import FILE_METAVAR, USER_ERRORS, console, fail, output_file
from arbibench.train.paper_recipes import paper_epochs

leaderboard_app = typer.Typer(
    help="The leaderboard site and markdown: build them from model cards, serve the site locally.",
    no_args_is_help=True,
)


@leaderboard_app.command()
def build(
    model_info: Path = typer.Option(Path("model_info"), help="Folder of model cards (<dataset>/<threat>/<name>.json)."),
    out: Path = typer.Option(Path("site"), help="Site folder; replaced atomically by the new build."),
    format: str = typer.Option("png,svg", "--format", help="Figure file formats, comma-separated: png, svg, pdf."),  # noqa: A002
) -> None:
    """Build the static leaderboard site and the paper figures (OUT/figures/)."""
    from arbibench.leaderboard.site import build_site  # start-up: matplotlib only for a build

    try:
        report = build_site(model_info, out, format)
    except (LeaderboardError, CardError) as e:
        fail(e)
    console.print(
        f"built {report.out}/index.html: {report.n_cards} model cards on {len(report.boards)} leaderboard(s), "
        f"{len(report.pages) - 1} model pages, {len(report.figures)} figure files in {report.out}/figures",
        highlight=False,
        soft_wrap=True,
    )


@leaderboard_app.command()
def serve(
    dir: Path = typer.Option(Path("site"), "--dir", help="Built site folder."),  # noqa: A002
    port: int = typer.Option(8000, min=0, max=65535, help="Port on 127.0.0.1 (0 picks a free one)."),
) -> None:
    """Serve the built site on http://127.0.0.1:PORT/ (local only)."""
    from arbibench.leaderboard.serve import serve as run  # start-up: only for serve

    try:
        run(dir, port)
    except (LeaderboardError, CardError) as e:
        fail(e)


@leaderboard_app.command()
def table(
    model_info: Path = typer.Option(Path("model_info"), help="Folder of model cards (<dataset>/<threat>/<name>.json)."),
    per_attack: bool = typer.Option(True, help="Also print ACC_norm per attack."),
    out: Path | None = typer.Option(None, parser=output_file, metavar=FILE_METAVAR,
                                    help="Write the markdown to this file instead of printing it."),
) -> None:
    """Print the leaderboards as GitHub markdown tables (the site's ranking), e.g. for a README."""
    check_outputs(("--out", out))
    try:
        boards = build_boards(load_cards(model_info))
    except (LeaderboardError, CardError) as e:
        fail(e)
    pins = shipped_sha256()
    text = "\n".join(board_markdown(b, per_attack=per_attack, pins=pins) for b in boards)
    if out is None:
        print(text, end="")  # plain print: no wrapping or markup in the tables
        return
    try:
        atomic_write_text(text, out)
    except OSError as e:
        fail(e)
    console.print(f"wrote {out}: {len(boards)} leaderboard(s)", highlight=False)


@leaderboard_app.command()
def markdown(
    out: Path = typer.Option(Path("LEADERBOARD.md"), parser=output_file, metavar=FILE_METAVAR,
                             help="The file to write (atomically)."),
    model_info: Path = typer.Option(Path("model_info"), help="Folder of model cards (<dataset>/<threat>/<name>.json)."),
    date: str | None = typer.Option(None, help="The date the provenance paragraph names, YYYY-MM-DD; default today "
                                    "(UTC)."),
    readme: Path | None = typer.Option(None, help="Also copy the top rows of the ranking into this README, between its "
                                       "'top rows of LEADERBOARD.md' markers; where it has them, also the short zoo "
                                       "table between its 'zoo table' markers and the deploy-check findings between "
                                       "its 'deploy checks' markers."),
    findings: Path | None = typer.Option(None, help="With --readme: the --json of `arbibench protocol report "
                                         "--markdown PAGE`; its paragraph linking PAGE (what it compares, which of "
                                         "the paper's claims hold) goes between README's 'findings page' markers."),
) -> None:
    """Write LEADERBOARD.md: every leaderboard with ACC_norm per attack, the corruptions, deploy-check and 8-bit
    grid-check tables where such cards exist, the zoo table and one dated provenance paragraph (checkpoint sha256s,
    protocol size, where the models were trained), all from the cards."""
    day = date or datetime.now(timezone.utc).date().isoformat()
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", day):
            raise ValueError(f"--date {day!r}: give the date as YYYY-MM-DD")
        try:
            date_cls.fromisoformat(day)
        except ValueError as e:
            raise ValueError(f"--date {day!r} is no calendar date ({e}); give the date as YYYY-MM-DD") from None
        from arbibench.leaderboard.corruptions import load_corruption_cards  # start-up: it loads matplotlib
        from arbibench.leaderboard.deploy import (  # start-up: beside the corruption cards
            deploy_summary_markdown,
            load_deploy_cards,
        )
        from arbibench.leaderboard.grid import load_grid_cards  # start-up: beside the corruption cards

        boards = build_boards(load_cards(model_info))
        text = leaderboard_document(boards, zoo_markdown(), shipped_cards(), shipped_sha256(), day,
                                    load_corruption_cards(model_info), load_deploy_cards(model_info),
                                    load_grid_cards(model_info), model_info.resolve().name)
        readme_text = None
        document = None if findings is None else _findings_document(findings, readme)
        paragraph = (None if document is None or readme is None
                     else findings_readme_markdown(document, link=_page_link(document, readme)))
        if readme is not None:
            readme_text = with_block(with_top_rows(readme.read_text(encoding="utf-8"), boards), ZOO_BEGIN, ZOO_END,
                                     zoo_readme_markdown(paper_epochs=paper_epochs()))
            readme_text = with_block(readme_text, DEPLOY_BEGIN, DEPLOY_END,
                                     deploy_summary_markdown(load_deploy_cards(model_info), shipped_sha256()))
            if paragraph is not None:
                readme_text = _with_findings(readme_text, paragraph)
        atomic_write_text(text, out)
        if readme is not None and readme_text is not None:
            atomic_write_text(readme_text, readme)
    except USER_ERRORS as e:
        fail(e)
    console.print(f"wrote {out}: {len(boards)} leaderboard(s) and the zoo table"
                  + ("" if readme is None else f"; the top rows in {readme}")
                  + ("" if findings is None else f", with the findings paragraph of {findings}"), highlight=False)
    for line in [] if document is None else replaced_weights(document, shipped_sha256()):
        console.print(f"[yellow]the findings page measured replaced weights[/]: {line}; regenerate it (`arbibench "
                      "protocol report ... --stored-only --markdown PAGE --json FILE`) once their full run is stored",
                      highlight=False)


def _page_link(document: dict[str, Any], readme: Path) -> str:
    """The findings page of ``document``, relative to the README that links it."""
    return Path(os.path.relpath(Path(document["page"]).resolve(), readme.resolve().parent)).as_posix()


def _findings_document(path: Path, readme: Path | None) -> dict[str, Any]:
    """The findings document (``protocol report --json``) at ``path``, checked to be one that names its page."""
    if readme is None:
        raise ValueError(f"--findings {path} writes a paragraph into a README: pass --readme too (e.g. --readme "
                         "README.md)")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"--findings {path}: cannot read it as JSON ({e}); pass the --json of `arbibench protocol "
                         "report`") from None
    if not isinstance(document, dict) or not document.get("page") or "claims" not in document:
        raise ValueError(f"--findings {path}: not the --json of `arbibench protocol report --markdown PAGE` (it "
                         "names no page); write it again with both --markdown and --json")
    return document


def _with_findings(readme: str, paragraph: str) -> str:
    """``readme`` with the findings paragraph between its markers, which --findings needs once each."""
    if readme.count(FINDINGS_BEGIN) != 1 or readme.count(FINDINGS_END) != 1:
        raise ValueError(f"--findings: README must hold the markers {FINDINGS_BEGIN} and {FINDINGS_END} once each, "
                         "around the paragraph to write")
    return with_block(readme, FINDINGS_BEGIN, FINDINGS_END, paragraph)
