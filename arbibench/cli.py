"""The ``arbibench`` command line: evaluate, train and list the zoo. Calls only the public API."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

app = typer.Typer(
    help="arbibench: adversarial robustness benchmark for binarized neural networks (ARBiBench protocol).",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()


@app.callback()
def _root() -> None:
    """arbibench: adversarial robustness benchmark for binarized neural networks (ARBiBench protocol)."""


@app.command()
def train(
    arch: str = typer.Option("resnet20", help="Backbone architecture."),
    method: str = typer.Option("fp", help="Binarization method preset (fp, bnn)."),
    epochs: int | None = typer.Option(None, help="Epochs; default: the method's CPU recipe."),
    out: Path = typer.Option(Path("runs"), help="Folder for run folders; the run goes to OUT/<arch>_<method>."),
    init_from: Path | None = typer.Option(None, help="safetensors checkpoint to initialise matching tensors from."),
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

    recipe = default_recipe(method, paper=paper)
    recipe.arch, recipe.seed = arch, seed
    if epochs is not None:
        recipe.epochs = epochs
    if lr is not None:
        recipe.lr = lr
    if init_from is not None:
        recipe.init_from = str(init_from)
    run_dir = out / f"{arch}_{method}"
    summary = run_training(recipe, run_dir, data_dir, log=console.log)
    console.print(
        f"[bold]{arch}_{method}[/]: clean accuracy {summary['clean_acc']:.4f} on the 10,000 test images "
        f"({summary['train_time_s'] / 60:.1f} min of training)"
    )
    if export:
        card = export_checkpoint(run_dir, f"{arch}_{method}", zoo_dir)
        console.print(f"exported {card}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
