"""``arbibench leaderboard build|serve``: turn model cards into the static site, and preview it locally."""

from __future__ import annotations

from pathlib import Path

import typer

from arbibench.files import atomic_write_text
from arbibench.leaderboard.cards import CardError, LeaderboardError, load_cards
from arbibench.leaderboard.markdown import board_markdown
from arbibench.leaderboard.ranking import build_boards
from arbibench.terminal import console

leaderboard_app = typer.Typer(help="The leaderboard site: build it from model cards, serve it locally.",
                              no_args_is_help=True)


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
        console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(
        f"built {report.out}/index.html: {report.n_cards} model cards on {len(report.boards)} leaderboard(s), "
        f"{len(report.pages) - 1} model pages, {len(report.figures)} figure files in {report.out}/figures",
        highlight=False,
        soft_wrap=True,
    )


@leaderboard_app.command()
def serve(
    dir: Path = typer.Option(Path("site"), "--dir", help="Built site folder."),  # noqa: A002
    port: int = typer.Option(8000, help="Port on 127.0.0.1 (0 picks a free one)."),
) -> None:
    """Serve the built site on http://127.0.0.1:PORT/ (local only)."""
    from arbibench.leaderboard.serve import serve as run  # start-up: only for serve

    try:
        run(dir, port)
    except (LeaderboardError, CardError) as e:
        console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


@leaderboard_app.command()
def table(
    model_info: Path = typer.Option(Path("model_info"), help="Folder of model cards (<dataset>/<threat>/<name>.json)."),
    per_attack: bool = typer.Option(True, help="Also print ACC_norm per attack."),
    out: Path | None = typer.Option(None, help="Write the markdown to this file instead of printing it."),
) -> None:
    """Print the leaderboards as GitHub markdown tables (the site's ranking), e.g. for a README."""
    try:
        boards = build_boards(load_cards(model_info))
    except (LeaderboardError, CardError) as e:
        console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    text = "\n".join(board_markdown(b, per_attack=per_attack) for b in boards)
    if out is None:
        print(text, end="")  # plain print: no wrapping or markup in the tables
        return
    atomic_write_text(text, out)
    console.print(f"wrote {out}: {len(boards)} leaderboard(s)", highlight=False)
