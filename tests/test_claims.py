"""The paper's claims read off BNN-versus-twin verdicts: direction claims per setting, the similarity claim, and
adversarially trained pairs left out (pure logic on verdict records)."""

from __future__ import annotations

import pytest

from arbibench.evaluation.bootstrap import Estimate
from arbibench.evaluation.findings import LESS_ROBUST, MORE_ROBUST, NOT_DISTINGUISHABLE, TwinComparison
from arbibench.leaderboard.findings import claims_markdown
from arbibench.protocol.claims import (
    DOES_NOT_HOLD,
    HOLDS,
    PARTLY,
    UNTESTED,
    Verdict,
    check_claims,
    verdicts_from_json,
    verdicts_of,
)
from arbibench.protocol.report import claim_rows

FP, FP_AT = "resnet20_fp", "resnet20_fp_at"


def _by_claim(checks):
    return {(c.claim.split(" ")[1] if c.claim.startswith("BNNs") else "alike", c.setting): c for c in checks}


def test_direction_and_similarity_claims_on_cifar10():
    verdicts = [
        Verdict("resnet20_bnn", FP, "white-box", LESS_ROBUST),
        Verdict("resnet20_xnor", FP, "white-box", LESS_ROBUST),
        Verdict("resnet20_bnn", FP, "black-box", MORE_ROBUST),
        Verdict("resnet20_xnor", FP, "black-box", LESS_ROBUST),
        Verdict("resnet20_dorefa", FP, "black-box", NOT_DISTINGUISHABLE),
        Verdict("resnet20_bnn", FP, "sweep pgd", MORE_ROBUST),  # no claim is read off the sweep
        # adversarially trained pairs answer another question: they would break both white-box claims if counted
        Verdict("resnet20_bireal_at", FP_AT, "white-box", MORE_ROBUST),
    ]
    checks = _by_claim(check_claims(verdicts, "cifar10"))
    white = checks[("are", "white-box")]
    assert (white.expected, white.n_models, white.as_claimed, white.opposite, white.status) == (
        LESS_ROBUST, 2, 2, 0, HOLDS)
    assert white.summary() == "holds (2 of 2)"
    black = checks[("are", "black-box")]
    assert (black.expected, black.n_models, black.as_claimed, black.opposite, black.status) == (
        MORE_ROBUST, 3, 1, 1, PARTLY)
    assert black.summary() == "partly (1 of 3; 1 opposite)"
    assert checks[("alike", "white-box")].status == HOLDS
    alike_black = checks[("alike", "black-box")]
    assert (alike_black.as_claimed, alike_black.status) == (1, DOES_NOT_HOLD)
    assert len(checks) == 4


def test_imagenet_predicts_the_opposite_white_box_direction_and_nothing_is_untested_silently():
    verdicts = [Verdict("resnet18_imagenet_bnn", "resnet18_imagenet_fp", "white-box", LESS_ROBUST)]
    # the ImageNet models are not shipped, so the zoo knows their twin's training all the same
    checks = check_claims(verdicts, "imagenet")
    white = next(c for c in checks if c.setting == "white-box" and c.claim.startswith("BNNs"))
    assert white.expected == MORE_ROBUST and white.status == DOES_NOT_HOLD and white.opposite == 1
    alike = next(c for c in checks if c.setting == "white-box" and not c.claim.startswith("BNNs"))
    assert alike.status == UNTESTED and alike.summary() == UNTESTED  # one BNN cannot be alike anything
    assert (alike.n_models, alike.as_claimed) == (1, 0)  # and is not counted as behaving as claimed
    assert all(c.status == UNTESTED for c in checks if c.setting == "black-box")
    with pytest.raises(ValueError, match="claims for cifar10, imagenet"):
        check_claims(verdicts, "cifar100")


def test_verdicts_from_a_report_json_match_the_comparisons_and_the_markdown_sets_them_side_by_side():
    est = Estimate(-0.2, -0.3, -0.1)
    comparison = TwinComparison("resnet20_bnn", FP, "white-box", ("pgd",), 100, est, est, est, LESS_ROBUST)
    assert verdicts_from_json({"findings": [comparison.to_dict()]}) == verdicts_of([comparison])
    now = claim_rows(verdicts_of([comparison]), "cifar10")
    earlier = claim_rows([Verdict("resnet20_bnn", FP, "white-box", NOT_DISTINGUISHABLE)], "cifar10")
    assert now is not None and claim_rows(verdicts_of([comparison]), "cifar100") is None  # no claim to check there
    lines = claims_markdown(now, earlier, "cifar10 (quick)")
    assert lines[0].endswith("| cifar10 (quick) |") and len(lines) == 2 + 4
    white = next(line for line in lines if "less robust than their FP twins" in line)
    assert white.endswith("| holds (1 of 1) | does not hold (0 of 1) |")
    assert "| 1 | 1 | 0 |" in white  # BNNs, as claimed, opposite
    alike = next(line for line in lines if line.startswith("| Different BNNs behave alike | white-box"))
    # one BNN: the similarity claim is not tested, so no BNN counts as behaving as claimed; it has no opposite
    assert "| 1 | 0 | - | not tested |" in alike
