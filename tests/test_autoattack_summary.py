"""The per-image AutoAttack comparison (benchmarks/autoattack_per_image.py): its summary (the pieces summed per (model,
eps) and over all, the sign test on the images only one library left robust) and a piece that resumes after its last
finished component."""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("autoattack_per_image", ROOT / "benchmarks" / "autoattack_per_image.py")
assert SPEC is not None and SPEC.loader is not None
per_image = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(per_image)
PIECES = ROOT / "docs" / "measurements" / "autoattack_per_image"


def test_the_sign_test_is_the_exact_two_sided_binomial() -> None:
    assert per_image.sign_test_p(0, 0) == 1.0
    assert per_image.sign_test_p(4, 1) == pytest.approx(12 / 32)  # P(<= 1 of 5) = 6/32, both tails
    assert per_image.sign_test_p(1, 4) == per_image.sign_test_p(4, 1)
    assert per_image.sign_test_p(10, 0) == pytest.approx(2 / 1024)
    assert per_image.sign_test_p(3, 3) == 1.0


def test_the_summary_sums_the_stored_pieces(capsys: pytest.CaptureFixture[str]) -> None:
    pieces = [json.loads(p.read_text()) for p in sorted(PIECES.glob("*.json"))]
    assert pieces, "the measured pieces are committed beside BENCHMARKS.md"
    per_image._summary(PIECES)
    out = capsys.readouterr().out.splitlines()
    rows = [line.split(" | ") for line in out if line.startswith("| all | - |")]
    assert len(rows) == 1
    ours = sum(sum(per_image._robust(p)[0]) for p in pieces)
    theirs = sum(sum(per_image._robust(p)[1]) for p in pieces)
    assert (int(rows[0][2]), int(rows[0][4]), int(rows[0][5])) == (len(pieces), ours, theirs)
    # per component over all pieces: every correct image meets APGD-CE, each later component gets what the ones
    # before left, and what no component fooled is the robust count
    correct = sum(sum(p["correct"]) for p in pieces)
    for library, robust in (("arbibench", ours), ("reference", theirs)):
        cells = next(line for line in out if line.startswith(f"| all | {len(pieces)} | {library} |"))
        attacked_fooled = [tuple(map(int, c.split(" / "))) for c in cells.strip(" |").split(" | ")[3:]]
        assert attacked_fooled[0][0] == correct
        for (attacked, fooled), (next_attacked, _) in itertools.pairwise(attacked_fooled):
            assert next_attacked == attacked - fooled
        assert attacked_fooled[-1][0] - attacked_fooled[-1][1] == robust
    # a robust image is a correctly classified one that no component fooled, in either library
    for p in pieces:
        a, b = per_image._robust(p)
        assert sum(a) == p["arbibench"]["square_variants"]["configured"]["robust"]
        assert sum(b) == p["reference"]["robust"]


def test_a_piece_cut_short_resumes_after_its_last_finished_component(tmp_path: Path, data_dir: Path) -> None:
    # the pieces take 1-2 hours on 2 cores, longer than what is left of a session; each component's outcome is kept
    # as it finishes, and a rerun skips it. Real images and model; a deterministic stand-in for each component
    import torch

    from arbibench.data import load_cifar10
    from arbibench.models.zoo import load_model

    model = load_model("resnet20_reactnet_at").eval()
    x, y, _ = load_cifar10(24, data_dir=data_dir)
    with torch.no_grad():
        correct = model(x).argmax(1) == y
    eps = 8 / 255
    calls: list[str] = []

    def component(name: str, sign: float):  # noqa: ANN202 - a stand-in attack
        def attack(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
            calls.append(name)
            return (xs + sign * eps * torch.sign(xs - 0.5)).clamp(0, 1)
        return attack

    plan = [("a", component("a", 1.0)), ("b", component("b", -1.0)), ("c", component("c", 1.0))]

    def run(resume: object, stop_after: int | None = None) -> dict[str, object]:
        tally = resume.tally("arbibench", correct)  # type: ignore[attr-defined]
        for k, (name, fn) in enumerate(plan):
            if stop_after is not None and k == stop_after:
                raise KeyboardInterrupt  # the session ends here
            tally.run(name, fn, x, y, eps, model)
        return tally.state()

    whole = run(per_image.Resume(None, total=3))
    assert calls == ["a", "b", "c"] and sum(whole["alive"]) < int(correct.sum())
    calls.clear()
    state = tmp_path / "piece" / "state.json"
    with pytest.raises(KeyboardInterrupt):
        run(per_image.Resume(state, total=3), stop_after=2)
    saved = json.loads(state.read_text())
    assert calls == ["a", "b"] and saved["epoch"] == 2 and saved["unit"] == "component"
    assert [h["component"] for h in saved["history"]] == ["arbibench: a", "arbibench: b"]
    calls.clear()
    resumed = run(per_image.Resume(state, total=3))
    assert calls == ["c"]  # a and b are read back, not run again
    assert {k: v for k, v in resumed.items() if k != "components"} == \
        {k: v for k, v in whole.items() if k != "components"}
    assert [(c["component"], c["images"], c["fooled"]) for c in resumed["components"]] == \
        [(c["component"], c["images"], c["fooled"]) for c in whole["components"]]
