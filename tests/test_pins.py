"""Pins: SHA256SUMS names every shipped checkpoint's bytes, and pinning a re-export checks its card first."""

from __future__ import annotations

import json
import shutil

import pytest

from arbibench.cards import PIN_FILE, shipped_sha256
from arbibench.files import sha256_file
from arbibench.models.pins import pin
from arbibench.models.zoo import ZOO


def _write_card(folder, name: str, sha256: str) -> None:
    """A checkpoint card for ``name`` naming ``sha256``: the shipped resnet20_bnn card with its identity replaced."""
    card = json.loads((PIN_FILE.parent / "resnet20_bnn.json").read_text())
    card.update(name=name, checkpoint=f"{name}.safetensors", sha256=sha256)
    (folder / f"{name}.json").write_text(json.dumps(card))


def test_every_shipped_checkpoint_matches_its_pin():
    pins = shipped_sha256()
    shipped = {name for name, entry in ZOO.items() if entry.shipped}
    assert set(pins) == shipped
    for name, sha in pins.items():
        assert sha256_file(PIN_FILE.parent / f"{name}.safetensors") == sha, name
        assert ZOO[name].sha256 == sha


def test_pin_rewrites_one_line_after_checking_the_card(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    pins = folder / "SHA256SUMS"
    shutil.copyfile(PIN_FILE, pins)
    weights = folder / "resnet20_bnn.safetensors"
    weights.write_bytes(b"retrained weights")
    _write_card(folder, "resnet20_bnn", "0" * 64)
    with pytest.raises(ValueError, match="export the run again"):
        pin("resnet20_bnn", folder, pins)
    assert pins.read_text() == PIN_FILE.read_text()  # nothing written
    _write_card(folder, "resnet20_bnn", sha256_file(weights))
    old, new = pin("resnet20_bnn", folder, pins)
    assert old == shipped_sha256()["resnet20_bnn"] and new == sha256_file(weights)
    after = shipped_sha256(pins)
    assert after["resnet20_bnn"] == new
    assert {k: v for k, v in after.items() if k != "resnet20_bnn"} == {
        k: v for k, v in shipped_sha256().items() if k != "resnet20_bnn"
    }


def test_a_malformed_pin_line_is_named(tmp_path):
    bad = tmp_path / "SHA256SUMS"
    bad.write_text("abc  resnet20_fp.safetensors\n")
    with pytest.raises(ValueError, match="SHA256SUMS:1"):
        shipped_sha256(bad)


def test_pin_refuses_a_malformed_card_naming_the_field(tmp_path):
    shutil.copyfile(PIN_FILE, tmp_path / "SHA256SUMS")
    (tmp_path / "resnet20_bnn.safetensors").write_bytes(b"retrained weights")
    _write_card(tmp_path, "resnet20_bnn", "not a digest")
    with pytest.raises(ValueError, match="field 'sha256': expected a sha256"):
        pin("resnet20_bnn", tmp_path, tmp_path / "SHA256SUMS")
    assert (tmp_path / "SHA256SUMS").read_text() == PIN_FILE.read_text()


def test_a_new_backbone_is_pinned_only_when_asked_and_registers_from_its_name(tmp_path):
    from arbibench.models.zoo import pinned_entry

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    pins = folder / "SHA256SUMS"
    shutil.copyfile(PIN_FILE, pins)
    weights = folder / "resnet18_bnn.safetensors"
    weights.write_bytes(b"a first resnet18 checkpoint")
    _write_card(folder, "resnet18_bnn", sha256_file(weights))
    with pytest.raises(ValueError, match="pin it with --add"):
        pin("resnet18_bnn", folder, pins)
    assert pins.read_text() == PIN_FILE.read_text()
    old, new = pin("resnet18_bnn", folder, pins, add=True)
    assert old is None and shipped_sha256(pins)["resnet18_bnn"] == new
    entry = pinned_entry("resnet18_bnn", new)
    assert (entry.arch, entry.method, entry.training, entry.shipped) == ("resnet18", "bnn", "standard", True)
    at = pinned_entry("resnet20_bireal_at", new)
    assert (at.arch, at.method, at.training) == ("resnet20", "bireal", "adversarial")


def test_zoo_pin_add_refuses_a_name_the_registry_cannot_read():
    from typer.testing import CliRunner

    from arbibench.cli import app

    result = CliRunner().invoke(app, ["zoo", "pin", "resnet99_bnn", "--add"])
    assert result.exit_code == 2 and "<arch>_<method>" in result.output and "Traceback" not in result.output
