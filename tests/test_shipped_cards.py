"""Cards that cannot go stale: every shipped result card (model_info/) records the sha256 of the checkpoint it
measured, and that is the sha256 of the checkpoint shipped under its name now; the leaderboard and ``zoo list`` mark
a card that does not."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arbibench.cards import (
    SHIPPED_CHECKPOINTS,
    parse_card,
    parse_corruption_card,
    read_card_json,
    shipped_sha256,
    stale_checkpoint,
)
from arbibench.files import sha256_file

ROOT = Path(__file__).resolve().parents[1]
MODEL_INFO = ROOT / "model_info"
RESULT_CARDS = sorted(p for p in MODEL_INFO.rglob("*.json"))


def _shipped_files() -> dict[str, str]:
    """Model name -> sha256 of the shipped checkpoint file itself (the bytes, not what a card says of them)."""
    return {p.stem: sha256_file(p) for p in sorted(SHIPPED_CHECKPOINTS.glob("*.safetensors"))}


def test_there_are_shipped_cards_to_check() -> None:
    assert len(RESULT_CARDS) >= 10 and len(_shipped_files()) >= 10


def test_every_shipped_card_measured_the_shipped_checkpoint() -> None:
    files = _shipped_files()
    wrong = []
    for path in RESULT_CARDS:
        card = read_card_json(path)
        name, recorded = card.get("name") or path.stem, card.get("checkpoint_sha256")
        if name not in files:
            continue  # a result card of a model arbibench does not ship (an imported checkpoint)
        if recorded != files[name]:
            wrong.append(f"{path.relative_to(ROOT)}: records {recorded and recorded[:12]}, "
                         f"the shipped {name}.safetensors is {files[name][:12]}")
    assert wrong == [], "cards of replaced weights (regenerate them): " + "; ".join(wrong)


def test_checkpoint_cards_record_their_files_sha256() -> None:
    """What the leaderboard compares against (torch-free) is the files' real digest."""
    assert shipped_sha256() == _shipped_files()


def _card(path: Path):  # noqa: ANN202 - either card type
    data = read_card_json(path)
    reader = parse_corruption_card if data.get("threat_model") == "corruptions" else parse_card
    return reader(path, data)


def test_stale_checkpoint_tells_current_replaced_and_unrecorded_cards() -> None:
    card = _card(MODEL_INFO / "cifar10" / "Linf" / "resnet20_fp.json")
    shipped = {"resnet20_fp": "a" * 64}
    assert stale_checkpoint(replace(card, checkpoint_sha256="a" * 64), shipped) is None
    assert "now ships aaaaaaaaaaaa" in (stale_checkpoint(replace(card, checkpoint_sha256="b" * 64), shipped) or "")
    assert "records no checkpoint sha256" in (stale_checkpoint(replace(card, checkpoint_sha256=None), shipped) or "")
    assert stale_checkpoint(replace(card, name="my_model", checkpoint_sha256=None), shipped) is None  # not shipped


@pytest.fixture
def one_stale_card(tmp_path: Path) -> Path:
    """A copy of two shipped cards, one of them claiming weights the zoo does not ship."""
    folder = tmp_path / "mi" / "cifar10" / "Linf"
    folder.mkdir(parents=True)
    for name in ("resnet20_fp", "resnet20_bnn"):
        data = json.loads((MODEL_INFO / "cifar10" / "Linf" / f"{name}.json").read_text())
        data.pop("examples", None)
        if name == "resnet20_bnn":
            data["checkpoint_sha256"] = "0" * 64
        (folder / f"{name}.json").write_text(json.dumps(data))
    return tmp_path / "mi"


def test_leaderboard_build_marks_a_stale_card(one_stale_card: Path, tmp_path: Path) -> None:
    from arbibench.leaderboard import build_site

    report = build_site(one_stale_card, tmp_path / "site", "svg")
    index = (report.out / "index.html").read_text()
    assert index.count("stale checkpoint") == 1
    bnn = next(p for p in report.pages if p.name == "resnet20_bnn.html").read_text()
    fp = next(p for p in report.pages if p.name == "resnet20_fp.html").read_text()
    assert "measured checkpoint 000000000000" in bnn and "stale checkpoint" not in fp


def test_zoo_list_marks_a_stale_card(one_stale_card: Path) -> None:
    from arbibench.cli import app

    result = CliRunner().invoke(app, ["zoo", "list", "--model-info", str(one_stale_card)],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    rows = {line.split()[1]: line for line in result.output.splitlines() if "resnet20_" in line}
    assert "stale: Linf" in rows["resnet20_bnn"]
    assert "current: Linf" in rows["resnet20_fp"]
    assert "stale" not in rows["resnet20_fp"]


def test_zoo_list_checks_every_kind_of_card(tmp_path: Path) -> None:
    """A retrained model's deployed-inference and 8-bit grid cards go stale like its attack card, and zoo list says
    so for each kind (the deploy and grid checks and the deployed cards sit in folders of their own)."""
    import shutil

    from arbibench.models.cli import result_card_status

    copy = tmp_path / "mi"
    shutil.copytree(MODEL_INFO, copy, ignore=shutil.ignore_patterns("*.npz"))
    for card in (copy / "cifar10" / "Linf" / "deployed" / "resnet20_bnn.json",
                 copy / "cifar10" / "grid_check" / "resnet20_bnn.json"):
        data = json.loads(card.read_text())
        data["checkpoint_sha256"] = "0" * 64
        card.write_text(json.dumps(data))
    for path in copy.rglob("*.json"):  # the .npz examples were not copied: drop the links to them
        data = json.loads(path.read_text())
        if isinstance(data, dict) and data.pop("examples", None) is not None:
            path.write_text(json.dumps(data))
    status = result_card_status(copy)
    assert status["resnet20_bnn"] == (
        "[red]stale: Linf deployed, 8-bit grid[/]; current: Linf, corruptions, deploy check")
    assert status["resnet20_reactnet"] == "current: Linf, Linf deployed, corruptions, deploy check, 8-bit grid"
    assert status["resnet20_fp"] == "current: Linf, corruptions, 8-bit grid"  # an FP network has no deployed form
