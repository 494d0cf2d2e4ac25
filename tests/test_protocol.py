"""Protocol presets and `protocol run`: subsets, per-family scores, worst case, resume, cards (the FP-twin findings
are tests/test_findings.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from arbibench.cards import SCHEMA_VERSION, card_json, parse_card
from arbibench.cli import app
from arbibench.evaluation.store import ResultStore
from arbibench.machine import computed_on, cpu_model
from arbibench.protocol import BLACK_BOX, PROTOCOLS, WHITE_BOX, AttackSpec, describe, get_protocol
from arbibench.protocol.cards import protocol_card, write_protocol_card
from arbibench.protocol.run import ALL, protocol_subsets, run_protocol

runner = CliRunner()


def test_presets_follow_the_paper():
    c = PROTOCOLS["cifar10"]
    assert (c.dataset, c.threat_model, c.n_white_box, c.n_black_box) == ("cifar10", "Linf", None, 500)
    assert c.eps == pytest.approx(8 / 255)
    i = PROTOCOLS["imagenet"]
    assert (i.n_white_box, i.n_black_box, i.eps) == (1000, 1000, pytest.approx(4 / 255))
    assert PROTOCOLS["cifar10-l2"].eps == 0.5 and PROTOCOLS["imagenet-l2"].threat_model == "L2"
    for p in PROTOCOLS.values():
        assert p.white_box and p.black_box and not p.quick
        assert {a.family for a in p.attacks} == {WHITE_BOX, BLACK_BOX}


def test_quick_variant_is_smaller_and_says_so():
    q = get_protocol("cifar10", quick=True)
    full = get_protocol("cifar10")
    assert q.quick and q.label == "cifar10 (quick)" and q.notes
    assert q.n_white_box == 500 and q.n_black_box == 100
    assert [a.name for a in q.white_box] == [a.name for a in full.white_box]
    budget = {a.name: a.kwargs.get("max_queries") for a in q.black_box}
    full_budget = {a.name: a.kwargs.get("max_queries") for a in full.black_box}
    assert all(budget[n] is None or budget[n] < full_budget[n] for n in budget if full_budget[n] is not None)


def test_demo_variant_is_a_first_look_with_both_families():
    d = get_protocol("cifar10", demo=True)
    q = get_protocol("cifar10", quick=True)
    assert d.demo and d.quick and d.label == "cifar10 (demo)" and "not the ARBiBench protocol" in d.notes[0]
    assert d.n_white_box < q.n_white_box and d.n_black_box < q.n_black_box and d.eps == q.eps
    assert [a.name for a in d.white_box] == ["fgsm", "pgd", "apgd_ce"]
    assert [a.name for a in d.black_box] == ["transfer", "square"]
    assert all(a.kwargs.get("max_queries", 0) <= 500 for a in d.black_box)
    assert [a.name for a in get_protocol("cifar10-l2", demo=True).black_box] == ["transfer", "square"]
    with pytest.raises(ValueError, match="--quick or --demo"):
        get_protocol("cifar10", quick=True, demo=True)
    with pytest.raises(ValueError, match="demo variant"):
        get_protocol("cifar10-c", demo=True)


def test_unknown_protocol_names_the_known_ones():
    with pytest.raises(ValueError, match="cifar10, cifar10-l2, imagenet, imagenet-l2"):
        get_protocol("mnist")


def test_describe_prints_every_attack_with_its_parameters():
    rows = dict.fromkeys(k for k, _ in describe(get_protocol("cifar10")))
    text = "\n".join(f"{k}: {v}" for k, v in describe(get_protocol("cifar10")))
    assert "white-box attack" in rows and "black-box attack" in rows
    assert "the whole test set" in text and "500 images drawn with seed 0" in text
    assert "square: " in text and "max_queries=5000" in text
    assert "8/255" in text


def test_black_box_images_are_drawn_from_the_white_box_images(data_dir):
    p = replace(get_protocol("cifar10"), n_white_box=300, n_black_box=40)
    subsets = protocol_subsets(p, data_dir)
    white, black = subsets[WHITE_BOX][2].numpy(), subsets[BLACK_BOX][2].numpy()
    assert len(white) == 300 and len(black) == 40
    assert set(black) <= set(white) and np.all(np.diff(black) > 0)
    again = protocol_subsets(p, data_dir)[BLACK_BOX][2].numpy()
    assert np.array_equal(black, again)  # seeded: the same images every time


@pytest.fixture(scope="module")
def tiny_protocol():
    base = get_protocol("cifar10", quick=True)
    return replace(
        base,
        attacks=(
            AttackSpec("fgsm", WHITE_BOX),
            AttackSpec("pgd", WHITE_BOX, (("steps", 5),)),
            AttackSpec("square", BLACK_BOX, (("max_queries", 100),)),
        ),
        n_white_box=60,
        n_black_box=20,
        sweep_eps=("2/255", "8/255"),
        sweep_attack="pgd",  # as the demo protocol: the sweep's code is the same, at a tenth of APGD-CE's steps
        n_sweep=40,
        batch_size=30,
        eps_star_draws=10,
        eps_star_floor=0.25 / 255,  # 6 halvings below 16/255, not 14: the descent is tested in test_min_perturbation
    )


@pytest.fixture(scope="module")
def tiny_run(tiny_protocol, data_dir, tmp_path_factory):
    db_path = tmp_path_factory.mktemp("protocol") / "store.db"
    with ResultStore(db_path) as db:
        results = run_protocol(
            tiny_protocol, ["resnet20_fp", "resnet20_bnn"], db, data_dir=data_dir, progress=False
        )
    return results, db_path


def test_run_scores_each_family_on_its_own_images(tiny_run, tiny_protocol):
    results, _ = tiny_run
    for r in results:
        assert r.n_examples == {WHITE_BOX: 60, BLACK_BOX: 20}
        white = [a.acc_norm for a in r.family(WHITE_BOX)]
        black = [a.acc_norm for a in r.family(BLACK_BOX)]
        assert r.rs[WHITE_BOX] == pytest.approx(sum(white))
        assert r.rs[BLACK_BOX] == pytest.approx(sum(black))
        assert r.rs[ALL] == pytest.approx(sum(white) + sum(black))
        assert r.rs_mean[ALL] == pytest.approx((sum(white) + sum(black)) / 3)
        for a in r.attacks:
            assert a.acc_norm == pytest.approx(a.acc_star / r.clean_acc[a.family])
        # the worst case over all attacks is on the black-box images: never above any black-box ACC*
        assert r.worst_case[ALL] <= min(a.acc_star for a in r.family(BLACK_BOX)) + 1e-12
        assert r.family(BLACK_BOX)[0].median_queries is None or r.family(BLACK_BOX)[0].median_queries <= 100
        assert [row["eps_text"] for row in r.sweep] == ["2/255", "8/255"]
        assert r.sweep[0]["acc_star"] >= r.sweep[1]["acc_star"]  # more budget, no more robust
        # eps* on the black-box images: at the protocol's eps it can only show less robustness than PGD there
        assert r.eps_star["n_examples"] == 20 and r.eps_star["attacks"] == ["pgd"]
        at_eps = [row["robust_acc"] for row in r.eps_star["curve"] if row["eps"] <= tiny_protocol.eps + 1e-12][-1]
        assert at_eps <= r.clean_acc[BLACK_BOX] + 1e-12
    fp = next(r for r in results if r.model_name == "resnet20_fp")
    assert fp.clean_acc[WHITE_BOX] > 0.8
    assert next(a for a in fp.attacks if a.name == "pgd").acc_star < 0.1


def test_rerun_recomputes_nothing(tiny_run, tiny_protocol, data_dir):
    _, db_path = tiny_run
    with ResultStore(db_path) as db:
        before = db.conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
        again = run_protocol(tiny_protocol, ["resnet20_fp"], db, data_dir=data_dir, progress=False)
        after = db.conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
    assert before == after
    first = next(r for r in tiny_run[0] if r.model_name == "resnet20_fp")
    assert [a.acc_star for a in again[0].attacks] == [a.acc_star for a in first.attacks]


def test_card_has_robustbench_fields_as_numbers(tiny_run, tmp_path, data_dir):
    from arbibench.models.zoo import load_model

    bnn = next(r for r in tiny_run[0] if r.model_name == "resnet20_bnn")
    path = write_protocol_card(bnn, tmp_path / "model_info", load_model("resnet20_bnn"), data_dir=data_dir)
    assert path == tmp_path / "model_info" / "cifar10" / "Linf" / "resnet20_bnn.json"
    card = json.loads(path.read_text())
    for key in ("link", "name", "authors", "additional_data", "number_forward_passes", "dataset", "venue",
                "architecture", "eps", "clean_acc", "reported", "autoattack_acc", "unreliable", "footnote"):
        assert key in card
    assert isinstance(card["eps"], float) and isinstance(card["clean_acc"], float)
    assert card["clean_acc"] == pytest.approx(100 * bnn.clean_acc[WHITE_BOX], abs=0.01)
    assert card["method"] == "bnn" and card["fp_twin"] == "resnet20_fp" and card["bits_weights"] == 1
    assert card["venue"] == "NeurIPS 2016" and card["quick"] is True and "quick" in card["footnote"]
    assert card["attacks"]["square"]["family"] == BLACK_BOX
    assert card["rs"]["all"] == pytest.approx(bnn.rs[ALL], abs=1e-4)
    assert card["median_eps_star"] == bnn.eps_star["median_eps_star"]
    # the seconds are read on what computed them: this CPU (tiny_run runs on it) at torch's thread count
    assert card["machine"] == computed_on(torch.device("cpu")) and cpu_model() in card["machine"]
    assert card["machine"].endswith(f"{torch.get_num_threads()} thread{'s' * (torch.get_num_threads() > 1)}")
    assert card["eps_star"]["curve"][0]["robust_acc"] == pytest.approx(100 * bnn.clean_acc[BLACK_BOX], abs=0.01)
    examples = np.load(path.with_name(card["examples"]))
    assert examples["x_adv"].dtype == np.uint8 and examples["x_adv"].shape == examples["x_clean"].shape
    assert np.abs(examples["x_adv"].astype(int) - examples["x_clean"].astype(int)).max() <= 8 + 1  # 8/255, rounding
    assert not list(path.parent.glob("*.tmp*"))
    # the schema's round trip on a real result: every field read back equals the one written
    read = parse_card(path, card)
    assert read == replace(protocol_card(bnn), examples=path.with_name(card["examples"]))
    assert card_json(read) == card and card["schema_version"] == SCHEMA_VERSION


def test_cli_show_prints_the_numbers():
    res = runner.invoke(app, ["protocol", "show", "cifar10"])
    assert res.exit_code == 0, res.output
    assert "8/255" in res.output and "500" in res.output and "max_queries=5000" in res.output
    res = runner.invoke(app, ["protocol", "show", "cifar10", "--quick"])
    assert "quick" in res.output and "max_queries=1000" in res.output


def test_cli_run_rejects_unknown_models_before_work(tmp_path):
    res = runner.invoke(
        app, ["protocol", "run", "cifar10", "--quick", "--models", "resnet20_fp,nope", "--store",
              str(tmp_path / "s.db"), "--model-info", str(tmp_path / "mi")]
    )
    assert res.exit_code == 2 and "unknown model 'nope'" in res.output
    assert not (tmp_path / "mi").exists()


def test_tables_show_autoattack_and_eps_star(tiny_run, tiny_protocol):
    from rich.console import Console

    from arbibench.protocol.cli.tables import model_table, summary_table

    console = Console(width=260, record=True)
    console.print(summary_table(tiny_run[0], tiny_protocol))
    console.print(model_table(tiny_run[0][0]))
    text = console.export_text()
    assert "AutoAttack" in text and "median eps*" in text
    fp = tiny_run[0][0].eps_star
    value, floor = fp["median_eps_star_correct"], fp["eps_floor"]
    median = ("inf" if value is None else f"\u2264 {floor * 255:.3g}/255" if value <= floor
              else f"{value * 255:.3g}/255")
    assert median in text and "median eps* (correct)" in text


def test_each_evaluation_is_planned_once_and_the_backend_gets_those_plans(tiny_protocol, data_dir, tmp_path,
                                                                          monkeypatch):
    """With a backend, run_protocol plans every evaluation once (model checks and store keys), hands those plans to
    the backend, and executes the same plans: no evaluation is assembled a second time."""
    from arbibench.evaluation import plan as plan_module
    from arbibench.evaluation.executors import Executor

    checked = []
    real_check = plan_module.check_model
    monkeypatch.setattr(plan_module, "check_model", lambda *a, **k: checked.append(1) or real_check(*a, **k))

    class Recording(Executor):
        name = "recording"

        def __init__(self) -> None:
            self.seen: list[list[object]] = []

        def run(self, plans, progress) -> None:  # noqa: ANN001 - computes nothing: the runner reads the store
            self.seen.append(list(plans))

        def close(self) -> None:
            pass

    backend = Recording()
    with ResultStore(tmp_path / "s.db") as db:
        results = run_protocol(tiny_protocol, ["resnet20_bnn"], db, data_dir=data_dir, progress=False, sweep=False,
                               backend=backend)
    assert len(checked) == 2  # one plan per attack family, each checked once
    first, *later = backend.seen
    assert later  # execution hands the backend its plans again (nothing left to compute by then)
    assert len(first) == 2 and all(any(p is q for q in first) for run in later for p in run)  # the same objects
    assert results[0].n_examples == {WHITE_BOX: 60, BLACK_BOX: 20}
    # this backend computed nothing, the runner every batch: the card names this CPU (the store says so per batch)
    assert results[0].machine == computed_on(torch.device("cpu"))


def test_a_stored_only_report_over_a_store_without_the_eps_star_search_keeps_the_model(tiny_run, tiny_protocol,
                                                                                       data_dir, tmp_path):
    # a store written before the descent search has no random-corner rows: the report reads the model's results
    # and leaves eps* out (never computing it), instead of leaving the whole model out
    import shutil
    import sqlite3

    from arbibench.evaluation.stored_only import StoredOnlyExecutor

    results, db_path = tiny_run
    db = tmp_path / "earlier.db"
    shutil.copy(db_path, db)
    with sqlite3.connect(db) as conn:
        keys = [k for (k,) in conn.execute("SELECT eval_key FROM evaluations WHERE attack = 'corners'")]
        assert keys
        marks = ",".join("?" * len(keys))
        for table in ("outcomes", "batch_machines", "flags", "batches", "evaluations"):
            conn.execute(f"DELETE FROM {table} WHERE eval_key IN ({marks})", keys)
        before = conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
    with ResultStore(db, read_only=True) as store:
        (fp,) = run_protocol(tiny_protocol, ["resnet20_fp"], store, data_dir=data_dir, progress=False,
                             backend=StoredOnlyExecutor())
    assert fp.eps_star is None and fp.rs == results[0].rs and fp.clean_acc == results[0].clean_acc
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0] == before
