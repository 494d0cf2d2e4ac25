"""Evaluation: attack runner, result store and ARBiBench metrics.

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
