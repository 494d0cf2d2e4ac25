"""An evaluation killed with SIGKILL mid-run and rerun gives exactly the numbers of an uninterrupted run.

The run is stopped at an observable event, not after a sleep: it pauses at the fault point right after committing
its second PGD batch (``ARBIBENCH_PAUSE``, :mod:`arbibench.faults`), the test's open of the pause FIFO returns
exactly when it got there, the store shows that batch's row, and only then does SIGKILL land.
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading

N, BATCH = 100, 10  # 10 clean, 10 FGSM and 10 PGD batches: the kill lands mid-attack with batches on both sides
KILL_AFTER = 2  # PGD batches committed when the kill lands


def _eval_cmd(store, out):
    return [
        sys.executable, "-m", "arbibench.cli", "eval", "--model", "resnet20_bnn", "--attacks", "fgsm,pgd",
        "--n-examples", str(N), "--batch-size", str(BATCH), "--store", str(store), "--json", str(out), "--no-checks",
    ]  # fmt: skip


def _batches_done(store, attack):
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1) as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM batches b JOIN evaluations e USING (eval_key) WHERE e.attack = ?", (attack,)
            ).fetchone()
            return row[0]
    except sqlite3.Error:
        return 0


def _numbers(path):
    d = json.loads(path.read_text())
    for m in d["attacks"].values():
        m.pop("seconds")
    return d


def _wait_for_pause(proc: subprocess.Popen, fifo, timeout: float = 300) -> None:
    """Return once ``proc`` sits at its pause point: opening the FIFO to write blocks until it opens it to read."""
    opened: list[int] = []
    waiter = threading.Thread(target=lambda: opened.append(os.open(fifo, os.O_WRONLY)), daemon=True)
    waiter.start()
    waiter.join(timeout)
    if not opened:  # never got there: unblock the waiter, stop the run, say why
        proc.kill()
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        raise AssertionError(f"the evaluation never reached its pause point (exit status {proc.wait()})")
    os.close(opened[0])  # the run now blocks reading its FIFO until it is killed


def test_sigkill_then_rerun_equals_uninterrupted(tmp_path, data_dir):
    pause = tmp_path / "pause"
    pause.mkdir()
    os.mkfifo(pause / "resume")
    # clean pass and fgsm take N // BATCH commits each; pause right after the KILL_AFTER-th pgd commit
    point = f"store.commit.after@{2 * (N // BATCH) + KILL_AFTER}"
    env = {**os.environ, "ARBIBENCH_DATA": str(data_dir), "OMP_NUM_THREADS": "1"}
    killed_store, killed_json = tmp_path / "killed.db", tmp_path / "killed.json"
    proc = subprocess.Popen(_eval_cmd(killed_store, killed_json), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**env, "ARBIBENCH_PAUSE": point, "ARBIBENCH_PAUSE_DIR": str(pause)})  # fmt: skip
    _wait_for_pause(proc, pause / "resume")
    assert _batches_done(killed_store, "pgd") == KILL_AFTER  # the event: its rows are in the store
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not killed_json.exists()

    subprocess.run(_eval_cmd(killed_store, killed_json), env=env, check=True, capture_output=True)
    clean_json = tmp_path / "clean.json"
    subprocess.run(_eval_cmd(tmp_path / "clean.db", clean_json), env=env, check=True, capture_output=True)

    resumed, uninterrupted = _numbers(killed_json), _numbers(clean_json)
    assert resumed == uninterrupted
    assert resumed["n_examples"] == N
    assert _batches_done(killed_store, "pgd") == N // BATCH  # resumed, not redone or double-counted
    # and a third run of the same evaluation recomputes nothing
    subprocess.run(_eval_cmd(killed_store, killed_json), env=env, check=True, capture_output=True)
    assert _numbers(killed_json) == uninterrupted
    assert _batches_done(killed_store, "pgd") == N // BATCH
