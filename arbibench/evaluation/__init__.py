"""Evaluation: what to compute (``plan``), its executors (the local ``runner``; a ``backends.Backend`` such as Ray,
chosen by ``backend_registry``), the result store and the ARBiBench metrics, and the cards of a benchmark result.

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
