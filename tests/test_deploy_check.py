"""The deploy check on real CIFAR-10 images: clean agreement, transfer of the simulation's adversarial examples to the
deployed network, and query attacks run against each, with the counts and intervals consistent with each other."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arbibench.cards import DeployCheckCard
from arbibench.models.zoo import ZOO
from arbibench.protocol import presets
from arbibench.protocol.deploy_check import run_deploy_check
from arbibench.protocol.presets import _spec

BB, WB = "black-box", "white-box"


def _tiny_protocol(name: str = "cifar10", quick: bool = False, demo: bool = False) -> presets.Protocol:
    base = presets.PROTOCOLS["cifar10"]
    return dataclasses.replace(
        base, n_white_box=60, n_black_box=16, quick=True,
        attacks=(_spec("fgsm", WB), _spec("pgd", WB, steps=5), _spec("square", BB, max_queries=60),
                 _spec("rays", BB, max_queries=60)),
    )


@pytest.fixture(scope="module")
def check(data_dir):
    return run_deploy_check("resnet20_xnor", _tiny_protocol(), data_dir=data_dir, backend="emulator",
                            log=lambda m: None)


def test_clean_agreement_of_the_zero_padded_network_and_the_cost_of_padding_with_ones(check):
    zero, ones = check.clean_agreement
    assert zero.n_images == ones.n_images == 60
    # non-power-of-two scales flip a prediction in about one of a thousand images; +1 padding changes far more
    assert zero.agreement >= 0.95
    assert ones.agreement < zero.agreement
    assert zero.interval[0] <= zero.agreement <= zero.interval[1]
    assert zero.max_logit_difference > 0  # xnor's mean|W| scales are not powers of two: every logit moves a little


def test_transfer_counts_are_consistent_and_cover_every_attack(check):
    assert [t.attack for t in check.transfer_to_deployed] == ["fgsm", "pgd", "square", "rays"]
    for t in check.transfer_to_deployed:
        assert 0 <= t.also_fool_deployed <= t.fooled_simulation <= t.attacked <= 16
        if t.fooled_simulation:
            assert t.interval is not None and t.interval[0] <= t.share <= t.interval[1]
    pgd = next(t for t in check.transfer_to_deployed if t.attack == "pgd")
    assert pgd.fooled_simulation >= pgd.attacked // 2  # even 5 PGD steps at 8/255 break most of a standard BNN


def test_direct_attacks_pair_the_two_networks_on_the_same_images(check):
    assert [d.attack for d in check.direct_attacks] == ["square", "rays"]
    for d in check.direct_attacks:
        assert d.difference.value == pytest.approx(d.acc_star_deployed - d.acc_star_simulation)
        assert d.difference.low <= d.difference.value <= d.difference.high


def test_the_card_names_the_checkpoint_it_measured(check):
    card = check.to_dict()
    assert card["checkpoint_sha256"] == ZOO["resnet20_xnor"].sha256
    assert card["kind"] == "deploy_check" and card["deployed_backend"] == "emulator"
    json.dumps(card, allow_nan=False)  # numbers as numbers, nothing unserialisable
    assert DeployCheckCard.parse(Path("resnet20_xnor.json"), card) == check


def test_the_command_writes_one_card_per_model_and_refuses_unknown_attacks(tmp_path, data_dir, monkeypatch):
    from arbibench.cli import app

    monkeypatch.setattr(presets, "get_protocol", _tiny_protocol)
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    args = ["protocol", "deploy-check", "cifar10", "--models", "resnet20_bnn", "--attacks", "fgsm",
            "--backend", "emulator", "--model-info", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    card = json.loads((tmp_path / "cifar10" / "deploy" / "resnet20_bnn.json").read_text())
    assert [t["attack"] for t in card["transfer_to_deployed"]] == ["fgsm"]
    result = CliRunner().invoke(app, [*args[:5], "--attacks", "nosuch", *args[7:]])
    assert result.exit_code == 2 and "not in" in result.output


def test_the_leaderboard_table_reads_the_deploy_card(check, tmp_path):
    from arbibench.files import atomic_write_json
    from arbibench.leaderboard.deploy import deploy_markdown, load_deploy_cards

    folder = tmp_path / "cifar10" / "deploy"
    folder.mkdir(parents=True)
    atomic_write_json(check.to_dict(), folder / "resnet20_xnor.json")
    cards = load_deploy_cards(tmp_path)
    text = deploy_markdown(cards)
    zero = check.clean()
    assert zero is not None
    assert f"{100 * zero.agreement:.2f}% of {zero.n_images}" in text
    assert "`resnet20_xnor`" in text and "stale" not in text
    assert "stale" in deploy_markdown(cards, {"resnet20_xnor": "0" * 64})


def test_the_site_shows_the_deploy_panel_beside_the_leaderboard(check, tmp_path):
    import shutil

    from arbibench.files import atomic_write_json
    from arbibench.leaderboard import build_site

    model_info = tmp_path / "model_info"
    shutil.copytree(Path(__file__).resolve().parents[1] / "model_info", model_info)
    (model_info / "cifar10" / "deploy").mkdir(exist_ok=True)
    atomic_write_json(check.to_dict(), model_info / "cifar10" / "deploy" / "resnet20_xnor.json")
    build_site(model_info, tmp_path / "site", "png")
    page = (tmp_path / "site" / "index.html").read_text()
    assert 'id="deployed"' in page and 'href="#deployed"' in page
    panel = page.split('id="deployed"')[1]
    zero = check.clean()
    assert zero is not None and f"{100 * zero.agreement:.2f}% of {zero.n_images}" in panel
