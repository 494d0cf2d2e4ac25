"""``arbibench protocol grid-check``: does robustness measured on float inputs hold on 8-bit images?"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from arbibench.cards import GRID_CHECK, check_card_path
from arbibench.evaluation.cli import check_data_dir, check_outputs, user_errors
from arbibench.files import atomic_write_json
from arbibench.terminal import FILE_METAVAR, comma_list, console, fail, output_file

if TYPE_CHECKING:
    from arbibench.cards import GridCheckCard, Interval, Proportion


def protocol_grid_check(
    models: str = typer.Option("resnet20_bnn,resnet20_fp", help="Comma-separated zoo models."),
    n_examples: int = typer.Option(300, "--n-examples", "-n", min=1, help="The first N test images."),
    attack: str = typer.Option("apgd_ce", help="The attack, run in float and on the grid: NAME or NAME(param=...)."),
    eps: str = typer.Option("1/255,2/255,4/255,8/255", help="Comma-separated Linf budgets."),
    dataset: str = typer.Option("cifar10", help="A dataset of 8-bit images (cifar10)."),
    seed: int = typer.Option(0, help="Seed of the attack's random starts (the same for float and the grid)."),
    batch_size: int = typer.Option(200, min=1, help="Images per batch (as eval's, so the float column matches it)."),
    json_out: Path | None = typer.Option(None, "--json", parser=output_file, metavar=FILE_METAVAR,
                                         help="Also write every number as JSON to this file."),
    model_info: Path | None = typer.Option(
        None, help="Also write each model's grid-check card to <model-info>/<dataset>/grid_check/<name>.json, which "
        "`leaderboard markdown` and `protocol report` read."
    ),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1, ... (default: cpu)."),
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    model_dir: Path | None = typer.Option(None, help="Checkpoint folder of models you brought or imported."),
) -> None:
    """Does robustness measured on float inputs hold on 8-bit images? Per model and eps: ACC* in float and on the
    uint8 grid with the paired difference, and the share of float adversarial examples that survive rounding to 8
    bits (arbibench.protocol.grid_check). With --model-info, one card per model for the leaderboard's "8-bit inputs"
    section and the findings page."""
    from arbibench.attacks import attacks_from_spec, get_threat_model, parse_eps  # start-up: loads torch
    from arbibench.attacks.threat import UINT8  # start-up: as above
    from arbibench.evaluation.plan import check_norms  # start-up: as above
    from arbibench.protocol.grid_check import run_grid_check  # start-up: as above

    try:  # no model, a misspelt attack or eps: refused before any model is loaded
        names, eps_values = comma_list(models, "--models"), comma_list(eps, "--eps")
        if not names:
            raise ValueError(f"--models {models!r} names no model; pass zoo names, e.g. --models resnet20_bnn")
        attack_objs = attacks_from_spec(attack)
        if len(attack_objs) != 1:
            raise ValueError(f"--attack {attack!r} names {len(attack_objs)} attacks; name one")
        check_norms(attack_objs, "Linf")  # the 8-bit grid is a Linf box
        if not eps_values:
            raise ValueError(f"--eps {eps!r} names no budget; pass e.g. --eps 1/255,8/255")
        for e in eps_values:
            try:
                get_threat_model("Linf", parse_eps(e), UINT8)
            except ValueError as bad:
                raise ValueError(f"--eps: {bad}") from None
    except ValueError as e:
        fail(e)
    check_outputs(("--json", json_out), ("--model-info", model_info), folders=("--model-info",))
    check_data_dir(data_dir)
    checks = []
    for name in names:
        try:
            check = run_grid_check(name, dataset=dataset, n_examples=n_examples, attack=attack_objs[0],
                                   eps_values=eps_values, seed=seed, batch_size=batch_size, device=device,
                                   data_dir=data_dir, model_dir=model_dir)
        except user_errors() as e:
            fail(e)
        console.print(_grid_table(check))
        if model_info is not None:
            path = check_card_path(model_info, check.dataset, GRID_CHECK, check.name)
            try:
                console.print(f"wrote {atomic_write_json(check.to_dict(), path)}")
            except OSError as e:
                fail(e)
        checks.append(check.to_dict())
    if json_out is not None:
        try:  # checked before the work, yet the disk may fill up meanwhile
            console.print(f"wrote {atomic_write_json({'kind': 'grid_check', 'checks': checks}, json_out)}")
        except OSError as e:
            fail(e)


def _grid_table(check: GridCheckCard) -> Table:
    """One model's grid check as a table: percentages with their 95% intervals."""
    def pct(e: Proportion | Interval) -> str:
        return f"{100 * e.value:.1f} [{100 * e.low:.1f}, {100 * e.high:.1f}]"

    table = Table("eps", "ACC* float", "ACC* uint8 grid", "grid - float (paired)", "float examples surviving",
                  title=f"{check.name}: {check.attack_name} on the first {check.n_images} {check.dataset} "
                  f"test images, clean {100 * check.clean_acc.value:.1f}%", title_justify="left")
    for r in check.rows:
        survival = "-" if r.survival is None else f"{r.survived}/{r.float_fooled} = {pct(r.survival)}"
        table.add_row(r.eps_text, pct(r.acc_float), pct(r.acc_grid), pct(r.difference), survival)
    return table
