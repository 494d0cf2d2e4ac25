"""An evaluation killed with SIGKILL mid-run and rerun gives exactly the numbers of an uninterrupted run."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

N, BATCH = 400, 20


def _eval_cmd(store, out):
    return [
        sys.executable, "-m", "arbibench.cli", "eval", "--model", "resnet20_bnn", "--attacks", "fgsm,pgd",
        "--n-examples", str(N), "--batch-size", str(BATCH), "--store", str(store), "--json", str(out),
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


def test_sigkill_then_rerun_equals_uninterrupted(tmp_path, data_dir):
    env = {**os.environ, "ARBIBENCH_DATA": str(data_dir)}
    killed_store, killed_json = tmp_path / "killed.db", tmp_path / "killed.json"
    proc = subprocess.Popen(_eval_cmd(killed_store, killed_json), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 300
    while _batches_done(killed_store, "pgd") < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    done_at_kill = _batches_done(killed_store, "pgd")
    assert 2 <= done_at_kill < N // BATCH, f"kill landed after {done_at_kill} pgd batches"
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
