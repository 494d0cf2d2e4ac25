"""``benchmark()``: one call from a model (or zoo name) to the ARBiBench metrics, in RobustBench's argument order."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import torch
from rich.console import Console
from torch import nn

from arbibench.attacks import Attack, AutoAttack, canonical_name, get_threat_model
from arbibench.attacks.threat import FLOAT
from arbibench.data.datasets import check_dataset, load_dataset
from arbibench.evaluation.cards import card_path, checkpoint_sha256, replaces_full_card, write_card
from arbibench.evaluation.executor_registry import get_executor
from arbibench.evaluation.executors import Executor
from arbibench.evaluation.inputs import resolve_device
from arbibench.evaluation.metrics import compute_report
from arbibench.evaluation.min_perturbation import EPS_FLOOR, check_search, search_eps_star
from arbibench.evaluation.plan import attack_list, check_norms, computed_by, plan_evaluation
from arbibench.evaluation.result import BenchmarkResult
from arbibench.evaluation.runner import execute
from arbibench.evaluation.settings import RunSettings
from arbibench.evaluation.store import ResultStore
from arbibench.inference import Inference
from arbibench.models.zoo import load_model

# The eps* search's settings as benchmark() and `eval` name them, for the errors of check_search.
EPS_STAR_SETTINGS = ("eps_star_max (--eps-star-max)", "eps_star_floor (--eps-star-floor)",
                     "eps_star_rounds (--eps-star-rounds)", "eps_star_draws (--eps-star-draws)")


def subset_description(n: int, seed: int | None) -> str:
    return f"first {n} test images" if seed is None else f"{n} test images drawn with seed {seed}"


def _resolve_model(
    model: nn.Module | str, model_name: str | None, dataset: str, model_dir: str | os.PathLike[str] | None,
    device: torch.device,
) -> tuple[nn.Module, str, str | None]:
    """(the module, its name, the sha256 of the checkpoint it was loaded from: None for a module handed over)."""
    if isinstance(model, str):
        sha256 = checkpoint_sha256(model, dataset, model_dir)
        return load_model(model, model_dir, dataset=dataset, device=device), model_name or model, sha256
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module or a zoo model name, got {type(model).__name__}")
    return model, model_name or type(model).__name__, None


def benchmark(
    model: nn.Module | str,
    n_examples: int | None = 1000,
    dataset: str = "cifar10",
    threat_model: str = "Linf",
    eps: float = 8 / 255,
    attacks: Sequence[str | Attack] = ("fgsm", "pgd"),
    *,
    model_name: str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    device: str | torch.device | None = None,
    batch_size: int = 200,
    seed: int = 0,
    subset_seed: int | None = None,
    store: str | os.PathLike[str] | ResultStore = "arbibench.db",
    progress: bool = True,
    console: Console | None = None,
    checks: bool = True,
    to_disk: bool = False,
    model_info: str | os.PathLike[str] = "model_info",
    model_dir: str | os.PathLike[str] | None = None,
    eps_star: Sequence[str | Attack] = (),
    eps_star_max: float | None = None,
    eps_star_rounds: int = 3,
    eps_star_floor: float = EPS_FLOOR,
    eps_star_draws: int = 50,
    backend: str | Executor | None = None,
    inference: Inference | str = Inference.SIMULATION,
    grid: str = "float",
) -> BenchmarkResult:
    """Evaluate ``model`` on ``n_examples`` test images under each attack and return the ARBiBench metrics.

    ``model`` is an ``nn.Module`` taking [0, 1] images, or the name of a zoo model. ``subset_seed=None`` takes the
    first ``n_examples`` images (RobustBench's convention); an integer draws them at random (the black-box subset).
    Results go batch by batch into ``store``; rerunning the same call resumes and never counts a sample twice.
    ``checks`` runs the gradient-masking checks (zero input gradients, accuracy at a huge eps, single-step beating
    iterative, gradient-free beating gradient attacks) and reports what they raise in ``result.flags``.
    ``model_dir`` is where a zoo name's checkpoint is looked up (ImageNet weights you bring; default: the
    package's checkpoints). ``to_disk=True`` writes the model card
    ``<model_info>/<dataset>/<threat_model>/<model_name>.json`` (a module handed over needs its ``model_name``).
    ``eps_star`` names the attacks whose smallest adversarial perturbation per image (eps*, searched from
    ``eps_star_max``, default 2 * eps, down to ``eps_star_floor`` (1e-3/255; an image fooled there is censored) with
    ``eps_star_draws`` random sign corners first at every radius (0: none), then ``eps_star_rounds`` bisection
    rounds) goes into ``result.min_perturbation``: median eps* over the correctly classified images and
    over all, with intervals, and the robust-accuracy-vs-eps curve, which still separate models that all reach 0%
    at ``eps``.
    ``backend`` computes the store batches elsewhere (``"ray"``, or an executor from :func:`get_executor` with its
    cluster address): the same numbers and store rows as ``None``/``"local"``, this process computing them.
    ``inference="deployed"`` lets the deployed bit-packed network of a BNN (:mod:`arbibench.deploy`) answer the clean
    pass and every black-box query and decide every outcome; white-box attacks take their gradients on the float
    simulation. The inference is part of every store key and of the card.
    ``grid="uint8"`` puts every adversarial example on the k/255 grid of 8-bit images (Linf only; the images must be
    8-bit, as CIFAR-10's are): the grid is part of every attack's store key and of the card, whose file goes to a
    ``uint8/`` folder beside the float card.
    """
    check_dataset(dataset)
    if to_disk and model_name is None and isinstance(model, nn.Module):
        raise ValueError(f"to_disk=True files the card under the model's name, and a module handed over has none (its "
                         f"class is {type(model).__name__!r}): pass model_name='my_bnn'")
    threat = get_threat_model(threat_model, eps, grid)
    if threat.grid != FLOAT and eps_star:
        raise ValueError(f"eps* is searched on float inputs only, not on the {grid} grid yet: leave eps_star empty "
                         "(--eps-star) or use grid 'float'")
    eps_star_max = 2 * threat.eps if eps_star_max is None else eps_star_max
    if eps_star:  # before any work: a bad search setting must not end an evaluation after it ran
        check_search(threat.norm, eps_star_max, eps_star_floor, eps_star_rounds, eps_star_draws,
                     names=EPS_STAR_SETTINGS)
    device = resolve_device(device)  # before any work: a missing GPU is one error, not a traceback from .to()
    settings = RunSettings(dataset=dataset, seed=seed, batch_size=batch_size, device=device,
                           inference=Inference.parse(inference))
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed (--seed) must be a non-negative integer, got {seed!r}")
    if subset_seed is not None and (isinstance(subset_seed, bool) or not isinstance(subset_seed, int)
                                    or subset_seed < 0):
        raise ValueError(f"subset_seed (--subset-seed) must be a non-negative integer, got {subset_seed!r}")
    attacks = attack_list(attacks)  # before any work: an empty list creates no store
    for a in attacks:  # and an unknown name is one error before the data are read
        if isinstance(a, str):
            canonical_name(a)
    check_norms(attacks, threat.norm)  # and an attack of another threat model, before the attacks ahead of it run
    for a in eps_star:  # eps*'s attacks too: before the evaluation, not after it
        try:
            if isinstance(a, str):
                canonical_name(a)
            check_norms([a], threat.norm)
        except ValueError as e:
            raise ValueError(f"eps_star (--eps-star): {e}") from None
    model, name, sha256 = _resolve_model(model, model_name, dataset, model_dir, device)
    x, y, indices = load_dataset(dataset, n_examples, data_dir, subset_seed)
    with ExitStack() as owned:
        db = store if isinstance(store, ResultStore) else owned.enter_context(ResultStore(Path(store)))
        executor = get_executor(backend, model_dir=model_dir) if isinstance(backend, str) else backend
        if isinstance(backend, str) and executor is not None:
            owned.enter_context(executor)  # an executor opened here is closed here
        plan = plan_evaluation(model, x, y, indices, attacks=attacks, threat=threat, settings=settings,
                               model_name=name, store=db)
        run = execute(plan, progress=progress, console=console, executor=executor)
        machine = computed_by([plan], elsewhere=executor is not None)
        min_perturbation = None
        if eps_star:
            min_perturbation = search_eps_star(
                model, x, y, indices, attacks=eps_star, threat_model=threat.norm, eps_max=eps_star_max,
                search_rounds=eps_star_rounds, eps_floor=eps_star_floor, probe_draws=eps_star_draws, store=db,
                settings=settings, model_name=name, progress=progress, console=console, executor=executor,
                grid=threat.grid,
            )
    result = BenchmarkResult(
        model_name=name,
        dataset=dataset,
        threat_model=threat.norm,
        eps=threat.eps,
        indices=indices.numpy(),
        subset=subset_description(len(indices), subset_seed),
        report=compute_report(run.clean.clean_correct, {n: o.adv_correct for n, o in run.outcomes.items()}),
        clean=run.clean,
        outcomes=run.outcomes,
        seconds=run.seconds,
        flags=run.flags,
        seed=seed,
        attack_configs={a.name: a.config_dict() for a in plan.attacks},
        min_perturbation=min_perturbation,
        checkpoint_sha256=sha256,
        inference=settings.inference,
        grid=threat.grid,
        machine=machine,
        notes=[
            f"{a.name} ran {', '.join(a.components_run)}; not available yet: {', '.join(a.skipped_components)}"
            for a in plan.attacks
            if isinstance(a, AutoAttack) and a.skipped_components
        ],
    )
    if to_disk:
        path, written = write_eval_card(result, model_info)
        if not written:
            warnings.warn(f"kept {path}: the full-protocol card of the same checkpoint is not replaced by this "
                          "evaluation's card; pass another model_info to write it", stacklevel=2)
    return result


def write_eval_card(result: BenchmarkResult, model_info: str | os.PathLike[str]) -> tuple[Path, bool]:
    """The card of ``result`` written under ``model_info``: (its path, whether it was written). A full-protocol
    card of the same checkpoint is kept (False): minutes of attacks never replace hours of them."""
    path = card_path(model_info, result.dataset, result.threat_model, result.model_name, inference=result.inference,
                     grid=result.grid)
    card = result.to_card()
    if replaces_full_card(card, path):
        return path, False
    return write_card(card, path), True
