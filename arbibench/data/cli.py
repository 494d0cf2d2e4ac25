"""``arbibench corruptions generate|download``: the data package owns its CIFAR-10-C commands; ``arbibench/cli.py``
only wires them in."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import Progress

from arbibench.evaluation.cli import check_data_dir
from arbibench.terminal import USER_ERRORS, comma_list, console, fail


def data_errors() -> tuple[type[Exception], ...]:
    """What the corruption commands report as one line; looked up when a command runs (the data package loads
    torch, which ``--help`` must not)."""
    from arbibench.data.download import DownloadError  # start-up: the data package loads torch

    return (*USER_ERRORS, DownloadError, FileExistsError)

corruptions_app = typer.Typer(
    help="CIFAR-10-C common corruptions: regenerate them from CIFAR-10 or download the official files.",
    no_args_is_help=True,
)


@corruptions_app.command("generate")
def corruptions_generate(
    n_examples: int = typer.Option(1000, "--n-examples", "-n", help="First N CIFAR-10 test images (10000: all)."),
    seed: int = typer.Option(0, help="Seed of the random corruptions; the same seed gives the same bytes."),
    data_dir: Path | None = typer.Option(None, help="Data folder holding CIFAR-10; default $ARBIBENCH_DATA or "
                                         "~/.cache/arbibench. The set goes to DATA_DIR/CIFAR-10-C."),
    out: Path | None = typer.Option(None, help="Write the set here instead of DATA_DIR/CIFAR-10-C."),
    corruptions: str = typer.Option("all", help="Comma-separated corruption names, or 'all' (the 15)."),
    grid: Path | None = typer.Option(None, help="Also write a PNG grid of two images per corruption and severity."),
    force: bool = typer.Option(False, help="Regenerate even if the folder already holds this seed and N."),
) -> None:
    """Regenerate CIFAR-10-C (15 corruptions x 5 severities, the CIFAR-C severity table of Hendrycks & Dietterich)
    from the real CIFAR-10 test set, in the official layout; everything made from it is labelled "regenerated"."""
    from arbibench.data.cifar10c import CORRUPTIONS, cifar10c_dir, read_manifest  # start-up: data loads torch
    from arbibench.data.corruptions.generate import generate_cifar10c  # start-up: as above
    from arbibench.data.corruptions.grid import corruption_grid  # start-up: as above

    check_data_dir(data_dir)
    cells = []  # what was corrupted now: nothing when the folder already held this set
    try:
        names = list(CORRUPTIONS) if corruptions.strip() == "all" else comma_list(corruptions, "--corruptions")
        if grid is not None and out is not None and out.name != "CIFAR-10-C":  # before the set, not after it
            raise ValueError("--grid reads DATA_DIR/CIFAR-10-C; use it without --out or name --out CIFAR-10-C")
        target = out if out is not None else cifar10c_dir(data_dir)
        before = read_manifest(target) if target.is_dir() else None
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("corrupting", total=5 * len(names))

            def cell(name: str, severity: int, n: int) -> None:
                cells.append((name, severity))
                bar.update(task, advance=1, description=f"{name} {severity}")

            folder, manifest = generate_cifar10c(
                n_examples, seed=seed, data_dir=data_dir, out=out, corruptions=names, force=force,
                on_cell=cell,
            )
        if grid is not None:
            console.print(f"wrote {corruption_grid(grid, data_dir if out is None else out.parent)}")
    except data_errors() as e:
        fail(e)
    console.print(
        f"regenerated CIFAR-10-C in {folder}: {len(manifest['corruptions'])} corruptions x 5 severities x "
        f"{manifest['n_examples']} images, seed {manifest['seed']} "
        + (f"({manifest['seconds']:.0f} s)" if cells else "(already there; --force to redo)")
    )
    if cells and before is not None:
        console.print(f"note: it replaced the set that was there ({', '.join(before.get('corruptions', []))}; "
                      f"seed {before.get('seed')}, {before.get('n_examples')} images)")


@corruptions_app.command("download")
def corruptions_download(
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
) -> None:
    """Download the official CIFAR-10-C (2.9 GB, Zenodo record 2535967), verify its MD5, extract it atomically."""
    from arbibench.data.cifar10c import download_cifar10c  # start-up: the data package loads torch

    try:
        console.print(f"official CIFAR-10-C in {download_cifar10c(data_dir)}")
    except data_errors() as e:
        fail(e)
