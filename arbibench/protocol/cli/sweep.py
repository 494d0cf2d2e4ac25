"""``arbibench sweep``: robust accuracy against eps, one attack at several budgets, each its own stored evaluation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer
from rich.table import Table

from arbibench.cards import ModelCard, parse_card, read_card_json
from arbibench.evaluation.cli import (
    ADDRESS_HELP,
    BACKEND_HELP,
    INFERENCE_HELP,
    WORKER_THREADS_HELP,
    WORKERS_HELP,
    check_data_dir,
    open_executor,
    user_errors,
)
from arbibench.inference import Inference
from arbibench.terminal import comma_list, console, fail


def sweep(
    model: str = typer.Option(..., "--model", "-m", help="Zoo model name."),
    eps: str = typer.Option("1/255,2/255,4/255,8/255,16/255", help="Comma-separated eps values (8/255 or 0.03)."),
    attack: str = typer.Option("apgd_ce", help="The attack run at every eps."),
    n_examples: int = typer.Option(500, "--n-examples", "-n", help="First N test images."),
    dataset: str = typer.Option("cifar10", help="cifar10 or imagenet."),
    threat_model: str = typer.Option("Linf", "--threat-model", "-t", help="Linf or L2."),
    store: Path = typer.Option(Path("arbibench.db"), help="SQLite result store; a rerun resumes from it."),
    model_info: Path | None = typer.Option(None, help="Add the curve to this model's card under this folder."),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1, ... (default: cpu)."),
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    backend: str = typer.Option("local", help=BACKEND_HELP),
    address: str | None = typer.Option(None, help=ADDRESS_HELP),
    workers: int | None = typer.Option(None, help=WORKERS_HELP),
    worker_threads: int | None = typer.Option(None, help=WORKER_THREADS_HELP),
    inference: str = typer.Option(Inference.SIMULATION.value, help=INFERENCE_HELP),
) -> None:
    """Robust accuracy against eps: one attack at several budgets (each budget its own stored evaluation)."""
    from arbibench.attacks import get_attack, get_threat_model, parse_eps  # start-up: the attacks load torch
    from arbibench.data.datasets import load_dataset  # start-up: as above
    from arbibench.evaluation.cards import card_path, write_card  # start-up: as above
    from arbibench.evaluation.inputs import resolve_device  # start-up: as above
    from arbibench.evaluation.plan import check_norms  # start-up: as above
    from arbibench.evaluation.store import ResultStore  # start-up: as above
    from arbibench.models.zoo import load_model  # start-up: as above
    from arbibench.protocol.cards import sweep_points  # start-up: as above
    from arbibench.protocol.run import sweep_eps  # start-up: as above

    try:  # before any store, model or image: the inference, the budgets, the attack and the card to update
        chosen = Inference.parse(inference)
        values = [parse_eps(e) for e in comma_list(eps, "--eps")]
        if not values:
            raise ValueError("--eps needs at least one value")
        check_norms([get_attack(attack)], get_threat_model(threat_model, values[0]).norm)
        path = None if model_info is None else card_path(model_info, dataset, threat_model, model, inference=chosen)
        if path is not None:
            _read_card(path)
    except user_errors() as e:
        fail(e)
    check_data_dir(data_dir)
    runner_backend = open_executor(backend, address, workers, worker_threads)
    try:
        device = str(resolve_device(device))
        net = load_model(model, dataset=dataset, device=device)
        x, y, idx = load_dataset(dataset, n_examples, data_dir, None)
        with ResultStore(store) as db:
            rows = sweep_eps(net, model, x, y, idx, attack, threat_model, values, db, dataset=dataset,
                             device=device, console=console, backend=runner_backend, inference=chosen)
    except user_errors() as e:
        fail(e)
    finally:
        if runner_backend is not None:
            runner_backend.close()
    table = Table(title=f"{model}: {attack} robust accuracy vs {threat_model} eps ({n_examples} images)")
    for col in ("eps", "ACC*", "ACC_norm"):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(row["eps_text"], f"{100 * row['acc_star']:.1f}%", f"{row['acc_norm']:.3f}")
    console.print(table)
    if path is not None:
        try:  # read again: the card may have changed while the sweep ran
            card = replace(_read_card(path), sweep=sweep_points(rows))
            console.print(f"updated {write_card(card, path)}")
        except user_errors() as e:
            fail(e)


def _read_card(path: Path) -> ModelCard:
    """The card ``--model-info`` names, read before the sweep and again before the curve is added to it."""
    if not path.is_file():
        raise FileNotFoundError(f"no card {path}: run `arbibench protocol run` or `eval` with cards first")
    return parse_card(path, read_card_json(path))
