"""What the ``arbibench protocol`` commands share: the preset a command names, the models it names, and the
help of ``--demo``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from arbibench.evaluation.cli import user_errors
from arbibench.terminal import comma_list, fail

if TYPE_CHECKING:
    from arbibench.protocol.presets import CorruptionProtocol, Protocol

DEMO_HELP = "The few-minute first look (a BNN against its twin on a few hundred images; not the protocol)."


def protocol_preset(name: str, quick: bool, demo: bool = False) -> Protocol | CorruptionProtocol:
    from arbibench.protocol import presets  # start-up: the presets build attacks, which load torch

    try:
        return presets.get_protocol(name, quick, demo)  # looked up on the module, so a test can shrink the presets
    except user_errors() as e:
        fail(e)


def named_models(models: str) -> list[str]:
    """The names of a comma-separated ``--models``; one that names none (``,``) is refused, not an empty table."""
    try:
        names = comma_list(models, "--models")
    except ValueError as e:
        fail(e)
    if not names:
        fail(ValueError(f"--models {models!r} names no model; pass zoo names, e.g. --models resnet20_bnn"))
    return names


def protocol_models(models: str, dataset: str, model_dir: Path | None) -> list[str]:
    """The names of ``--models``: a comma-separated list, or 'all' present checkpoints of ``dataset``."""
    from arbibench.models.zoo import zoo_rows  # start-up: the zoo loads torch

    if models.strip() != "all":
        return named_models(models)
    names = [r["name"] for r in zoo_rows(model_dir) if r["dataset"] == dataset and r["present"]]
    if not names:
        fail(ValueError(f"no {dataset} checkpoints present; pass --model-dir or --models"))
    return names


def protocol_on_grid(protocol: Protocol | CorruptionProtocol, grid: str) -> Protocol | CorruptionProtocol:
    """``--grid``: the attack protocol on that input grid; refused for what cannot have one."""
    from arbibench.protocol.presets import CorruptionProtocol, on_grid  # start-up: the presets load torch

    if grid == "float":
        return protocol
    if isinstance(protocol, CorruptionProtocol):
        fail(ValueError(f"--grid {grid} applies to the attack protocols; {protocol.label} has no attack"))
    try:
        return on_grid(protocol, grid)
    except ValueError as e:
        fail(ValueError(f"--grid {grid}: {e}"))
