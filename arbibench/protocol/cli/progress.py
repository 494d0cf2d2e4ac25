"""``arbibench protocol progress``: how far a protocol run has come, read from its store (nothing is computed); with
``--json``, the same counts for a script that watches the run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from arbibench.evaluation.cli import user_errors
from arbibench.inference import Inference
from arbibench.protocol.cli import common
from arbibench.terminal import console, fail

if TYPE_CHECKING:
    from arbibench.operations.progress import ProtocolProgress
    from arbibench.protocol.presets import Protocol


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


RUN_ONLY_HELP = "The run's own option, accepted so that its command line reads back; it changes nothing counted."


def protocol_progress_command(
    name: str = typer.Argument("cifar10", help="The preset of the run: cifar10, cifar10-l2, imagenet, imagenet-l2."),
    models: str = typer.Option("all", help="The run's --models: comma-separated zoo names, or 'all'."),
    quick: bool = typer.Option(False, "--quick", help="The run used the laptop variant."),
    demo: bool = typer.Option(False, "--demo", help="The run used the demo variant."),
    store: Path = typer.Option(Path("arbibench.db"), help="The run's SQLite result store."),
    model_info: Path = typer.Option(
        Path("model_info"), help="The run's --model-info: a model's quick card there prices the attacks its full run "
        "has not reached."
    ),
    model_dir: Path | None = typer.Option(None, help="The run's --model-dir (checkpoints outside the package)."),
    sweep: bool = typer.Option(True, help="The run's --sweep/--no-sweep: whether its eps sweep is counted."),
    device: str | None = typer.Option(None, hidden=True, help=RUN_ONLY_HELP),
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    backend: str = typer.Option("local", hidden=True, help=RUN_ONLY_HELP),
    address: str | None = typer.Option(None, hidden=True, help=RUN_ONLY_HELP),
    workers: int | None = typer.Option(None, hidden=True, help=RUN_ONLY_HELP),
    worker_threads: int | None = typer.Option(None, hidden=True, help=RUN_ONLY_HELP),
    inference: str = typer.Option(Inference.SIMULATION.value, help="The run's --inference."),
    grid: str = typer.Option("float", help="The run's --grid."),
    certify: bool = typer.Option(
        False, "--certify", help="The run's --certify: its certificates are counted after its eps* search."
    ),
    only_attacks: str | None = typer.Option(None, "--only-attacks", hidden=True, help=RUN_ONLY_HELP),
    evaluations: bool = typer.Option(
        False, "--evaluations", help="Also print, per model, every evaluation (batches, hours so far, seconds per "
        "image, hours left) and the hours of each part: where a run's time went."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the counts as JSON on stdout instead of tables: per model its batches done and "
        "total, hours so far and left, and every evaluation's; for a script that watches the run."
    ),
) -> None:
    """How far a protocol run has come: per model, batches done of the total and the hours left at the measured
    cost per batch, read from its store (nothing is computed). Takes every option of `protocol run` with the same
    defaults, so a run's command line with `run` turned into `progress` reports that run."""
    from arbibench.protocol.presets import Protocol  # start-up: the presets load torch

    del device, backend, address, workers, worker_threads  # how a run computes, not what it computes
    if only_attacks is not None:
        fail(ValueError("--only-attacks: such a run writes part of a store and no card; count the whole run, "
                        "without --only-attacks, on the store that joins the parts"))
    protocol = common.protocol_on_grid(common.protocol_preset(name, quick, demo), grid)
    if not isinstance(protocol, Protocol):
        fail(ValueError(f"{name!r} has no attack evaluations to count; use cifar10, cifar10-l2, imagenet, imagenet-l2"))
    if certify:
        protocol = replace(protocol, eps_star_certify=True)
    names = common.protocol_models(models, protocol.dataset, model_dir)
    if as_json and not store.is_file():  # nothing stored yet: what the models' quick cards project, nothing planned
        _print_json(protocol, store, [_not_started_json(protocol, m, model_info) for m in names])
        return
    if not store.is_file():
        fail(FileNotFoundError(f"no store at {store}: the run has not started (or pass its --store)"))
    if protocol.dataset == "cifar10" and not _has_cifar10(data_dir):
        fail(FileNotFoundError("CIFAR-10's test images are not in the data folder: progress plans the run on them and "
                               "never downloads them; set ARBIBENCH_DATA or pass --data-dir"))
    found = _read_progress(protocol, names, store, (model_info, model_dir, data_dir), inference, sweep)
    if as_json:
        _print_json(protocol, store, [{**_progress_json(p), **_card_projection(protocol, p.model_name, model_info)}
                                      for p in found])
        return
    _print_progress(found, evaluations)


def _has_cifar10(data_dir: Path | None) -> bool:
    from arbibench.data.cifar10 import has_cifar10  # start-up: the data package loads numpy

    return has_cifar10("test", data_dir)


def _progress_json(p: ProtocolProgress) -> dict[str, object]:
    from arbibench.operations.progress import progress_json  # start-up: planning loads the models

    return progress_json(p)


def _read_progress(protocol: Protocol, names: list[str], store: Path,
                   folders: tuple[Path, Path | None, Path | None], inference: str, sweep: bool
                   ) -> list[ProtocolProgress]:
    """Each model's progress in ``store``; ``folders`` are the run's model-info, model and data folders."""
    from arbibench.evaluation.store import ResultStore  # start-up: the store loads torch
    from arbibench.operations.progress import protocol_progress  # start-up: planning loads the models

    model_info, model_dir, data_dir = folders
    try:
        with ResultStore(store, read_only=True) as db:  # progress only reads: the run's store stays as it was
            return [protocol_progress(protocol, model, db, data_dir=data_dir, inference=inference,
                                      model_info=model_info, model_dir=model_dir, sweep=sweep) for model in names]
    except user_errors() as e:
        fail(e)


def _card_projection(protocol: Protocol, model: str, model_info: Path) -> dict[str, object]:
    """The (low, high) hours a full run of ``model`` takes by its quick card in ``model_info``; None for a quick
    run or a model without a quick card."""
    from arbibench.operations.projection import project_model  # start-up: the presets load torch

    projection = None if protocol.quick else project_model(model_info, model, protocol.name)
    return {"quick_card_hours": None if projection is None else [round(h, 4) for h in projection.total_h]}


def _not_started_json(protocol: Protocol, model: str, model_info: Path) -> dict[str, object]:
    return {"model": model, "protocol": protocol.label, "batches": None, "done": 0, "gpu_done": 0,
            "hours_so_far": 0.0, "hours_left": None, "not_started": None, "evaluations": [],
            **_card_projection(protocol, model, model_info)}


def _print_json(protocol: Protocol, store: Path, models: list[dict[str, object]]) -> None:
    """The JSON answer on stdout, alone (no console markup or wrapping)."""
    answer = {"preset": protocol.name, "protocol": protocol.label, "quick": protocol.quick, "store": str(store),
              "store_found": store.is_file(), "models": models}
    typer.echo(json.dumps(answer, indent=1))


def _print_progress(found: list[ProtocolProgress], evaluations: bool) -> None:
    """The tables of ``protocol progress``: each model's evaluations when asked, then one row a model."""
    table = Table("model", "batches done", "hours so far", "hours left (projected)", "not started", "eps*")
    for p in found:
        hours, unknown = p.hours_left()
        gpu = f" ({p.gpu_done} on a GPU)" if p.gpu_done else ""
        search = "" if p.eps_star is None else p.eps_star.describe()
        if p.certification is not None:
            search += f"; certificates: {p.certification.describe()}"
        table.add_row(p.model_name, f"{p.done}/{p.batches}{gpu}", f"{p.hours_so_far:.2f}", f"{hours:.2f}",
                      str(unknown) if unknown else "", search)
        if evaluations:
            console.print(_evaluations_table(p))
    console.print(table)
    console.print("hours so far and left are a CPU's: batches a GPU computed count as done and price nothing. "
                  "hours left: each evaluation's remaining batches at its own cost per batch; one not started yet at "
                  "the dearer of the same evaluation's dearest cost per image on another model of the store and the "
                  "model's own quick card in --model-info (at the full budget), else at the same attack's cost per "
                  "image elsewhere in the run, else at the dearest cost per batch measured so far, or not counted "
                  "when nothing is measured. eps*: where its search stands (hours so far include it); its hours left "
                  "are not projected, since each radius attacks what the last one left. certificates (--certify): "
                  "those stored of the eps* images; the rest at the mean seconds of those done")
