"""What a queue job's protocol runs have stored, asked of arbibench itself: ``arbibench protocol progress --json``.

A step ``arbibench protocol run ARGS`` is asked about as ``arbibench protocol progress ARGS --json``: progress takes
every option of ``protocol run`` with the same defaults, so the queue never reads a run's options or copies their
defaults, and a renamed option fails here as loudly as in the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.queue.jobs import Job, command_line, is_protocol_run


@dataclass(frozen=True)
class RunProgress:
    """One protocol run's answer: its store as the run names it, whether it exists, and each model's counts (the
    JSON of ``protocol progress --json``); ``error`` is the command's error line when it refused."""

    store: str | None
    store_found: bool
    models: tuple[dict[str, Any], ...]
    error: str | None = None


def ask(args: list[str], repo: Path, *, threads: int = 1) -> RunProgress:
    """``arbibench protocol progress ARGS --json`` in ``repo``, on ``threads`` threads (it runs beside the queue's
    job, which holds the cores: planning checks each model on a few images)."""
    argv = command_line(("arbibench", "protocol", "progress", *args, "--json"), sys.executable)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    done = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True)
    if done.returncode != 0:  # arbibench's one error line (wrapped by the console), else the end of what it said
        said = done.stdout + done.stderr
        error = said[said.index("error:") + 6:] if "error:" in said else said[-300:]
        return RunProgress(None, False, (), error=" ".join(error.split()) or f"exit status {done.returncode}")
    answer = json.loads(done.stdout)
    return RunProgress(str(answer["store"]), bool(answer["store_found"]), tuple(answer["models"]))


def run_progress(step: tuple[str, ...], repo: Path, snapshot: tuple[str, str] | None = None) -> RunProgress:
    """The progress of the protocol run ``step``; where the run's store is the job's working store and it is missing
    here (a fresh checkout), its snapshot copy is read instead."""
    args = list(step[3:])
    found = ask(args, repo)
    if (snapshot and not found.store_found and found.store == snapshot[0] and (repo / snapshot[1]).is_file()):
        found = ask([*args, "--store", snapshot[1]], repo)  # the last --store counts
    return found


def protocol_runs(job: Job) -> list[tuple[str, ...]]:
    """The job's ``arbibench protocol run`` steps."""
    return [s for s in job.steps if is_protocol_run(s)]


def job_models(job: Job, repo: Path) -> tuple[tuple[str, ...], str | None]:
    """(the models whose rows the job's runs add to its snapshotted store, an error line or None); no models (and
    so every model's rows) where arbibench could not say."""
    if job.snapshot is None:
        return (), None
    names: set[str] = set()
    for step in protocol_runs(job):
        found = ask(list(step[3:]), repo)
        if found.error is not None:
            return (), found.error
        if found.store == job.snapshot[0]:
            names.update(m["model"] for m in found.models)
    return tuple(sorted(names)), None
