"""Transfer attack: PGD on the FP twin breaks the shipped BNN without its gradients, one query per sample."""

import json

import pytest
import torch

from arbibench.attacks import Linf, Transfer, get_attack
from arbibench.data import load_cifar10
from arbibench.evaluation.runner import evaluate
from arbibench.evaluation.store import ResultStore
from arbibench.evaluation.surrogates import attack_for_target, resolve_surrogate
from arbibench.models.zoo import load_model

N = 100


@pytest.fixture(scope="module")
def bnn_and_data(data_dir):
    model = load_model("resnet20_bnn")
    x, y, _ = load_cifar10(N, data_dir=data_dir)
    with torch.no_grad():
        correct = model(x).argmax(1) == y
    return model, x, y, correct


def test_fp_twin_resolution():
    assert resolve_surrogate("fp_twin", "resnet20_bnn") == "resnet20_fp"
    attack = attack_for_target("transfer", "resnet20_bnn")
    assert isinstance(attack, Transfer) and attack.config.surrogate == "resnet20_fp"
    spec = attack.config_dict()
    assert spec == {
        "name": "transfer",
        "surrogate": "resnet20_fp",
        "attack": "pgd",
        "max_queries": 1,
        "early_exit": False,
    }
    # the FP twin of the FP model is itself: the "transfer" is then a white-box attack on the target
    assert attack_for_target("transfer", "resnet20_fp").config.surrogate == "resnet20_fp"
    # an explicit surrogate is kept whatever the target (BNN -> BNN transfer)
    explicit = get_attack("transfer", surrogate="resnet20_bnn", attack="pgd@identity")
    assert attack_for_target(explicit, "resnet20_fp").config.surrogate == "resnet20_bnn"


def test_unknown_names_raise_clear_errors():
    with pytest.raises(ValueError, match="resnet20_fp") as info:
        attack_for_target(get_attack("transfer", surrogate="resnet99_fp"), "resnet20_bnn")
    assert "resnet99_fp" in str(info.value) and "resnet20_bnn" in str(info.value)
    with pytest.raises(ValueError, match="known models: .*resnet20_fp"):
        attack_for_target("transfer", "my_model")
    with pytest.raises(ValueError, match="unknown attack"):
        get_attack("transfer", attack="nope")
    with pytest.raises(ValueError, match="white-box"):
        get_attack("transfer", attack="hsja")
    with pytest.raises(ValueError, match="max_queries"):
        get_attack("transfer", max_queries=2)


def test_unresolved_surrogate_refuses_to_run(bnn_and_data):
    model, x, y, _ = bnn_and_data
    with pytest.raises(ValueError, match="attack_for_target"):
        get_attack("transfer")(model, x[:2], y[:2], Linf(8 / 255), torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def transferred(bnn_and_data):
    """PGD on resnet20_fp (the FP twin), shown to resnet20_bnn at Linf 8/255."""
    model, x, y, correct = bnn_and_data
    attack = attack_for_target("transfer", "resnet20_bnn")
    x0, y0 = x[correct], y[correct]
    out = attack.output(model, x0, y0, Linf(8 / 255), torch.Generator().manual_seed(0))
    x_adv = out.x_adv
    with torch.no_grad():
        still = model(x_adv).argmax(1) == y0
    return attack, out, x0, y0, x_adv, still


def test_transfer_from_fp_breaks_bnn(bnn_and_data, transferred, trained_fp):
    model, x, y, correct = bnn_and_data
    attack, out, x0, y0, x_adv, still = transferred
    assert not attack.needs_gradients and attack.access == "labels"
    Linf(8 / 255).verify(x_adv, x0)
    clean, robust = int(correct.sum()) / N, int(still.sum()) / N
    # measured: clean 0.72, ACC* 0.58 with PGD (10 steps, all iterations) on resnet20_fp: FP -> BNN transfers weakly
    assert clean > 0.6
    assert robust <= clean - 0.08
    assert bool((out.queries == 1).all())  # one query per sample, never more
    assert torch.equal(torch.isfinite(out.min_distance), ~still)
    assert torch.equal(x_adv[still], x0[still])  # what did not transfer comes back as the original
    # the surrogate is the zoo's resnet20_fp (same weights as the shipped model), cached, on the images' device
    surrogate = attack.surrogate_model(x.device)
    assert surrogate is attack.surrogate_model(x.device)
    assert next(surrogate.parameters()).device == x.device
    for a, b in zip(surrogate.state_dict().values(), trained_fp.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_full_iterations_transfer_better_than_early_exit(bnn_and_data, transferred):
    """Why early_exit=False is the default: PGD's first surrogate-misclassified iterate transfers far less."""
    model, _, _, _ = bnn_and_data
    _, _, x0, y0, _, still = transferred
    attack = attack_for_target(get_attack("transfer", early_exit=True), "resnet20_bnn")
    assert attack.config_dict()["early_exit"] is True
    x_adv = attack(model, x0, y0, Linf(8 / 255), torch.Generator().manual_seed(0))
    with torch.no_grad():
        robust_early = int((model(x_adv).argmax(1) == y0).sum()) / N
    # measured: 0.68 with early exit, 0.58 without
    assert int(still.sum()) / N <= robust_early - 0.05


def test_runner_stores_the_resolved_surrogate(bnn_and_data, tmp_path):
    """Through the runner: the spec the store hashes names resnet20_fp, and each sample costs one query."""
    model, x, y, correct = bnn_and_data
    with ResultStore(tmp_path / "r.db") as store:
        clean, per_attack, _, _ = evaluate(
            model,
            x[:12],
            y[:12],
            attacks=["transfer"],
            threat=Linf(8 / 255),
            model_name="resnet20_bnn",
            store=store,
            progress=False,
            checks=False,
        )
        (spec,) = store.conn.execute("SELECT spec FROM evaluations WHERE attack = 'transfer'").fetchone()
    attack_spec = json.loads(spec)["attack"]
    assert attack_spec["surrogate"] == "resnet20_fp" and attack_spec["attack"] == "pgd"
    out = per_attack["transfer"]
    assert bool((out.queries[clean.clean_correct] == 1).all())
    assert bool((out.queries[~clean.clean_correct] == -1).all())
    assert out.adv_correct.sum() <= clean.clean_correct.sum()
