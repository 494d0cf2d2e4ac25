"""Evaluation: what to compute (``plan``, under ``settings``), its executors (the local ``runner``; an
``executors.Executor`` such as Ray, chosen by ``executor_registry`` from ``--backend``), the result store and the
ARBiBench metrics, and the cards of a benchmark result.

Only the torch-free metrics are re-exported here so that ``import arbibench.evaluation`` stays cheap.
"""

from arbibench.evaluation.metrics import (
    AttackMetrics,
    RobustnessReport,
    acc_norm,
    compute_report,
    robustness_score,
    robustness_score_mean,
    wilson_interval,
)

__all__ = [
    "AttackMetrics",
    "RobustnessReport",
    "acc_norm",
    "compute_report",
    "robustness_score",
    "robustness_score_mean",
    "wilson_interval",
]
