"""The ``arbibench`` command line: evaluate, train and list the zoo. Calls only the public API."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from arbibench.data.download import DownloadError

app = typer.Typer(
    help="arbibench: adversarial robustness benchmark for binarized neural networks (ARBiBench protocol).",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()


@app.callback()
def _root() -> None:
    """arbibench: adversarial robustness benchmark for binarized neural networks (ARBiBench protocol)."""


USER_ERRORS = (ValueError, TypeError, FileNotFoundError, IsADirectoryError, PermissionError, DownloadError)


def _fail(e: Exception) -> None:
    console.print(f"[bold red]error:[/] {e}")
    raise typer.Exit(2)


@app.command()
def train(
    arch: str = typer.Option("resnet20", help="Backbone architecture."),
    method: str = typer.Option(
        "fp", help="Method preset: fp, bnn, xnor, dorefa, bireal, irnet, reactnet, xnorpp."
    ),
    epochs: int | None = typer.Option(None, help="Epochs; default: the method's CPU recipe."),
    out: Path = typer.Option(Path("runs"), help="Folder for run folders; the run goes to OUT/<arch>_<method>."),
    init_from: str | None = typer.Option(
        None, help="Zoo model name or safetensors file whose matching tensors initialise the model."
    ),
    seed: int = typer.Option(0, help="Seed for initialisation, shuffling and augmentation."),
    lr: float | None = typer.Option(None, help="Peak learning rate; default: the method's recipe."),
    paper: bool = typer.Option(False, help="Use the long paper-length schedule (for a GPU)."),
    data_dir: Path | None = typer.Option(None, help="CIFAR-10 folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    export: bool = typer.Option(
        False, help="When done, write <arch>_<method>.safetensors and its model card to --zoo-dir."
    ),
    zoo_dir: Path | None = typer.Option(None, help="Where --export writes; default: the package's checkpoint folder."),
) -> None:
    """Train a zoo model on the real CIFAR-10 train set (random crop + flip), checkpointing every epoch.

    Rerunning the same command resumes from the last finished epoch.
    """
    from arbibench.models.zoo import export_checkpoint
    from arbibench.train import default_recipe
    from arbibench.train import train as run_training

    try:
        recipe = default_recipe(method, paper=paper)
    except USER_ERRORS as e:
        _fail(e)
    recipe.arch, recipe.seed = arch, seed
    if epochs is not None:
        recipe.epochs = epochs
    if lr is not None:
        recipe.lr = lr
    if init_from is not None:
        recipe.init_from = str(init_from)
    run_dir = out / f"{arch}_{method}"
    try:
        summary = run_training(recipe, run_dir, data_dir, log=console.log)
    except USER_ERRORS as e:
        _fail(e)
    console.print(
        f"[bold]{arch}_{method}[/]: clean accuracy {summary['clean_acc']:.4f} on the 10,000 test images "
        f"({summary['train_time_s'] / 60:.1f} min of training)"
    )
    if export:
        card = export_checkpoint(run_dir, f"{arch}_{method}", zoo_dir)
        console.print(f"exported {card}")


@app.command("eval")
def eval_(
    model: str = typer.Option(..., "--model", "-m", help="Zoo model name (see `arbibench zoo list`)."),
    attacks: str = typer.Option(
        "fgsm,pgd",
        help="Comma-separated attacks, run in this order: fgsm, pgd, mifgsm, cw_linf, apgd_ce, apgd_dlr, apgd_t, "
        "...; NAME@SURROGATE (e.g. pgd@identity) attacks through another BNN gradient estimator, NAME_adaptive "
        "through several.",
    ),
    n_examples: int = typer.Option(1000, "--n-examples", "-n", help="Number of test images."),
    eps: str = typer.Option("8/255", help="Perturbation budget, e.g. 8/255 or 0.5."),
    threat_model: str = typer.Option("Linf", "--threat-model", "-t", help="Linf or L2."),
    dataset: str = typer.Option("cifar10", help="cifar10 or imagenet."),
    batch_size: int = typer.Option(200, help="Images per batch (one store transaction each)."),
    seed: int = typer.Option(0, help="Seed of the attacks' random starts."),
    subset_seed: int | None = typer.Option(
        None, help="Draw the images at random with this seed instead of taking the first N."
    ),
    store: Path = typer.Option(Path("arbibench.db"), help="SQLite results store; reruns resume from it."),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the result as JSON to this file."),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1, ... (default: cpu)."),
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    checks: bool = typer.Option(True, help="Run the gradient-masking checks after the attacks and show their flags."),
) -> None:
    """Evaluate a zoo model under white-box attacks and print ACC, ACC*, ACC_norm, RS and the worst case.

    Only correctly classified images are attacked; every adversarial batch is verified against the threat model
    before it counts, and each finished batch is committed to the store, so an interrupted run resumes.
    """
    from arbibench.attacks import parse_eps
    from arbibench.evaluation.benchmark import benchmark

    try:
        result = benchmark(
            model,
            n_examples,
            dataset,
            threat_model,
            parse_eps(eps),
            [a.strip() for a in attacks.split(",") if a.strip()],
            data_dir=data_dir,
            device=device,
            batch_size=batch_size,
            seed=seed,
            subset_seed=subset_seed,
            store=store,
            console=console,
            checks=checks,
        )
    except USER_ERRORS as e:
        _fail(e)
    console.print(result.table())
    for note in result.notes:
        console.print(f"note: {note}")
    for flag, meaning in result.flags.items():
        console.print(f"[yellow]flag {flag}[/]: {meaning}")
    if json_out is not None:
        console.print(f"wrote {result.save_json(json_out)}")


zoo_app = typer.Typer(help="The model zoo: list models and their checkpoints.", no_args_is_help=True)
app.add_typer(zoo_app, name="zoo")


@zoo_app.command("list")
def zoo_list() -> None:
    """List the zoo: name, method, backbone, parameters, clean accuracy and whether the checkpoint is present."""
    from rich.table import Table

    from arbibench.models.zoo import zoo_rows

    table = Table(title="arbibench model zoo")
    for col in ("name", "dataset", "method", "backbone", "params", "clean acc (10k test)", "checkpoint"):
        table.add_column(col)
    for row in zoo_rows():
        acc = "" if row["clean_acc"] is None else f"{row['clean_acc']:.4f}"
        table.add_row(
            row["name"],
            row["dataset"],
            row["method"],
            row["arch"],
            f"{row['params']:,}",
            acc,
            "present" if row["present"] else "[red]missing[/]",
        )
    console.print(table)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
