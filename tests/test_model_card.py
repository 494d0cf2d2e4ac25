"""`benchmark(..., to_disk=True)`: a RobustBench-shaped model card with numbers as numbers, written atomically."""

from __future__ import annotations

import json

import pytest

from arbibench.evaluation.benchmark import benchmark
from arbibench.models.zoo import ZOO


def test_benchmark_to_disk_writes_the_card(tmp_path, data_dir):
    result = benchmark(
        "resnet20_bnn", n_examples=40, attacks=("fgsm", "pgd"), data_dir=data_dir, store=tmp_path / "s.db",
        progress=False, checks=False, to_disk=True, model_info=tmp_path / "model_info", batch_size=20,
    )
    path = tmp_path / "model_info" / "cifar10" / "Linf" / "resnet20_bnn.json"
    card = json.loads(path.read_text())
    assert card["name"] == "resnet20_bnn" and card["dataset"] == "cifar10" and card["threat_model"] == "Linf"
    assert card["eps"] == pytest.approx(8 / 255) and card["eps_text"] == "8/255"
    assert card["clean_acc"] == pytest.approx(100 * result.clean_acc, abs=0.01)  # percent, a number
    assert card["worst_case_acc"] == pytest.approx(100 * result.robust_acc, abs=0.01)
    assert card["additional_data"] is False and card["number_forward_passes"] == 1
    assert card["method"] == "bnn" and card["architecture"] == "resnet20" and card["authors"] == "Hubara et al."
    assert card["checkpoint_sha256"] == ZOO["resnet20_bnn"].sha256  # the weights measured
    assert set(card["attacks"]) == {"fgsm", "pgd"}
    for name, a in card["attacks"].items():
        metrics = next(m for m in result.report.attacks if m.attack == name)
        assert a["family"] == "white-box" and a["acc_norm"] == pytest.approx(metrics.acc_norm, abs=1e-4)
        assert a["ci_low"] <= a["acc_star"] <= a["ci_high"]
    assert card["rs"]["all"] == pytest.approx(result.report.rs, abs=1e-4)
    assert card["rs"]["white-box"] == card["rs"]["all"] and "black-box" not in card["rs"]
    assert card["n_examples"] == {"all": 40}
    assert not list(path.parent.glob("*.tmp"))


def test_user_model_gets_a_card_without_zoo_metadata(tmp_path, data_dir):
    from arbibench.models.zoo import load_model

    benchmark(
        load_model("resnet20_fp"), n_examples=20, attacks=("fgsm",), model_name="my_model", data_dir=data_dir,
        store=tmp_path / "s.db", progress=False, checks=False, to_disk=True, model_info=tmp_path / "mi",
    )
    card = json.loads((tmp_path / "mi" / "cifar10" / "Linf" / "my_model.json").read_text())
    assert card["name"] == "my_model" and card["method"] is None and card["authors"] is None
    assert isinstance(card["clean_acc"], float)


def test_the_eval_card_names_the_machine_that_computed_its_batches(tmp_path, data_dir):
    # an eval card's seconds are read on a machine, as a protocol card's: it names this CPU, and where the store's
    # batches came from elsewhere (a GPU) each machine's share of the batch seconds, not the machine writing it
    import sqlite3

    import torch

    from arbibench.machine import computed_on

    kwargs = {"n_examples": 20, "attacks": ("fgsm",), "data_dir": data_dir, "store": tmp_path / "s.db",
              "progress": False, "checks": False, "to_disk": True, "model_info": tmp_path / "mi", "batch_size": 10}
    result = benchmark("resnet20_bnn", **kwargs)
    path = tmp_path / "mi" / "cifar10" / "Linf" / "resnet20_bnn.json"
    here = computed_on(torch.device("cpu"))
    assert result.machine == here and result.to_dict()["machine"] == here
    assert json.loads(path.read_text())["machine"] == here
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("UPDATE batch_machines SET machine = 'NVIDIA H200 (cuda)' WHERE batch_index = 0")
    again = benchmark("resnet20_bnn", **kwargs)  # read back from the store: nothing recomputed here
    card = json.loads(path.read_text())
    assert card["machine"] == again.machine and again.machine.count("% of batch seconds") == 2
    assert "NVIDIA H200 (cuda)" in again.machine and here in again.machine
