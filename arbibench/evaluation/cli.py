"""``arbibench eval`` and ``arbibench import``: the evaluation package owns the commands that evaluate a model and
bring one in, and the pieces every evaluating command shares (its user errors, ``--backend``); ``arbibench/cli.py``
only wires them in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from arbibench.files import check_writable
from arbibench.inference import Inference
from arbibench.terminal import FILE_METAVAR, comma_list, console, fail, output_file
from arbibench.terminal import USER_ERRORS as BASE_ERRORS

if TYPE_CHECKING:
    from arbibench.evaluation.executors import Executor

# The command-line help of the backend options, shared by `eval`, `protocol run` and `sweep`.
BACKEND_HELP = ("Where the store batches are computed: local (this process), processes (worker processes on this "
                "machine: more cores, or a GPU that one process may leave idle) or ray (a Ray cluster); same results.")
ADDRESS_HELP = ("--backend ray: the cluster's head, host:port or 'auto' (default $RAY_ADDRESS; neither: a private "
                "Ray on this machine, on 127.0.0.1).")
INFERENCE_HELP = ("simulation: the float model answers everything (as always); deployed: the bit-packed network of a "
                  "BNN (arbibench.deploy) answers the clean pass and every black-box query and decides every outcome, "
                  "white-box attacks taking their gradients on the simulation. Part of the store key and the card.")
GRID_HELP = ("float: any pixel value (as always); uint8: every adversarial example on the k/255 grid of 8-bit images "
             "inside the eps box, what a camera, a PNG file and a deployed network's first layer see (Linf only). Part "
             "of the store key and the card.")
WORKERS_HELP = ("--backend processes or ray: worker processes or actors (default: this machine's or the cluster's "
                "CPUs / --worker-threads).")
WORKER_THREADS_HELP = ("--backend processes or ray: torch threads per worker (default: this process's, as a local run "
                       "uses; another count may round differently on a CPU).")
SPEC_HELP = (
    "Attack specs, comma-separated, run in this order: NAME or NAME(param=value, ...), e.g. "
    "\"square(max_queries=300),pgd(steps=20)\"; parameters are checked by the attack's config. AutoAttack's names "
    "(apgd-ce, apgd-t, fab-t) are accepted; NAME@SURROGATE (e.g. pgd@identity) attacks through another BNN gradient "
    "estimator, NAME_adaptive through several. `arbibench attacks list` shows every attack with its defaults."
)


def user_errors() -> tuple[type[Exception], ...]:
    """What eval, import and the protocol commands report as one line instead of a traceback. A function, not a
    constant: the store's and the downloader's errors live in modules that load torch, which ``--help`` must not."""
    from arbibench.data.download import DownloadError  # start-up: the data package loads torch
    from arbibench.deploy.build import KernelUnavailableError  # start-up: beside DownloadError
    from arbibench.deploy.numba_kernel import NumbaUnavailableError  # start-up: as above (numba itself is not loaded)
    from arbibench.evaluation.store import StoreError  # start-up: beside DownloadError, looked up when a command runs

    # the deployed network's backends: no C compiler for --backend kernel, no numba for --backend numba
    return (*BASE_ERRORS, DownloadError, StoreError, KernelUnavailableError, NumbaUnavailableError)


def open_executor(
    backend: str, address: str | None, workers: int | None, worker_threads: int | None, model_dir: Path | None = None
) -> Executor | None:
    """The backend of ``--backend`` (``None``: local), or exit with the reason (e.g. Ray not installed)."""
    from arbibench.evaluation.executor_registry import get_executor  # start-up: the executors load torch

    try:
        return get_executor(backend, address=address, workers=workers, worker_threads=worker_threads,
                           model_dir=model_dir)
    except user_errors() as e:
        fail(e)


def check_outputs(*outputs: tuple[str, Path | None], folders: tuple[str, ...] = ()) -> None:
    """Each ``(option, path)`` a command writes at its end (``--json``, ``--markdown``; the options in ``folders``
    name folders, e.g. ``--model-info``), checked before any work: a folder in a file's place or a folder that
    cannot be written is one error naming the option, not a traceback after an hour of attacks."""
    for option, path in outputs:
        if path is None:
            continue
        try:
            check_writable(path, folder=option in folders)
        except OSError as e:
            fail(ValueError(f"{option} {path}: {e.strerror or e}"))


def check_data_dir(data_dir: Path | None) -> None:
    """An explicit ``--data-dir`` must exist: a misspelt folder is named as such, not created and downloaded into
    (leave the option out for $ARBIBENCH_DATA or the download to ~/.cache/arbibench)."""
    if data_dir is not None and not data_dir.is_dir():
        what = "is a file, not a folder" if data_dir.exists() else "does not exist"
        fail(ValueError(f"--data-dir {data_dir} {what}; pass an existing folder (CIFAR-10: the one holding cifar10/; "
                        "ImageNet: your validation images), or leave it out for $ARBIBENCH_DATA or the download to "
                        "~/.cache/arbibench"))


def _radius(option: str, text: str) -> float:
    """``text`` read as an eps (0.031 or 8/255); a bad one ends the command with one error naming ``option``."""
    from arbibench.attacks import parse_eps  # start-up: the attacks load torch

    try:
        return parse_eps(text)
    except ValueError as e:
        fail(ValueError(f"{option}: {e}"))


def eval_(
    model: str = typer.Option(..., "--model", "-m", help="Zoo model name (see `arbibench zoo list`)."),
    attacks: str = typer.Option(
        "fgsm,pgd",
        help="White-box fgsm, pgd, mifgsm, cw_linf, apgd_ce, autoattack, ...; black-box transfer, square, simba, nes, "
        "hsja, rays. " + SPEC_HELP,
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
    json_out: Path | None = typer.Option(None, "--json", parser=output_file, metavar=FILE_METAVAR,
                                         help="Also write the result as JSON to this file."),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1, ... (default: cpu)."),
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    checks: bool = typer.Option(True, help="Run the gradient-masking checks after the attacks and show their flags."),
    model_dir: Path | None = typer.Option(
        None, help="Checkpoint folder: ImageNet weights you bring, or the folder `arbibench import` wrote into."
    ),
    model_info: Path | None = typer.Option(None, help="Also write the model card under this folder."),
    eps_star: str = typer.Option(
        "",
        help="Comma-separated attacks for the smallest adversarial perturbation per image (eps*), e.g. apgd_ce,fab: "
        "median eps* with its 95% interval and the robust-accuracy-vs-eps curve (in --json and the card).",
    ),
    eps_star_max: str | None = typer.Option(
        None, help="--eps-star: the largest eps the search tries; default 2 x --eps."
    ),
    eps_star_rounds: int | None = typer.Option(
        None, help="--eps-star: bisection rounds after the descent to --eps-star-floor (resolution: a factor "
        "2^(1/2^rounds)); default 3.",
    ),
    eps_star_floor: str | None = typer.Option(
        None, help="--eps-star: the smallest eps the search tries; an image fooled even there is reported censored "
        "(\"< floor\"), never as the floor; default 1e-3/255.",
    ),
    eps_star_draws: int | None = typer.Option(
        None, help="--eps-star: random sign corners per image tried at every radius before the attacks (0: none); "
        "they find the tiny-radius examples of sign networks that gradients miss; default 50.",
    ),
    backend: str = typer.Option("local", help=BACKEND_HELP),
    address: str | None = typer.Option(None, help=ADDRESS_HELP),
    workers: int | None = typer.Option(None, help=WORKERS_HELP),
    worker_threads: int | None = typer.Option(None, help=WORKER_THREADS_HELP),
    inference: str = typer.Option(Inference.SIMULATION.value, help=INFERENCE_HELP),
    grid: str = typer.Option("float", help=GRID_HELP),
) -> None:
    """Evaluate a zoo model under white- and black-box attacks: ACC, ACC*, ACC_norm, RS, worst case, queries.

    Only correctly classified images are attacked; every adversarial batch is verified against the threat model
    before it counts, and each finished batch is committed to the store, so an interrupted run resumes.
    """
    from arbibench.attacks import attacks_from_spec  # start-up: the attacks load torch
    from arbibench.evaluation.benchmark import benchmark, write_eval_card  # start-up: so does the evaluation

    try:
        attack_objs = attacks_from_spec(attacks)
    except ValueError as e:
        fail(ValueError(f"--attacks {attacks!r}: {e}"))
    eps_value = _radius("--eps", eps)
    try:
        star_names = comma_list(eps_star, "--eps-star")
    except ValueError as e:
        fail(e)
    given = [option for option, value in (
        ("--eps-star-max", eps_star_max), ("--eps-star-rounds", eps_star_rounds),
        ("--eps-star-floor", eps_star_floor), ("--eps-star-draws", eps_star_draws)) if value is not None]
    if given and not star_names:  # as --workers without --backend: a setting of nothing is a mistake
        fail(ValueError(f"{' and '.join(given)} apply to --eps-star; add --eps-star or drop them"))
    star: dict[str, Any] = {}  # the search settings given, by benchmark()'s names; the others keep its defaults
    if eps_star_max is not None:
        star["eps_star_max"] = _radius("--eps-star-max", eps_star_max)
    if eps_star_floor is not None:
        star["eps_star_floor"] = _radius("--eps-star-floor", eps_star_floor)
    if eps_star_rounds is not None:
        star["eps_star_rounds"] = eps_star_rounds
    if eps_star_draws is not None:
        star["eps_star_draws"] = eps_star_draws
    check_outputs(("--json", json_out), ("--model-info", model_info), folders=("--model-info",))
    check_data_dir(data_dir)
    executor = open_executor(backend, address, workers, worker_threads, model_dir)
    try:
        result = benchmark(
            model,
            n_examples,
            dataset,
            threat_model,
            eps_value,
            attack_objs,
            data_dir=data_dir,
            device=device,
            batch_size=batch_size,
            seed=seed,
            subset_seed=subset_seed,
            store=store,
            console=console,
            checks=checks,
            model_dir=model_dir,
            eps_star=star_names,
            backend=executor,
            inference=inference,
            grid=grid,
            **star,
        )
        card = None if model_info is None else write_eval_card(result, model_info)
    except user_errors() as e:
        fail(e)
    finally:
        if executor is not None:
            executor.close()
    console.print(result.table())
    for note in result.notes:
        console.print(f"note: {note}")
    for flag, meaning in result.flags.items():
        console.print(f"[yellow]flag {flag}[/]: {meaning}")
    if card is not None:
        path, written = card
        console.print(f"wrote {path}" if written else f"note: kept {path}: the full-protocol card of the same "
                      "checkpoint is not replaced by this evaluation's card; pass another --model-info to write it")
    if json_out is not None:
        try:
            console.print(f"wrote {result.save_json(json_out)}")
        except OSError as e:  # checked before the work, yet the disk may fill up meanwhile
            fail(e)


def import_(
    checkpoint: Path = typer.Argument(..., help="The paper's checkpoint file (.pth.tar, .pth, .pt, .th, .tar)."),
    source: str = typer.Option(
        ..., "--from", help="Whose file it is: recu, rbnn, siman, biper, irnet, reactnet (README: supported sources)."
    ),
    arch: str = typer.Option(..., help="Its architecture, e.g. resnet20, resnet20_bireal (rbnn), resnet18_imagenet."),
    name: str = typer.Option(..., help="The name to evaluate it under (must not be a zoo model's)."),
    model_dir: Path | None = typer.Option(
        None, help="User model folder to write into; default $ARBIBENCH_MODELS or ~/.cache/arbibench/models."
    ),
    trust_pickle: bool = typer.Option(
        False,
        "--trust-pickle",
        help="Read the pickle file with torch.load(weights_only=True, map_location='cpu'): PyTorch's restricted "
        "unpickler, which builds only tensors and plain containers. Without it no pickle is read.",
    ),
    freq: float | None = typer.Option(
        None, help="BiPer only: the frequency omega of sign(sin(omega w)); the file does not hold it."
    ),
    expect_acc: float | None = typer.Option(
        None, help="The paper's top-1 (%); a measured clean accuracy more than 2 points away is an error."
    ),
    n_examples: int | None = typer.Option(
        None, "--n-examples", "-n",
        help="Test images of the clean-accuracy check; default the first 1000, or all the data folder holds if fewer.",
    ),
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    overwrite: bool = typer.Option(False, help="Replace a model of the same name in --model-dir."),
) -> None:
    """Import a published BNN's own checkpoint: convert it, check its clean accuracy, write safetensors + card.

    Then `arbibench eval --model NAME --model-dir DIR` (and benchmark(), protocol run, zoo list) use it like a zoo
    model. Nothing is written when a check fails.
    """
    check_data_dir(data_dir)
    from arbibench.evaluation.model_import import (  # start-up: the importers load torch
        DEFAULT_CHECK_IMAGES,
        import_checkpoint,
    )
    from arbibench.models.importers import PickleRefusedError  # start-up: beside import_checkpoint

    options = {} if freq is None else {"freq": freq}
    errors: tuple[type[Exception], ...] = (PickleRefusedError, *user_errors())
    try:
        card_path = import_checkpoint(
            source, checkpoint, arch, name, model_dir, trust_pickle=trust_pickle, options=options,
            expect_acc=expect_acc, n_examples=n_examples, data_dir=data_dir, overwrite=overwrite,
        )
    except errors as e:
        fail(e)

    card = json.loads(card_path.read_text())
    console.print(
        f"imported {card['source']} {card['official_model']} as [bold]{name}[/]: clean accuracy "
        f"{100 * card['clean_acc']:.2f}% on the first {card['clean_acc_n_examples']} test images "
        f"(paper: {card['paper_acc']}%); wrote {card_path} and {card['checkpoint']}"
    )
    if n_examples is None and card["clean_acc_n_examples"] < DEFAULT_CHECK_IMAGES:
        console.print(
            f"the check used all {card['clean_acc_n_examples']} test images the data folder holds (the default is "
            f"{DEFAULT_CHECK_IMAGES})"
        )
