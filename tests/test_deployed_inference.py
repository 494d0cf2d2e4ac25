"""--inference deployed: the deployed network answers the clean pass and the black-box queries and decides every
outcome, white-box attacks take their gradients on the simulation, and the inference is in the store key and the
card (a deployed card never lands on the simulation's leaderboard)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from arbibench import benchmark
from arbibench.attacks import get_attack, get_threat_model
from arbibench.deploy import deployed
from arbibench.evaluation.batch import compute_batch
from arbibench.evaluation.store import ResultStore
from arbibench.leaderboard.cards import ranked_card
from arbibench.models.zoo import load_model


class _AlwaysZero(nn.Module):
    """An oracle that answers class 0 for every image, whatever it is: whoever it decides for is easy to tell."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(len(x), 10)
        out[:, 0] = 1.0
        return out


@pytest.fixture(scope="module")
def batch(data_dir):
    from arbibench.data import load_cifar10

    x, y, _ = load_cifar10(16, data_dir=data_dir)
    return x, y


def test_the_oracle_decides_every_outcome_and_answers_the_queries(batch):
    x, y = batch
    sim = load_model("resnet20_bnn")
    threat = get_threat_model("Linf", 8 / 255)
    dev = torch.device("cpu")
    clean = compute_batch(sim, None, threat, 0, 0, x, y, None, dev, oracle=_AlwaysZero().eval())
    assert clean.clean_correct == (y == 0).tolist()
    everything = torch.ones(len(y), dtype=torch.bool)
    for attack in (get_attack("fgsm"), get_attack("square", max_queries=20)):
        out = compute_batch(sim, attack, threat, 0, 0, x, y, everything, dev, oracle=_AlwaysZero().eval())
        # the constant oracle cannot be fooled on class 0 and never agrees elsewhere, whatever the simulation says
        assert out.adv_correct == (y == 0).tolist(), attack.name
    # FGSM's step follows the simulation's gradient: the oracle has none, and the attack still ran and moved images
    fgsm = compute_batch(sim, get_attack("fgsm"), threat, 0, 0, x, y, everything, dev, oracle=_AlwaysZero().eval())
    assert max(fgsm.perturbation) == pytest.approx(8 / 255, abs=1e-6)


def test_a_deployed_benchmark_is_its_own_evaluation_with_its_own_card(tmp_path, data_dir):
    store = tmp_path / "s.db"
    kwargs = dict(n_examples=40, attacks=(get_attack("fgsm"), get_attack("square", max_queries=30)), data_dir=data_dir,
                  store=store, progress=False, checks=False)
    dep = benchmark("resnet20_xnor", inference="deployed", **kwargs)
    sim = benchmark("resnet20_xnor", **kwargs)
    with ResultStore(store) as db:
        specs = [json.loads(r[0]) for r in db.conn.execute("SELECT spec FROM evaluations")]
    assert sorted(s.get("inference", "simulation") for s in specs) == ["deployed"] * 3 + ["simulation"] * 3
    model = load_model("resnet20_xnor")
    from arbibench.data import load_cifar10

    xs, ys, _ = load_cifar10(40, data_dir=data_dir)
    with torch.no_grad():
        assert dep.clean.clean_correct.tolist() == (deployed(model)(xs).argmax(1) == ys).tolist()
        assert sim.clean.clean_correct.tolist() == (model(xs).argmax(1) == ys).tolist()
    card = dep.to_card()
    assert card.inference == "deployed" and sim.to_card().inference == "simulation"
    assert not ranked_card({"threat_model": "Linf", "inference": "deployed"})
    assert ranked_card({"threat_model": "Linf"})  # cards from before the field measured the simulation


def test_deploying_a_full_precision_model_is_one_clear_error(tmp_path, data_dir):
    with pytest.raises(ValueError, match="cannot be deployed.*no binary convolution"):
        benchmark("resnet20_fp", n_examples=8, attacks=("fgsm",), data_dir=data_dir, store=tmp_path / "s.db",
                  progress=False, inference="deployed")
    with pytest.raises(ValueError, match="inference must be one of"):
        benchmark("resnet20_bnn", n_examples=8, attacks=("fgsm",), data_dir=data_dir, store=tmp_path / "t.db",
                  progress=False, inference="bits")


def test_a_sweep_measures_the_deployed_network_under_its_own_keys(tmp_path, data_dir, monkeypatch):
    """``arbibench sweep --inference deployed``: the deployed network answers (the simulation's sweep never asks it),
    and every evaluation of the sweep is its own, keyed apart from the simulation's."""
    from typer.testing import CliRunner

    from arbibench.cli import app
    from arbibench.deploy import DeployedModel

    shown = CliRunner().invoke(app, ["sweep", "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "--inference" in shown.output
    answered: list[int] = []
    forward = DeployedModel.forward

    def counted(self: DeployedModel, x: torch.Tensor) -> torch.Tensor:
        answered.append(len(x))
        return forward(self, x)

    monkeypatch.setattr(DeployedModel, "forward", counted)
    store = tmp_path / "s.db"
    args = ["sweep", "--model", "resnet20_xnor", "--eps", "1/255,8/255", "--attack", "fgsm", "-n", "12",
            "--store", str(store), "--data-dir", str(data_dir)]
    sim = CliRunner().invoke(app, args)
    assert sim.exit_code == 0, sim.output
    assert answered == []  # the simulation answered everything
    dep = CliRunner().invoke(app, [*args, "--inference", "deployed"])
    assert dep.exit_code == 0, dep.output
    assert sum(answered) >= 12  # at least the clean pass of the 12 images, then each eps's verification
    with ResultStore(store) as db:
        rows = [(key, json.loads(spec)) for key, spec in db.conn.execute("SELECT eval_key, spec FROM evaluations")]
        keys: dict[str, set[str]] = {}
        for key, spec in rows:
            keys.setdefault(spec.get("inference", "simulation"), set()).add(key)
        # one clean pass and one evaluation per eps for each network, none shared
        assert {k: len(v) for k, v in keys.items()} == {"simulation": 3, "deployed": 3}
        deployed_clean = next(k for k, s in rows if s.get("inference") == "deployed" and s["attack"] == "clean")
        clean = db.outcomes(deployed_clean).clean_correct
    from arbibench.data import load_cifar10

    xs, ys, _ = load_cifar10(12, data_dir=data_dir)
    with torch.no_grad():  # the stored clean outcomes are the deployed network's answers
        assert clean.tolist() == (deployed(load_model("resnet20_xnor"))(xs).argmax(1) == ys).tolist()
    refused = CliRunner().invoke(app, [*args, "--inference", "bits"])
    assert refused.exit_code != 0 and "inference must be one of" in refused.output
