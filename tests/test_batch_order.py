"""The order a worker backend hands out store batches: clean passes, then the dearest attacks, each evaluation from
its last missing batch down (a local run of the same store, the queue, works up from the first: the two meet once)."""

from __future__ import annotations

from arbibench.attacks import get_attack, get_threat_model
from arbibench.data.cifar10 import load_cifar10
from arbibench.evaluation.batch_jobs import attack_jobs, clean_jobs
from arbibench.evaluation.plan import plan_evaluation
from arbibench.evaluation.runner import execute
from arbibench.evaluation.settings import RunSettings
from arbibench.evaluation.store import ResultStore
from arbibench.models.zoo import load_model


def test_dearest_attack_first_and_each_evaluation_from_its_last_batch(data_dir, tmp_path):
    x, y, _ = load_cifar10(40, data_dir=data_dir)
    with ResultStore(tmp_path / "s.db") as store:
        plan = plan_evaluation(load_model("resnet20_bnn"), x, y, attacks=["fgsm", get_attack("square", max_queries=20)],
                               threat=get_threat_model("Linf", 8 / 255), model_name="resnet20_bnn",
                               settings=RunSettings(dataset="cifar10", batch_size=10), store=store)
        assert [j.batch_index for j in clean_jobs([plan])] == [0, 1, 2, 3]
        execute(plan, progress=False, checks=False)  # the local runner: every batch, from the first up
        # a store holding the first two batches of each attack (as a local run stopped halfway leaves it)
        for attack in ("fgsm", "square"):
            key = store.conn.execute("SELECT eval_key FROM evaluations WHERE attack = ?", (attack,)).fetchone()[0]
            with store.conn:
                for table in ("outcomes", "batch_machines", "batches"):
                    store.conn.execute(f"DELETE FROM {table} WHERE eval_key = ? AND batch_index >= 2", (key,))
        order = [(j.attack.name, j.batch_index) for j in attack_jobs([plan])]
    assert order == [("square", 3), ("square", 2), ("fgsm", 3), ("fgsm", 2)]
