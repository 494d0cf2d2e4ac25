"""Every card file in the repository, of each kind, reads into its typed card and writes back to a file that reads
equal; a corrupted copy is refused naming the file and the first bad field as a path.

The kinds: result cards (attack and corruptions, ``model_info/<dataset>/<threat>/``), deploy-check and grid-check
cards (``model_info/<dataset>/deploy/``, ``model_info/<dataset>/grid_check/``), checkpoint cards
(``arbibench/models/checkpoints/``) and findings documents (``docs/measurements/findings_*.json``).
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
from conftest import with_value

from arbibench.cards import (
    CHECK_FOLDERS,
    DEPLOY_CHECK,
    GRID_CHECK,
    ONES_PADDING,
    PIN_FILE,
    SHIPPED_CHECKPOINTS,
    TEST_SET_IMAGES,
    Card,
    CardError,
    CardIdentity,
    CheckpointCard,
    CorruptionCard,
    DeployCheckCard,
    FindingsDocument,
    GridCheckCard,
    ModelCard,
    check_card_files,
    read_card_json,
    shipped_sha256,
    stale_checkpoint,
)

ROOT = Path(__file__).resolve().parents[1]
MODEL_INFO = ROOT / "model_info"
RESULT_CARDS = sorted(p for p in MODEL_INFO.rglob("*.json") if p.parent.name not in CHECK_FOLDERS.values())
DEPLOY_CARDS = check_card_files(MODEL_INFO, DEPLOY_CHECK)
GRID_CARDS = check_card_files(MODEL_INFO, GRID_CHECK)  # none until the queue's grid check has run
CHECKPOINT_CARDS = sorted(SHIPPED_CHECKPOINTS.glob("*.json"))
FINDINGS = sorted((ROOT / "docs").rglob("findings_*.json"))


def _kind(path: Path, data: Any) -> type[Card]:
    if path in DEPLOY_CARDS:
        return DeployCheckCard
    if path in GRID_CARDS:
        return GridCheckCard
    if path in CHECKPOINT_CARDS:
        return CheckpointCard
    if path in FINDINGS:
        return FindingsDocument
    return CorruptionCard if data.get("threat_model") == "corruptions" else ModelCard


ALL_CARDS = [*RESULT_CARDS, *DEPLOY_CARDS, *GRID_CARDS, *CHECKPOINT_CARDS, *FINDINGS]


def test_the_repository_has_cards_of_every_kind() -> None:
    assert len(RESULT_CARDS) >= 10 and len(DEPLOY_CARDS) >= 5 and len(CHECKPOINT_CARDS) >= 10 and len(FINDINGS) >= 1


@pytest.mark.parametrize("path", ALL_CARDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_card_file_round_trips(path: Path) -> None:
    data = read_card_json(path)
    kind = _kind(path, data)
    card = kind.parse(path, data)
    written = card.to_dict()
    assert written["schema_version"] == kind.VERSION
    again = kind.parse(path, json.loads(json.dumps(written, allow_nan=False)))
    assert again == replace(card, schema_version=kind.VERSION)
    assert again.to_dict() == written
    # what the file held is all still there (a superset where the layout grew: the version, a deploy row's place)
    for key, value in data.items():
        if key not in ("card_version", "schema_version", "clean_agreement"):
            assert written[key] == value, (path, key)


def _first_row_field(kind: type[Card], data: dict[str, Any]) -> tuple[list[str | int], str]:
    """A path to one number inside a list of typed records of ``data`` (the deepest kind of field a card has), or
    to a top-level number where the card has none."""
    record_lists = {f.name for f in fields(kind) if f.metadata.get("kind") == "record_list"}
    for key, value in data.items():
        if key in record_lists and value and isinstance(value[-1], dict):
            inner = next((k for k, v in value[-1].items() if isinstance(v, int | float) and not isinstance(v, bool)),
                         None)
            if inner is not None:
                return [key, len(value) - 1, inner], f"{key}[{len(value) - 1}].{inner}"
    key = next(k for k, v in data.items() if isinstance(v, int | float) and not isinstance(v, bool)
               and k != "schema_version")
    return [key], key


@pytest.mark.parametrize("path", ALL_CARDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_corrupted_copy_is_refused_naming_the_field(path: Path) -> None:
    data = read_card_json(path)
    kind = _kind(path, data)
    where, name = _first_row_field(kind, data)
    bad = with_value(data, where, "not a number")
    with pytest.raises(CardError) as raised:
        kind.parse(path, bad)
    assert raised.value.field == name and str(raised.value).startswith(f"{path}: field '{name}': expected")


def test_result_cards_share_one_identity_base_and_keep_their_field_order() -> None:
    identity = {f.name for f in fields(CardIdentity)}
    assert {"name", "dataset", "method", "checkpoint_sha256", "protocol"} <= identity
    for cls in (ModelCard, CorruptionCard):
        assert issubclass(cls, CardIdentity)
        own = {f.name for f in fields(cls)} - identity
        assert own and not own & identity
    card = ModelCard.read(MODEL_INFO / "cifar10" / "Linf" / "resnet20_fp.json")
    keys = list(card.to_dict())
    assert keys[:4] == ["schema_version", "name", "link", "authors"]
    assert keys.index("eps") + 1 == keys.index("eps_text")  # an own field among the base's, where the file has it
    assert keys.index("checkpoint_sha256") < keys.index("inference") < keys.index("protocol")


def test_errors_name_the_file_the_field_path_and_the_fix(tmp_path: Path) -> None:
    path = DEPLOY_CARDS[0]
    data = read_card_json(path)
    cases = [
        (["clean_agreement", 1, "n_images"], 0, "clean_agreement[1].n_images", "0 is below 1"),
        (["direct_attacks", 0, "difference"], [0.1, 0.2], "direct_attacks[0].difference",
         "expected [value, low, high], got a list"),
        (["checkpoint_sha256"], "abc", "checkpoint_sha256", "expected a sha256 (64 lowercase hex digits)"),
        (["clean_agreement", 0, "acc_deployed"], 77.4, "clean_agreement[0].acc_deployed",
         "77.4 is outside [0.0, 1.0] (a ratio, not percent)"),
        (["schema_version"], 99, "schema_version", "upgrade arbibench"),
    ]
    for where, value, name, problem in cases:
        bad = with_value(data, where, value)
        with pytest.raises(CardError) as raised:
            DeployCheckCard.parse(path, bad)
        assert str(raised.value) == f"{path}: field '{name}': {problem}" or (
            str(raised.value).startswith(f"{path}: field '{name}': ") and problem in str(raised.value)), raised.value
    with pytest.raises(CardError, match="field 'kind': expected 'deploy_check'"):
        DeployCheckCard.parse(path, {**data, "kind": "other"})
    missing = {k: v for k, v in read_card_json(CHECKPOINT_CARDS[0]).items() if k != "sha256"}
    with pytest.raises(CardError, match="field 'sha256': is missing"):
        CheckpointCard.parse(CHECKPOINT_CARDS[0], missing)
    moved = tmp_path / "other_name.json"
    moved.write_text(CHECKPOINT_CARDS[0].read_text())
    with pytest.raises(CardError, match=f"names '{CHECKPOINT_CARDS[0].stem}.safetensors', but the card is"):
        CheckpointCard.read(moved)


def test_older_deploy_cards_read_their_rows_by_what_they_measured() -> None:
    """Version 1 deploy cards (no version key) said by a row's place which network and images it measured; read,
    each row says it, and the leaderboard asks for rows by that, never by place."""
    data = read_card_json(DEPLOY_CARDS[0])
    assert "schema_version" not in data and "padding" not in data["clean_agreement"][0]
    card = DeployCheckCard.parse(DEPLOY_CARDS[0], data)
    zero, ones, full = card.clean(), card.clean(ONES_PADDING), card.clean(images=TEST_SET_IMAGES)
    assert zero is not None and ones is not None and full is not None
    assert (zero.variant, ones.variant, full.variant) == tuple(r["variant"] for r in data["clean_agreement"])
    assert zero.agreement == data["clean_agreement"][0]["agreement"]
    reordered = replace(card, clean_agreement=card.clean_agreement[::-1])  # a current card: rows say what they are
    assert DeployCheckCard.parse(DEPLOY_CARDS[0], reordered.to_dict()).clean(ONES_PADDING) == ones


def test_checkpoint_cards_describe_the_shipped_files_and_the_pins_name_them() -> None:
    pins = shipped_sha256()
    assert list(pins) == [line.split()[1].removesuffix(".safetensors") for line in PIN_FILE.read_text().splitlines()]
    for name, sha in pins.items():
        card = CheckpointCard.read(SHIPPED_CHECKPOINTS / f"{name}.json")
        assert card.sha256 == sha and card.checkpoint == f"{name}.safetensors"
        assert card.adversarial == name.endswith("_at") == (card.threat_model is not None)
        assert all(v.sha256 != sha for v in card.previous_versions)  # a replaced version is never the shipped one
    deploy = DeployCheckCard.read(DEPLOY_CARDS[0])
    assert stale_checkpoint(deploy, {deploy.name: deploy.checkpoint_sha256}) is None
    assert "describe replaced weights" in (stale_checkpoint(deploy, {deploy.name: "0" * 64}) or "")


def test_findings_documents_match_rows_across_reports() -> None:
    doc = FindingsDocument.read(FINDINGS[0])
    assert doc.findings and all(f.difference.low <= f.difference.value <= f.difference.high for f in doc.findings)
    keys = {f.key() for f in doc.findings}
    assert all(r.key() in keys for r in doc.per_column)  # every per-column row belongs to a setting's row
    assert all(len(r.key(per_column=True)) == 4 for r in doc.per_column)


def _page_checkpoints(page: str) -> dict[str, str]:
    """The findings page's "Models" table: model name -> the checkpoint sha256 prefix it shows."""
    rows = {}
    for line in page.split("## Models", 1)[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) > 2 and cells[0].startswith("resnet") and len(cells[1]) == 12:
            rows[cells[0]] = cells[1]
    return rows


def test_the_findings_page_measures_each_model_at_the_weights_its_full_card_measured() -> None:
    """Once a model's full-protocol card measures its shipped weights, the findings page must too: the page is what a
    reader quotes, and it once showed two retrained BNNs at their replaced weights for a day. (Between a retraining
    and its full run the model's card is a quick one, and the page may still show the weights it replaced.)"""
    shown = _page_checkpoints((ROOT / "docs" / "findings-cifar10.md").read_text())
    assert len(shown) >= 8, shown  # the table was read
    pins = shipped_sha256()
    stale = []
    for model, prefix in shown.items():
        card = MODEL_INFO / "cifar10" / "Linf" / f"{model}.json"
        data = json.loads(card.read_text()) if card.is_file() else {}
        if data.get("quick") is False and data.get("checkpoint_sha256") == pins.get(model):
            if not pins[model].startswith(prefix):
                stale.append(f"{model}: the page shows {prefix}, its full card {pins[model][:12]}")
    assert stale == [], ("regenerate the page (the findings step of the queue's full-protocol jobs): "
                         + "; ".join(stale))
