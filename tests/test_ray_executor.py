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
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from arbibench.attacks import BLACK_BOX, WHITE_BOX
from arbibench.evaluation.store import ResultStore
from arbibench.protocol.presets import AttackSpec, Protocol
from arbibench.protocol.run import run_protocol
from benchmarks.ray_head import LOOPBACK, listening_addresses, loopback_head, process_tree
from tests.store_rows import store_rows

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


def _assert_same_rows(a: Path, b: Path) -> None:
    ra, rb = store_rows(a), store_rows(b)
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
    from arbibench.evaluation.ray_executor import RayExecutor

    backend = RayExecutor(address=head[0], workers=2, worker_threads=1)
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


EVAL_ATTACKS, EVAL_N, EVAL_BATCH = "fgsm,square(max_queries=30)", 60, 20


def _eval(store: Path, env: dict[str, str], *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "arbibench.cli", "eval", "--model", "resnet20_bnn", "--attacks", EVAL_ATTACKS,
           "-n", str(EVAL_N), "--batch-size", str(EVAL_BATCH), "--store", str(store), "--no-checks",
           *extra]  # fmt: skip
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def test_killed_driver_resumes_from_the_store(ray_head: tuple[str, dict, int], tmp_path: Path,
                                              data_dir: Path) -> None:
    from arbibench import benchmark
    from arbibench.attacks import attacks_from_spec

    address, ray_env, _ = ray_head
    env = {**os.environ, **ray_env}
    # the local reference in this process: what `eval` runs without a backend (benchmark(); the CLI's own local
    # path against benchmark() is tests/test_faults.py's), so only the killed and resumed drivers pay a start-up
    benchmark("resnet20_bnn", EVAL_N, attacks=attacks_from_spec(EVAL_ATTACKS), batch_size=EVAL_BATCH,
              store=tmp_path / "local.db", data_dir=data_dir, progress=False, checks=False)
    cluster = ("--backend", "ray", "--address", address, "--workers", "2", "--worker-threads", "1")
    killed = _eval(tmp_path / "ray.db", {**env, "ARBIBENCH_FAULT": "store.commit.after@4"}, *cluster)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with sqlite3.connect(tmp_path / "ray.db") as c:
        assert c.execute("SELECT COUNT(*) FROM batches").fetchone()[0] == 4  # 3 clean + 1 attack batch survived
    resumed = _eval(tmp_path / "ray.db", env, *cluster)
    assert resumed.returncode == 0, resumed.stderr
    assert store_rows(tmp_path / "local.db") == store_rows(tmp_path / "ray.db")


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_cluster_address_fails_at_once_naming_it(tmp_path: Path, data_dir: Path) -> None:
    """Nothing listens at the address: one error naming it (ray.init alone retries such an address for ever)."""
    address = f"127.0.0.1:{_closed_port()}"
    env = {**os.environ, "ARBIBENCH_DATA": str(data_dir)}
    result = _eval(tmp_path / "ray.db", env, "--backend", "ray", "--address", address, timeout=90)
    out = " ".join((result.stdout + result.stderr).split())  # the console wraps long lines
    assert result.returncode == 2, out  # the CLI's exit status for a user error
    assert f"cannot reach the Ray cluster at {address}: connection refused" in out
    assert "Traceback" not in out and out.count("cannot reach the Ray cluster") == 1


def test_silent_cluster_address_fails_within_the_connect_timeout() -> None:
    """A port that accepts connections but where no Ray head answers: ray.init would wait for ever, the backend
    gives up after its connect timeout (2 s here) with one error naming the address."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        code = ("import sys\nfrom arbibench.evaluation.executors import ExecutorError\n"
                "from arbibench.evaluation.ray_executor import _refused, connect_ray\n"
                "assert _refused('ray://127.0.0.1:1', 1) is None  # a Ray Client address is ray.init's to resolve\n"
                f"try:\n    connect_ray({address!r}, timeout=2)\n"
                "except ExecutorError as e:\n    print(e)\n    sys.exit(3)\n")
        env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"the Ray cluster at {address} did not accept this driver within 2 s" in result.stdout


def test_silent_address_is_refused_before_the_model_and_the_store(tmp_path: Path, data_dir: Path) -> None:
    """`eval --backend ray` joins the cluster when the backend is opened: a silent address ends the command within
    the connect timeout (2 s here) plus its start-up, before a model is loaded or a store written."""
    store = tmp_path / "ray.db"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        code = ("import sys\nimport arbibench.evaluation.ray_executor as rb\nrb.CONNECT_TIMEOUT_S = 2.0\n"
                "from arbibench.cli import app\n"
                f"sys.argv = ['arbibench', 'eval', '-m', 'resnet20_bnn', '-n', '8', '--attacks', 'fgsm', '--store', "
                f"{str(store)!r}, '--backend', 'ray', '--address', {address!r}]\napp()\n")
        env = {**os.environ, "ARBIBENCH_DATA": str(data_dir), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
               "RAY_USAGE_STATS_ENABLED": "0", "COLUMNS": "300"}
        start = time.monotonic()
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        seconds = time.monotonic() - start
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, out
    assert f"the Ray cluster at {address} did not accept this driver within 2 s" in out
    assert "Traceback" not in out and not store.exists()
    assert seconds < 60, seconds  # generous: 2 s of waiting and the start-up, on a loaded machine


def test_worker_that_never_comes_back_is_dropped(ray_head: tuple[str, dict, int], local_store: Path,
                                                 tmp_path: Path, data_dir: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed while another actor waits for its CPU cannot be restarted: the driver gives it nothing until
    it answers a probe, drops it after REVIVE_S (1 s here) and finishes on the other worker. (Ray fails a task sent
    to a restarting actor at once, so batches sent to it would bounce back, each counting towards MAX_ATTEMPTS.)
    The kill comes early and REVIVE_S is short, so that the other worker's share outlasts it even on a fast machine
    (with 5 s, a fast machine finished every batch before the drop)."""
    import ray

    from arbibench.evaluation import ray_executor
    from arbibench.evaluation.ray_executor import RayExecutor

    class CpuHolder:  # defined here, so that Ray ships it by value: the workers cannot import this test module
        """Takes a CPU of the cluster, so that a worker Ray restarts finds none."""

        def ready(self) -> bool:
            return True

    monkeypatch.setattr(ray_executor, "REVIVE_S", 1.0)
    backend = RayExecutor(address=ray_head[0], workers=2, worker_threads=1)
    holder: list = []

    def kill_a_worker(committed: int) -> None:
        if committed == 2 and not holder:
            holder.append(ray.remote(num_cpus=1)(CpuHolder).remote())  # pending: both CPUs are the workers'
            time.sleep(1.0)  # queued before the restart asks for the CPU
            os.kill(backend.pids[0], signal.SIGKILL)

    backend.on_commit = kill_a_worker

    def stuck(signum: int, frame: object) -> None:
        raise TimeoutError("the driver waited on a worker that never came back")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(180)
    try:
        with ResultStore(tmp_path / "ray.db") as store:
            run_protocol(PROTOCOL, MODELS, store, data_dir=data_dir, progress=False, backend=backend)
        assert ray.get(holder[0].ready.remote(), timeout=30)  # the holder got the dead worker's CPU ...
        assert backend.revived == 0 and backend.lost_workers == {0}  # ... so it never came back, and was dropped
        # only the batches it held when it died ran again: none was sent to it while it was down (each of those
        # would fail at once and count towards MAX_ATTEMPTS)
        assert 1 <= backend.retried <= ray_executor.IN_FLIGHT_PER_WORKER
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        for actor in holder:
            ray.kill(actor)
        backend.close()
    _assert_same_rows(local_store, tmp_path / "ray.db")


DEPLOYED_PROTOCOL = Protocol(
    name="ray-deployed-test", dataset="cifar10", threat_model="Linf", eps=8 / 255, eps_text="8/255",
    attacks=(AttackSpec("fgsm", WHITE_BOX), AttackSpec("square", BLACK_BOX, (("max_queries", 30),))),
    n_white_box=50, n_black_box=25, batch_size=25, sweep_attack="fgsm", sweep_eps=(), n_sweep=50,
    eps_star_attacks=(),
)  # fmt: skip


def test_deployed_inference_on_ray_equals_local(ray_head: tuple[str, dict, int], tmp_path: Path,
                                                data_dir: Path) -> None:
    # each worker deploys its own copy of the BNN (its kernel built for its CPU); the rows are the local run's
    from arbibench.evaluation.ray_executor import RayExecutor

    local, remote = tmp_path / "local.db", tmp_path / "ray.db"
    with ResultStore(local) as store:
        run_protocol(DEPLOYED_PROTOCOL, ["resnet20_bnn"], store, data_dir=data_dir, progress=False,
                      inference="deployed")
    backend = RayExecutor(address=ray_head[0], workers=2, worker_threads=1)
    try:
        with ResultStore(remote) as store:
            run_protocol(DEPLOYED_PROTOCOL, ["resnet20_bnn"], store, data_dir=data_dir, progress=False,
                         backend=backend, inference="deployed")
    finally:
        backend.close()
    assert backend._committed > 0  # the workers computed the batches
    rows_local, rows_remote = store_rows(local), store_rows(remote)
    assert rows_local == rows_remote
    assert all('"inference": "deployed"' in r[4] for r in rows_local["evaluations"])
