"""``arbibench protocol show``: every number of a preset, before anything runs."""

from __future__ import annotations

import typer
from rich.table import Table

from arbibench.evaluation.cli import user_errors
from arbibench.protocol.cli import common
from arbibench.protocol.cli.common import DEMO_HELP
from arbibench.terminal import console, fail


def protocol_show(
    name: str = typer.Argument("cifar10", help="cifar10, cifar10-l2, imagenet, imagenet-l2 or cifar10-c."),
    quick: bool = typer.Option(False, "--quick", help="The laptop variant (smaller subsets and budgets)."),
    demo: bool = typer.Option(False, "--demo", help=DEMO_HELP),
) -> None:
    """Print every number of a protocol preset: subsets, eps, seeds and each attack with all its parameters."""
    from arbibench.protocol.presets import describe  # start-up: the presets load torch

    protocol = common.protocol_preset(name, quick, demo)
    table = Table(title=f"protocol {protocol.label}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    try:
        for key, value in describe(protocol):
            table.add_row(key, value)
    except user_errors() as e:
        fail(e)
    console.print(table)
