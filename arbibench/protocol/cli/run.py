"""``arbibench protocol run``: a preset over zoo models through the store, cards into --model-info. The one
entrance, with three ends: the attack protocol scored and carded, its named attacks only (``--only-attacks``: one run
split across machines), or the common-corruptions preset."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from arbibench.clock import active_clock
from arbibench.evaluation.cli import (
    ADDRESS_HELP,
    BACKEND_HELP,
    GRID_HELP,
    INFERENCE_HELP,
    WORKER_THREADS_HELP,
    WORKERS_HELP,
    check_data_dir,
    open_executor,
    user_errors,
)
from arbibench.inference import Inference
from arbibench.protocol.cli import common
from arbibench.protocol.cli.common import DEMO_HELP
from arbibench.terminal import comma_list, console, fail

if TYPE_CHECKING:
    from torch import nn

    from arbibench.protocol.corruptions import CorruptionEvaluation
    from arbibench.protocol.presets import CorruptionProtocol, Protocol
    from arbibench.protocol.run import ModelEvaluation


def protocol_run(
    name: str = typer.Argument("cifar10", help="cifar10, cifar10-l2, imagenet, imagenet-l2 or cifar10-c."),
    models: str = typer.Option("all", help="Comma-separated zoo names, or 'all' (every shipped model of the dataset)."),
    quick: bool = typer.Option(False, "--quick", help="The laptop variant (smaller subsets and budgets)."),
    demo: bool = typer.Option(False, "--demo", help=DEMO_HELP),
    store: Path = typer.Option(Path("arbibench.db"), help="SQLite result store; a rerun resumes from it."),
    model_info: Path = typer.Option(Path("model_info"), help="Where the model cards are written."),
    model_dir: Path | None = typer.Option(
        None, help="Checkpoint folder: ImageNet weights you bring, or the folder `arbibench import` wrote into."
    ),
    sweep: bool = typer.Option(True, help="Also run the preset's eps sweep (robust accuracy vs eps curves)."),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1, ... (default: cpu)."),
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    backend: str = typer.Option("local", help=BACKEND_HELP),
    address: str | None = typer.Option(None, help=ADDRESS_HELP),
    workers: int | None = typer.Option(None, help=WORKERS_HELP),
    worker_threads: int | None = typer.Option(None, help=WORKER_THREADS_HELP),
    inference: str = typer.Option(Inference.SIMULATION.value, help=INFERENCE_HELP),
    grid: str = typer.Option(
        "float", help=f"{GRID_HELP} eps* in whole grey levels from 1/255; its cards go to a uint8/ folder."
    ),
    certify: bool = typer.Option(
        False, "--certify", help="Also certify each eps* image with `arbibench verify`'s bounds (seconds to tens of "
        "seconds per image, each committed to the store as it finishes: a rerun certifies only the images missing): "
        "the card's median eps* becomes the bracket of its certified (lower) and attacked (upper) end."
    ),
    only_attacks: str | None = typer.Option(
        None, "--only-attacks", help="Compute only these attacks' store batches (comma-separated, e.g. autoattack; the "
        "sweep's evaluations count as its attack's) and write no card: one run split across machines (a GPU takes "
        "AutoAttack, a CPU the query attacks), the stores' rows joined later. A run without it "
        "scores the whole protocol from the store.",
    ),
) -> None:
    """Run a protocol over zoo models: every (model, attack) pair through the store, cards into --model-info.

    Prints per model ACC, ACC* and ACC_norm per attack, RS and RS_mean per family and overall, the worst case, and
    each BNN against its full-precision twin (paired 95% intervals and a verdict).
    """

    from arbibench.evaluation.store import ResultStore  # start-up: the run loads torch
    from arbibench.protocol.cards import write_protocol_card  # start-up: as above
    from arbibench.protocol.cli.tables import (  # start-up: as above
        claims_table,
        findings_table,
        model_table,
        summary_table,
    )
    from arbibench.protocol.presets import CorruptionProtocol  # start-up: as above
    from arbibench.protocol.run import protocol_findings, run_protocol  # start-up: as above

    protocol = _with_options(common.protocol_on_grid(common.protocol_preset(name, quick, demo), grid), certify,
                             inference, (backend, address, workers, worker_threads))
    names = common.protocol_models(models, protocol.dataset, model_dir)
    check_data_dir(data_dir)
    noun = "model" if len(names) == 1 else "models"
    console.print(f"protocol {protocol.label} on {len(names)} {noun}: {', '.join(names)}")
    for note in protocol.notes:
        console.print(f"[yellow]note[/]: {note}")
    t0 = active_clock().now()
    if only_attacks is not None:
        if isinstance(protocol, CorruptionProtocol):
            fail(ValueError(f"--only-attacks applies to the attack protocols; {protocol.label} has no attack"))
        _protocol_run_attacks(protocol, names, store, only_attacks, model_dir, device, data_dir, sweep,
                              (backend, address, workers, worker_threads), inference)
        console.print(f"protocol {protocol.label}, {only_attacks} only, finished in {active_clock().now() - t0:.0f} s")
        return
    if isinstance(protocol, CorruptionProtocol):
        _protocol_run_corruptions(protocol, names, store, model_info, model_dir, device, data_dir)
        console.print(f"protocol {protocol.label} finished in {active_clock().now() - t0:.0f} s")
        return

    def done(result: ModelEvaluation, model: nn.Module) -> None:
        console.print(model_table(result))
        for flag, meaning in result.flags.items():
            console.print(f"[yellow]flag {flag}[/]: {meaning}")
        path = write_protocol_card(result, model_info, model, data_dir=data_dir, device=device)
        if path is None:
            console.print(f"[yellow]note[/]: {result.model_name}: kept its full-protocol card in {model_info}; a "
                          f"{protocol.label} card does not replace it (its results are in the store; pass another "
                          "--model-info to write the card)")
        else:
            console.print(f"wrote {path}")

    runner_backend = open_executor(backend, address, workers, worker_threads, model_dir)
    try:
        with ResultStore(store) as db:
            results = run_protocol(
                protocol, names, db, data_dir=data_dir, model_dir=model_dir, device=device, console=console,
                sweep=sweep, on_model_done=done, backend=runner_backend, inference=inference,
            )
    except user_errors() as e:
        fail(e)
    finally:
        if runner_backend is not None:
            runner_backend.close()
    console.print(summary_table(results, protocol))
    findings = protocol_findings(results)
    if findings:
        console.print(findings_table(findings))
        if (claims := claims_table(findings, protocol.dataset)) is not None:
            console.print(claims)
    console.print(f"protocol {protocol.label} finished in {active_clock().now() - t0:.0f} s")


def _with_options(protocol: Protocol | CorruptionProtocol, certify: bool, inference: str,
                  backend_options: tuple[str, str | None, int | None, int | None]) -> Protocol | CorruptionProtocol:
    """``protocol`` with ``--certify``; the options of the attack protocols, which the corruption protocol would
    ignore, refused for it."""
    from arbibench.protocol.presets import CorruptionProtocol  # start-up: the presets load torch

    if not isinstance(protocol, CorruptionProtocol):
        return replace(protocol, eps_star_certify=True) if certify else protocol
    if certify:
        fail(ValueError(f"--certify certifies eps*; {protocol.label} has no eps* search"))
    if inference != Inference.SIMULATION.value:
        fail(ValueError(f"--inference {inference} applies to the attack protocols; {protocol.label} measures the "
                        "float model only"))
    if backend_options != ("local", None, None, None):
        fail(ValueError(f"--backend, --address, --workers and --worker-threads apply to the attack protocols; "
                        f"{protocol.label} runs in this process (got --backend {backend_options[0]})"))
    return protocol


def _protocol_run_attacks(
    protocol: Protocol, names: list[str], store: Path, attacks: str, model_dir: Path | None,
    device: str | None, data_dir: Path | None, sweep: bool,
    backend_options: tuple[str, str | None, int | None, int | None], inference: str,
) -> None:
    """``protocol run --only-attacks``: those attacks' batches into the store, a table of what it holds, no card."""
    from arbibench.evaluation.store import ResultStore  # start-up: the run loads torch
    from arbibench.operations.split import check_attack_names, compute_attacks  # start-up: as above

    try:  # before a backend starts its workers
        wanted = check_attack_names(protocol, comma_list(attacks, "--only-attacks"), sweep=sweep)
    except ValueError as e:
        fail(e)
    runner_backend = open_executor(*backend_options, model_dir)
    try:
        with ResultStore(store) as db:
            shares = compute_attacks(protocol, names, db, wanted, data_dir=data_dir, model_dir=model_dir,
                                     device=device, console=console, sweep=sweep, backend=runner_backend,
                                     inference=inference)  # fmt: skip
    except user_errors() as e:
        fail(e)
    finally:
        if runner_backend is not None:
            runner_backend.close()
    table = Table(title=f"{store}: batches stored of {', '.join(wanted)}")
    for column in ("model", "evaluation", "batches stored"):
        table.add_column(column)
    for share in shares:
        table.add_row(share.model_name, share.evaluation, f"{share.batches_done}/{share.batches_total}")
    console.print(table)
    console.print("no card written: a card needs every attack of the protocol; run it without --only-attacks on "
                  "the store that holds the rest (the parts' rows joined into one store)")


def _protocol_run_corruptions(
    protocol: CorruptionProtocol, names: list[str], store: Path, model_info: Path, model_dir: Path | None,
    device: str | None, data_dir: Path | None,
) -> None:
    """The cifar10-c preset: every model on every CIFAR-10-C cell through the store, cards, the zoo table."""
    from arbibench.evaluation.store import ResultStore  # start-up: the run loads torch
    from arbibench.protocol.cards import write_corruption_card  # start-up: as above
    from arbibench.protocol.cli.tables import corruption_model_table, corruption_zoo_table  # start-up: as above
    from arbibench.protocol.corruptions import run_corruption_protocol  # start-up: as above

    def done(result: CorruptionEvaluation) -> None:
        console.print(corruption_model_table(result))
        for flag, meaning in result.flags.items():
            console.print(f"[yellow]flag {flag}[/]: {meaning}")
        console.print(f"wrote {write_corruption_card(result, model_info)}")

    try:
        with ResultStore(store) as db:
            results = run_corruption_protocol(protocol, names, db, data_dir=data_dir, model_dir=model_dir,
                                              device=device, console=console, on_model_done=done)
    except user_errors() as e:
        fail(e)
    console.print(corruption_zoo_table(results))
