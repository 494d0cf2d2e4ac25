"""The ``arbibench`` command line: wiring of each package's commands (protocol, attacks, leaderboard) plus eval,
train, import, zoo and corruptions. Calls only the public API."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.progress import Progress
from rich.table import Table

from arbibench.attacks import attacks_from_spec, parse_eps
from arbibench.attacks.cli import SPEC_HELP, attacks_app
from arbibench.data.cifar10c import CORRUPTIONS, download_cifar10c
from arbibench.data.corruptions.generate import generate_cifar10c
from arbibench.data.corruptions.grid import corruption_grid
from arbibench.evaluation.backends import ADDRESS_HELP, BACKEND_HELP, WORKER_THREADS_HELP, WORKERS_HELP
from arbibench.evaluation.benchmark import benchmark
from arbibench.evaluation.model_import import import_checkpoint
from arbibench.faults import fault_point
from arbibench.leaderboard.cli import leaderboard_app
from arbibench.models.importers import PickleRefusedError
from arbibench.models.zoo import export_checkpoint, zoo_rows
from arbibench.protocol.cli import USER_ERRORS, console, fail, open_backend, protocol_app, sweep
from arbibench.train import AT_SUFFIX, default_recipe
from arbibench.train import train as run_training

app = typer.Typer(
    help="arbibench: adversarial robustness benchmark for binarized neural networks (ARBiBench protocol).",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """arbibench: adversarial robustness benchmark for binarized neural networks (ARBiBench protocol)."""


@app.command()
def train(
    arch: str = typer.Option("resnet20", help="Backbone architecture."),
    method: str = typer.Option(
        "fp", help="Method preset: fp, bnn, xnor, dorefa, bireal, irnet, reactnet, xnorpp."
    ),
    recipe_kind: str = typer.Option(
        "finetune",
        "--recipe",
        help="finetune: cross-entropy from the FP twin's weights; kd: few-epoch two-step distillation from the FP "
        "twin (binary activations first, then binary weights; ReActNet's distributional loss); at: fast adversarial "
        "training at Linf 8/255 (FGSM from a random start) into <arch>_<method>_at, a BNN distilled from "
        "<arch>_fp_at, PGD-10 checked after every epoch.",
    ),
    epochs: int | None = typer.Option(None, help="Epochs; default: the method's CPU recipe."),
    out: Path = typer.Option(
        Path("runs"), help="Folder for run folders; the run goes to OUT/<arch>_<method> (OUT/<arch>_<method>_at)."
    ),
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
    try:
        recipe = default_recipe(method, paper=paper, kind=recipe_kind)
    except USER_ERRORS as e:
        fail(e)
    recipe.arch, recipe.seed = arch, seed
    if epochs is not None:
        recipe.epochs = epochs
    if lr is not None:
        recipe.lr = lr
    if init_from is not None:
        recipe.init_from = str(init_from)
    name = f"{arch}_{method}{AT_SUFFIX if recipe.adversarial else ''}"
    run_dir = out / name
    try:
        summary = run_training(recipe, run_dir, data_dir, log=console.log)
    except USER_ERRORS as e:
        fail(e)
    console.print(
        f"[bold]{name}[/]: clean accuracy {summary['clean_acc']:.4f} on the 10,000 test images "
        f"({summary['train_time_s'] / 60:.1f} min of training)"
    )
    if export:
        fault_point("train.export")  # crash tests kill here (arbibench.faults)
        try:
            card = export_checkpoint(run_dir, name, zoo_dir)
        except USER_ERRORS as e:
            fail(e)
        console.print(f"exported {card}")


@app.command("eval")
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
    json_out: Path | None = typer.Option(None, "--json", help="Also write the result as JSON to this file."),
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
    eps_star_max: str | None = typer.Option(None, help="Largest eps the eps* search tries; default 2 x --eps."),
    eps_star_rounds: int = typer.Option(6, help="Bisection rounds of the eps* search (resolution eps_max / 2^rounds)."),
    backend: str = typer.Option("local", help=BACKEND_HELP),
    address: str | None = typer.Option(None, help=ADDRESS_HELP),
    workers: int | None = typer.Option(None, help=WORKERS_HELP),
    worker_threads: int | None = typer.Option(None, help=WORKER_THREADS_HELP),
) -> None:
    """Evaluate a zoo model under white- and black-box attacks: ACC, ACC*, ACC_norm, RS, worst case, queries.

    Only correctly classified images are attacked; every adversarial batch is verified against the threat model
    before it counts, and each finished batch is committed to the store, so an interrupted run resumes.
    """
    try:
        attack_objs = attacks_from_spec(attacks)
    except ValueError as e:
        fail(ValueError(f"--attacks {attacks!r}: {e}"))
    runner_backend = open_backend(backend, address, workers, worker_threads, model_dir)
    try:
        result = benchmark(
            model,
            n_examples,
            dataset,
            threat_model,
            parse_eps(eps),
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
            to_disk=model_info is not None,
            model_info=model_info or "model_info",
            eps_star=[a.strip() for a in eps_star.split(",") if a.strip()],
            eps_star_max=None if eps_star_max is None else parse_eps(eps_star_max),
            eps_star_rounds=eps_star_rounds,
            backend=runner_backend,
        )
    except USER_ERRORS as e:
        fail(e)
    finally:
        if runner_backend is not None:
            runner_backend.close()
    console.print(result.table())
    for note in result.notes:
        console.print(f"note: {note}")
    for flag, meaning in result.flags.items():
        console.print(f"[yellow]flag {flag}[/]: {meaning}")
    if json_out is not None:
        console.print(f"wrote {result.save_json(json_out)}")


@app.command("import")
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
    n_examples: int = typer.Option(1000, "--n-examples", "-n", help="Test images of the clean-accuracy check."),
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    overwrite: bool = typer.Option(False, help="Replace a model of the same name in --model-dir."),
) -> None:
    """Import a published BNN's own checkpoint: convert it, check its clean accuracy, write safetensors + card.

    Then `arbibench eval --model NAME --model-dir DIR` (and benchmark(), protocol run, zoo list) use it like a zoo
    model. Nothing is written when a check fails.
    """
    options = {} if freq is None else {"freq": freq}
    try:
        card_path = import_checkpoint(
            source, checkpoint, arch, name, model_dir, trust_pickle=trust_pickle, options=options,
            expect_acc=expect_acc, n_examples=n_examples, data_dir=data_dir, overwrite=overwrite,
        )
    except (PickleRefusedError, *USER_ERRORS) as e:
        fail(e)

    card = json.loads(card_path.read_text())
    console.print(
        f"imported {card['source']} {card['official_model']} as [bold]{name}[/]: clean accuracy "
        f"{100 * card['clean_acc']:.2f}% on the first {card['clean_acc_n_examples']} test images "
        f"(paper: {card['paper_acc']}%); wrote {card_path} and {card['checkpoint']}"
    )


zoo_app = typer.Typer(help="The model zoo: list models and their checkpoints.", no_args_is_help=True)
app.add_typer(zoo_app, name="zoo")


@zoo_app.command("list")
def zoo_list(
    dataset: str | None = typer.Option(None, help="Only this dataset's models (cifar10, imagenet); default: all."),
    model_dir: Path | None = typer.Option(
        None, help="Folder to look for checkpoints and imported models in; default: the package's checkpoint folder "
        "(imported models: the user model folder)."
    ),
) -> None:
    """List the zoo: name, dataset, method, backbone, parameters, clean accuracy and whether the checkpoint is present.

    Models registered but not shipped (the ImageNet ResNet-18s) show "not shipped"; put your own
    <name>.safetensors in --model-dir (and pass model_dir= to load_model) to use them.
    """
    try:
        rows = zoo_rows(model_dir, dataset)
    except USER_ERRORS as e:
        fail(e)
    table = Table(title="arbibench model zoo")
    for col in ("name", "dataset", "method", "source", "backbone", "params", "clean accuracy", "checkpoint present"):
        table.add_column(col, no_wrap=col == "name")
    for row in rows:
        acc = "-" if row["clean_acc"] is None else f"{100 * row['clean_acc']:.2f}%"
        if row["shipped"]:
            present = "yes" if row["present"] else "[red]missing[/]"
        else:
            present = "yes (user file)" if row["present"] else "not shipped"
        if row["source"] != "arbibench":
            present = "yes (imported)" if row["present"] else "[red]missing[/]"
        table.add_row(
            row["name"], row["dataset"], row["method"], row["source"], row["arch"], f"{row['params']:,}", acc, present
        )
    console.print(table)
    console.print(
        "clean accuracy: on the 10,000 test images, from each model card (imported models: on the first test "
        "images of the import check). source: arbibench's zoo, or the paper whose checkpoint was imported."
    )


corruptions_app = typer.Typer(
    help="CIFAR-10-C common corruptions: regenerate them from CIFAR-10 or download the official files.",
    no_args_is_help=True,
)
app.add_typer(corruptions_app, name="corruptions")


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
    names = list(CORRUPTIONS) if corruptions.strip() == "all" else [c.strip() for c in corruptions.split(",")]
    t0 = time.perf_counter()
    try:
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("corrupting", total=5 * len(names))
            folder, manifest = generate_cifar10c(
                n_examples, seed=seed, data_dir=data_dir, out=out, corruptions=[n for n in names if n], force=force,
                on_cell=lambda name, s, n: bar.update(task, advance=1, description=f"{name} {s}"),
            )
        if grid is not None:
            grid_data = data_dir if out is None else None
            if out is not None and out.name != "CIFAR-10-C":
                raise ValueError("--grid reads DATA_DIR/CIFAR-10-C; use it without --out or name --out CIFAR-10-C")
            console.print(f"wrote {corruption_grid(grid, grid_data if out is None else out.parent)}")
    except (*USER_ERRORS, FileExistsError) as e:
        fail(e)
    took = time.perf_counter() - t0
    console.print(
        f"regenerated CIFAR-10-C in {folder}: {len(manifest['corruptions'])} corruptions x 5 severities x "
        f"{manifest['n_examples']} images, seed {manifest['seed']} "
        + (f"({manifest['seconds']:.0f} s)" if took > 1 else "(already there; --force to redo)")
    )


@corruptions_app.command("download")
def corruptions_download(
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
) -> None:
    """Download the official CIFAR-10-C (2.9 GB, Zenodo record 2535967), verify its MD5, extract it atomically."""
    try:
        console.print(f"official CIFAR-10-C in {download_cifar10c(data_dir)}")
    except (*USER_ERRORS, FileExistsError) as e:
        fail(e)


app.add_typer(protocol_app, name="protocol")
app.command("sweep")(sweep)
app.add_typer(attacks_app, name="attacks")
app.add_typer(leaderboard_app, name="leaderboard")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
