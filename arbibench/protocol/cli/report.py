"""``arbibench protocol report``: ARBiBench's findings, each BNN against its FP twin, from the outcomes a run stored;
the findings document (``--json``) computed by the protocol, its page (``--markdown``) rendered by the leaderboard."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from arbibench.cards import FindingsDocument, shipped_sha256
from arbibench.evaluation.cli import check_data_dir, check_outputs, user_errors
from arbibench.files import atomic_write, atomic_write_json
from arbibench.leaderboard.findings import findings_markdown
from arbibench.leaderboard.grid import load_grid_cards
from arbibench.protocol.cli import common
from arbibench.protocol.cli.common import DEMO_HELP
from arbibench.terminal import FILE_METAVAR, console, fail, output_file

if TYPE_CHECKING:
    from arbibench.evaluation.store import ResultStore
    from arbibench.protocol.presets import Protocol
    from arbibench.protocol.run import ModelEvaluation


def protocol_report(
    name: str = typer.Argument("cifar10", help="cifar10, cifar10-l2, imagenet or imagenet-l2."),
    models: str = typer.Option("all", help="Comma-separated zoo names, or 'all' (every shipped model of the dataset)."),
    quick: bool = typer.Option(False, "--quick", help="The laptop variant (smaller subsets and budgets)."),
    demo: bool = typer.Option(False, "--demo", help=DEMO_HELP),
    store: Path = typer.Option(Path("arbibench.db"), help="SQLite result store of `protocol run`."),
    model_dir: Path | None = typer.Option(None, help="Checkpoint folder of imported or user-supplied models."),
    json_out: Path | None = typer.Option(
        None, "--json", parser=output_file, metavar=FILE_METAVAR,
        help="Also write the findings as JSON to this file (per setting, and per attack and eps)."
    ),
    stored_only: bool = typer.Option(
        False, "--stored-only", help="Compute nothing: report the models whose run is complete in --store and list "
        "the others as left out (a report over a full-protocol store must not start hours of attacks). The test "
        "images are still read, never downloaded: the model checks and the gradient-masking checks run on them."
    ),
    per_attack: bool = typer.Option(
        False, "--per-attack", help="Also print each attack and each eps of the sweep against the FP twin on its own "
        "(what each setting's row averages)."
    ),
    markdown: Path | None = typer.Option(
        None, parser=output_file, metavar=FILE_METAVAR,
        help="Also write the dated findings page (markdown) to this file, e.g. docs/findings-cifar10.md; it "
        "compares per setting and per attack and eps."
    ),
    compare: Path | None = typer.Option(
        None, help="The --json of an earlier report (e.g. the quick protocol's): the page sets each verdict beside it."
    ),
    model_info: Path = typer.Option(
        Path("model_info"), help="Grid-check cards (<model-info>/<dataset>/grid_check/, `protocol grid-check "
        "--model-info`): the page and --json say what the 8-bit grid changes for the compared models; none there, no "
        "such section."
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
    from arbibench.evaluation.store import ResultStore  # start-up: the run loads torch
    from arbibench.protocol.cli.tables import claims_table, findings_table, summary_table  # start-up: as above
    from arbibench.protocol.presets import CorruptionProtocol  # start-up: as above
    from arbibench.protocol.report import earlier_claims, findings_document  # start-up: as above
    from arbibench.protocol.run import protocol_findings, run_protocol  # start-up: as above

    protocol = common.protocol_preset(name, quick, demo)
    if isinstance(protocol, CorruptionProtocol):
        fail(ValueError("the corruptions preset compares to the FP twin in `protocol run cifar10-c` (mCA / FP twin)"))
    names = common.protocol_models(models, protocol.dataset, model_dir)
    _check_paths(store if stored_only else None, json_out, markdown, data_dir, protocol.dataset)
    previous = _read_findings_json(compare) if compare is not None else None
    try:  # a malformed grid card is refused before any work
        grid_cards = load_grid_cards(model_info) if json_out is not None or markdown is not None else []
    except ValueError as e:
        fail(e)
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
    if json_out is None and markdown is None:
        return
    document = findings_document(results, findings, protocol, per_column=per_column, left_out=left_out, page=markdown,
                                 grid_cards=grid_cards, pins=shipped_sha256())
    if json_out is not None:
        _write_json(document, json_out)
    if markdown is not None:
        command = " ".join([
            "arbibench protocol report", name, *(["--quick"] if quick else []), *(["--demo"] if demo else []),
            "--models", models, "--store", str(store), *(["--stored-only"] if stored_only else []),
            *([f"--compare {compare}"] if compare is not None else []),
            *([f"--model-info {model_info}"] if document.get("grid") is not None else []), "--markdown", str(markdown),
        ])
        earlier = None if previous is None else earlier_claims(previous, protocol.dataset)
        _write_page(document, markdown, command, previous, earlier, json_out)


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


def _check_paths(stored: Path | None, json_out: Path | None, markdown: Path | None, data_dir: Path | None,
                 dataset: str) -> None:
    """What the report reads and writes, checked before any work: the store of --stored-only (``stored``), the
    files it writes, and the test images. --stored-only runs no attack, yet reads the images (the model checks and
    the gradient-masking checks run on them); it starts no 160 MB download for them."""
    from arbibench.data.cifar10 import default_data_dir, has_cifar10  # start-up: the data package loads torch

    if stored is not None and not stored.is_file():
        fail(FileNotFoundError(f"no store at {stored}: nothing is stored to report (pass the run's --store)"))
    check_outputs(("--json", json_out), ("--markdown", markdown))
    check_data_dir(data_dir)
    if stored is not None and dataset == "cifar10" and not has_cifar10("test", data_dir):
        fail(FileNotFoundError(
            f"--stored-only reads the CIFAR-10 test images (the model checks and the gradient-masking checks run on "
            f"them) and downloads nothing, and {default_data_dir(data_dir)} holds none: set ARBIBENCH_DATA or pass "
            "--data-dir (the folder holding cifar10/), or let `arbibench eval` download it first"))


def _write_json(document: dict[str, Any], path: Path) -> None:
    """``--json``: the findings document, what ``--compare`` and ``leaderboard markdown --findings`` read."""
    try:  # checked before the work, yet the disk may fill up meanwhile
        atomic_write_json(document, path)
    except OSError as e:
        fail(e)
    console.print(f"wrote {path}")


def _write_page(document: dict[str, Any], path: Path, command: str, previous: dict[str, Any] | None,
                earlier: list[dict[str, Any]] | None, json_out: Path | None) -> None:
    """``--markdown``: the dated page, rendered by the leaderboard; README's paragraph on it is the leaderboard's."""
    page = findings_markdown(document, command=command, previous=previous, earlier_claims=earlier)
    try:
        atomic_write(lambda f: f.write(page.encode()), path)
    except OSError as e:
        fail(e)
    console.print(f"wrote {path}")
    then = "" if json_out is not None else "add --json FILE to this report, then "
    console.print(f"README's paragraph on the page: {then}arbibench leaderboard markdown --readme README.md "
                  f"--findings {json_out or 'FILE'}", highlight=False)


def _read_findings_json(path: Path) -> dict[str, Any]:
    """The --json of an earlier ``protocol report``, checked as a findings document; anything else is refused
    before any work."""
    try:
        return FindingsDocument.read(path).to_dict()
    except OSError as e:
        fail(ValueError(f"--compare {path}: cannot read it ({e}); pass the --json of an earlier report"))
    except ValueError as e:
        fail(ValueError(f"--compare: not the --json of `arbibench protocol report`: {e}"))
