"""Job definitions (``queue.json``) and the queue's record of what has finished (``queue_state.json``).

Both files are plain JSON in the repository, so a later session sees the plan and the progress without running
anything, and can reorder or add jobs by editing the plan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arbibench.files import atomic_write_json


@dataclass(frozen=True)
class Job:
    """One long job: commands run in order; ``watch`` (a training's run folder) and ``snapshot`` (a working SQLite
    store and its copy) are what the queue saves as the job's resume copies (:mod:`lab.queue.resume_point`,
    :mod:`lab.queue.carry`) while it runs; ``commit`` is committed to the branch when the job ends."""

    name: str
    steps: tuple[tuple[str, ...], ...]
    watch: str | None = None
    snapshot: tuple[str, str] | None = None  # (working store, its copy in the resume point)
    commit: tuple[str, ...] = ()
    budget_epochs: int | None = None  # for the status projection of training jobs

    @property
    def stores(self) -> tuple[str, ...]:
        """Every result store the job writes or reads: its snapshot's working store and each ``--store`` of its steps
        (a findings report reads stores that other jobs carried, and must find their rows in a fresh clone too)."""
        found = [self.snapshot[0]] if self.snapshot else []
        for step in self.steps:
            for i, arg in enumerate(step[:-1]):
                if arg == "--store":
                    found.append(step[i + 1])
            found += [arg.removeprefix("--store=") for arg in step if arg.startswith("--store=")]
        return tuple(dict.fromkeys(found))

    @property
    def trains(self) -> tuple[str, ...]:
        """The zoo models its ``arbibench train`` steps write (``--models a,b``, else ``--arch`` and ``--method``,
        ``_at`` for ``--recipe at``), read off the plan's text."""
        names: list[str] = []
        for step in self.steps:
            if list(step[:2]) != ["arbibench", "train"]:
                continue
            opts = dict(zip(step[2:], step[3:], strict=False))  # each option and the word after it
            if "--models" in opts:
                names += opts["--models"].split(",")
            else:
                name = f"{opts.get('--arch', 'resnet20')}_{opts.get('--method', 'fp')}"
                names.append(name + ("_at" if opts.get("--recipe") == "at" else ""))
        return tuple(dict.fromkeys(names))

    @property
    def measures(self) -> tuple[str, ...]:
        """The models its ``arbibench protocol run`` steps name with ``--models``, read off the plan's text."""
        names: list[str] = []
        for step in self.steps:
            if is_protocol_run(step) and "--models" in step[:-1]:
                names += step[step.index("--models") + 1].split(",")
        return tuple(dict.fromkeys(names))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Job:
        unknown = set(d) - {"name", "steps", "watch", "snapshot", "commit", "budget_epochs"}
        if unknown:
            raise ValueError(f"job {d.get('name')!r} has unknown fields {sorted(unknown)}")
        if not d.get("name") or not d.get("steps"):
            raise ValueError(f"every job needs a name and at least one step, got {d}")
        # a string would be run one character at a time: steps are lists of commands, each a list of arguments
        if not isinstance(d["steps"], list) or not all(isinstance(s, list) for s in d["steps"]):
            raise ValueError(f"job {d['name']!r}: steps must be a list of commands, each a list of arguments "
                             f"(e.g. [[\"arbibench\", \"zoo\", \"list\"]]), got {d['steps']!r}")
        steps = tuple(tuple(str(a) for a in s) for s in d["steps"])
        if any(not s for s in steps):
            raise ValueError(f"job {d['name']!r} has an empty step")
        snap = d.get("snapshot")
        return cls(
            name=str(d["name"]),
            steps=steps,
            watch=d.get("watch"),
            snapshot=(str(snap[0]), str(snap[1])) if snap else None,
            commit=tuple(d.get("commit", ())),
            budget_epochs=d.get("budget_epochs"),
        )


def load_plan(path: str | Path) -> list[Job]:
    """The queue's jobs, in order; a duplicate name is an error (the state file is keyed by name)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no queue plan at {p}; write one (see docs/long-jobs.md) or pass --plan")
    try:
        raw = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p} is not valid JSON: {e}") from e
    if not isinstance(raw, dict) or not isinstance(raw.get("jobs", []), list):
        raise ValueError(f"{p}: a queue plan is a JSON object {{\"jobs\": [...]}}, got {json.dumps(raw)[:60]}")
    if not all(isinstance(d, dict) for d in raw.get("jobs", [])):
        raise ValueError(f"{p}: every job is a JSON object {{\"name\": ..., \"steps\": [...]}}")
    jobs = [Job.from_dict(d) for d in raw.get("jobs", [])]
    names = [j.name for j in jobs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"{p}: job names must be unique; repeated: {sorted(dup)}")
    return jobs


def load_checks(path: str | Path) -> tuple[str, ...]:
    """The plan's ``checks``: the test files that read what jobs commit (cards, boards, README), run before each job
    that commits anything; none when the plan names none."""
    p = Path(path)
    raw = json.loads(p.read_text()) if p.is_file() else {}
    checks = raw.get("checks", []) if isinstance(raw, dict) else []
    if not isinstance(checks, list) or not all(isinstance(c, str) and c for c in checks):
        raise ValueError(f"{p}: \"checks\" is a list of test paths, e.g. [\"tests/test_card_files.py\"]")
    return tuple(checks)


@dataclass
class QueueState:
    """Finished steps per job (by index), the job's wall time, when each job ended, and for an unfinished job the
    work tree its finished steps wrote their (not yet committed) outputs to."""

    path: Path
    done_steps: dict[str, int] = field(default_factory=dict)
    finished: dict[str, str] = field(default_factory=dict)
    elapsed_s: dict[str, float] = field(default_factory=dict)
    work_tree: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> QueueState:
        p = Path(path)
        if not p.is_file():
            return cls(p)
        try:
            raw = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{p} is not valid JSON ({e}): restore it from git (git checkout -- {p})") from e
        fields = ("done_steps", "finished", "elapsed_s", "work_tree")
        if not isinstance(raw, dict) or not all(isinstance(raw.get(f, {}), dict) for f in fields):
            raise ValueError(f"{p}: not the queue's record (a JSON object of {', '.join(fields)}); restore it from "
                             f"git (git checkout -- {p})")
        return cls(p, dict(raw.get("done_steps", {})), dict(raw.get("finished", {})), dict(raw.get("elapsed_s", {})),
                   dict(raw.get("work_tree", {})))

    def save(self) -> None:
        atomic_write_json({"done_steps": self.done_steps, "finished": self.finished, "elapsed_s": self.elapsed_s,
                           "work_tree": self.work_tree}, self.path)


def command_line(step: tuple[str, ...], python: str) -> list[str]:
    """The argv that runs ``step`` here: ``arbibench`` as the arbibench of ``python`` (whatever PATH says), and
    ``python``/``python3`` (a benchmark script) as ``python`` itself."""
    if step[0] == "arbibench":
        return [python, "-m", "arbibench.cli", *step[1:]]
    if step[0] in ("python", "python3"):
        return [python, *step[1:]]
    return list(step)


def is_protocol_run(step: tuple[str, ...]) -> bool:
    """Whether ``step`` is an ``arbibench protocol run``: its progress can be asked of ``arbibench protocol progress``
    with the same arguments."""
    return list(step[:3]) == ["arbibench", "protocol", "run"]
