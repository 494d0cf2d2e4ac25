"""``arbibench protocol deploy-check``: does robustness measured on the float simulation hold for the deployed,
bit-packed BNN?"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from arbibench.cards import DEPLOY_CHECK, ONES_PADDING, check_card_path
from arbibench.evaluation.cli import check_data_dir, check_outputs, user_errors
from arbibench.files import atomic_write_json
from arbibench.protocol.cli import common
from arbibench.terminal import comma_list, console, fail


def protocol_deploy_check(
    name: str = typer.Argument("cifar10", help="The preset whose images and attacks are used: cifar10, cifar10-l2."),
    models: str = typer.Option("all", help="Comma-separated zoo BNNs, or 'all' (every binary CIFAR-10 model)."),
    quick: bool = typer.Option(False, "--quick", help="The preset's laptop variant (smaller subsets, 1000 queries)."),
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
    from arbibench.deploy import get_conv_kernel  # start-up: the deployed network loads torch
    from arbibench.models.methods import get_method  # start-up: the presets load torch
    from arbibench.models.zoo import ZOO  # start-up: the zoo loads torch
    from arbibench.protocol.deploy_check import check_attacks, run_deploy_check  # start-up: loads torch
    from arbibench.protocol.presets import Protocol  # start-up: as above

    protocol = common.protocol_preset(name, quick)
    if not isinstance(protocol, Protocol):
        fail(ValueError(f"{name!r} has no attacks to check; use cifar10 or cifar10-l2"))
    check_outputs(("--model-info", model_info), folders=("--model-info",))  # before any model, not after the first
    check_data_dir(data_dir)
    if models.strip() == "all":
        names = [n for n, e in ZOO.items() if e.dataset == protocol.dataset and e.shipped
                 and get_method(e.method).is_binary]
    else:
        names = common.named_models(models)
    try:  # a misspelt attack or a backend this machine lacks: refused before any model is loaded
        chosen = None if attacks is None else comma_list(attacks, "--attacks")
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
        path = atomic_write_json(card.to_dict(), check_card_path(model_info, protocol.dataset, DEPLOY_CHECK,
                                                                  model_name))
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
