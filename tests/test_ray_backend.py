"""The protocol on a real Ray cluster gives the local run's store, row for row: also with a worker SIGKILLed
mid-run, and after the driver itself is killed and rerun.

The cluster is a real Ray head on loopback only (``benchmarks/ray_head.py``: ``ray start --head --block``, a child
process stopped by its PID, token authentication, workers at niceness 0), and the test checks that no process of the
cluster or of this driver listens anywhere else.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from arbibench.attacks import BLACK_BOX, WHITE_BOX
from arbibench.evaluation.store import ResultStore
from arbibench.protocol.presets import AttackSpec, Protocol
from arbibench.protocol.run import run_protocol
from benchmarks.ray_head import LOOPBACK, listening_addresses, loopback_head, process_tree

if importlib.util.find_spec("ray") is None:  # not imported here: Ray must first see the loopback setting below
    pytest.skip("the Ray extra is not installed (pip install 'arbibench[ray]')", allow_module_level=True)

MODELS = ["resnet20_fp", "resnet20_bnn"]
PROTOCOL = Protocol(
    name="ray-test", dataset="cifar10", threat_model="Linf", eps=8 / 255, eps_text="8/255",
    attacks=(AttackSpec("fgsm", WHITE_BOX), AttackSpec("pgd", WHITE_BOX, (("steps", 3),)),
             AttackSpec("mifgsm", WHITE_BOX, (("steps", 3),)), AttackSpec("square", BLACK_BOX, (("max_queries", 40),))),
    n_white_box=100, n_black_box=25, batch_size=25, sweep_attack="fgsm", sweep_eps=("4/255",), n_sweep=50,
    eps_star_attacks=(),
)  # fmt: skip


@pytest.fixture(scope="module")
def ray_head() -> Iterator[tuple[str, dict[str, str], int]]:
    """A Ray head on 127.0.0.1 only; yields its address, the environment a driver needs to reach it, its pid."""
    if shutil.which("ss") is None:
        pytest.fail("the loopback check needs `ss` (iproute2)")
    with loopback_head() as head:
        saved = {k: os.environ.get(k) for k in head.env}
        os.environ.update(head.env)  # before this process imports Ray: the driver advertises 127.0.0.1 too
        try:
            yield head.address, head.env, head.pid
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _rows(path: Path) -> dict[str, list[tuple]]:
    """Every stored row but the timings (seconds, creation time)."""
    with sqlite3.connect(path) as c:
        return {
            "evaluations": sorted(c.execute("SELECT eval_key, model_hash, model_name, attack, spec FROM evaluations")),
            "batches": sorted(c.execute("SELECT eval_key, batch_index, n_samples FROM batches")),
            "outcomes": sorted(c.execute("SELECT * FROM outcomes")),
            "flags": sorted(c.execute("SELECT * FROM flags")),
        }


def _assert_same_rows(a: Path, b: Path) -> None:
    ra, rb = _rows(a), _rows(b)
    for table in ra:
        assert ra[table] == rb[table], table
    assert len(ra["outcomes"]) > 500 and any(q is not None for *_, q in ra["outcomes"])  # black-box rows too


@pytest.fixture(scope="module")
def local_store(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    path = tmp_path_factory.mktemp("local") / "local.db"
    with ResultStore(path) as store:
        run_protocol(PROTOCOL, MODELS, store, data_dir=data_dir, progress=False)
    return path


def _ray_run(
    head: tuple[str, dict, int], path: Path, data_dir: Path, kill_at: int | None = None
) -> tuple[int, int, int]:
    """The protocol through the cluster; returns (batches the workers computed, retried batches, batches stored)."""
    from arbibench.evaluation.ray_backend import RayBackend

    backend = RayBackend(address=head[0], workers=2, worker_threads=1)
    killed: list[int] = []

    def kill_a_worker(committed: int) -> None:
        if kill_at is not None and committed == kill_at and not killed:
            killed.append(backend.pids[0])
            os.kill(backend.pids[0], signal.SIGKILL)  # the worker has a batch in flight: 2 are kept per worker

    backend.on_commit = kill_a_worker
    try:
        with ResultStore(path) as store:
            run_protocol(PROTOCOL, MODELS, store, data_dir=data_dir, progress=False, backend=backend)
        import ray

        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}  # what Ray advertises
        listening = listening_addresses(process_tree(head[2]) | {os.getpid()})  # the cluster, its workers, this driver
        assert listening and all(addr.startswith(LOOPBACK) for addr in listening), listening
    finally:
        backend.close()
    with sqlite3.connect(path) as c:
        stored = c.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
    return backend._committed, backend.retried, stored


def test_protocol_on_ray_equals_local(ray_head: tuple[str, dict, int], local_store: Path, tmp_path: Path,
                                      data_dir: Path) -> None:
    computed, retried, stored = _ray_run(ray_head, tmp_path / "ray.db", data_dir)
    assert computed == stored and retried == 0  # every batch came from a worker, none from the driver
    _assert_same_rows(local_store, tmp_path / "ray.db")


def test_worker_sigkilled_mid_run_still_equals_local(ray_head: tuple[str, dict, int], local_store: Path,
                                                     tmp_path: Path, data_dir: Path) -> None:
    computed, retried, stored = _ray_run(ray_head, tmp_path / "ray.db", data_dir, kill_at=16)
    assert retried >= 1  # the kill hit a batch in flight, which was computed again ...
    assert computed == stored  # ... and committed once
    _assert_same_rows(local_store, tmp_path / "ray.db")


def _eval(store: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "arbibench.cli", "eval", "--model", "resnet20_bnn", "--attacks",
           "fgsm,square(max_queries=30)", "-n", "60", "--batch-size", "20", "--store", str(store), "--no-checks",
           *extra]  # fmt: skip
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def test_killed_driver_resumes_from_the_store(ray_head: tuple[str, dict, int], tmp_path: Path) -> None:
    address, ray_env, _ = ray_head
    env = {**os.environ, **ray_env}
    local = _eval(tmp_path / "local.db", env)
    assert local.returncode == 0, local.stderr
    cluster = ("--backend", "ray", "--address", address, "--workers", "2", "--worker-threads", "1")
    killed = _eval(tmp_path / "ray.db", {**env, "ARBIBENCH_FAULT": "store.commit.after@4"}, *cluster)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with sqlite3.connect(tmp_path / "ray.db") as c:
        assert c.execute("SELECT COUNT(*) FROM batches").fetchone()[0] == 4  # 3 clean + 1 attack batch survived
    resumed = _eval(tmp_path / "ray.db", env, *cluster)
    assert resumed.returncode == 0, resumed.stderr
    assert _rows(tmp_path / "local.db") == _rows(tmp_path / "ray.db")
