"""``arbibench verify``: the certified Linf radius of each test image, the lower end of its eps*."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import typer
from rich.table import Table

from arbibench.evaluation.cli import check_data_dir, check_outputs
from arbibench.terminal import FILE_METAVAR, USER_ERRORS, console, fail, output_file


def _per_255(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value * 255:.3g}/255"


def _radius(option: str, text: str, parse: Callable[[str], float]) -> float:
    try:
        return parse(text)
    except ValueError as e:
        raise ValueError(f"{option} {text!r}: {e}") from e


def verify(
    model: str = typer.Option(..., "--model", "-m", help="Zoo model name (see `arbibench zoo list`)."),
    n_examples: int = typer.Option(20, "--n-examples", "-n", help="Number of test images (the first N)."),
    dataset: str = typer.Option("cifar10", help="cifar10 or imagenet."),
    radius_min: str = typer.Option("1e-4/255", help="Smallest Linf radius tried, e.g. 1e-4/255."),
    radius_max: str = typer.Option("1e-2/255", help="Largest Linf radius tried."),
    steps: int = typer.Option(5, help="Bisections between the two radii (in log space)."),
    nodes: int = typer.Option(256, help="Branch-and-bound nodes per image and radius; past them: unknown."),
    corners: int = typer.Option(50, help="Random sign corners tried for a counterexample before the bounds."),
    semantics: str = typer.Option("deployed", help="deployed (the bit-packed network) or simulation (the float "
                                  "model); see arbibench.deploy.semantics."),
    seed: int = typer.Option(0, help="Seed of the random corners."),
    json_out: Path | None = typer.Option(None, "--json", parser=output_file, metavar=FILE_METAVAR,
                                         help="Also write every image's verdicts as JSON here."),
    device: str | None = typer.Option(None, help="cpu, cuda, ... where the bounds are computed (default: cpu)."),
    data_dir: Path | None = typer.Option(None, help="Data folder; default $ARBIBENCH_DATA or ~/.cache/arbibench."),
    model_dir: Path | None = typer.Option(None, help="Checkpoint folder of ImageNet or imported models."),
) -> None:
    """Certify Linf robustness per image: sound bounds through the exact signs, then a bounded branch-and-bound.

    Per image and radius: verified (no input within the radius is misclassified, proven by float64 interval
    bounds with margins for float32 rounding, sound for the chosen semantics), falsified (a counterexample was
    found, replayed and checked against the threat model) or unknown. The certified radius is found by bisection;
    with the smallest falsified radius it brackets the image's eps*.
    """
    from arbibench.attacks.threat import parse_eps  # start-up: the attacks load torch
    from arbibench.data.datasets import load_dataset  # start-up: so does the data package
    from arbibench.files import atomic_write_json
    from arbibench.machine import computed_on  # start-up: asks torch about the device
    from arbibench.models.zoo import load_model  # start-up: the zoo loads torch
    from arbibench.verify.certify import ImageCertificate, certify, check_search  # start-up: the verifier loads torch

    check_outputs(("--json", json_out))
    check_data_dir(data_dir)
    try:
        low, high = (_radius(option, text, parse_eps) for option, text in
                     (("--radius-min", radius_min), ("--radius-max", radius_max)))
        if n_examples < 1:
            raise ValueError(f"--n-examples must be >= 1, got {n_examples}")
        if semantics not in ("deployed", "simulation"):
            raise ValueError(f"--semantics {semantics!r}: use deployed or simulation")
        check_search(low, high, steps, nodes, corners)
        net = load_model(model, model_dir, dataset, device=device)
        x, y, idx = load_dataset(dataset, n_examples, data_dir, None)
        table = Table(title=f"{model}: certified Linf radius ({semantics} semantics)")
        for col in ("image", "label", "certified", "attacked", "radii tried", "seconds"):
            table.add_column(col, justify="left" if col == "radii tried" else "right")

        def shown(c: ImageCertificate) -> None:
            tried = ", ".join(f"{v.radius * 255:.2g}:{v.status[0]}" for v in c.verdicts) or "misclassified"
            console.print(f"image {c.index}: certified {_per_255(c.certified)}, attacked {_per_255(c.attacked)}")
            table.add_row(str(c.index), str(c.label), _per_255(c.certified), _per_255(c.attacked), tried,
                          f"{c.seconds:.1f}")

        result = certify(net, x, y, radius_min=low, radius_max=high, steps=steps, max_nodes=nodes, corners=corners,
                         semantics=semantics, indices=idx, seed=seed, device=device, on_image=shown)
    except USER_ERRORS as e:
        fail(e)
    console.print(table)
    lower, upper = result.median_bracket()
    console.print(f"median eps* over {len(result.correct)} correctly classified images lies in "
                  f"[{_per_255(lower)}, {_per_255(upper)}] (v: verified, f: falsified, u: unknown)")
    if json_out is not None:
        record = {"model": model, "dataset": dataset, "machine": computed_on(next(net.parameters()).device),
                  **result.to_dict()}
        try:  # checked before the work, yet the disk may fill up meanwhile
            console.print(f"wrote {atomic_write_json(record, json_out)}")
        except OSError as e:
            fail(e)
