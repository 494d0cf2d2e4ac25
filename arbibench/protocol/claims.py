"""The ARBiBench paper's claims, checked against the BNN-versus-twin verdicts of a findings report.

Zhao et al. (arXiv:2312.13575) report three results for standard-trained BNNs: under white-box attacks BNNs are less
robust than full-precision networks on CIFAR-10 and more robust on ImageNet (opposite on the two datasets); under
black-box attacks they are more robust on both; and different BNNs behave alike. A reader of a findings page wants
to know which of these the evaluated zoo confirms, so each claim is read off the paired verdicts
(:mod:`arbibench.evaluation.findings`): a claim about direction holds for a BNN when its 95% interval says so, and
on the zoo when it holds for every BNN; the similarity claim holds in a setting when every BNN got the same verdict.

Only pairs whose twin is standard-trained count: the paper states its claims for standard training, and an
adversarially trained pair answers a different question. The same check runs on an earlier report's JSON (e.g. the
quick protocol's), so the page shows whether the larger protocol moved a claim, not only single verdicts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from arbibench.evaluation.findings import LESS_ROBUST, MORE_ROBUST, TwinComparison
from arbibench.models.zoo import ZOO
from arbibench.protocol.presets import BLACK_BOX, WHITE_BOX

HOLDS, DOES_NOT_HOLD, PARTLY, UNTESTED = "holds", "does not hold", "partly", "not tested"
SAME_VERDICT = "one verdict for every BNN"

# (claim, setting, the verdict it predicts for each BNN) per dataset; the similarity claim is added per setting.
_DIRECTION_CLAIMS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "cifar10": (("BNNs are less robust than their FP twins under white-box attacks on CIFAR-10", WHITE_BOX,
                 LESS_ROBUST),
                ("BNNs are more robust than their FP twins under black-box attacks", BLACK_BOX, MORE_ROBUST)),
    "imagenet": (("BNNs are more robust than their FP twins under white-box attacks on ImageNet", WHITE_BOX,
                  MORE_ROBUST),
                 ("BNNs are more robust than their FP twins under black-box attacks", BLACK_BOX, MORE_ROBUST)),
}
CLAIM_DATASETS = tuple(_DIRECTION_CLAIMS)
_OPPOSITE = {LESS_ROBUST: MORE_ROBUST, MORE_ROBUST: LESS_ROBUST}


@dataclass(frozen=True)
class Verdict:
    """One BNN-versus-twin verdict, from a :class:`TwinComparison` or an earlier report's JSON."""

    model: str
    twin: str
    setting: str
    verdict: str


@dataclass(frozen=True)
class ClaimCheck:
    """One claim on one setting: how many standard-trained BNNs were compared, how many agree, and the status."""

    claim: str
    setting: str
    expected: str  # the verdict it predicts per BNN, or SAME_VERDICT
    n_models: int
    # BNNs with the predicted verdict (similarity: the largest group sharing one verdict, 0 with fewer than two BNNs,
    # where nothing can be alike)
    as_claimed: int
    opposite: int  # BNNs with the opposite verdict (similarity: 0)
    status: str

    def summary(self) -> str:
        """``holds (3 of 3)``, ``partly (1 of 3; 1 opposite)``, ``not tested``: the BNNs that contradict a claim are
        named, so "partly" never hides a verdict against it."""
        if self.status == UNTESTED:
            return self.status
        against = f"; {self.opposite} opposite" if self.opposite else ""
        return f"{self.status} ({self.as_claimed} of {self.n_models}{against})"


def verdicts_of(findings: Iterable[TwinComparison]) -> list[Verdict]:
    return [Verdict(f.model, f.twin, f.setting, f.verdict) for f in findings]


def verdicts_from_json(payload: Mapping[str, Any]) -> list[Verdict]:
    """The verdicts of an earlier ``protocol report --json``."""
    return [Verdict(str(f["model"]), str(f["twin"]), str(f["setting"]), str(f["verdict"]))
            for f in payload.get("findings", [])]


def standard_twin(twin: str) -> bool:
    """Whether ``twin`` is a standard-trained zoo model: the pairs the paper's claims speak of. An unknown twin (a
    user's own model) is not assumed to be one."""
    entry = ZOO.get(twin)
    return entry is not None and entry.training == "standard"


def _status(agree: int, n: int) -> str:
    if n == 0:
        return UNTESTED
    return HOLDS if agree == n else DOES_NOT_HOLD if agree == 0 else PARTLY


def check_claims(verdicts: Iterable[Verdict], dataset: str) -> list[ClaimCheck]:
    """Each of the paper's claims for ``dataset`` (``cifar10`` or ``imagenet``), read off the standard-trained pairs
    of ``verdicts``."""
    if dataset not in CLAIM_DATASETS:
        raise ValueError(f"the paper makes claims for {', '.join(CLAIM_DATASETS)}; got dataset {dataset!r}")
    by_setting: dict[str, list[str]] = {}
    for v in verdicts:
        if standard_twin(v.twin):
            by_setting.setdefault(v.setting, []).append(v.verdict)
    checks = []
    for claim, setting, expected in _DIRECTION_CLAIMS[dataset]:
        seen = by_setting.get(setting, [])
        agree = sum(v == expected for v in seen)
        checks.append(ClaimCheck(claim, setting, expected, len(seen), agree,
                                 sum(v == _OPPOSITE[expected] for v in seen), _status(agree, len(seen))))
    for setting in (WHITE_BOX, BLACK_BOX):
        seen = by_setting.get(setting, [])
        largest = Counter(seen).most_common(1)[0][1] if len(seen) >= 2 else 0
        status = UNTESTED if len(seen) < 2 else HOLDS if largest == len(seen) else DOES_NOT_HOLD
        checks.append(ClaimCheck("Different BNNs behave alike", setting, SAME_VERDICT, len(seen), largest, 0,
                                 status))
    return checks
