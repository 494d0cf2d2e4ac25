"""The ``arbibench protocol show|run|report`` and ``arbibench sweep`` commands: the protocol owns its command line,
and ``arbibench/cli.py`` only wires it in."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    open_executor,
    user_errors,
)
from arbibench.inference import Inference
from arbibench.terminal import console, fail

if TYPE_CHECKING:
    from torch import nn

    from arbibench.evaluation.findings import TwinComparison
    from arbibench.evaluation.store import ResultStore
    from arbibench.protocol.corruptions import CorruptionEvaluation
    from arbibench.protocol.presets import CorruptionProtocol, Protocol
    from arbibench.protocol.progress import ProtocolProgress
    from arbibench.protocol.run import ModelEvaluation

protocol_app = typer.Typer(help="The ARBiBench protocol presets: show and run them.", no_args_is_help=True)


DEMO_HELP = "The few-minute first look (a BNN against its twin on a few hundred images; not the protocol)."


def _protocol(name: str, quick: bool, demo: bool = False) -> Protocol | CorruptionProtocol:
    from arbibench.protocol import presets  # start-up: the presets build attacks, which load torch

    try:
        return presets.get_protocol(name, quick, demo)  # looked up on the module, so a test can shrink the presets
    except user_errors() as e:
        fail(e)


@protocol_app.command("show")
def protocol_show(
    name: str = typer.Argument("cifar10", help="cifar10, cifar10-l2, imagenet, imagenet-l2 or cifar10-c."),
    quick: bool = typer.Option(False, "--quick", help="The laptop variant (smaller subsets and budgets)."),
    demo: bool = typer.Option(False, "--demo", help=DEMO_HELP),
) -> None:
    """Print every number of a protocol preset: subsets, eps, seeds and each attack with all its parameters."""


    from arbibench.protocol.presets import describe  # start-up: the presets load torch

    protocol = _protocol(name, quick, demo)
    table = Table(title=f"protocol {protocol.label}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    try:
        for key, value in describe(protocol):
            table.add_row(key, value)
    except user_errors() as e:
        fail(e)
    console.print(table)


@protocol_app.command("run")
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
    grid: str = typer.Option("float", help=f"{GRID_HELP} No eps* search on the grid; its cards go to a uint8/ folder."),
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

    from arbibench.evaluation.store import ResultStore  # start-up: as above
    from arbibench.protocol.cards import write_protocol_card  # start-up: the run loads torch
    from arbibench.protocol.presets import CorruptionProtocol  # start-up: as above
    from arbibench.protocol.report import claims_table, findings_table, model_table, summary_table  # start-up: as above
    from arbibench.protocol.run import protocol_findings, run_protocol  # start-up: as above

    protocol = _on_grid(_protocol(name, quick, demo), grid)
    names = _protocol_models(models, protocol.dataset, model_dir)
    noun = "model" if len(names) == 1 else "models"
    console.print(f"protocol {protocol.label} on {len(names)} {noun}: {', '.join(names)}")
    for note in protocol.notes:
        console.print(f"[yellow]note[/]: {note}")
    t0 = active_clock().now()
    if only_attacks is not None:
        if isinstance(protocol, CorruptionProtocol):
            fail(ValueError(f"--only-attacks applies to the attack protocols; {protocol.label} has no attack"))
        _protocol_run_attacks(protocol, names, store, only_attacks.split(","), model_dir, device, data_dir, sweep,
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


def _protocol_run_attacks(
    protocol: Protocol, names: list[str], store: Path, attacks: list[str], model_dir: Path | None,
    device: str | None, data_dir: Path | None, sweep: bool,
    backend_options: tuple[str, str | None, int | None, int | None], inference: str,
) -> None:
    """``protocol run --only-attacks``: those attacks' batches into the store, a table of what it holds, no card."""
    from arbibench.evaluation.store import ResultStore  # start-up: the run loads torch
    from arbibench.protocol.split import check_attack_names, compute_attacks  # start-up: as above

    try:
        wanted = check_attack_names(protocol, attacks, sweep=sweep)  # before a backend starts its workers
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


def _on_grid(protocol: Protocol | CorruptionProtocol, grid: str) -> Protocol | CorruptionProtocol:
    """``--grid``: the attack protocol on that input grid; refused for what cannot have one."""
    from arbibench.protocol.presets import CorruptionProtocol, on_grid  # start-up: the presets load torch

    if grid == "float":
        return protocol
    if isinstance(protocol, CorruptionProtocol):
        fail(ValueError(f"--grid {grid} applies to the attack protocols; {protocol.label} has no attack"))
    try:
        return on_grid(protocol, grid)
    except ValueError as e:
        fail(ValueError(f"--grid {grid}: {e}"))


def _named_models(models: str) -> list[str]:
    """The names of a comma-separated ``--models``; one that names none (``,``) is refused, not an empty table."""
    names = [m.strip() for m in models.split(",") if m.strip()]
    if not names:
        fail(ValueError(f"--models {models!r} names no model; pass zoo names, e.g. --models resnet20_bnn"))
    return names


def _protocol_models(models: str, dataset: str, model_dir: Path | None) -> list[str]:
    """The names of ``--models``: a comma-separated list, or 'all' present checkpoints of ``dataset``."""
    from arbibench.models.zoo import zoo_rows  # start-up: the zoo loads torch

    if models.strip() != "all":
        return _named_models(models)
    names = [r["name"] for r in zoo_rows(model_dir) if r["dataset"] == dataset and r["present"]]
    if not names:
        fail(ValueError(f"no {dataset} checkpoints present; pass --model-dir or --models"))
    return names


@protocol_app.command("report")
def protocol_report(
    name: str = typer.Argument("cifar10", help="cifar10, cifar10-l2, imagenet or imagenet-l2."),
    models: str = typer.Option("all", help="Comma-separated zoo names, or 'all' (every shipped model of the dataset)."),
    quick: bool = typer.Option(False, "--quick", help="The laptop variant (smaller subsets and budgets)."),
    demo: bool = typer.Option(False, "--demo", help=DEMO_HELP),
    store: Path = typer.Option(Path("arbibench.db"), help="SQLite result store of `protocol run`."),
    model_dir: Path | None = typer.Option(None, help="Checkpoint folder of imported or user-supplied models."),
    json_out: Path | None = typer.Option(
        None, "--json", help="Also write the findings as JSON to this file (per setting, and per attack and eps)."
    ),
    stored_only: bool = typer.Option(
        False, "--stored-only", help="Compute nothing: report the models whose run is complete in --store and list "
        "the others as left out (a report over a full-protocol store must not start hours of attacks)."
    ),
    per_attack: bool = typer.Option(
        False, "--per-attack", help="Also print each attack and each eps of the sweep against the FP twin on its own "
        "(what each setting's row averages)."
    ),
    markdown: Path | None = typer.Option(
        None, help="Also write the dated findings page (markdown) to this file, e.g. docs/findings-cifar10.md; it "
        "compares per setting and per attack and eps."
    ),
    compare: Path | None = typer.Option(
        None, help="The --json of an earlier report (e.g. the quick protocol's): the page sets each verdict beside it."
    ),
    readme: Path | None = typer.Option(
        None, help="With --markdown: also write a paragraph linking the page (what it compares, which of the paper's "
        "claims hold) into this README, between its 'findings page' markers."
    ),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1, ... (default: cpu)."),
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
) -> None:
    """ARBiBench's findings: is each BNN more or less robust than its FP twin, under white-box and black-box attacks
    at the protocol eps and across the eps sweep?

    Reads the outcomes `protocol run` stored (whatever is missing is evaluated and stored first, unless
    --stored-only), pairs each BNN with its twin on the same images and gives the difference of mean ACC_norm with a
    95% bootstrap interval. The verdict follows the interval: above zero "more robust", below "less robust",
    otherwise "not distinguishable".
    """

    from arbibench.cards import FindingsDocument  # start-up: beside the run's imports
    from arbibench.evaluation.store import ResultStore  # start-up: the run loads torch
    from arbibench.files import atomic_write, atomic_write_json  # start-up: beside the run's imports
    from arbibench.protocol.findings_page import findings_markdown  # start-up: as above
    from arbibench.protocol.presets import CorruptionProtocol  # start-up: as above
    from arbibench.protocol.report import claims_table, findings_table, summary_table  # start-up: as above
    from arbibench.protocol.run import protocol_findings, run_protocol  # start-up: as above

    protocol = _protocol(name, quick, demo)
    if isinstance(protocol, CorruptionProtocol):
        fail(ValueError("the corruptions preset compares to the FP twin in `protocol run cifar10-c` (mCA / FP twin)"))
    names = _protocol_models(models, protocol.dataset, model_dir)
    if stored_only and not store.is_file():
        fail(FileNotFoundError(f"no store at {store}: nothing is stored to report (pass the run's --store)"))
    previous = _read_findings_json(compare) if compare is not None else None
    readme_text = _read_readme(readme, markdown) if readme is not None else None
    left_out: dict[str, str] = {}
    try:
        with ResultStore(store, read_only=stored_only) as db:  # --stored-only computes nothing and writes nothing
            if stored_only:
                results = _stored_results(protocol, names, db, left_out, data_dir, model_dir, device)
            else:
                results = run_protocol(protocol, names, db, data_dir=data_dir, model_dir=model_dir, device=device,
                                       console=console)
    except user_errors() as e:
        fail(e)
    if not results:
        fail(ValueError(f"no model's {protocol.label} run is complete in {store}; see `arbibench protocol progress`"))
    console.print(summary_table(results, protocol))
    findings = protocol_findings(results)
    if findings:
        console.print(findings_table(findings))
        if (claims := claims_table(findings, protocol.dataset)) is not None:
            console.print(claims)
    elif markdown is None:
        fail(ValueError("no BNN was evaluated together with its FP twin: include both in --models"))
    # each attack and eps on its own: always in the files, on the terminal with --per-attack
    wanted = per_attack or json_out is not None or markdown is not None
    per_column = protocol_findings(results, per_column=True) if wanted and findings else []
    if per_attack and per_column:
        console.print(findings_table(per_column, per_column=True))
    if json_out is not None:
        document = FindingsDocument(protocol=protocol.label, findings=tuple(f.to_row() for f in findings),
                                    per_column=tuple(f.to_row() for f in per_column))
        atomic_write_json(document.to_dict(), json_out)
        console.print(f"wrote {json_out}")
    if markdown is not None:
        command = " ".join([
            "arbibench protocol report", name, *(["--quick"] if quick else []), *(["--demo"] if demo else []),
            "--models", models, "--store", str(store), *(["--stored-only"] if stored_only else []),
            *([f"--compare {compare}"] if compare is not None else []), "--markdown", str(markdown),
        ])
        page = findings_markdown(results, findings, protocol, command=command, left_out=left_out, previous=previous,
                                 per_column=per_column)
        atomic_write(lambda f: f.write(page.encode()), markdown)
        console.print(f"wrote {markdown}")
        if readme is not None and readme_text is not None:
            _write_readme_paragraph(readme, readme_text, markdown, results, findings, protocol, left_out, per_column)


def _stored_results(protocol: Protocol, names: list[str], db: ResultStore, left_out: dict[str, str],
                    data_dir: Path | None, model_dir: Path | None, device: str | None) -> list[ModelEvaluation]:
    """The models whose run is complete in ``db``, one at a time: a model still on the queue goes to ``left_out``
    with why, and the others are reported."""
    from arbibench.evaluation.stored_only import MissingResultsError, StoredOnlyExecutor  # start-up: as above
    from arbibench.protocol.run import run_protocol  # start-up: as above

    results: list[ModelEvaluation] = []
    stored = db.model_names()
    if not stored:
        raise ValueError(f"{db.path} holds no evaluation: nothing to report (pass the --store of `protocol run`)")
    for model_name in names:
        if model_name not in stored:  # nothing stored: left out at once, without loading and checking the model
            left_out[model_name] = (f"{model_name}: no evaluation of it in {db.path}; run it with `arbibench "
                                    "protocol run` (same preset and --store) first")
            console.print(f"left out {left_out[model_name]}")
            continue
        try:
            results += run_protocol(protocol, [model_name], db, data_dir=data_dir, model_dir=model_dir,
                                    device=device, console=console, backend=StoredOnlyExecutor())
        except MissingResultsError as e:
            left_out[model_name] = str(e)
            console.print(f"left out {e}")
    return results


def _write_readme_paragraph(readme: Path, text: str, page: Path, results: list[ModelEvaluation],
                            findings: list[TwinComparison], protocol: Protocol, left_out: dict[str, str],
                            per_column: list[TwinComparison]) -> None:
    """README's paragraph on the findings page, between its markers, linking the page relative to the README."""
    from arbibench.files import atomic_write_text  # start-up: as in protocol_report
    from arbibench.leaderboard.markdown import with_block  # start-up: as above
    from arbibench.protocol.findings_page import FINDINGS_BEGIN, FINDINGS_END, findings_readme_markdown

    link = Path(os.path.relpath(page.resolve(), readme.resolve().parent)).as_posix()
    paragraph = findings_readme_markdown(results, findings, protocol, link=link, left_out=left_out,
                                         per_column=per_column)
    atomic_write_text(with_block(text, FINDINGS_BEGIN, FINDINGS_END, paragraph), readme)
    console.print(f"wrote the findings paragraph into {readme}")


def _read_readme(path: Path, markdown: Path | None) -> str:
    """The README ``--readme`` names, checked before any work: it needs --markdown and one pair of markers."""
    from arbibench.protocol.findings_page import FINDINGS_BEGIN, FINDINGS_END  # start-up: as in protocol_report

    if markdown is None:
        fail(ValueError("--readme links the findings page: pass --markdown too (e.g. --markdown docs/findings.md)"))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        fail(ValueError(f"--readme {path}: cannot read it ({e})"))
    if text.count(FINDINGS_BEGIN) != 1 or text.count(FINDINGS_END) != 1:
        fail(ValueError(f"--readme {path}: it must hold the markers {FINDINGS_BEGIN} and {FINDINGS_END} once each, "
                        "around the paragraph to write"))
    return text


def _read_findings_json(path: Path) -> dict[str, Any]:
    """The --json of an earlier ``protocol report``, checked as a findings document; anything else is refused
    before any work."""
    from arbibench.cards import FindingsDocument  # start-up: as in protocol_report

    try:
        return FindingsDocument.read(path).to_dict()
    except OSError as e:
        fail(ValueError(f"--compare {path}: cannot read it ({e}); pass the --json of an earlier report"))
    except ValueError as e:
        fail(ValueError(f"--compare: not the --json of `arbibench protocol report`: {e}"))


def _protocol_run_corruptions(
    protocol: CorruptionProtocol, names: list[str], store: Path, model_info: Path, model_dir: Path | None,
    device: str | None, data_dir: Path | None,
) -> None:
    """The cifar10-c preset: every model on every CIFAR-10-C cell through the store, cards, the zoo table."""
    from arbibench.evaluation.store import ResultStore  # start-up: as above
    from arbibench.protocol.cards import write_corruption_card  # start-up: the run loads torch
    from arbibench.protocol.corruptions import run_corruption_protocol  # start-up: as above
    from arbibench.protocol.report import corruption_model_table, corruption_zoo_table  # start-up: as above

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


    from arbibench.attacks import parse_eps  # start-up: the attacks load torch
    from arbibench.cards import parse_card, read_card_json  # start-up: beside the sweep's imports
    from arbibench.data.datasets import load_dataset  # start-up: as above
    from arbibench.evaluation.cards import card_path, write_card  # start-up: as above
    from arbibench.evaluation.inputs import resolve_device  # start-up: as above
    from arbibench.evaluation.store import ResultStore  # start-up: as above
    from arbibench.models.zoo import load_model  # start-up: as above
    from arbibench.protocol.cards import sweep_points  # start-up: as above
    from arbibench.protocol.run import sweep_eps  # start-up: as above

    runner_backend = open_executor(backend, address, workers, worker_threads)
    try:
        chosen = Inference.parse(inference)  # before the model and the data load
        values = [parse_eps(e.strip()) for e in eps.split(",") if e.strip()]
        if not values:
            raise ValueError("--eps needs at least one value")
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
    if model_info is not None:
        path = card_path(model_info, dataset, threat_model, model, inference=chosen)
        if not path.is_file():
            fail(FileNotFoundError(f"no card {path}: run `arbibench protocol run` or `eval` with cards first"))
        try:
            card = replace(parse_card(path, read_card_json(path)), sweep=sweep_points(rows))
        except ValueError as e:
            fail(e)
        console.print(f"updated {write_card(card, path)}")




@protocol_app.command("grid-check")
def protocol_grid_check(
    models: str = typer.Option("resnet20_bnn,resnet20_fp", help="Comma-separated zoo models."),
    n_examples: int = typer.Option(300, "--n-examples", "-n", min=1, help="The first N test images."),
    attack: str = typer.Option("apgd_ce", help="The attack, run in float and on the grid: NAME or NAME(param=...)."),
    eps: str = typer.Option("1/255,2/255,4/255,8/255", help="Comma-separated Linf budgets."),
    dataset: str = typer.Option("cifar10", help="A dataset of 8-bit images (cifar10)."),
    seed: int = typer.Option(0, help="Seed of the attack's random starts (the same for float and the grid)."),
    batch_size: int = typer.Option(200, min=1, help="Images per batch (as eval's, so the float column matches it)."),
    json_out: Path | None = typer.Option(None, "--json", help="Also write every number as JSON to this file."),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1, ... (default: cpu)."),
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    model_dir: Path | None = typer.Option(None, help="Checkpoint folder of models you brought or imported."),
) -> None:
    """Does robustness measured on float inputs hold on 8-bit images? Per model and eps: ACC* in float and on the
    uint8 grid with the paired difference, and the share of float adversarial examples that survive rounding to 8
    bits (arbibench.protocol.grid_check)."""
    from arbibench.attacks import attacks_from_spec, get_threat_model, parse_eps  # start-up: loads torch
    from arbibench.attacks.threat import UINT8  # start-up: as above
    from arbibench.files import atomic_write_json  # start-up: --help stays light
    from arbibench.protocol.grid_check import run_grid_check  # start-up: as above

    names = [m.strip() for m in models.split(",") if m.strip()]
    eps_values = [e.strip() for e in eps.split(",") if e.strip()]
    try:  # no model, a misspelt attack or eps: refused before any model is loaded
        if not names:
            raise ValueError(f"--models {models!r} names no model; pass zoo names, e.g. --models resnet20_bnn")
        attack_objs = attacks_from_spec(attack)
        if len(attack_objs) != 1:
            raise ValueError(f"--attack {attack!r} names {len(attack_objs)} attacks; name one")
        if not eps_values:
            raise ValueError(f"--eps {eps!r} names no budget; pass e.g. --eps 1/255,8/255")
        for e in eps_values:
            get_threat_model("Linf", parse_eps(e), UINT8)
    except ValueError as e:
        fail(e)
    checks = []
    for name in names:
        try:
            check = run_grid_check(name, dataset=dataset, n_examples=n_examples, attack=attack_objs[0],
                                   eps_values=eps_values, seed=seed, batch_size=batch_size, device=device,
                                   data_dir=data_dir, model_dir=model_dir)
        except user_errors() as e:
            fail(e)
        console.print(_grid_table(check))
        checks.append(check.to_dict())
    if json_out is not None:
        console.print(f"wrote {atomic_write_json({'kind': 'grid_check', 'checks': checks}, json_out)}")


def _grid_table(check: Any) -> Table:
    """One model's grid check as a table: percentages with their 95% intervals."""
    def pct(e: Any) -> str:
        return f"{100 * e.value:.1f} [{100 * e.low:.1f}, {100 * e.high:.1f}]"

    table = Table("eps", "ACC* float", "ACC* uint8 grid", "grid - float (paired)", "float examples surviving",
                  title=f"{check.model_name}: {check.attack['name']} on the first {check.n_images} {check.dataset} "
                  f"test images, clean {100 * check.clean_acc.value:.1f}%", title_justify="left")
    for r in check.rows:
        survival = "-" if r.survival is None else f"{r.survived}/{r.float_fooled} = {pct(r.survival)}"
        table.add_row(r.eps_text, pct(r.acc_float), pct(r.acc_grid), pct(r.difference), survival)
    return table


@protocol_app.command("deploy-check")
def protocol_deploy_check(
    name: str = typer.Argument("cifar10", help="The preset whose images and attacks are used: cifar10, cifar10-l2."),
    models: str = typer.Option("all", help="Comma-separated zoo BNNs, or 'all' (every binary CIFAR-10 model)."),
    quick: bool = typer.Option(False, help="The preset's laptop variant (smaller subsets, 1000 queries)."),
    attacks: str | None = typer.Option(None, help="Comma-separated attacks of the preset (default: all of them)."),
    clean_images: int | None = typer.Option(
        None, min=1, help="Also measure clean agreement on the first N test images (10000: the whole test set)."
    ),
    backend: str = typer.Option("auto", help="The deployed network's backend: auto, kernel, numba or emulator."),
    model_info: Path = typer.Option(Path("model_info"), help="Deploy cards go to <model-info>/<dataset>/deploy/."),
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or the cache."),
) -> None:
    """Does robustness measured on the float simulation hold for the deployed, bit-packed BNN? Clean agreement,
    the share of the simulation's adversarial examples that fool the deployed network, and Square/HSJA/RayS run
    against each (arbibench.protocol.deploy_check)."""
    from arbibench.cards import ONES_PADDING  # start-up: --help stays light
    from arbibench.deploy import get_conv_kernel  # start-up: the deployed network loads torch
    from arbibench.files import atomic_write_json  # start-up: --help stays light
    from arbibench.models.methods import get_method  # start-up: the presets load torch
    from arbibench.models.zoo import ZOO  # start-up: the zoo loads torch
    from arbibench.protocol.deploy_check import check_attacks, run_deploy_check  # start-up: loads torch
    from arbibench.protocol.presets import Protocol  # start-up: as above

    protocol = _protocol(name, quick)
    if not isinstance(protocol, Protocol):
        fail(ValueError(f"{name!r} has no attacks to check; use cifar10 or cifar10-l2"))
    if models.strip() == "all":
        names = [n for n, e in ZOO.items() if e.dataset == protocol.dataset and e.shipped
                 and get_method(e.method).is_binary]
    else:
        names = _named_models(models)
    chosen = None if attacks is None else [a.strip() for a in attacks.split(",") if a.strip()]
    try:  # a misspelt attack or a backend this machine lacks: refused before any model is loaded
        check_attacks(protocol, chosen)
        get_conv_kernel(backend)
    except user_errors() as e:
        fail(e)
    table = Table("model", "clean agreement", "pad=+1 agreement", "transfer to deployed (min share)",
                  "direct: deployed - simulation ACC*")
    for model_name in names:
        try:
            card = run_deploy_check(model_name, protocol, data_dir=data_dir, attacks=chosen,
                                    clean_images=clean_images, backend=backend, log=console.log)
        except user_errors() as e:
            fail(e)
        path = model_info / protocol.dataset / "deploy" / f"{model_name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(card.to_dict(), path)
        shares = [t.share for t in card.transfer_to_deployed if t.share is not None]
        zero, padded = card.clean(), card.clean(ONES_PADDING)
        table.add_row(
            model_name, "" if zero is None else f"{zero.agreement:.2%}",
            "" if padded is None else f"{padded.agreement:.2%}",
            "" if not shares else f"{min(shares):.2%}",
            ", ".join(f"{d.attack} {d.difference.value:+.3f} [{d.difference.low:+.3f}, {d.difference.high:+.3f}]"
                      for d in card.direct_attacks),
        )
        console.print(f"wrote {path}")
    console.print(table)


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


@protocol_app.command("progress")
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
    protocol = _on_grid(_protocol(name, quick, demo), grid)
    if not isinstance(protocol, Protocol):
        fail(ValueError(f"{name!r} has no attack evaluations to count; use cifar10, cifar10-l2, imagenet, imagenet-l2"))
    names = _protocol_models(models, protocol.dataset, model_dir)
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
    from arbibench.protocol.progress import progress_json  # start-up: planning loads the models

    return progress_json(p)


def _read_progress(protocol: Protocol, names: list[str], store: Path,
                   folders: tuple[Path, Path | None, Path | None], inference: str, sweep: bool
                   ) -> list[ProtocolProgress]:
    """Each model's progress in ``store``; ``folders`` are the run's model-info, model and data folders."""
    from arbibench.evaluation.store import ResultStore  # start-up: the store loads torch
    from arbibench.protocol.progress import protocol_progress  # start-up: planning loads the models

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
    from arbibench.protocol.projection import project_model  # start-up: the presets load torch

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
    table = Table("model", "batches done", "hours so far", "hours left (projected)", "not started")
    for p in found:
        hours, unknown = p.hours_left()
        gpu = f" ({p.gpu_done} on a GPU)" if p.gpu_done else ""
        table.add_row(p.model_name, f"{p.done}/{p.batches}{gpu}", f"{p.hours_so_far:.2f}", f"{hours:.2f}",
                      str(unknown) if unknown else "")
        if evaluations:
            console.print(_evaluations_table(p))
    console.print(table)
    console.print("hours so far and left are a CPU's: batches a GPU computed count as done and price nothing. "
                  "hours left: each evaluation's remaining batches at its own cost per batch; one not started yet at "
                  "the dearer of the same evaluation's dearest cost per image on another model of the store and the "
                  "model's own quick card in --model-info (at the full budget), else at the same attack's cost per "
                  "image elsewhere in the run, else at the dearest cost per batch measured so far, or not counted "
                  "when nothing is measured; eps* not counted")
