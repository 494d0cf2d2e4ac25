"""`protocol run --only-attacks`: part of a run on one machine, the rest on another, the same store rows and card."""

from __future__ import annotations

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from arbibench.cli import app
from arbibench.evaluation.executors import Executor
from arbibench.evaluation.store import ResultStore
from arbibench.operations.split import check_attack_names, compute_attacks, protocol_attack_names
from arbibench.protocol import BLACK_BOX, WHITE_BOX, AttackSpec, get_protocol
from arbibench.protocol.run import run_protocol

runner = CliRunner()


@pytest.fixture(scope="module")
def small_protocol():
    return replace(
        get_protocol("cifar10", quick=True),
        attacks=(
            AttackSpec("fgsm", WHITE_BOX),
            AttackSpec("pgd", WHITE_BOX, (("steps", 3),)),
            AttackSpec("square", BLACK_BOX, (("max_queries", 40),)),
        ),
        n_white_box=40,
        n_black_box=10,
        sweep_eps=("2/255", "8/255"),
        sweep_attack="pgd",
        n_sweep=20,
        batch_size=20,
        eps_star_attacks=("fgsm",),
        eps_star_rounds=2,
        eps_star_draws=10,
        eps_star_floor=0.25 / 255,  # 6 halvings below 16/255, not 14: the descent is tested in test_min_perturbation
    )


def _batches(db: ResultStore) -> set[tuple[str, str, int]]:
    rows = db.conn.execute(
        "SELECT e.attack, b.eval_key, b.batch_index FROM batches b JOIN evaluations e USING (eval_key)"
    ).fetchall()
    return {(attack, key, index) for attack, key, index in rows}


def test_attack_names_are_the_presets_and_unknown_ones_are_named(small_protocol):
    assert protocol_attack_names(small_protocol) == ["fgsm", "pgd", "square"]
    assert protocol_attack_names(replace(small_protocol, sweep_attack="apgd_ce")) == ["fgsm", "pgd", "square",
                                                                                      "apgd_ce"]
    assert check_attack_names(small_protocol, [" pgd", "pgd", "square "]) == ["pgd", "square"]
    with pytest.raises(ValueError, match=r"rays, nope not in protocol cifar10 \(quick\); its attacks are fgsm, pgd"):
        check_attack_names(small_protocol, ["pgd", "rays", "nope"])
    with pytest.raises(ValueError, match="names no attack"):
        check_attack_names(small_protocol, ["", " "])


def test_a_split_run_stores_what_the_whole_run_stores(small_protocol, data_dir, tmp_path):
    """Square on one store, the rest on another, the two joined: the full run then computes nothing and scores as a
    run that did everything itself."""
    with ResultStore(tmp_path / "part.db") as part:
        shares = compute_attacks(small_protocol, ["resnet20_bnn"], part, ["square"], data_dir=data_dir,
                                 progress=False)
        assert [(s.evaluation, s.batches_done, s.batches_total) for s in shares] == [("black-box: square", 1, 1)]
        part_batches = _batches(part)
    assert {a for a, _, _ in part_batches} == {"clean", "square"}  # the clean pass it starts from, nothing else

    with ResultStore(tmp_path / "whole.db") as whole:
        whole_results = run_protocol(small_protocol, ["resnet20_bnn"], whole, data_dir=data_dir, progress=False)
        whole_batches = _batches(whole)
    assert part_batches < whole_batches  # the same keys: the part is the whole run's rows of those evaluations

    with ResultStore(tmp_path / "part.db") as part:
        shares = compute_attacks(small_protocol, ["resnet20_bnn"], part, ["pgd"], data_dir=data_dir, progress=False)
        # the white-box PGD and the sweep's PGD at each eps: 2 + 1 + 1 batches
        assert [(s.evaluation, s.batches_done, s.batches_total) for s in shares] == [
            ("white-box: pgd", 2, 2), ("sweep eps=2/255: pgd", 1, 1), ("sweep eps=8/255: pgd", 1, 1)]
        assert "fgsm" not in {a for a, _, _ in _batches(part)}
        results = run_protocol(small_protocol, ["resnet20_bnn"], part, data_dir=data_dir, progress=False)
        assert _batches(part) == whole_batches  # the same evaluations and batches, whichever machine stored them
    got, want = results[0], whole_results[0]
    assert [(a.name, a.acc_star) for a in got.attacks] == [(a.name, a.acc_star) for a in want.attacks]
    assert got.rs == want.rs and got.sweep == want.sweep and got.eps_star == want.eps_star


def test_a_backend_gets_only_the_named_attacks(small_protocol, data_dir, tmp_path):
    class Recording(Executor):
        name = "recording"

        def __init__(self) -> None:
            self.seen: list[tuple[str, ...]] = []

        def run(self, plans, progress) -> None:  # noqa: ANN001 - computes nothing
            self.seen += [tuple(a.name for a in p.attacks) for p in plans]

        def close(self) -> None:
            pass

    backend = Recording()
    with ResultStore(tmp_path / "s.db") as db:
        shares = compute_attacks(small_protocol, ["resnet20_fp", "resnet20_bnn"], db, ["square", "fgsm"],
                                 data_dir=data_dir, progress=False, sweep=False, backend=backend)
    assert backend.seen == [("fgsm",), ("square",)] * 2
    assert [(s.model_name, s.evaluation, s.batches_done) for s in shares] == [
        ("resnet20_fp", "white-box: fgsm", 0), ("resnet20_fp", "black-box: square", 0),
        ("resnet20_bnn", "white-box: fgsm", 0), ("resnet20_bnn", "black-box: square", 0)]


def test_cli_refuses_an_attack_the_protocol_lacks_before_any_work(tmp_path):
    store = tmp_path / "s.db"
    result = runner.invoke(app, ["protocol", "run", "cifar10", "--quick", "--models", "resnet20_fp", "--store",
                                 str(store), "--only-attacks", "autoattack,pgdd"])
    assert result.exit_code != 0
    assert "pgdd not in protocol cifar10 (quick)" in result.output and "autoattack," in result.output
    assert not store.exists()
    result = runner.invoke(app, ["protocol", "run", "cifar10-c", "--models", "resnet20_fp", "--store", str(store),
                                 "--only-attacks", "fgsm"])
    assert result.exit_code != 0 and "applies to the attack protocols" in result.output


def test_cli_prints_the_share_and_writes_no_card(data_dir, tmp_path, monkeypatch, small_protocol):
    import arbibench.protocol.presets as presets

    monkeypatch.setattr(presets, "get_protocol", lambda name, quick=False, demo=False: small_protocol)
    result = runner.invoke(app, ["protocol", "run", "cifar10", "--models", "resnet20_fp", "--store",
                                 str(tmp_path / "s.db"), "--model-info", str(tmp_path / "cards"), "--no-sweep",
                                 "--data-dir", str(data_dir), "--only-attacks", "fgsm"])
    assert result.exit_code == 0, result.output
    assert "white-box: fgsm" in result.output and "2/2" in result.output and "no card written" in result.output
    assert not (tmp_path / "cards").exists()
