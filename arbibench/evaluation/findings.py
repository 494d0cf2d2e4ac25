"""ARBiBench's question, answered per BNN: is it more or less robust than its full-precision twin?

The comparison is the paper's: mean ACC_norm (ACC*/ACC) over a set of attacks (one family at the protocol eps), or
over the eps values of a sweep (the mean height of the normalised robustness curve). Both models are evaluated on
the same images, so the difference BNN - FP gets a *paired* bootstrap interval over images (each resample keeps an
image's clean and adversarial outcomes of both models together). The verdict follows the 95% interval only:
entirely above zero "more robust", entirely below "less robust", otherwise "not distinguishable" -- which is also
what two models that both fall to 0% get, and it says so rather than ranking noise.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from arbibench.cards import Finding, Interval
from arbibench.evaluation.bootstrap import N_BOOTSTRAP, Estimate, bootstrap_image_means, percentile_interval

MORE_ROBUST, LESS_ROBUST, NOT_DISTINGUISHABLE = "more robust", "less robust", "not distinguishable"


def verdict(difference: Estimate) -> str:
    """The plain reading of a BNN - FP difference's 95% interval."""
    if difference.low > 0:
        return MORE_ROBUST
    if difference.high < 0:
        return LESS_ROBUST
    return NOT_DISTINGUISHABLE


@dataclass(frozen=True)
class PairedOutcomes:
    """One model's outcomes on a set of images: clean correctness [n] and, per column (attack or eps), robustness
    [n] (correct on the adversarial image)."""

    clean: np.ndarray
    adversarial: Mapping[str, np.ndarray]


@dataclass(frozen=True)
class TwinComparison:
    """A BNN against its FP twin in one setting (an attack family at the protocol eps, or an eps sweep)."""

    model: str
    twin: str
    setting: str  # "white-box", "black-box", or "sweep <attack>"
    columns: tuple[str, ...]  # the attacks (or eps values) whose ACC_norm is averaged
    n_examples: int
    bnn: Estimate  # mean ACC_norm of the BNN
    fp: Estimate  # mean ACC_norm of the FP twin
    difference: Estimate  # BNN - FP, paired over images
    verdict: str

    def to_row(self) -> Finding:
        """This comparison as a row of the findings document (:class:`arbibench.cards.FindingsDocument`)."""
        def interval(e: Estimate) -> Interval:
            return Interval(value=e.value, low=e.low, high=e.high)

        return Finding(model=self.model, twin=self.twin, setting=self.setting, columns=self.columns,
                       n_examples=self.n_examples, bnn_mean_acc_norm=interval(self.bnn),
                       fp_mean_acc_norm=interval(self.fp), difference=interval(self.difference), verdict=self.verdict)

    def to_dict(self) -> dict[str, Any]:
        return self.to_row().to_dict()


def _mean_acc_norm(means: np.ndarray, n_columns: int) -> np.ndarray:
    """Mean over columns of ACC*/ACC from image means laid out as [..., columns + clean]."""
    clean = means[..., n_columns : n_columns + 1]
    ratio = np.divide(means[..., :n_columns], clean, out=np.zeros_like(means[..., :n_columns]), where=clean > 0)
    mean: np.ndarray = ratio.mean(-1)
    return mean


def compare_to_twin(
    model: str,
    twin: str,
    setting: str,
    bnn: PairedOutcomes,
    fp: PairedOutcomes,
    *,
    n_boot: int = N_BOOTSTRAP,
    seed: int = 0,
) -> TwinComparison:
    """Mean ACC_norm of ``bnn`` and ``fp`` over their shared columns, their difference and its verdict."""
    columns = tuple(c for c in bnn.adversarial if c in fp.adversarial)
    if not columns:
        raise ValueError(f"{model} and {twin} share no attack in setting {setting!r}: nothing to compare")
    n = bnn.clean.shape[0]
    vectors = [bnn.clean, fp.clean, *(bnn.adversarial[c] for c in columns), *(fp.adversarial[c] for c in columns)]
    if any(v.shape != (n,) for v in vectors):
        raise ValueError(f"{model} and {twin} were not evaluated on the same {n} images in setting {setting!r}")
    k = len(columns)
    # rows: BNN columns, BNN clean, FP columns, FP clean
    stats = np.stack(
        [*(bnn.adversarial[c] for c in columns), bnn.clean, *(fp.adversarial[c] for c in columns), fp.clean]
    ).astype(np.float64)

    def both(means: np.ndarray) -> np.ndarray:
        return np.stack([_mean_acc_norm(means[..., : k + 1], k), _mean_acc_norm(means[..., k + 1 :], k)], -1)

    point = both(stats.mean(-1))
    boot = bootstrap_image_means(stats, both, n_boot, seed)  # [B, 2]
    difference = percentile_interval(boot[:, 0] - boot[:, 1], float(point[0] - point[1]))
    return TwinComparison(
        model=model,
        twin=twin,
        setting=setting,
        columns=columns,
        n_examples=n,
        bnn=percentile_interval(boot[:, 0], float(point[0])),
        fp=percentile_interval(boot[:, 1], float(point[1])),
        difference=difference,
        verdict=verdict(difference),
    )


def _pairs(
    outcomes: Mapping[str, Mapping[str, PairedOutcomes]], twins: Mapping[str, str]
) -> Iterator[tuple[str, str, str, PairedOutcomes, PairedOutcomes]]:
    """(BNN, twin, setting, BNN's outcomes, twin's outcomes) for every setting both were evaluated in."""
    for model, settings in outcomes.items():
        twin = twins.get(model)
        if twin is None or twin == model or twin not in outcomes:
            continue
        for setting, own in settings.items():
            other = outcomes[twin].get(setting)
            if other is not None:
                yield model, twin, setting, own, other


def twin_findings(
    outcomes: Mapping[str, Mapping[str, PairedOutcomes]],
    twins: Mapping[str, str],
    *,
    n_boot: int = N_BOOTSTRAP,
    seed: int = 0,
) -> list[TwinComparison]:
    """Every BNN of ``outcomes`` (model -> setting -> outcomes) against its twin (``twins``: model -> FP twin), in
    every setting both were evaluated in; models whose twin is missing are left out."""
    return [compare_to_twin(model, twin, setting, own, other, n_boot=n_boot, seed=seed)
            for model, twin, setting, own, other in _pairs(outcomes, twins)]


def column_findings(outcomes: Mapping[str, Mapping[str, PairedOutcomes]], twins: Mapping[str, str], *,
                    n_boot: int = N_BOOTSTRAP, seed: int = 0) -> list[TwinComparison]:
    """What :func:`twin_findings` averages, one column at a time: each attack of a family, each eps of a sweep.

    A family's verdict is a mean over its attacks, so one weak attack can carry it (a BNN and its twin both at 0%
    under every iterative attack differ only by FGSM); these rows show which columns a verdict rests on. Each row's
    ``setting`` is its family's and ``columns`` holds the one attack or eps."""
    rows = []
    for model, twin, setting, own, other in _pairs(outcomes, twins):
        for column in (c for c in own.adversarial if c in other.adversarial):
            rows.append(compare_to_twin(
                model, twin, setting,
                PairedOutcomes(own.clean, {column: own.adversarial[column]}),
                PairedOutcomes(other.clean, {column: other.adversarial[column]}),
                n_boot=n_boot, seed=seed,
            ))
    return rows


def verdict_counts(rows: Sequence[TwinComparison]) -> dict[str, int]:
    """How many comparisons came out each way (the one-line answer to the paper's claim)."""
    return {v: sum(r.verdict == v for r in rows) for v in (MORE_ROBUST, LESS_ROBUST, NOT_DISTINGUISHABLE)}
