"""``arbibench train``: the training recipes own their command; ``arbibench/cli.py`` only wires it in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

import arbibench.train as training
from arbibench.evaluation.cli import check_data_dir, check_outputs
from arbibench.faults import fault_point
from arbibench.terminal import USER_ERRORS, console, fail
from arbibench.train import side_by_side
from arbibench.train.recipes import KD_BN_BATCHES
from arbibench.train.side_by_side import EXIT_TIME_LIMIT


def train_errors() -> tuple[type[Exception], ...]:
    """What the training commands report as one line; looked up when a command runs (the data package that defines
    DownloadError loads torch, which ``--help`` must not)."""
    from arbibench.data.download import DownloadError  # start-up: the data package loads torch

    return (*USER_ERRORS, DownloadError)


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
        "<arch>_fp_at, PGD-10 checked after every epoch; long: continue the shipped <arch>_<method> for its epoch "
        "budget (60 or 30), the epoch picked on the last 5,000 training images, stopping after 8 without a better one; "
        "paper: the method's own paper's CIFAR-10 recipe at full length (200-400 epochs: for a GPU), every choice "
        "cited in the card.",
    ),
    epochs: int | None = typer.Option(None, help="Epochs; default: the method's CPU recipe."),
    out: Path = typer.Option(
        Path("runs"), help="Folder for run folders; the run goes to OUT/<arch>_<method> (OUT/<arch>_<method>_at)."
    ),
    init_from: str | None = typer.Option(
        None, help="Zoo model name or safetensors file whose matching tensors initialise the model."
    ),
    seed: int = typer.Option(0, help="Seed for initialisation, shuffling and augmentation."),
    step1_epochs: int | None = typer.Option(
        None,
        help="Two-step recipes (kd, at): epochs of step 1 (binary activations, real weights) before binary weights; "
        "0 trains binary weights from the first epoch, to continue a trained BNN given by --init-from.",
    ),
    lr: float | None = typer.Option(None, help="Peak learning rate; default: the method's recipe."),
    val_examples: int | None = typer.Option(
        None, help="Hold out the last N training images to pick the epoch (0: no held-out selection); default: the "
        "recipe's."
    ),
    patience: int | None = typer.Option(
        None, help="With --val-examples: stop after this many epochs without a better validation accuracy (0: never)."
    ),
    paper: bool = typer.Option(
        False, help="The recipe's schedule stretched to the papers' epoch counts (for a GPU); the papers' own "
        "recipes are --recipe paper."),
    device: str = typer.Option(
        "cpu", help="cpu, cuda or cuda:N. On a GPU the training set and held-out split stay there as uint8 and the "
        "augmentation runs there; the final checkpoint is measured on the CPU in float32 either way."),
    models: str | None = typer.Option(
        None, help="Train several models side by side on --device, one process each (zoo names, e.g. "
        "resnet20_fp,resnet20_bnn; replaces --arch/--method); each logs to OUT/<name>.log."),
    autocast: str | None = typer.Option(
        None, help="bf16: training steps under bfloat16 autocast (held-out, BatchNorm and test measurements stay "
        "float32); not part of the recipe. Faster, but it cost resnet20_xnor 0.75 held-out points in "
        "benchmarks/bf16_training.py: run that A/B on your model first."),
    compile_mode: str = typer.Option(
        "default", help="With --compile: default, reduce-overhead (CUDA graphs) or max-autotune."),
    time_limit: float | None = typer.Option(
        None, help="Minutes: stop after the last epoch that ends within them (checkpointed; exit status 3); the same "
        "command resumes. For machines lent in slices."),
    channels_last: bool = typer.Option(
        False, help="Compute in the channels_last memory layout (faster for some BNNs on some CPUs: measure with "
        "benchmarks/train_throughput.py --layouts); the same arithmetic, so not part of the recipe."
    ),
    compile_model: bool = typer.Option(
        False, "--compile", help="Run the training forward through torch.compile (about a minute to compile; faster "
        "for some BNNs, measure with benchmarks/train_throughput.py --layouts --compile); not part of the recipe."
    ),
    data_dir: Path | None = typer.Option(None, help="CIFAR-10 folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    export: bool = typer.Option(
        False,
        help="When done, write <arch>_<method>.safetensors and its model card to --zoo-dir. A run that continues "
        "that very model (--init-from <arch>_<method>) replaces it only when its clean accuracy is higher.",
    ),
    zoo_dir: Path | None = typer.Option(None, help="Where --export writes; default: the package's checkpoint folder."),
    replace: bool = typer.Option(
        False, help="With --export: ship a run that does not beat the shipped model on the held-out images, for a "
        "shipped model that trained on those images (its figure flatters it); the card records both figures."),
) -> None:
    """Train a zoo model on the real CIFAR-10 train set (random crop + flip), checkpointing every epoch.

    Rerunning the same command resumes from the last finished epoch.
    """
    check_data_dir(data_dir)
    if time_limit is not None and not time_limit > 0:  # NaN too
        fail(ValueError(f"--time-limit is in minutes and must be positive, got {time_limit:g}"))
    if models is not None:
        _train_side_by_side(models, out, device, _shared_options(locals()))
        return
    from arbibench.train.execution import Execution, TimeLimitReached  # start-up: execution loads torch

    try:
        execution = Execution(device=device, channels_last=channels_last, compile_model=compile_model,
                              compile_mode=compile_mode, autocast=autocast,
                              time_limit_s=None if time_limit is None else time_limit * 60)
    except ValueError as e:
        fail(e)
    # The recipe and the training loop are looked up on the module, so a test can shrink them to test size.
    try:
        recipe = training.default_recipe(method, paper=paper, kind=recipe_kind, arch=arch)
    except train_errors() as e:
        fail(e)
    recipe.arch, recipe.seed = arch, seed
    if epochs is not None:
        recipe.epochs = epochs
    if step1_epochs is not None:
        if not recipe.step1_epochs:
            fail(ValueError(f"--step1-epochs applies to the two-step recipes (kd, at); --recipe {recipe_kind} has "
                            "one step"))
        recipe.step1_epochs = step1_epochs
    if lr is not None:
        recipe.lr = lr
    if init_from is not None:
        recipe.init_from = str(init_from)
    if val_examples is not None:
        recipe.val_examples = val_examples
    if patience is not None:
        recipe.patience = patience
    try:  # before the run folder exists, in the options' own names
        training.check_recipe(recipe, _option)
    except train_errors() as e:
        fail(e)
    name = f"{arch}_{method}{training.AT_SUFFIX if recipe.adversarial else ''}"
    run_dir = out / name
    try:
        summary = training.train(recipe, run_dir, data_dir, log=console.log, execution=execution)
    except TimeLimitReached as stop:
        console.print(f"[bold]{name}[/]: {stop}")
        raise typer.Exit(EXIT_TIME_LIMIT) from None
    except train_errors() as e:
        fail(e)
    console.print(
        f"[bold]{name}[/]: clean accuracy {summary['clean_acc']:.4f} on the 10,000 test images "
        f"({summary['train_time_s'] / 60:.1f} min of training)"
    )
    if export:
        _export(name, summary, recipe.init_from, bool(recipe.val_examples), run_dir, data_dir, zoo_dir, replace)


# The options every member of a side-by-side group gets (``--models``), as this command spells them.
_SHARED = {
    "recipe_kind": "--recipe", "epochs": "--epochs", "out": "--out", "init_from": "--init-from", "seed": "--seed",
    "step1_epochs": "--step1-epochs", "lr": "--lr", "val_examples": "--val-examples", "patience": "--patience",
    "device": "--device", "autocast": "--autocast", "compile_mode": "--compile-mode", "time_limit": "--time-limit",
    "data_dir": "--data-dir", "zoo_dir": "--zoo-dir",
}
_SHARED_FLAGS = {"paper": "--paper", "channels_last": "--channels-last", "compile_model": "--compile",
                 "export": "--export", "replace": "--replace"}


def _option(field: str) -> str:
    """A recipe field as this command's option spells it (``lr`` -> ``--lr``); a field with no option keeps its name."""
    return {"arch": "--arch", "method": "--method", **_SHARED}.get(field, field)


def _shared_options(values: dict[str, Any]) -> list[str]:
    """The command's own options, as arguments for each member's process."""
    args: list[str] = []
    for key, flag in _SHARED.items():
        if values[key] is not None:
            args += [flag, str(values[key])]
    return args + [flag for key, flag in _SHARED_FLAGS.items() if values[key]]


def _train_side_by_side(names: str, out: Path, device: str, shared: list[str]) -> None:
    """``--models``: each model in its own process on ``device``; one line per model at the end."""
    from arbibench.models.architectures import ARCHITECTURES  # start-up: the model registry loads torch
    from arbibench.models.methods import METHODS

    try:
        members = side_by_side.parse_members(names, out, set(ARCHITECTURES), set(METHODS))
    except ValueError as e:
        fail(e)
    console.print(f"training {', '.join(m.name for m in members)} side by side on {device}; logs: "
                  f"{', '.join(str(m.log) for m in members)}")
    status = side_by_side.run_side_by_side(members, shared, device, report=console.log)
    for m in members:
        code = status[m.name]
        word = {0: "finished", EXIT_TIME_LIMIT: "stopped at the time limit (run again to resume)"}.get(
            code, f"failed (exit {code}; see {m.log})")
        console.print(f"[bold]{m.name}[/]: {word}")
    failed = [c for c in status.values() if c not in (0, EXIT_TIME_LIMIT)]
    if failed:
        raise typer.Exit(1)
    if any(c == EXIT_TIME_LIMIT for c in status.values()):
        raise typer.Exit(EXIT_TIME_LIMIT)


def _export(name: str, summary: dict[str, Any], init_from: str | None, held_out: bool, run_dir: Path,
            data_dir: Path | None, zoo_dir: Path | None, force: bool) -> None:
    """Ship a finished run as the zoo's ``name`` if it beats the shipped model; else record it in that card's
    ``attempts``, so its curve still says what the extra training did."""
    from arbibench.train.export import export_checkpoint, record_attempt  # start-up: export loads the zoo and torch

    if (init_from == name and not _continuation_is_better(name, summary, zoo_dir)) or (
        init_from != name and held_out and not _fresh_run_replaces(name, summary, run_dir, data_dir, zoo_dir, force)
    ):
        try:
            recorded = record_attempt(run_dir, name, zoo_dir)
        except FileNotFoundError as e:  # no card to record it in: the kept model is not the zoo's
            console.print(f"not recorded as an attempt: {e}")
            return
        except train_errors() as e:
            fail(e)
        if recorded is not None:
            console.print(f"recorded the run in {name}'s card as an attempt that did not ship "
                          "(`arbibench zoo curves` shows its curve)")
        return
    fault_point("train.export")  # crash tests kill here (arbibench.faults)
    try:
        card = export_checkpoint(run_dir, name, zoo_dir)
    except train_errors() as e:
        fail(e)
    console.print(f"exported {card}")


def _fresh_run_replaces(
    name: str, summary: dict[str, Any], run_dir: Path, data_dir: Path | None, zoo_dir: Path | None, force: bool
) -> bool:
    """Whether a run that did not start from the shipped ``name`` may replace it: it must be more accurate on the
    run's held-out images than the shipped model, measured now on the same images (``--replace`` overrides, for a
    shipped model that trained on them). The comparison goes into the run's summary, and so into the card."""
    from arbibench.files import atomic_write_json  # start-up: beside the export, only when it runs
    from arbibench.train.selection import shipped_heldout

    shipped = shipped_heldout(name, summary["validation"]["examples"], data_dir, zoo_dir)
    if not shipped:
        return True
    better = summary["validation"]["val_acc"] > shipped["val_acc"]
    summary["validation"]["shipped"] = {**shipped, "replaced": better or force, "forced": force and not better}
    atomic_write_json(summary, run_dir / "summary.json")
    if better or force:
        return True
    hint = (" It trained on those images, so its figure flatters it: --replace ships the run anyway."
            if shipped["trained_on_heldout"] else "")
    console.print(f"kept the zoo's {name}: held-out accuracy {summary['validation']['val_acc']:.4f} is not above the "
                  f"shipped model's {shipped['val_acc']:.4f} on the same {summary['validation']['examples']} images."
                  + hint)
    return False


def _continuation_is_better(name: str, summary: dict[str, Any], zoo_dir: Path | None) -> bool:
    """Whether a run continuing the zoo model ``name`` may replace it. With a validation split the two are compared on
    it (the test set picks nothing); a run without one falls back to the shipped card's clean accuracy."""
    val = summary.get("validation") or {}
    if val.get("init_val_acc") is not None:
        if val["val_acc"] > val["init_val_acc"]:
            return True
        console.print(f"kept the zoo's {name}: validation accuracy {val['val_acc']:.4f} is not above the shipped "
                      f"model's {val['init_val_acc']:.4f} on the same {val['examples']} held-out images")
        return False
    shipped = _shipped_accuracy(name, zoo_dir)
    if shipped is not None and summary["clean_acc"] <= shipped:
        console.print(f"kept the zoo's {name} ({shipped:.4f}): the continued run is not more accurate")
        return False
    return True


def _shipped_accuracy(name: str, zoo_dir: Path | None) -> float | None:
    """The clean accuracy on the card of the zoo model ``name`` would replace (None without a card)."""
    from arbibench.models.zoo import load_card  # start-up: the zoo loads torch

    try:
        return load_card(name, zoo_dir).clean_acc
    except FileNotFoundError:
        return None


def recalibrate(
    name: str = typer.Argument(..., help="A trained zoo model, e.g. resnet20_bireal."),
    batches: int = typer.Option(
        KD_BN_BATCHES, help="Batches of augmented training images (128 each) to average the statistics over."
    ),
    out: Path = typer.Option(Path("zoo_runs/recalibrated"), help="Folder for the re-estimated weights and summary."),
    data_dir: Path | None = typer.Option(None, help="CIFAR-10 folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    export: bool = typer.Option(
        False, help="Replace the zoo checkpoint and card when the clean accuracy on the 10,000 test images rises."
    ),
    zoo_dir: Path | None = typer.Option(None, help="Where --export writes; default: the package's checkpoint folder."),
) -> None:
    """Re-estimate a trained BNN's BatchNorm statistics on augmented training images (the kd recipe's last step).

    Prints the clean accuracy before and after; with --export the new weights replace the zoo's only when they are
    more accurate, and the card keeps the old version in its history.
    """
    check_data_dir(data_dir)
    run_dir = out / name
    check_outputs(("--out", run_dir), folders=("--out",))  # before the two 10,000-image passes, not after them
    try:
        summary = training.recalibrate_checkpoint(name, run_dir, data_dir, batches=batches, log=console.log)
    except train_errors() as e:
        fail(e)
    before, after = summary["clean_acc_before_bn_recalibration"], summary["clean_acc"]
    console.print(f"[bold]{name}[/]: clean accuracy {before:.4f} -> {after:.4f} on the 10,000 test images")
    if not export:
        return
    if after <= before:
        console.print(f"kept the zoo's {name}: the re-estimated statistics are not more accurate")
        return
    from arbibench.train.export import export_checkpoint  # start-up: export loads the zoo and torch

    try:
        card = export_checkpoint(run_dir, name, zoo_dir)
    except train_errors() as e:
        fail(e)
    console.print(f"exported {card}")
