"""``arbibench attacks list``: every registered attack with its family, supported norms and parameter defaults."""

from __future__ import annotations

import typer
from rich.table import Table

from arbibench.terminal import console

attacks_app = typer.Typer(help="The attack registry: names, families, norms and parameters.", no_args_is_help=True)


@attacks_app.command("list")
def list_attacks(
    adaptive: bool = typer.Option(False, "--adaptive", help="Also list the <attack>_adaptive variants."),
) -> None:
    """Every attack: family (white-box, score-based, decision-based, transfer), norms, aliases and defaults."""
    from arbibench.attacks import describe_attacks  # start-up: the attacks import torch (and register on import)

    table = Table(title="arbibench attacks")
    for col in ("name", "family", "norms", "aliases", "parameters (defaults)"):
        table.add_column(col, no_wrap=col in ("name", "family"))
    for row in describe_attacks():
        if row["name"].endswith("_adaptive") and not adaptive:
            continue
        params = ", ".join(f"{k}={v!r}" for k, v in row["defaults"].items()) or "-"
        table.add_row(row["name"], row["family"], ", ".join(row["norms"]), ", ".join(row["aliases"]) or "-", params)
    console.print(table)
    if not adaptive:
        console.print("every white-box attack also exists as <name>_adaptive (several BNN gradient estimators, worst "
                      "case per sample): --adaptive lists them")
