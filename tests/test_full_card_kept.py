"""A quick, demo or eval card never replaces the full-protocol card of the same checkpoint (hours of attacks giving
way to minutes, and the leaderboard ranking the smaller measurement); it replaces a card of other weights."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arbibench.protocol import presets
from arbibench.protocol.presets import _spec

REPO = Path(__file__).resolve().parents[1]


def _tiny(name: str = "cifar10", quick: bool = False, demo: bool = False) -> presets.Protocol:
    return dataclasses.replace(
        presets.PROTOCOLS["cifar10"], n_white_box=16, n_black_box=8, batch_size=8, sweep_eps=(), n_sweep=8,
        eps_star_attacks=(), quick=True, notes=("a tiny quick variant for tests",),
        attacks=(_spec("fgsm", "white-box"), _spec("square", "black-box", max_queries=10)),
    )


def _full_model() -> str:
    """A zoo model whose shipped card is a full-protocol card of the shipped checkpoint: resnet20_bnn, unless the
    queue has just retrained it and its full run is still to come (its card is then a quick one)."""
    from arbibench.cards import shipped_sha256

    shipped = shipped_sha256()
    full = []
    for path in sorted((REPO / "model_info" / "cifar10" / "Linf").glob("*.json")):
        card = json.loads(path.read_text())
        if card.get("quick") is False and card.get("checkpoint_sha256") == shipped.get(path.stem):
            full.append(path.stem)
    assert full, "no zoo model ships a full-protocol card of its checkpoint"
    return "resnet20_bnn" if "resnet20_bnn" in full else full[0]


def _shipped_full_card(info: Path, model: str) -> Path:
    """The repository's full-protocol card of ``model`` copied into ``info``."""
    card = info / "cifar10" / "Linf" / f"{model}.json"
    card.parent.mkdir(parents=True)
    shutil.copy(REPO / "model_info" / "cifar10" / "Linf" / f"{model}.json", card)
    assert json.loads(card.read_text())["quick"] is False
    return card


def _run(args: list[str]) -> str:
    from arbibench.cli import app

    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_a_quick_run_keeps_the_full_card_of_the_same_checkpoint(tmp_path, data_dir, monkeypatch):
    monkeypatch.setattr(presets, "get_protocol", _tiny)
    info, model = tmp_path / "info", _full_model()
    card = _shipped_full_card(info, model)
    before = card.read_bytes()
    args = ["protocol", "run", "cifar10", "--quick", "--models", model, "--store", str(tmp_path / "s.db"),
            "--model-info", str(info), "--data-dir", str(data_dir)]
    out = _run(args)
    assert card.read_bytes() == before
    assert "kept its full-protocol card" in " ".join(out.split())
    # a full card of other weights (a stale card) gives way to the quick card of the shipped checkpoint
    stale = json.loads(before)
    stale["checkpoint_sha256"] = "0" * 64
    card.write_text(json.dumps(stale))
    out = _run(args)
    assert "kept its full-protocol card" not in " ".join(out.split())
    written = json.loads(card.read_text())
    assert written["quick"] is True and written["checkpoint_sha256"] == json.loads(before)["checkpoint_sha256"]


def test_an_eval_card_keeps_the_full_card_and_says_so(tmp_path, data_dir):
    from arbibench.evaluation.benchmark import benchmark

    info, model = tmp_path / "info", _full_model()
    card = _shipped_full_card(info, model)
    before = card.read_bytes()
    with pytest.warns(UserWarning, match="full-protocol card of the same checkpoint"):
        benchmark(model, attacks=["fgsm"], n_examples=8, batch_size=8, data_dir=data_dir,
                  store=tmp_path / "s.db", model_info=info, to_disk=True, progress=False, checks=False)
    assert card.read_bytes() == before
    card.unlink()  # no full card: the eval card is written
    benchmark(model, attacks=["fgsm"], n_examples=8, batch_size=8, data_dir=data_dir,
              store=tmp_path / "s.db", model_info=info, to_disk=True, progress=False, checks=False)
    assert json.loads(card.read_text())["name"] == model


def test_eval_says_in_one_line_which_card_it_kept_or_wrote(tmp_path, data_dir):
    """``eval --model-info`` used to show the kept card as a Python warning with a source line, and the written card
    not at all."""
    info, model = tmp_path / "info", _full_model()
    card = _shipped_full_card(info, model)
    before = card.read_bytes()
    args = ["eval", "-m", model, "-n", "8", "--batch-size", "8", "--attacks", "fgsm", "--no-checks", "--store",
            str(tmp_path / "s.db"), "--data-dir", str(data_dir), "--model-info", str(info)]
    out = _run(args)
    assert card.read_bytes() == before
    assert f"note: kept {card}: the full-protocol card" in " ".join(out.split())
    assert "Warning" not in out and "warn(" not in out
    card.unlink()
    out = _run(args)
    assert f"wrote {card}" in " ".join(out.split()) and json.loads(card.read_text())["name"] == model
