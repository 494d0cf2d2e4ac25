"""Crash, concurrency, disk and permission faults: real processes on real data, killed at chosen moments.

The fault matrix kills ``eval`` (before and during a store commit, mid card write), ``protocol run`` (during a
commit, mid examples write), ``sweep`` (after a commit), ``leaderboard build`` (mid site write, mid swap) and
``train --export`` (mid checkpoint write) with SIGKILL (the moment is chosen by a
fault-injection point, :mod:`arbibench.faults`, never by a sleep), then reruns the command: the rerun ends with
the results of an uninterrupted run, no partial file, no sample counted twice. Commands run through
``cli_at_test_size.py``, the real CLI with the protocol and training sizes shrunk.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_at_test_size import tiny_protocol
from typer.testing import CliRunner

from arbibench import benchmark
from arbibench.cli import app
from arbibench.evaluation import store as store_module
from arbibench.evaluation.store import ResultStore, StoreError

HARNESS = Path(__file__).with_name("cli_at_test_size.py")
N, BATCH = 30, 10
EVAL = ["eval", "--model", "resnet20_bnn", "--attacks", "fgsm", "-n", str(N), "--batch-size", str(BATCH),
        "--no-checks"]  # fmt: skip


def run_cli(args: list[str], cwd: Path, data_dir: Path, **env: str) -> subprocess.CompletedProcess:
    """The command in a fresh process (``env``: fault-injection variables); its output kept for the asserts."""
    full_env = {**os.environ, "ARBIBENCH_DATA": str(data_dir), "OMP_NUM_THREADS": "1", "COLUMNS": "200", **env}
    return subprocess.run([sys.executable, str(HARNESS), *args], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def killed_at(point: str, args: list[str], cwd: Path, data_dir: Path) -> None:
    """Run ``args`` with SIGKILL at ``point``; the process must have died there."""
    proc = run_cli(args, cwd, data_dir, ARBIBENCH_FAULT=point)
    assert proc.returncode == -signal.SIGKILL, f"not killed at {point}: rc {proc.returncode}\n{proc.stderr}"


def finished(args: list[str], cwd: Path, data_dir: Path) -> str:
    proc = run_cli(args, cwd, data_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc.stdout


def store_state(db: Path) -> tuple[int, list[tuple]]:
    """(committed batches, every outcome row by model, attack spec and sample), after checking the store is whole.

    Opened read-only, as the killed process left it: SQLite's integrity check passes, and every evaluation holds
    exactly the samples its committed batches claim (no half batch, no sample twice).
    """
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        per_eval = conn.execute(
            "SELECT e.eval_key, (SELECT COALESCE(SUM(n_samples), 0) FROM batches b WHERE b.eval_key = e.eval_key), "
            "(SELECT COUNT(*) FROM outcomes o WHERE o.eval_key = e.eval_key) FROM evaluations e"
        ).fetchall()
        assert all(claimed == held for _, claimed, held in per_eval), per_eval
        batches = conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
        rows = conn.execute(
            "SELECT e.model_name, e.spec, o.sample_index, o.clean_correct, o.adv_correct, o.perturbation, o.queries "
            "FROM outcomes o JOIN evaluations e USING (eval_key) ORDER BY e.model_name, e.spec, o.sample_index"
        ).fetchall()
    return batches, rows


def leftovers(root: Path) -> list[Path]:
    """Temporary files of atomic writes still lying around (a rerun must leave none)."""
    return [p for p in root.rglob("*") if ".tmp" in p.name or ".building-" in p.name or ".old-" in p.name]


def without_timings(obj: object) -> object:
    """A card or result with its wall-clock fields removed: the numbers that must be identical after a crash."""
    if isinstance(obj, dict):
        return {k: without_timings(v) for k, v in obj.items() if k not in ("seconds", "train_time_s", "time_s")}
    if isinstance(obj, list):
        return [without_timings(v) for v in obj]
    return obj


def test_eval_killed_before_and_during_a_commit_and_mid_card_write(tmp_path: Path, data_dir: Path) -> None:
    db, cards, out = tmp_path / "s.db", tmp_path / "mi", tmp_path / "r.json"
    args = [*EVAL, "--store", str(db), "--model-info", str(cards), "--json", str(out)]
    card = cards / "cifar10" / "Linf" / "resnet20_bnn.json"
    # 3 clean + 3 fgsm batches; each rerun resumes and is killed at the next point
    for point, committed in [
        ("store.commit.before@2", 1),  # second batch computed, not written
        ("store.commit.during@2", 2),  # the batch after the resumed one inserted, not committed: rolled back
        ("card.write", 6),  # the rest resumed: every batch in, the card's temporary written, not renamed
    ]:
        killed_at(point, args, tmp_path, data_dir)
        assert store_state(db)[0] == committed, point
        assert not card.exists() and not out.exists(), point
    finished(args, tmp_path, data_dir)
    assert leftovers(tmp_path) == []
    batches, rows = store_state(db)
    assert batches == 2 * N // BATCH

    reference = benchmark("resnet20_bnn", N, attacks=["fgsm"], batch_size=BATCH, store=tmp_path / "ref.db",
                          data_dir=data_dir, progress=False, checks=False, to_disk=True,
                          model_info=tmp_path / "ref_mi")  # fmt: skip
    assert rows == store_state(tmp_path / "ref.db")[1]
    ref_card = tmp_path / "ref_mi" / "cifar10" / "Linf" / "resnet20_bnn.json"
    assert without_timings(json.loads(card.read_text())) == without_timings(json.loads(ref_card.read_text()))
    assert without_timings(json.loads(out.read_text())) == without_timings(json.loads(json.dumps(reference.to_dict())))


@pytest.fixture(scope="module")
def protocol_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict[str, object]:
    """``protocol run`` killed mid-commit and mid-examples-write, then rerun; what each step left behind."""
    root = tmp_path_factory.mktemp("protocol")
    db, cards = root / "p.db", root / "mi"
    args = ["protocol", "run", "cifar10", "--quick", "--models", "resnet20_bnn", "--store", str(db),
            "--model-info", str(cards)]  # fmt: skip
    seen = {}
    killed_at("store.commit.during@3", args, root, data_dir)
    seen["after commit kill"] = (store_state(db)[0], sorted(p.name for p in cards.rglob("*")) if cards.exists() else [])
    killed_at("examples.write", args, root, data_dir)
    seen["after examples kill"] = sorted(p.name for p in cards.rglob("*.json"))
    finished(args, root, data_dir)
    return {"root": root, "db": db, "cards": cards, "seen": seen}


def test_protocol_run_killed_then_rerun_equals_uninterrupted(
    protocol_run: dict, data_dir: Path, tmp_path: Path
) -> None:
    from arbibench.models.zoo import load_model
    from arbibench.protocol.cards import write_protocol_card
    from arbibench.protocol.run import run_protocol

    assert protocol_run["seen"]["after commit kill"] == (2, [])  # two batches in, no card
    assert protocol_run["seen"]["after examples kill"] == []  # the card comes after its examples
    assert leftovers(protocol_run["root"]) == []
    with ResultStore(tmp_path / "ref.db") as db:
        results = run_protocol(tiny_protocol("cifar10", quick=True), ["resnet20_bnn"], db, data_dir=data_dir,
                               progress=False)  # fmt: skip
    ref_card = write_protocol_card(results[0], tmp_path / "mi", load_model("resnet20_bnn"), data_dir=data_dir)
    card = protocol_run["cards"] / "cifar10" / "Linf" / "resnet20_bnn.json"
    assert without_timings(json.loads(card.read_text())) == without_timings(json.loads(ref_card.read_text()))
    assert store_state(protocol_run["db"])[1] == store_state(tmp_path / "ref.db")[1]


def test_leaderboard_build_killed_mid_write_and_mid_swap(protocol_run: dict, data_dir: Path) -> None:
    root = protocol_run["root"]
    site = root / "site"
    args = ["leaderboard", "build", "--model-info", str(protocol_run["cards"]), "--out", str(site), "--format", "svg"]
    killed_at("site.page", args, root, data_dir)
    assert not site.exists()  # half a site stays in its temporary folder
    finished(args, root, data_dir)
    first = (site / "index.html").read_text()
    killed_at("site.swap", args, root, data_dir)  # the old site moved aside, the new one not yet in place
    assert not site.exists()
    finished(args, root, data_dir)
    assert (site / "index.html").read_text() == first
    assert leftovers(root) == []


def test_sweep_killed_after_a_commit_then_rerun(tmp_path: Path, data_dir: Path) -> None:
    from arbibench.data.datasets import load_dataset
    from arbibench.models.zoo import load_model
    from arbibench.protocol.run import sweep_eps

    db = tmp_path / "s.db"
    args = ["sweep", "--model", "resnet20_bnn", "--eps", "4/255,8/255", "--attack", "fgsm", "-n", "20",
            "--store", str(db)]  # fmt: skip
    killed_at("store.commit.after@2", args, tmp_path, data_dir)  # the clean batch, then the first eps's batch
    assert store_state(db)[0] == 2
    table = finished(args, tmp_path, data_dir)
    x, y, idx = load_dataset("cifar10", 20, data_dir, None)
    with ResultStore(tmp_path / "ref.db") as ref:
        rows = sweep_eps(load_model("resnet20_bnn"), "resnet20_bnn", x, y, idx, "fgsm", "Linf",
                         [4 / 255, 8 / 255], ref, progress=False)  # fmt: skip
    assert store_state(db)[1] == store_state(tmp_path / "ref.db")[1]
    for row in rows:
        assert f"{100 * row['acc_star']:.1f}%" in table


def test_train_export_killed_mid_checkpoint_write(tmp_path: Path, data_dir: Path) -> None:
    args = ["train", "--method", "fp", "--epochs", "2", "--out", str(tmp_path / "runs"), "--export",
            "--zoo-dir", str(tmp_path / "zoo")]  # fmt: skip
    run = tmp_path / "runs" / "resnet20_fp"
    killed_at("checkpoint.write@3", args, tmp_path, data_dir)  # epoch 2's weights written to the temporary file
    assert json.loads((run / "state.json").read_text())["epoch"] == 0  # epoch 1 is the last whole checkpoint
    # what the killed run was about to put in place: the uninterrupted run's final weights (no BatchNorm
    # re-estimation in this recipe), which the resumed run must reproduce bit for bit
    uninterrupted = hashlib.sha256((run / "model.safetensors.tmp").read_bytes()).hexdigest()
    assert not (tmp_path / "zoo").exists()
    finished(args, tmp_path, data_dir)
    assert leftovers(tmp_path) == []
    exported = tmp_path / "zoo" / "resnet20_fp.safetensors"
    assert hashlib.sha256(exported.read_bytes()).hexdigest() == uninterrupted
    assert json.loads((tmp_path / "zoo" / "resnet20_fp.json").read_text())["sha256"] == uninterrupted
    assert json.loads((run / "state.json").read_text())["epoch"] == 1


# --- two writers on one store ---


def test_two_writers_on_one_store_both_finish_with_each_batch_once(tmp_path: Path, data_dir: Path) -> None:
    """A pauses with its first batch computed, B (same model and evaluation) writes everything, then A resumes.

    Without the read-back this is the reported ``IntegrityError: UNIQUE constraint failed``; here the ordering is
    forced (A paused at a fault point), so the race is not left to chance.
    """
    db, pause = tmp_path / "same.db", tmp_path / "pause"
    pause.mkdir()
    os.mkfifo(pause / "resume")
    env = {**os.environ, "ARBIBENCH_DATA": str(data_dir), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}

    def start(model: str, out: str, **extra: str) -> subprocess.Popen:
        args = [*EVAL, "--store", str(db), "--json", str(tmp_path / out)]
        args[args.index("resnet20_bnn")] = model
        return subprocess.Popen([sys.executable, str(HARNESS), *args], env={**env, **extra}, cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip

    first = start("resnet20_bnn", "a.json", ARBIBENCH_PAUSE="store.commit.before",
                  ARBIBENCH_PAUSE_DIR=str(pause))  # fmt: skip
    deadline = time.monotonic() + 300
    while not (pause / "paused").exists():  # the event: A has computed its first batch
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0]
        time.sleep(0.05)
    others = [start("resnet20_bnn", "b.json")]
    outputs = [p.communicate(timeout=300)[0] for p in others]
    with open(pause / "resume", "w") as resume:  # A's first batch is already in the store now
        resume.write("go")
    outputs.append(first.communicate(timeout=300)[0])
    for proc, output in zip([*others, first], outputs, strict=True):
        assert proc.returncode == 0, output
        assert "Traceback" not in output and "locked" not in output
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert without_timings(a) == without_timings(b)
    batches, rows = store_state(db)
    assert batches == 2 * N // BATCH  # clean + fgsm, each batch once
    assert len(rows) == 2 * N


def test_a_writer_held_up_past_the_timeout_gets_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    with ResultStore(db) as store:
        key = store.register("m", "model", "fgsm", {})
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.2)
    holder = sqlite3.connect(db)
    with ResultStore(db) as store:
        holder.execute("BEGIN IMMEDIATE")  # another process in the middle of a long write
        try:
            with pytest.raises(StoreError, match="held its write lock") as info:
                store.commit_batch(key, 0, [0], [True], [True], [0.0])
            assert "rerun resumes" in str(info.value)
        finally:
            holder.rollback()
            holder.close()
    with ResultStore(db) as store:
        assert store.commit_batch(key, 0, [0], [True], [True], [0.0])


# --- disk and permission faults ---


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder this process cannot write: mode 0o555, or for root (who ignores modes) a read-only tmpfs mount."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"running as root and cannot mount a read-only tmpfs: {mounted.stderr.decode().strip()}")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def test_store_in_a_read_only_folder_is_one_error(read_only_folder: Path) -> None:
    with pytest.raises(StoreError, match="not writable") as info:
        ResultStore(read_only_folder / "s.db")
    assert "--store" in str(info.value)


def test_card_folder_not_writable_then_rerun_resumes(
    read_only_folder: Path, tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    monkeypatch.setenv("COLUMNS", "200")
    import arbibench.evaluation.cli as eval_cli

    db = tmp_path / "s.db"
    args = [*EVAL, "--store", str(db), "--model-info"]
    result = CliRunner().invoke(app, [*args, str(read_only_folder / "mi")])
    assert result.exit_code == 2 and "--model-info" in result.output and "not writable" in result.output
    assert not db.exists()  # refused before any work
    # a folder that turns read-only while the evaluation runs: the card fails, the evaluation is kept
    with monkeypatch.context() as m:
        m.setattr(eval_cli, "check_writable", lambda path, folder=False: path)
        result = CliRunner().invoke(app, [*args, str(read_only_folder / "mi")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().startswith("error:") or "\nerror:" in result.output, result.output
    done = store_state(db)
    assert done[0] == 2 * N // BATCH  # the evaluation itself is safe in the store
    result = CliRunner().invoke(app, [*args, str(tmp_path / "mi")])
    assert result.exit_code == 0, result.output
    assert store_state(db) == done  # resumed: nothing recomputed, nothing added
    assert (tmp_path / "mi" / "cifar10" / "Linf" / "resnet20_bnn.json").is_file()


def test_disk_full_during_a_commit_keeps_the_store_valid_and_resumable(tmp_path: Path, data_dir: Path) -> None:
    """SQLite's own disk-full error (SQLITE_FULL), raised by capping the file at its current number of pages."""
    kwargs = {"attacks": ["fgsm"], "batch_size": BATCH, "data_dir": data_dir, "progress": False, "checks": False}
    with ResultStore(tmp_path / "s.db") as db:
        pages = db.conn.execute("PRAGMA page_count").fetchone()[0]
        db.conn.execute(f"PRAGMA max_page_count = {pages + 2}")  # room for the first batches only
        with pytest.raises(StoreError, match="disk is full") as info:
            benchmark("resnet20_bnn", 40, store=db, **kwargs)
        assert "rerun resumes" in str(info.value)
    partial, _ = store_state(tmp_path / "s.db")
    assert 0 < partial < 2 * 40 // BATCH
    resumed = benchmark("resnet20_bnn", 40, store=tmp_path / "s.db", **kwargs)
    reference = benchmark("resnet20_bnn", 40, store=tmp_path / "ref.db", **kwargs)
    assert store_state(tmp_path / "s.db")[1] == store_state(tmp_path / "ref.db")[1]
    assert resumed.report.attacks[0].acc_star == reference.report.attacks[0].acc_star


def test_disk_full_while_writing_a_card_leaves_no_partial_file(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arbibench.files import atomic_write_json

    card = tmp_path / "mi" / "card.json"
    atomic_write_json({"acc": 1}, card)

    def full(fd: int) -> None:  # the disk fills while the written temporary is flushed (delayed allocation)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="cannot write .*card.json: No space left on device") as info:
        atomic_write_json({"acc": 2}, card)
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert json.loads(card.read_text()) == {"acc": 1}  # the old card, whole
    assert leftovers(tmp_path) == []
    shutil.rmtree(tmp_path / "mi")
