"""A long job's resume point in git, outside the branch: one commit on its own ref, replaced at every save.

A training's checkpoint (weights, optimiser state: about 4 MB for ResNet-20) changes every epoch and a full-protocol
store grows to tens of MB; committing them to the branch as they change would add gigabytes of history that every
clone downloads and nobody reads. The queue saves them instead, with its branch copies (at most hourly, and on
request), as the only commit of ``refs/arbibench/queue/<job>`` (the ref's name predates the queue's move out of the
package; runners old and new read the same refs): the repository keeps the latest resume point (a git object, so it
survives the session like any commit), old ones become unreachable and are pruned, and a clone of the branch does not
fetch it. The next runner on this repository restores the run folder from there before it resumes the job. The
job's results (the exported checkpoint, its cards, LEADERBOARD.md) go to the branch when the job ends.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

REF_PREFIX = "refs/arbibench/queue/"


def job_ref(job_name: str) -> str:
    """The ref of a job's resume point: its name with every run of other characters turned into '-'."""
    slug = re.sub(r"[^A-Za-z0-9_.]+", "-", job_name).strip("-.") or "job"
    return REF_PREFIX + slug


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> bytes:
    out = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:2])} failed: {out.stderr.decode(errors='replace').strip()}")
    return out.stdout


def save(repo: Path, ref: str, paths: list[str], message: str) -> bool:
    """Make ``paths`` (files or folders, ignored files included) the only commit of ``ref``; the branch, its index
    and the work tree are not touched. False when none of the paths exists."""
    existing = [p for p in paths if (repo / p).exists()]
    if not existing:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}  # a private index: the branch's stays
        _git(repo, "add", "-f", "--", *existing, env=env)
        tree = _git(repo, "write-tree", env=env).decode().strip()
    commit = _git(repo, "commit-tree", tree, "-m", message).decode().strip()
    _git(repo, "update-ref", ref, commit)
    return True


def prune_replaced(repo: Path) -> None:
    """Drop the objects of replaced resume points from this repository's disk (unreachable for over an hour, so an
    object another git process is writing right now is never touched); git itself would keep them two weeks."""
    subprocess.run(["git", "prune", "--expire=1.hour.ago"], cwd=repo, capture_output=True)


def exists(repo: Path, ref: str) -> bool:
    return subprocess.run(["git", "rev-parse", "--verify", "-q", ref], cwd=repo, capture_output=True).returncode == 0


def _epoch(state_json: bytes | None) -> int:
    """The last finished epoch a training's state.json records; -1 without one."""
    if state_json is None:
        return -1
    try:
        return int(json.loads(state_json)["epoch"])
    except (ValueError, KeyError, TypeError):
        return -1


def restore(repo: Path, ref: str, watch: str | None, files: list[str]) -> list[str]:
    """Bring back from ``ref`` what the work tree lacks: the run folder ``watch`` when the ref's state.json is at a
    later epoch than the local one (or there is none here), and each of ``files`` missing here. Returns what was
    restored; nothing when the ref does not exist."""
    if not exists(repo, ref):
        return []
    with tarfile.open(fileobj=io.BytesIO(_git(repo, "archive", "--format=tar", ref))) as tar:
        return restore_from_tar(repo, tar, watch, files)


def restore_from_tar(repo: Path, tar: tarfile.TarFile, watch: str | None, files: list[str]) -> list[str]:
    """:func:`restore` from an open archive whose member names are paths in the repository (a resume point, or the
    branch's copy of a run folder in :mod:`lab.queue.carry`)."""
    members = {m.name: m for m in tar.getmembers() if m.isfile()}
    wanted: list[str] = []
    if watch is not None:
        local = repo / watch / "state.json"
        saved_state = members.get(f"{watch}/state.json")
        saved_epoch = _epoch(tar.extractfile(saved_state).read()) if saved_state else -1  # type: ignore[union-attr]
        if saved_epoch > _epoch(local.read_bytes() if local.is_file() else None):
            wanted += [n for n in members if n.startswith(f"{watch}/")]
    wanted += [f for f in files if f in members and not (repo / f).exists()]
    wanted.sort(key=lambda n: n.endswith("/state.json"))  # last: a cut-off restore never claims a later epoch
    for name in wanted:
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(tar.extractfile(members[name]).read())  # type: ignore[union-attr]
        os.replace(tmp, target)
    return wanted
