"""The ``arbibench`` command line: wiring only. Each package owns its commands in its own ``cli.py`` (train and
recalibrate, eval and import, zoo, corruptions, protocol and sweep, attacks, leaderboard, verify); this module
names them and adds them.

A command's module is imported only when that command runs or shows its help: ``arbibench --help`` lists the
commands from the table below and imports none of them, so it answers without the seconds ``import torch`` takes
(a package's ``__init__`` may load torch even when its ``cli.py`` does not). ``tests/test_cli_startup.py`` checks
that each entry's one-line help is the first line of the command's own.
"""

from __future__ import annotations

import difflib
import importlib
import os
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from arbibench.machine import default_threads, wait_policy


@dataclass(frozen=True)
class CommandEntry:
    """One ``arbibench`` command: where its typer function or app lives, and its line in ``arbibench --help``."""

    module: str
    attr: str
    summary: str


COMMANDS: dict[str, CommandEntry] = {
    "train": CommandEntry(
        "arbibench.train.cli", "train",
        "Train a zoo model on the real CIFAR-10 train set (random crop + flip), checkpointing every epoch."),
    "recalibrate": CommandEntry(
        "arbibench.train.cli", "recalibrate",
        "Re-estimate a trained BNN's BatchNorm statistics on augmented training images (the kd recipe's last step)."),
    "eval": CommandEntry(
        "arbibench.evaluation.cli", "eval_",
        "Evaluate a zoo model under white- and black-box attacks: ACC, ACC*, ACC_norm, RS, worst case, queries."),
    "import": CommandEntry(
        "arbibench.evaluation.cli", "import_",
        "Import a published BNN's own checkpoint: convert it, check its clean accuracy, write safetensors + card."),
    "sweep": CommandEntry(
        "arbibench.protocol.cli.sweep", "sweep",
        "Robust accuracy against eps: one attack at several budgets (each budget its own stored evaluation)."),
    "zoo": CommandEntry("arbibench.models.cli", "zoo_app", "The model zoo: list models and their checkpoints."),
    "corruptions": CommandEntry(
        "arbibench.data.cli", "corruptions_app",
        "CIFAR-10-C common corruptions: regenerate them from CIFAR-10 or download the official files."),
    "protocol": CommandEntry(
        "arbibench.protocol.cli", "protocol_app", "The ARBiBench protocol presets: show and run them."),
    "attacks": CommandEntry(
        "arbibench.attacks.cli", "attacks_app", "The attack registry: names, families, norms and parameters."),
    "leaderboard": CommandEntry(
        "arbibench.leaderboard.cli", "leaderboard_app",
        "The leaderboard site and markdown: build them from model cards, serve the site locally."),
    "verify": CommandEntry(
        "arbibench.verify.cli", "verify",
        "Certify Linf robustness per image: sound bounds through the exact signs, then a bounded branch-and-bound."),
}


def load_command(name: str) -> Any:
    """The click command of ``COMMANDS[name]``, importing its module (and so, for most, torch)."""
    entry = COMMANDS[name]
    target: Any = getattr(importlib.import_module(entry.module), entry.attr)
    wiring = typer.Typer(add_completion=False)
    if isinstance(target, typer.Typer):
        wiring.add_typer(target, name=name)
        group = typer.main.get_command(wiring)
        assert isinstance(group, TyperGroup)
        return group.commands[name]
    wiring.command(name)(target)
    return typer.main.get_command(wiring)


class _LazyGroup(TyperGroup):
    """The root group: commands come from :data:`COMMANDS`, each loaded when it is about to run or show its help;
    while the root's own help is drawn, each is a stub holding its one-line summary."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if self._listing:
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name].summary)
        if cmd_name not in self.commands:
            self.commands[cmd_name] = load_command(cmd_name)
        return self.commands[cmd_name]

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in COMMANDS and not args[0].startswith("-"):  # unknown: suggest, load nothing
            matches = difflib.get_close_matches(args[0], list(COMMANDS))
            hint = f" Did you mean {', '.join(repr(m) for m in matches)}?" if matches else ""
            ctx.fail(f"No such command {args[0]!r}.{hint}")
        return super().resolve_command(ctx, args)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    cls=_LazyGroup,
    help="arbibench: adversarial robustness benchmark for binarized neural networks (ARBiBench protocol).",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """arbibench: adversarial robustness benchmark for binarized neural networks (ARBiBench protocol)."""


def _cap_threads() -> None:
    """Before torch loads: no more OpenMP workers than the cores this process may use (its affinity and cgroup
    quota), where those are fewer than the machine's and the user set no thread count. Torch would start one worker
    per core of the machine, and the extra ones only take time slices from the working ones. On a busy machine the
    idle workers sleep instead of spinning (:func:`arbibench.machine.wait_policy`)."""
    threads = default_threads()
    if threads is not None and threads < (os.cpu_count() or 1):
        os.environ["OMP_NUM_THREADS"] = str(threads)
    if (policy := wait_policy()) is not None:
        os.environ["OMP_WAIT_POLICY"] = policy


def main() -> None:
    _cap_threads()
    app()


if __name__ == "__main__":
    main()
