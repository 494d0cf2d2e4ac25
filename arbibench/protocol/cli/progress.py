"""``arbibench protocol progress``: how far a protocol run has come, read from its store (nothing is computed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from arbibench.evaluation.cli import user_errors
from arbibench.protocol.cli import common
from arbibench.terminal import console, fail

if TYPE_CHECKING:
    from arbibench.operations.progress import ProtocolProgress


def _evaluations_table(p: ProtocolProgress) -> Table:
    """One model's evaluations and the hours of each part of its run (``protocol progress --evaluations``)."""
    table = Table("evaluation", "batches done", "images", "hours so far", "s per image", "hours left",
                  title=f"{p.model_name}: {p.protocol}", title_justify="left")
    for e, left in zip(p.evaluations, p.seconds_left(), strict=True):
        per_image = "" if e.per_sample is None else f"{e.per_sample:.3g}"
        gpu = f" ({e.gpu_done} on a GPU)" if e.gpu_done else ""
        table.add_row(e.label, f"{e.done}/{e.batches}{gpu}", str(e.samples), f"{e.cpu_seconds / 3600:.3f}", per_image,
                      "?" if left is None else f"{left / 3600:.3f}")
    table.add_section()
    for part, (so_far, left_h) in p.parts().items():
        table.add_row(f"{part} (all)", "", "", f"{so_far:.3f}", "", f"{left_h:.3f}")
    return table


def protocol_progress_command(
    name: str = typer.Argument("cifar10", help="The preset of the run: cifar10, cifar10-l2, imagenet, imagenet-l2."),
    models: str = typer.Option(..., help="Comma-separated zoo names of the run."),
    store: Path = typer.Option(..., help="The run's SQLite result store."),
    quick: bool = typer.Option(False, "--quick", help="The run used the laptop variant."),
    inference: str = typer.Option("simulation", help="The run's --inference."),
    model_info: Path = typer.Option(
        Path("model_info"), help="The run's --model-info: a model's quick card there prices the attacks its full run "
        "has not reached."
    ),
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    evaluations: bool = typer.Option(
        False, "--evaluations", help="Also print, per model, every evaluation (batches, hours so far, seconds per "
        "image, hours left) and the hours of each part: where a run's time went."
    ),
) -> None:
    """How far a protocol run has come: per model, batches done of the total and the hours left at the measured
    cost per batch, read from its store (nothing is computed)."""
    from arbibench.evaluation.store import ResultStore  # start-up: the store loads torch
    from arbibench.operations.progress import protocol_progress  # start-up: planning loads the models
    from arbibench.protocol.presets import Protocol  # start-up: as above

    protocol = common.protocol_preset(name, quick)
    if not isinstance(protocol, Protocol):
        fail(ValueError(f"{name!r} has no attack evaluations to count; use cifar10, cifar10-l2, imagenet, imagenet-l2"))
    names = common.named_models(models)
    if not store.is_file():
        fail(FileNotFoundError(f"no store at {store}: the run has not started (or pass its --store)"))
    table = Table("model", "batches done", "hours so far", "hours left (projected)", "not started")
    details = []
    try:
        with ResultStore(store, read_only=True) as db:  # progress only reads: the run's store stays as it was
            for model in names:
                p = protocol_progress(protocol, model, db, data_dir=data_dir, inference=inference,
                                      model_info=model_info)
                hours, unknown = p.hours_left()
                gpu = f" ({p.gpu_done} on a GPU)" if p.gpu_done else ""
                table.add_row(model, f"{p.done}/{p.batches}{gpu}", f"{p.hours_so_far:.2f}", f"{hours:.2f}",
                              str(unknown) if unknown else "")
                if evaluations:
                    details.append(_evaluations_table(p))
    except user_errors() as e:
        fail(e)
    for detail in details:
        console.print(detail)
    console.print(table)
    console.print("hours so far and left are a CPU's: batches a GPU computed count as done and price nothing. "
                  "hours left: each evaluation's remaining batches at its own cost per batch; one not started yet at "
                  "the dearer of the same evaluation's dearest cost per image on another model of the store and the "
                  "model's own quick card in --model-info (at the full budget), else at the same attack's cost per "
                  "image elsewhere in the run, else at the dearest cost per batch measured so far, or not counted "
                  "when nothing is measured; eps* not counted")
