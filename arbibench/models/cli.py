"""``arbibench zoo list``, ``zoo table``, ``zoo curves``, ``zoo pin`` and ``zoo attempt``: the model zoo owns its
command; ``arbibench/cli.py`` only wires it in. ``zoo table`` and ``zoo curves`` read cards and pins only
(:mod:`arbibench.models.markdown`), so they load no torch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from arbibench.evaluation.cli import check_outputs
from arbibench.files import atomic_write_text
from arbibench.models.markdown import epochs_in_all, goal_status, paper_status, write_curves, zoo_markdown
from arbibench.terminal import FILE_METAVAR, USER_ERRORS, console, fail, output_file
from arbibench.train.paper_recipes import paper_epochs

if TYPE_CHECKING:
    from arbibench.cards import CardIdentity, DeployCheckCard, GridCheckCard

zoo_app = typer.Typer(help="The model zoo: list models and their checkpoints.", no_args_is_help=True)


@zoo_app.command("list")
def zoo_list(
    dataset: str | None = typer.Option(None, help="Only this dataset's models (cifar10, imagenet); default: all."),
    model_dir: Path | None = typer.Option(
        None, help="Folder to look for checkpoints and imported models in; default: the package's checkpoint folder "
        "(imported models: the user model folder)."
    ),
    model_info: Path = typer.Option(Path("model_info"), help="Folder of result cards to check against the shipped "
                                    "checkpoints (<dataset>/<threat>/<name>.json)."),
) -> None:
    """List the zoo: name, dataset, method, backbone, parameters, clean accuracy and whether the checkpoint is present.

    Models registered but not shipped (the ImageNet ResNet-18s) show "not shipped"; put your own
    <name>.safetensors in --model-dir (and pass model_dir= to load_model) to use them. "result cards" names the
    cards in --model-info of each model (every kind: attack cards, deployed inference, 8-bit inputs, corruptions, deploy
    and grid checks), and marks "stale" those that measured other weights than the shipped ones.
    """
    from arbibench.models.zoo import zoo_rows  # start-up: the zoo loads torch

    try:
        rows = zoo_rows(model_dir, dataset)
        cards = result_card_status(model_info)
    except USER_ERRORS as e:
        fail(e)
    table = Table(title="arbibench model zoo")
    for col in ("name", "dataset", "method", "source", "backbone", "params", "clean accuracy", "paper", "goal",
                "checkpoint present", "result cards"):
        table.add_column(col, no_wrap=col == "name")
    for row in rows:
        acc = "-" if row["clean_acc"] is None else f"{100 * row['clean_acc']:.2f}%"
        if row["shipped"]:
            present = "yes" if row["present"] else "[red]missing[/]"
        else:
            present = "yes (user file)" if row["present"] else "not shipped"
        if row["source"] != "arbibench":
            present = "yes (imported)" if row["present"] else "[red]missing[/]"
        ours = row["source"] == "arbibench" and row["dataset"] == "cifar10"
        status = {"name": row["name"], "clean_acc": row["clean_acc"], "adversarial": row["training"] == "adversarial"}
        goal, paper = (goal_status(**status), paper_status(**status)) if ours else ("-", "-")
        table.add_row(
            row["name"], row["dataset"], row["method"], row["source"], row["arch"], f"{row['params']:,}", acc, paper,
            goal, present, cards.get(row["name"], "-"),
        )
    console.print(table)
    console.print(
        "clean accuracy: on the 10,000 test images, from each model card (imported models: on the first test "
        "images of the import check). paper: the method's own published CIFAR-10 figure for the backbone and the gap "
        "(docs/paper-recipes.md has the sources). goal: the zoo's clean-accuracy goal for a standard-trained model. "
        "source: arbibench's zoo, or the paper whose checkpoint was imported."
    )


def result_card_status(model_info: Path) -> dict[str, str]:
    """Model name -> every card of it under ``model_info``, "current: Linf, Linf deployed, corruptions, deploy check,
    8-bit grid" or "stale: ..." (red) for those that did not measure the checkpoint shipped now: a retrained model
    leaves none of its kinds unchecked. Cards only: no torch."""
    from arbibench.cards import (  # start-up: beside the zoo listing, only when it runs
        CardError,
        read_card_json,
        shipped_sha256,
        stale_checkpoint,
    )

    shipped = shipped_sha256()
    current: dict[str, list[str]] = {}
    stale: dict[str, list[str]] = {}
    for path in sorted(model_info.rglob("*.json")) if model_info.is_dir() else []:
        try:
            card, label = card_and_label(path, read_card_json(path))
        except CardError:
            continue  # not a card (e.g. a measurements file); `arbibench leaderboard build` names what is wrong
        (stale if stale_checkpoint(card, shipped) else current).setdefault(card.name, []).append(label)

    def listed(labels: list[str]) -> str:  # attack cards first, then their variants, then the other kinds
        rank = {"corruptions": 2, "deploy check": 3, "8-bit grid": 4}
        return ", ".join(sorted(labels, key=lambda label: (rank.get(label, 1 if " " in label else 0), label)))

    out = {}
    for name in sorted({*current, *stale}):
        parts = [f"[red]stale: {listed(stale[name])}[/]"] if name in stale else []
        parts += [f"current: {listed(current[name])}"] if name in current else []
        out[name] = "; ".join(parts)
    return out


def card_and_label(path: Path, data: Any) -> tuple[CardIdentity | DeployCheckCard | GridCheckCard, str]:
    """One card file of any kind, parsed, and how ``zoo list`` names it: the threat model (with "deployed" and
    "uint8" where the card says so), "corruptions", "deploy check" or "8-bit grid". :class:`CardError` otherwise."""
    from arbibench.cards import (  # start-up: beside the zoo listing, only when it runs
        DEPLOY_CHECK,
        GRID_CHECK,
        DeployCheckCard,
        GridCheckCard,
        parse_card,
        parse_corruption_card,
    )

    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == DEPLOY_CHECK:
        return DeployCheckCard.parse(path, data), "deploy check"
    if kind == GRID_CHECK:
        return GridCheckCard.parse(path, data), "8-bit grid"
    if isinstance(data, dict) and data.get("threat_model") == "corruptions":
        return parse_corruption_card(path, data), "corruptions"
    card = parse_card(path, data)
    extra = [v for v in (card.inference, card.grid) if v not in (None, "simulation", "float")]
    return card, " ".join([card.threat_model, *extra])


@zoo_app.command("table")
def zoo_table(
    out: Path | None = typer.Option(None, parser=output_file, metavar=FILE_METAVAR,
                                    help="Write the table to this file (atomically); default: print it."),
    dataset: str = typer.Option("cifar10", help="The dataset whose shipped models to list."),
) -> None:
    """Print the shipped zoo as a markdown table from the model cards: accuracy, training time, recipe and the gap to
    the zoo's accuracy goal (README's zoo table is this command's output)."""
    check_outputs(("--out", out))
    try:
        text = zoo_markdown(dataset=dataset)
        if out is not None:
            atomic_write_text(text, out)
    except USER_ERRORS as e:
        fail(e)
    if out is None:
        typer.echo(text, nl=False)
        return
    console.print(f"wrote {out}")


@zoo_app.command("curves")
def zoo_curves(
    out: Path = typer.Option(Path("docs/learning-curves.md"), parser=output_file, metavar=FILE_METAVAR,
                             help="The page to write (atomically); its figure is "
                             "written beside it as <stem>.png."),
    model_dir: Path | None = typer.Option(None, help="Folder of checkpoint cards and SHA256SUMS; default: the "
                                          "package's checkpoint folder."),
) -> None:
    """Write the learning curve of every shipped checkpoint's last training run, from its card, and what each says:
    underfits or not, still rising or flat, so a miss of the accuracy goal reads as the budget or the recipe; the
    epochs behind the shipped weights (every run they continue) stand beside those of the paper recipe."""
    check_outputs(("--out", out), ("--out", out.with_suffix(".png")))
    try:
        curves = write_curves(out, model_dir, paper_epochs())
    except USER_ERRORS as e:
        fail(e)
    table = Table(title="learning curves of the shipped checkpoints")
    for column in ("model", "epochs", "in all (paper)", "best held-out", "train - held-out", "last quarter",
                   "reading"):
        table.add_column(column)
    for name, (_, r) in curves.items():
        best = "-" if r.val is None else f"{max(r.val):.1f}% (epoch {r.best_epoch})"
        gap = "-" if r.fit_gap is None else f"{r.fit_gap:+.1f}"
        late = "-" if r.late_gain is None else f"{r.late_gain:+.1f}"
        table.add_row(name, str(len(r.epochs)), epochs_in_all(r), best, gap, late, r.verdict())
    console.print(table)
    console.print(f"wrote {out} and {out.with_suffix('.png')}")


@zoo_app.command("pin")
def zoo_pin(
    name: str = typer.Argument(..., help="A shipped zoo model, e.g. resnet20_reactnet."),
    add: bool = typer.Option(False, help="Ship a model the zoo does not ship yet (<arch>_<method>[_at], e.g. "
                             "resnet18_bnn, exported with its card)."),
) -> None:
    """Pin a re-exported checkpoint's sha256 in checkpoints/SHA256SUMS (its card must name the same bytes)."""
    from arbibench.models.pins import pin  # start-up: --help stays light

    try:
        if add:
            _check_new_name(name)
        old, new = pin(name, add=add)
    except USER_ERRORS as e:
        fail(e)
    console.print(f"{name}: pinned {new}" + ("" if old == new else f" (was {old})"))


@zoo_app.command("attempt")
def zoo_attempt(
    run_dir: Path = typer.Argument(..., help="A finished training run's folder (train --out OUT: OUT/<name>)."),
    name: str | None = typer.Option(None, help="The zoo model it did not replace; default: the folder's name."),
    model_dir: Path | None = typer.Option(None, help="Folder of checkpoint cards; default: the package's checkpoint "
                                          "folder."),
) -> None:
    """Record a finished run that did not replace its zoo model in that model's card (`attempts`), so the learning
    curves show what more training did. `train --export` records such a run itself; this records one after the fact."""
    from arbibench.train.export import record_attempt  # start-up: export loads torch

    target = name or run_dir.name
    try:
        recorded = record_attempt(run_dir, target, model_dir)
    except USER_ERRORS as e:
        fail(e)
    if recorded is None:
        console.print(f"{target}: its card already records this run; nothing changed")
        return
    best = recorded.best_val
    held_out = "" if best is None else f", best held-out {100 * best[1]:.2f}% at epoch {best[0]}"
    console.print(f"{target}: recorded a {len(recorded.history)}-epoch run{held_out} as an attempt that did not ship")


def _check_new_name(name: str) -> None:
    """A new zoo model's name must say its backbone and method, as the registry reads them off it."""
    from arbibench.models.architectures import ARCHITECTURES  # start-up: the registry loads torch
    from arbibench.models.methods import METHODS

    arch, _, method = name.removesuffix("_at").partition("_")
    if ARCHITECTURES.get(arch) is None or ARCHITECTURES[arch].dataset != "cifar10" or method not in METHODS:
        raise ValueError(f"{name!r} is not <arch>_<method>[_at] of a CIFAR-10 backbone and a method preset "
                         "(e.g. resnet18_bnn)")
