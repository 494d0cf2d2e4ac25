"""Gradient-masking checks: small named tests whose failure says a reported robustness may be an artefact.

BNNs are the textbook case of gradient masking: ``sign`` has zero derivative almost everywhere and over-confident
logits saturate the softmax, so a gradient attack can fail on a model that is not robust at all. Each check here
looks for one symptom (after Carlini et al., "On Evaluating Adversarial Robustness", 2019, and AutoAttack's
``checks.py``: Croce & Hein, ICML 2020) and returns a :class:`Flag` naming it, the numbers seen and what to do,
or ``None``. :func:`run_checks` runs them all and returns ``{flag name: message}``, the shape the runner stores.

Checks on the inputs themselves (randomized model, probability outputs) live in
:mod:`arbibench.evaluation.inputs`; :data:`ALL_FLAG_MEANINGS` lists both sets.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from arbibench.attacks.base import Attack
from arbibench.attacks.pgd import PGD
from arbibench.attacks.threat import L2, Linf, ThreatModel
from arbibench.evaluation import inputs

FLAG_MEANINGS = {
    "zero_gradient": "The cross-entropy gradient w.r.t. the input is exactly zero on many correctly classified "
    "samples: gradient attacks get no signal there and those samples look robust without being so. Attack through "
    "a surrogate (BPDA: EstimatedAttack/AdaptiveAttack with 'identity' or 'tanh'), a logit temperature > 1, or a "
    "margin/DLR loss, and add a gradient-free attack (Square).",
    "single_step_stronger": "A single-step attack (FGSM) left fewer samples robust than its iterative version (PGD): "
    "an iterated attack should never be weaker, so the iterates follow a misleading (masked) gradient. Use more "
    "restarts, other gradient estimators, and trust the lower number.",
    "large_eps_robust": "A gradient attack with a huge budget (Linf 0.5, enough to reach a uniform grey image) left "
    "samples correctly classified: the model's gradients do not lead anywhere, so small-budget results from "
    "gradient attacks are not trustworthy. Check the gradient estimator, and run gradient-free attacks.",
    "gradient_free_stronger": "A gradient-free attack beat every gradient attack: the gradients are masked. Report "
    "the worst case over all attacks and try other gradient estimators (AdaptiveAttack).",
}

ALL_FLAG_MEANINGS = {**inputs.FLAG_MEANINGS, **FLAG_MEANINGS}

# Linf 0.5 around any image in [0, 1] contains the uniform grey image, so one image for every sample.
LARGE_LINF_EPS = 0.5


@dataclass(frozen=True)
class Flag:
    """A raised check: its ``name``, the numbers behind it (``detail``) and what it means and calls for."""

    name: str
    detail: str
    meaning: str

    @property
    def message(self) -> str:
        return f"{self.detail} {self.meaning}"


def _flag(name: str, detail: str) -> Flag:
    return Flag(name, detail, FLAG_MEANINGS[name])


def _batches(n: int, batch_size: int) -> Iterable[slice]:
    return (slice(i, i + batch_size) for i in range(0, n, batch_size))


# -- checks on the model ---------------------------------------------------------------------------------------------
def zero_gradient_fraction(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    threshold: float = 0.05,
    *,
    batch_size: int = 100,
    device: str | torch.device | None = None,
) -> Flag | None:
    """Flag ``zero_gradient`` when more than ``threshold`` of the correctly classified samples have an all-zero
    (or non-finite) input gradient of the cross-entropy, computed as an attacker would (the model's own
    surrogates, no temperature).

    Only correctly classified samples count: they are the ones attacks are handed. AutoAttack warns on any zero
    gradient; the default 5% tolerates a few saturated samples, while each such sample can add a full point of
    ACC* per hundred samples.
    """
    device = torch.device(device) if device is not None else x.device
    n_zero = n_seen = 0
    for s in _batches(len(y), batch_size):
        xb, yb = x[s].to(device), y[s].to(device)
        with torch.enable_grad():
            xr = xb.detach().clone().requires_grad_(True)
            logits = model(xr)
            loss = F.cross_entropy(logits, yb, reduction="sum")
            grad = torch.zeros_like(xr)
            if loss.requires_grad:  # the output may not depend on the input at all
                (g,) = torch.autograd.grad(loss, xr, allow_unused=True)
                grad = torch.zeros_like(xr) if g is None else g
        correct = logits.detach().argmax(1) == yb
        flat = grad.detach().flatten(1)[correct]
        dead = (flat == 0).all(1) | ~torch.isfinite(flat).all(1)
        n_zero += int(dead.sum())
        n_seen += int(correct.sum())
    if n_seen == 0 or n_zero / n_seen <= threshold:
        return None
    return _flag(
        "zero_gradient",
        f"{n_zero} of {n_seen} correctly classified samples ({n_zero / n_seen:.1%}) have an all-zero input "
        f"gradient (threshold {threshold:.0%}).",
    )


def large_threat(threat: ThreatModel | None, x: torch.Tensor) -> ThreatModel:
    """The same norm with a budget that reaches a uniform grey image from any image (Linf 0.5, L2 0.5*sqrt(d))."""
    if isinstance(threat, L2):
        return L2(LARGE_LINF_EPS * math.sqrt(x[0].numel()))
    return Linf(LARGE_LINF_EPS)


def large_eps_sanity(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    threat: ThreatModel | None = None,
    attack: Attack | None = None,
    *,
    max_accuracy: float = 0.05,
    seed: int = 0,
    batch_size: int = 100,
    device: str | torch.device | None = None,
) -> Flag | None:
    """Flag ``large_eps_robust`` when ``attack`` (default PGD-10, CE, random start) at a huge budget in
    ``threat``'s norm (see :func:`large_threat`) leaves more than ``max_accuracy`` of the samples correct.

    Any classifier can be fooled by a budget that reaches one same image for every input, so accuracy should fall
    to about 0: if a gradient attack cannot get there, its small-budget numbers say little (Carlini et al. 2019).
    A model whose output does not depend on its input at all (no autograd graph) is flagged as well.
    """
    device = torch.device(device) if device is not None else x.device
    big = large_threat(threat, x)
    attack = attack if attack is not None else PGD(steps=10)
    n_correct = 0
    for b, s in enumerate(_batches(len(y), batch_size)):
        xb, yb = x[s].to(device), y[s].to(device)
        with torch.no_grad():
            ok = model(xb).argmax(1) == yb
        idx = ok.nonzero().flatten()
        if idx.numel():
            generator = torch.Generator().manual_seed(seed * 1_000_003 + b)
            try:
                x_adv = attack(model, xb[idx], yb[idx], big, generator)
            except RuntimeError as e:  # autograd: the output does not depend on the input
                if "does not require grad" not in str(e) and "not have been used in the graph" not in str(e):
                    raise
                x_adv = xb[idx]
            with torch.no_grad():
                ok[idx] = model(x_adv).argmax(1) == yb[idx]
        n_correct += int(ok.sum())
    acc = n_correct / max(len(y), 1)
    if acc <= max_accuracy:
        return None
    return _flag(
        "large_eps_robust",
        f"{attack.name} at {big.norm} eps={big.eps:.4g} left {n_correct} of {len(y)} samples ({acc:.1%}) correctly "
        f"classified (expected at most {max_accuracy:.0%}).",
    )


# -- checks on the results -----------------------------------------------------------------------------------------
def _variants(acc: Mapping[str, float], base: str) -> dict[str, float]:
    """``{suffix: ACC*}`` of ``base`` and its variants (``base@identity``, ``base_adaptive``, ...)."""
    out = {}
    for name, value in acc.items():
        if name.startswith(base) and (name == base or name[len(base)] in "@_"):
            out[name[len(base) :]] = value
    return out


def single_step_beats_iterative(
    acc_star_by_attack: Mapping[str, float],
    pairs: Iterable[tuple[str, str]] = (("fgsm", "pgd"),),
    *,
    tolerance: float = 0.0,
) -> Flag | None:
    """Flag ``single_step_stronger`` when, for a ``(single_step, iterative)`` pair, the single-step attack has a
    lower ACC* than the iterative one by more than ``tolerance``.

    Variants are compared like with like: ``fgsm@identity`` against ``pgd@identity``, ``fgsm_adaptive`` against
    ``pgd_adaptive``. ACC* values are fractions in [0, 1]; attacks not in the mapping are skipped.
    """
    found = []
    for single, iterative in pairs:
        singles, iters = _variants(acc_star_by_attack, single), _variants(acc_star_by_attack, iterative)
        for suffix, a_single in singles.items():
            if suffix in iters and a_single < iters[suffix] - tolerance:
                found.append(f"{single}{suffix} ACC* {a_single:.2%} < {iterative}{suffix} ACC* {iters[suffix]:.2%}")
    if not found:
        return None
    return _flag("single_step_stronger", "; ".join(found) + ".")


def gradient_free_beats_gradient(
    acc_star_by_attack: Mapping[str, float],
    gradient_free_names: Collection[str],
    gradient_names: Collection[str] | None = None,
    *,
    tolerance: float = 0.0,
) -> Flag | None:
    """Flag ``gradient_free_stronger`` when a gradient-free attack's ACC* is lower than the best (lowest) ACC* of
    the gradient attacks by more than ``tolerance``.

    ``gradient_names=None`` takes every attack in the mapping that is not gradient-free.
    """
    free = {k: v for k, v in acc_star_by_attack.items() if k in set(gradient_free_names)}
    grad_set = set(gradient_names) if gradient_names is not None else set(acc_star_by_attack) - set(free)
    grad = {k: v for k, v in acc_star_by_attack.items() if k in grad_set and k not in free}
    if not free or not grad:
        return None
    best_grad = min(grad, key=grad.__getitem__)
    beaten = {k: v for k, v in free.items() if v < grad[best_grad] - tolerance}
    if not beaten:
        return None
    listed = ", ".join(f"{k} {v:.2%}" for k, v in sorted(beaten.items(), key=lambda kv: kv[1]))
    return _flag(
        "gradient_free_stronger",
        f"gradient-free ACC* {listed} below the best gradient attack {best_grad} {grad[best_grad]:.2%}.",
    )


# -- all of them -----------------------------------------------------------------------------------------------------
def run_checks(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    threat: ThreatModel | None,
    acc_star_by_attack: Mapping[str, float] | None = None,
    gradient_free: Collection[str] = frozenset(),
    device: str | torch.device | None = None,
    *,
    n_samples: int = 100,
    seed: int = 0,
    gradient_only: Collection[str] | None = None,
) -> dict[str, str]:
    """Every gradient-masking check; returns ``{flag name: detail and meaning}`` for those raised.

    The model checks (zero gradients, large budget) use the first ``n_samples`` of ``x``; the result checks use
    ``acc_star_by_attack`` (attack name -> ACC* in [0, 1], may be empty before any attack ran) and the names of
    the gradient-free attacks in it; ``gradient_only`` names the attacks a gradient-free one is compared against
    (default: all the others). ``model`` must be in eval mode.
    """
    xs, ys = x[:n_samples], y[:n_samples]
    acc = dict(acc_star_by_attack or {})
    flags = [
        zero_gradient_fraction(model, xs, ys, device=device),
        large_eps_sanity(model, xs, ys, threat, seed=seed, device=device),
        single_step_beats_iterative(acc),
        gradient_free_beats_gradient(acc, gradient_free, gradient_only),
    ]
    return {f.name: f.message for f in flags if f is not None}


__all__ = [
    "ALL_FLAG_MEANINGS",
    "FLAG_MEANINGS",
    "Flag",
    "gradient_free_beats_gradient",
    "large_eps_sanity",
    "large_threat",
    "run_checks",
    "single_step_beats_iterative",
    "zero_gradient_fraction",
]
