"""Several zoo models trained side by side on one device: one ``arbibench train`` process each.

A ResNet-20 step leaves most of a large GPU idle (its kernels are small and the host launches them one by one), so
several runs on the same GPU finish sooner together than one after the other. Separate processes keep each run
exactly what it is alone (its own seed, checkpoints, resume and time limit); the parent only starts them, shows each
one's epochs from its checkpoint record, and reports which finished. On a CPU the cores are split between them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

EXIT_TIME_LIMIT = 3  # exit status of ``arbibench train`` stopped at its time limit: not failed, run it again


@dataclass(frozen=True)
class Member:
    """One run of a side-by-side group: the zoo name, its backbone and method, and where it writes."""

    name: str
    arch: str
    method: str
    run_dir: Path
    log: Path


def parse_members(names: str, out: Path, known_archs: set[str], known_methods: set[str]) -> list[Member]:
    """``resnet20_fp,resnet20_bnn`` as members; one error that names the first bad name."""
    members: list[Member] = []
    for name in (n.strip() for n in names.split(",")):
        if not name:
            continue
        arch, _, method = name.partition("_")
        if arch not in known_archs or method not in known_methods:
            raise ValueError(
                f"--models: {name!r} is not <architecture>_<method> (architectures: {', '.join(sorted(known_archs))}; "
                f"methods: {', '.join(sorted(known_methods))})"
            )
        if any(m.name == name for m in members):
            raise ValueError(f"--models names {name!r} twice; each model trains once")
        members.append(Member(name, arch, method, out / name, out / f"{name}.log"))
    if not members:
        raise ValueError(f"--models {names!r} names no model; give zoo names, e.g. resnet20_fp,resnet20_bnn")
    return members


# The command line itself, for a parent that is not a program file (``python -c``, a notebook).
COMMAND_LINE = "from arbibench.cli import app; app(prog_name='arbibench')"


def child_command(member: Member, shared: list[str]) -> list[str]:
    """The member's own ``arbibench train`` call: this very program (the installed command, or a wrapper that runs
    it) with the group's options; the command line itself when the parent is no program file."""
    me = Path(sys.argv[0])
    program = [str(me)] if me.is_file() else ["-c", COMMAND_LINE]
    return [sys.executable, *program, "train", "--arch", member.arch, "--method", member.method, *shared]


def _epochs(member: Member) -> int:
    """Epochs the member has finished, from its checkpoint record (0 before the first)."""
    try:
        return int(json.loads((member.run_dir / "state.json").read_text())["epoch"]) + 1
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def run_side_by_side(
    members: list[Member], shared: list[str], device: str, report: Callable[[str], object] | None = None
) -> dict[str, int]:
    """Start every member, wait for all, return each one's exit status (``EXIT_TIME_LIMIT``: stopped at the time
    limit, resumable). ``report`` gets a line whenever a member's finished epochs change."""
    env = dict(os.environ)
    if device == "cpu":  # the cores split between the runs, never oversubscribed
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        env["OMP_NUM_THREADS"] = str(max(1, cores // len(members)))  # the cores this process may use, not the host's
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for m in members:
        m.log.parent.mkdir(parents=True, exist_ok=True)
        with open(m.log, "ab") as log:
            procs[m.name] = subprocess.Popen(child_command(m, shared), stdout=log, stderr=subprocess.STDOUT, env=env)
    seen = {m.name: -1 for m in members}
    try:
        while any(p.poll() is None for p in procs.values()):
            for m in members:
                done = _epochs(m)
                if done != seen[m.name] and report is not None:
                    report(f"{m.name}: {done} epoch(s) done")
                seen[m.name] = done
            time.sleep(1.0)
    except KeyboardInterrupt:
        for p in procs.values():
            p.terminate()  # each run keeps its last finished epoch; the same command resumes them
        for p in procs.values():
            p.wait()
        raise
    return {name: p.returncode for name, p in procs.items()}

