"""The protocol on local worker processes gives the local run's store, row for row; a worker killed mid-run stops the
run with one error and the rerun resumes from the store to the same rows; the CLI takes ``--backend processes``."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arbibench.attacks import BLACK_BOX, WHITE_BOX
from arbibench.cli import app
from arbibench.evaluation.executors import ExecutorError
from arbibench.evaluation.process_executor import ProcessExecutor
from arbibench.evaluation.store import ResultStore
from arbibench.machine import describe
from arbibench.protocol.presets import AttackSpec, Protocol
from arbibench.protocol.run import run_protocol
from tests.store_rows import store_rows

MODELS = ["resnet20_fp", "resnet20_bnn"]
PROTOCOL = Protocol(
    name="processes-test", dataset="cifar10", threat_model="Linf", eps=8 / 255, eps_text="8/255",
    attacks=(AttackSpec("fgsm", WHITE_BOX), AttackSpec("pgd", WHITE_BOX, (("steps", 3),)),
             AttackSpec("square", BLACK_BOX, (("max_queries", 40),))),
    n_white_box=100, n_black_box=25, batch_size=25, sweep_attack="fgsm", sweep_eps=("4/255",), n_sweep=50,
    eps_star_attacks=(),
)  # fmt: skip


@pytest.fixture(scope="module")
def local_store(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    path = tmp_path_factory.mktemp("local") / "local.db"
    with ResultStore(path) as store:
        run_protocol(PROTOCOL, MODELS, store, data_dir=data_dir, progress=False)
    return path


def _processes_run(path: Path, data_dir: Path, kill_at: int | None = None) -> tuple[ProcessExecutor, list]:
    backend = ProcessExecutor(workers=2, worker_threads=1)

    def kill_a_worker(committed: int) -> None:
        if committed == kill_at:
            os.kill(backend.pids[0], signal.SIGKILL)

    backend.on_commit = kill_a_worker
    try:
        with ResultStore(path) as store:
            results = run_protocol(PROTOCOL, MODELS, store, data_dir=data_dir, progress=False, backend=backend)
    finally:
        backend.close()
    return backend, results


def test_protocol_on_processes_equals_local(local_store: Path, tmp_path: Path, data_dir: Path) -> None:
    backend, results = _processes_run(tmp_path / "p.db", data_dir)
    rows = store_rows(tmp_path / "p.db")
    assert backend.committed == len(rows["batches"])  # every batch came from a worker, none from the driver
    assert rows == store_rows(local_store)
    assert any(q is not None for *_, q in rows["outcomes"])  # black-box rows too
    assert [r.machine for r in results] == [describe(1)] * 2  # the cards name the workers' CPU at their one thread


def test_a_card_names_each_machine_s_share_of_a_resumed_run(local_store: Path, tmp_path: Path,
                                                            data_dir: Path) -> None:
    path = tmp_path / "resumed.db"
    shutil.copy(local_store, path)
    with sqlite3.connect(path) as c:  # as if another machine had computed the clean passes and the square batches
        c.execute("UPDATE batch_machines SET machine = 'GPU X (cuda)' WHERE eval_key IN "
                  "(SELECT eval_key FROM evaluations WHERE attack IN ('clean', 'square'))")
        here = c.execute("SELECT DISTINCT machine FROM batch_machines WHERE machine != 'GPU X (cuda)'").fetchall()
    assert len(here) == 1  # the local run named one machine, this one
    with ResultStore(path) as store:
        results = run_protocol(PROTOCOL, MODELS, store, data_dir=data_dir, progress=False)
    for r in results:  # nothing was computed again: the shares come from the stored batches
        shares = dict(part.split(": ") for part in r.machine.split("; "))
        assert set(shares) == {"GPU X (cuda)", here[0][0]}, r.machine
        assert all(v.endswith("% of batch seconds") for v in shares.values())


def test_killed_worker_is_one_error_and_the_rerun_resumes(local_store: Path, tmp_path: Path, data_dir: Path) -> None:
    with pytest.raises(ExecutorError, match="a worker process died.*rerun the same command"):
        _processes_run(tmp_path / "p.db", data_dir, kill_at=5)
    with sqlite3.connect(tmp_path / "p.db") as c:
        kept = c.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
    assert kept >= 5  # what was committed before the kill stays
    backend, _ = _processes_run(tmp_path / "p.db", data_dir)
    assert 0 < backend.committed < len(store_rows(local_store)["batches"])  # only the missing batches were computed
    assert store_rows(tmp_path / "p.db") == store_rows(local_store)


def test_cli_eval_on_processes(tmp_path: Path, data_dir: Path) -> None:
    args = ["eval", "-m", "resnet20_bnn", "--attacks", "fgsm", "-n", "40", "--batch-size", "20", "--no-checks",
            "--data-dir", str(data_dir)]  # fmt: skip
    local = CliRunner().invoke(app, [*args, "--store", str(tmp_path / "l.db")])
    assert local.exit_code == 0, local.output
    run = CliRunner().invoke(app, [*args, "--store", str(tmp_path / "p.db"), "--backend", "processes",
                                   "--workers", "2", "--worker-threads", "1"])  # fmt: skip
    assert run.exit_code == 0, run.output
    assert store_rows(tmp_path / "p.db") == store_rows(tmp_path / "l.db")


def test_the_eps_star_search_on_processes_equals_local(tmp_path: Path, data_dir: Path) -> None:
    """The queue runs full protocols on two worker processes of one thread (a query attack keeps one core busy):
    the eps* search, which attacks what each radius leaves through the same executor, must find what a local run
    finds, row for row."""
    from dataclasses import replace

    protocol = replace(PROTOCOL, name="processes-eps-star", attacks=PROTOCOL.attacks[:1], n_white_box=25,
                       n_black_box=20, batch_size=10, n_sweep=10, eps_star_attacks=("pgd",), eps_star_rounds=1,
                       eps_star_draws=2)
    with ResultStore(tmp_path / "l.db") as store:
        local = run_protocol(protocol, ["resnet20_bnn"], store, data_dir=data_dir, progress=False)
    backend = ProcessExecutor(workers=2, worker_threads=1)
    try:
        with ResultStore(tmp_path / "p.db") as store:
            processes = run_protocol(protocol, ["resnet20_bnn"], store, data_dir=data_dir, progress=False,
                                     backend=backend)
    finally:
        backend.close()
    assert local[0].eps_star is not None and local[0].eps_star["n_examples"] == 20
    assert processes[0].eps_star == local[0].eps_star
    assert backend.committed > 0 and store_rows(tmp_path / "p.db") == store_rows(tmp_path / "l.db")


# evaluated in a worker: how many models it holds a deployed network of
DEPLOYED_CACHE_SIZE = "len(__import__('arbibench.deploy.cache').deploy.cache._CACHE)"


def test_deployed_inference_on_processes_equals_local(tmp_path: Path, data_dir: Path) -> None:
    """``--inference deployed`` on worker processes: each worker builds its own bit-packed network from the batch's
    model name, and its answers are the local run's, row for row (and the rows say they are the deployed network's)."""
    from dataclasses import replace

    protocol = replace(PROTOCOL, name="processes-deployed", attacks=(PROTOCOL.attacks[0], PROTOCOL.attacks[2]),
                       n_white_box=50, n_black_box=25, n_sweep=0, sweep_eps=())
    with ResultStore(tmp_path / "l.db") as store:
        run_protocol(protocol, ["resnet20_bnn"], store, data_dir=data_dir, progress=False, inference="deployed")
    backend = ProcessExecutor(workers=2, worker_threads=1)
    try:
        with ResultStore(tmp_path / "p.db") as store:
            run_protocol(protocol, ["resnet20_bnn"], store, data_dir=data_dir, progress=False, backend=backend,
                         inference="deployed")
        # the workers answered with deployed networks of their own (a simulation run leaves their caches empty);
        # the rows alone cannot tell, as the deployed network agrees with the simulation on these images
        assert backend.pool is not None
        built = {backend.pool.submit(eval, DEPLOYED_CACHE_SIZE).result() for _ in range(2 * backend.workers)}
        assert max(built) >= 1, built
    finally:
        backend.close()
    rows = store_rows(tmp_path / "p.db")
    assert backend.committed == len(rows["batches"]) > 0
    assert rows == store_rows(tmp_path / "l.db")
    assert rows["evaluations"] and all('"inference": "deployed"' in r[4] for r in rows["evaluations"])
