"""The 8-bit threat model through the evaluation: store keys, benchmark(), cards, eval/protocol --grid, grid-check."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from arbibench.attacks import Linf, get_attack
from arbibench.cards import GridCheckCard
from arbibench.cli import app
from arbibench.data.cifar10 import load_cifar10
from arbibench.evaluation.benchmark import benchmark
from arbibench.evaluation.plan import plan_evaluation
from arbibench.evaluation.store import ResultStore
from arbibench.leaderboard.cards import ranked_card
from arbibench.models.zoo import load_model
from arbibench.protocol.grid_check import grid_check
from arbibench.protocol.presets import Protocol, get_protocol, on_grid
from arbibench.protocol.run import plan_model, protocol_subsets, run_settings

runner = CliRunner()


@pytest.fixture
def env(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    monkeypatch.setenv("COLUMNS", "160")


def test_float_keys_stay_and_the_grid_is_in_the_attack_keys_only(data_dir: Path, tmp_path: Path) -> None:
    """Float specs hold no grid (existing stores stay valid); uint8 specs name it; the clean pass is shared."""
    x, y, idx = load_cifar10(4, data_dir=data_dir)
    model = load_model("resnet20_bnn")
    with ResultStore(tmp_path / "s.db") as db:
        plans = {g: plan_evaluation(model, x, y, idx, attacks=["fgsm"], threat=Linf(2 / 255, g), store=db)
                 for g in ("float", "uint8")}
        attack = plans["float"].attacks[0]
        specs = {g: p.ctx.spec(attack) for g, p in plans.items()}
        assert "grid" not in specs["float"]
        assert specs["uint8"] == {**specs["float"], "grid": "uint8"}
        assert plans["float"].ctx.store_key(attack) != plans["uint8"].ctx.store_key(attack)
        assert plans["float"].ctx.store_key(None) == plans["uint8"].ctx.store_key(None)


def test_images_off_the_grid_are_refused_by_name(data_dir: Path, tmp_path: Path) -> None:
    x, y, idx = load_cifar10(4, data_dir=data_dir)
    x = x.clone()
    x[1, 0, 0, 0] += 0.3 / 255
    with ResultStore(tmp_path / "s.db") as db, pytest.raises(ValueError, match="1 of 4 images have pixels off"):
        plan_evaluation(load_model("resnet20_fp"), x, y, idx, attacks=["fgsm"], threat=Linf(2 / 255, "uint8"),
                        store=db)


def test_benchmark_on_the_grid_writes_its_card_beside_the_float_card(data_dir: Path, tmp_path: Path) -> None:
    kwargs = {"n_examples": 8, "eps": 2 / 255, "attacks": ["fgsm"], "data_dir": data_dir, "store": tmp_path / "s.db",
              "progress": False, "checks": False, "to_disk": True, "model_info": tmp_path / "mi"}
    flt = benchmark("resnet20_bnn", **kwargs)  # type: ignore[arg-type]
    grid = benchmark("resnet20_bnn", grid="uint8", **kwargs)  # type: ignore[arg-type]
    assert (flt.grid, grid.grid) == ("float", "uint8")
    assert grid.to_dict()["grid"] == "uint8"
    float_card = json.loads((tmp_path / "mi/cifar10/Linf/resnet20_bnn.json").read_text())
    grid_card = json.loads((tmp_path / "mi/cifar10/Linf/uint8/resnet20_bnn.json").read_text())
    assert "grid" not in float_card and grid_card["grid"] == "uint8"
    assert ranked_card(float_card) and not ranked_card(grid_card)
    with pytest.raises(ValueError, match="eps\\* is searched on float inputs only"):
        benchmark("resnet20_bnn", grid="uint8", eps_star=["fgsm"], **kwargs)  # type: ignore[arg-type]


def test_eval_grid_uint8_from_the_command_line(env: None, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["eval", "-m", "resnet20_bnn", "--attacks", "fgsm", "-n", "8", "--eps", "1/255",
                                 "--grid", "uint8", "--no-checks", "--store", str(tmp_path / "s.db"), "--json",
                                 str(out)])
    assert result.exit_code == 0, result.output
    assert "on the uint8 grid" in result.output
    assert json.loads(out.read_text())["grid"] == "uint8"


@pytest.mark.parametrize(("args", "message"), [
    (["-t", "L2", "--eps", "0.5", "--grid", "uint8"], "Linf threat model only"),
    (["--grid", "uint4"], "grid must be one of float, uint8"),
])
def test_eval_refuses_a_grid_it_cannot_have_before_any_write(
    env: None, tmp_path: Path, args: list[str], message: str
) -> None:
    store = tmp_path / "s.db"
    result = runner.invoke(app, ["eval", "-m", "resnet20_bnn", "-n", "8", "--store", str(store), *args])
    assert result.exit_code != 0
    assert message in result.output and "Traceback" not in result.output
    assert not store.exists()


def test_protocol_on_the_grid_plans_every_evaluation_on_it(data_dir: Path, tmp_path: Path) -> None:
    base = get_protocol("cifar10", quick=True)
    assert isinstance(base, Protocol)
    small = replace(base, n_white_box=6, n_black_box=3, n_sweep=6, attacks=base.white_box[:1] + base.black_box[:1])
    protocol = on_grid(small, "uint8")
    assert protocol.label.endswith("on the uint8 grid") and protocol.eps_star_attacks == ()
    with ResultStore(tmp_path / "s.db") as db:
        subsets = protocol_subsets(protocol, data_dir)
        plan = plan_model(load_model("resnet20_bnn"), "resnet20_bnn", protocol, db, subsets,
                          settings=run_settings(protocol), data_dir=data_dir)
        assert len(plan.plans) == 2 + len(protocol.sweep_eps)
        for p in plan.plans:
            assert p.ctx.threat.grid == "uint8"
            assert all(p.ctx.spec(a)["grid"] == "uint8" for a in p.attacks)
    with pytest.raises(ValueError, match="Linf threat model only"):
        on_grid(get_protocol("cifar10-l2", quick=True), "uint8")  # type: ignore[arg-type]


def test_protocol_run_refuses_a_grid_for_l2_and_corruptions(env: None, tmp_path: Path) -> None:
    for name in ("cifar10-l2", "cifar10-c"):
        result = runner.invoke(app, ["protocol", "run", name, "--quick", "--models", "resnet20_bnn", "--grid", "uint8",
                                     "--store", str(tmp_path / "s.db")])
        assert result.exit_code != 0 and "--grid uint8" in result.output and "Traceback" not in result.output
        assert not (tmp_path / "s.db").exists()


def test_grid_check_counts_what_it_verifies(data_dir: Path) -> None:
    """The float column is the float attack's ACC*, the survival count the rounded float examples that still fool."""
    x, y, _ = load_cifar10(12, data_dir=data_dir)
    model = load_model("resnet20_bnn")
    attack = get_attack("pgd", steps=2)
    clean, rows = grid_check(model, x, y, attack=attack, eps_values=("1/255", "4/255"), batch_size=6)
    ok = (model(x).argmax(1) == y).detach()
    assert clean.value == float(ok.double().mean())
    for row in rows:
        eps = row.eps
        robust, survived = 0, 0
        for b, s in enumerate(range(0, 12, 6)):
            pick = s + ok[s : s + 6].nonzero().flatten()
            x_adv = attack(model, x[pick], y[pick], Linf(eps), torch.Generator().manual_seed(b))
            fooled = model(x_adv).argmax(1) != y[pick]
            rounded = Linf(eps, "uint8").round_to_grid(x_adv, x[pick])
            robust += int((~fooled).sum())
            survived += int((fooled & (model(rounded).argmax(1) != y[pick])).sum())
        assert row.acc_float.value == robust / 12
        assert (row.float_fooled, row.survived) == (int(ok.sum()) - robust, survived)
        assert row.acc_grid.value <= row.acc_grid_attack.value
        assert row.acc_float.low <= row.acc_float.value <= row.acc_float.high


def test_grid_check_command_writes_json(env: None, tmp_path: Path) -> None:
    out = tmp_path / "g.json"
    result = runner.invoke(app, ["protocol", "grid-check", "--models", "resnet20_fp", "-n", "6", "--attack", "fgsm",
                                 "--eps", "2/255", "--json", str(out)])
    assert result.exit_code == 0, result.output
    check = json.loads(out.read_text())["checks"][0]  # each entry is the model's grid-check card
    assert check["name"] == "resnet20_fp" and check["rows"][0]["eps_text"] == "2/255"
    assert GridCheckCard.parse(out, check).to_dict() == check and not ranked_card(check)  # never ranked
    bad = runner.invoke(app, ["protocol", "grid-check", "--models", "resnet20_fp", "--eps", "0.5/0"])
    assert bad.exit_code != 0 and "divides by zero" in bad.output
