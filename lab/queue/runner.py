"""Run the queue: one job at a time, each step a child process on the queue's threads; pause and resume by PID.

The runner writes its PID to ``<run_dir>/pid``. ``pause`` records a holder file and sends SIGSTOP to the runner and
every descendant (a training, a protocol run); ``resume`` removes the holder and sends SIGCONT once no holder is
left, so two test runs that overlap cannot wake the queue under each other.

Commits: one when a job ends, with everything it made (a retrained checkpoint with its pin, the cards measured on
it, the boards made from them) and the queue's record, so the branch never holds a checkpoint without its pin and
cards. While a job runs, its resume copies (the resume point on its own ref and the branch copies of
:mod:`lab.queue.carry`, with the queue's record) are taken at most every ``carry_every_s`` (an hour by default: what
a lost checkout may cost), and at once when a session about to end asks for them (``request_carry``).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from arbibench.clock import active_clock
from arbibench.files import atomic_write_text, pid_alive
from lab.queue import carry, progress, resume_point
from lab.queue.jobs import Job, QueueState, command_line, load_checks, load_plan

PRUNE_EVERY_S = 3600.0  # replaced resume points (about 4 MB each) leave the disk this often
POLL_S = 5.0
CARRY_REQUEST = "carry_request"  # in the run folder: a session asks for a branch copy now (request_carry)
CARRY_RESULT = "carry_result.json"  # the runner's answer: the commit and the paths it copied


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc); empty where /proc has no children files."""
    out: list[int] = []
    stack = [pid]
    while stack:
        p = stack.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out.extend(kids)
            stack.extend(kids)
    return out



def running_pid(run_dir: Path) -> int | None:
    """The PID of a live runner of this queue, or None."""
    pid_file = run_dir / "pid"
    if not pid_file.is_file():
        return None
    try:
        pid = int(pid_file.read_text().split()[0])
    except (ValueError, IndexError):
        return None
    return pid if pid_alive(pid) else None


def _signal_tree(pid: int, sig: signal.Signals) -> int:
    pids = [pid, *_descendants(pid)]
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
    return len(pids)


def pause(run_dir: Path, holder: str) -> str:
    """Stop the queue's processes until ``holder`` (and every other holder) resumes."""
    _check_holder(holder)
    holders = run_dir / "holders"
    holders.mkdir(parents=True, exist_ok=True)
    (holders / holder).write_text(f"{os.getpid()} {time.time():.0f}\n")
    pid = running_pid(run_dir)
    if pid is None:
        return f"no queue is running; holder {holder!r} recorded, so a queue started now waits for its resume"
    n = _signal_tree(pid, signal.SIGSTOP)
    return f"paused the queue (PID {pid}, {n} processes) for {holder!r}"


def resume(run_dir: Path, holder: str) -> str:
    """Drop ``holder``; continue the queue's processes when no holder is left."""
    _check_holder(holder)
    (run_dir / "holders" / holder).unlink(missing_ok=True)
    left = sorted(p.name for p in (run_dir / "holders").glob("*")) if (run_dir / "holders").is_dir() else []
    pid = running_pid(run_dir)
    if left:
        return f"still paused for {', '.join(left)}"
    if pid is None:
        return "no queue is running"
    n = _signal_tree(pid, signal.SIGCONT)
    return f"resumed the queue (PID {pid}, {n} processes)"


@dataclass(frozen=True)
class CarryAnswer:
    """The runner's answer to :func:`request_carry`: ``commit`` is None when nothing changed since the last copy."""

    job: str
    paths: list[str]
    commit: str | None


def request_carry(run_dir: Path, timeout_s: float = 120.0) -> CarryAnswer:
    """Ask the running queue to commit its job's resume copies now (:mod:`lab.queue.carry`) and wait for its
    answer."""
    pid = running_pid(run_dir)
    if pid is None:
        raise ValueError("no queue is running: there is no progress to copy (start one with `make queue`)")
    held = _holders(run_dir)
    if held:
        raise ValueError(f"the queue is paused for {', '.join(held)}; a stopped runner cannot copy: resume it first "
                         "(`python -m lab queue resume --holder NAME`)")
    request, result = run_dir / CARRY_REQUEST, run_dir / CARRY_RESULT
    result.unlink(missing_ok=True)
    atomic_write_text(f"{os.getpid()} {time.time():.0f}\n", request)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result.is_file() and not request.exists():
            return CarryAnswer(**json.loads(result.read_text()))
        time.sleep(min(POLL_S, 1.0))
    request.unlink(missing_ok=True)
    raise TimeoutError(f"the queue (PID {pid}) did not copy its progress within {timeout_s:.0f} s: it answers between "
                       "its job's steps' polls, and not while it waits between jobs; try again with a longer --timeout")


def _check_holder(holder: str) -> None:
    if not holder or "/" in holder or holder.startswith("."):
        raise ValueError(f"a holder is a plain name such as 'tests', got {holder!r}")


def _holders(run_dir: Path) -> list[str]:
    d = run_dir / "holders"
    return sorted(p.name for p in d.glob("*")) if d.is_dir() else []


def snapshot_store(working: Path, tracked: Path) -> bool:
    """Copy a live SQLite store to ``tracked`` with SQLite's backup API (a consistent copy mid-run); False when the
    working store does not exist yet."""
    if not working.is_file():
        return False
    tracked.parent.mkdir(parents=True, exist_ok=True)
    tmp = tracked.with_name(tracked.name + ".tmp")
    tmp.unlink(missing_ok=True)
    src, dst = sqlite3.connect(working), sqlite3.connect(tmp)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()
    os.replace(tmp, tracked)
    return True


def restore_store(working: Path, tracked: Path) -> bool:
    """Start from the tracked snapshot when the working store is missing (a fresh checkout resumes there)."""
    if working.is_file() or not tracked.is_file():
        return False
    working.parent.mkdir(parents=True, exist_ok=True)
    snapshot_store(tracked, working)
    return True


def _tracked(repo: Path, path: str) -> bool:
    return subprocess.run(["git", "ls-files", "--error-unmatch", "--", path], cwd=repo,
                          capture_output=True).returncode == 0


def git_commit(paths: list[str], message: str, repo: Path) -> bool:
    """Commit ``paths`` only (other staged or unstaged work stays as it is): their changes, and the deletion of a
    tracked one that is gone from the work tree. False when nothing changed or git is not available. Retries while
    another git process holds the index lock."""
    if not (repo / ".git").exists():
        return False
    targets = [p for p in paths if (repo / p).exists() or _tracked(repo, p)]
    if not targets:
        return False
    for _ in range(30):
        add = subprocess.run(["git", "add", "-A", "--", *targets], cwd=repo, capture_output=True, text=True)
        if add.returncode == 0:
            diff = subprocess.run(["git", "diff", "--cached", "--quiet", "--", *targets], cwd=repo)
            if diff.returncode == 0:
                return False
            done = subprocess.run(["git", "commit", "-q", "-m", message, "--", *targets], cwd=repo,
                                  capture_output=True, text=True)
            if done.returncode == 0:
                return True
            err = done.stderr
        else:
            err = add.stderr
        if "index.lock" not in err:
            print(f"queue: git commit failed: {err.strip()}", file=sys.stderr)
            return False
        time.sleep(2)
    return False


def tests_naming_changed_weights(repo: Path, paths: Sequence[str], tests: str = "tests") -> tuple[str, ...]:
    """The test files that name (as a quoted string) a model whose ``.safetensors`` under ``paths`` differs from
    HEAD. A test can hold a property of the shipped model (a share of images censored at an eps* floor, an accuracy
    floor): new weights may break it, and without this the first to notice would be CI on the branch."""
    if not (repo / ".git").exists() or not paths or not (repo / tests).is_dir():
        return ()
    changed = subprocess.run(["git", "diff", "--name-only", "HEAD", "--", *paths], cwd=repo, capture_output=True,
                             text=True).stdout.split()
    changed += subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "--", *paths], cwd=repo,
                              capture_output=True, text=True).stdout.split()
    names = {Path(p).stem for p in changed if p.endswith(".safetensors")}
    if not names:
        return ()
    return tuple(str(f.relative_to(repo)) for f in sorted((repo / tests).glob("test_*.py"))
                 if any(f'"{n}"' in f.read_text(encoding="utf-8") for n in names))


def epoch_note(state_json: Path) -> str:
    """A training's last epoch for a commit message (", after epoch 12 of 60, validation accuracy 85.10%"); empty
    without a readable state.json."""
    try:
        st = json.loads(state_json.read_text())
    except (OSError, json.JSONDecodeError):
        return ""
    if not isinstance(st, dict) or not st.get("history"):
        return ""
    last = st["history"][-1]
    total = st.get("recipe", {}).get("epochs", "?")
    acc = last.get("val_acc")
    acc_text = f", validation accuracy {100 * acc:.2f}%" if isinstance(acc, float) else ""
    unit = st.get("unit", "epoch")  # a resumable benchmark counts its own steps ("component")
    return f", after {unit} {last.get('epoch', len(st['history']))} of {total}{acc_text}"


class Runner:
    """Runs ``jobs`` in order from ``repo``, recording progress in ``state`` and the runner's files in ``run_dir``."""

    def __init__(self, jobs: list[Job], state: QueueState, repo: Path, run_dir: Path, *, threads: int = 2,
                 commit: bool = True, log: Callable[[str], object] = print, plan: Path | None = None,
                 carry_every_s: float = carry.CARRY_EVERY_S) -> None:
        self.jobs, self.state, self.repo, self.run_dir, self.plan = jobs, state, repo, run_dir, plan
        self.checks: tuple[str, ...] = ()  # the plan's, read with its jobs at each job boundary
        self.threads, self.commit, self.log, self.carry_every_s = threads, commit, log, carry_every_s
        self._last_prune = 0.0
        self._last_carry = 0.0
        self._models: dict[str, tuple[str, ...]] = {}  # job -> the models of its snapshotted store's rows

    def run(self, *, only: str | None = None, max_jobs: int | None = None) -> int:
        """Run every unfinished job (or only the one named); returns the number of jobs finished now."""
        other = running_pid(self.run_dir)
        if other is not None and other != os.getpid():
            raise RuntimeError(f"a queue runner is already running (PID {other}); one job at a time on this machine")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "pid").write_text(f"{os.getpid()}\n")
        finished = 0
        try:
            while (job := self._next_job(only)) is not None:
                self._run_job(job)
                finished += 1
                if max_jobs is not None and finished >= max_jobs:
                    break
        finally:
            (self.run_dir / "pid").unlink(missing_ok=True)
        return finished

    def _next_job(self, only: str | None) -> Job | None:
        """The first unfinished job, the plan read again first when the runner has one: a job added to or moved in
        ``queue.json`` while the queue runs takes its place at the next job boundary."""
        if self.plan is not None:
            self.jobs, self.checks = load_plan(self.plan), load_checks(self.plan)
        return next((j for j in self.jobs if j.name not in self.state.finished and only in (None, j.name)), None)

    def _wait_for_holders(self) -> None:
        shown = False
        while held := _holders(self.run_dir):
            if not shown:
                self.log(f"queue: waiting while paused for {', '.join(held)}")
                shown = True
            time.sleep(POLL_S)

    def _work_tree_id(self) -> str:
        """This work tree's id, kept in the (untracked) runner folder: a fresh clone or a rebuilt checkout gets a new
        one, which tells the runner that the outputs of an unfinished job's finished steps are not here."""
        path = self.run_dir / "work_tree"
        if not path.is_file():
            atomic_write_text(uuid.uuid4().hex + "\n", path)
        return path.read_text().strip()

    def _run_job(self, job: Job) -> None:
        start = self.state.done_steps.get(job.name, 0)
        here = self._work_tree_id()
        if start and self.state.work_tree.get(job.name, here) != here:
            # A job commits its outputs (an exported checkpoint, cards) when it ends; its finished steps wrote them
            # to another work tree. From step 1 again: a training resumes at its restored epoch and a protocol run
            # reads its stored batches back, so nothing is computed twice but what the lost hour held.
            self.log(f"queue: {job.name}: the outputs of its {start} finished step(s) stayed in another work tree; "
                     "from step 1 again")
            start = 0
        self.log(f"queue: {job.name} (step {start + 1} of {len(job.steps)})")
        self._restore(job)
        self._last_carry = time.time()
        for i in range(start, len(job.steps)):
            self._wait_for_holders()
            t0 = active_clock().now()  # a pause stops the runner too: its minutes are not the job's
            self._run_step(job, job.steps[i])
            self.state.elapsed_s[job.name] = round(
                self.state.elapsed_s.get(job.name, 0.0) + active_clock().now() - t0, 1)
            self.state.done_steps[job.name] = i + 1
            self.state.work_tree[job.name] = here
            self.state.save()  # on disk after every step; on the branch with the resume copies and at the end
        if self.commit and job.commit:
            self._check(job)
        self.state.finished[job.name] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        self.state.work_tree.pop(job.name, None)
        self.state.save()
        if self.commit:
            # One commit for the finished job: its outputs together (a retrained checkpoint and the cards measured
            # on it, a card and the board made from it), the queue's record, and its final branch copies.
            paths = [*self._record_paths(), *job.commit, *self._carry_paths(job, finished=True)]
            git_commit(paths, f"Queue: {job.name}, finished", self.repo)
        self.log(f"queue: {job.name} finished")

    def _check(self, job: Job) -> None:
        """Run the plan's checks, and the tests that name a model whose weights the job changed, on what the job's
        steps wrote, before it is committed: outputs that the test suite would refuse (a card its reader cannot
        round-trip, a board that says what the cards do not, weights that break a test's claim about the shipped
        model) stay uncommitted and the queue stops, so the branch, and CI on it, never holds them. Fixed, the same
        ``make queue`` runs the checks again and commits."""
        checks = list(dict.fromkeys([*self.checks, *tests_naming_changed_weights(self.repo, job.commit)]))
        if not checks:
            return
        self._wait_for_holders()
        self.log(f"queue: {job.name}: checking its outputs ({' '.join(checks)})")
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *checks],
                                cwd=self.repo, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
            raise RuntimeError(f"{job.name}: its outputs fail the plan's checks, so they stay uncommitted: fix them "
                               f"(or the code that reads them), then `make queue` checks again and commits\n{tail}")

    def _restore(self, job: Job) -> None:
        """Bring the job's run folder and store back from its resume point and the branch's copies (a fresh checkout,
        or a run folder behind them), and merge the rows other jobs carried into the stores it uses."""
        restored = resume_point.restore(self.repo, resume_point.job_ref(job.name), job.watch,
                                        [job.snapshot[1]] if job.snapshot else [])
        if restored:
            self.log(f"queue: restored {len(restored)} file(s) from {resume_point.job_ref(job.name)}")
        if job.watch and (restored := carry.unpack_run_folder(self.repo, job.watch,
                                                                carry.run_folder_copy(job.name))):
            self.log(f"queue: restored {len(restored)} file(s) from the branch's {carry.run_folder_copy(job.name)}")
        if job.snapshot and restore_store(self.repo / job.snapshot[0], self.repo / job.snapshot[1]):
            self.log(f"queue: resumed the store from {job.snapshot[1]}")
        self._merge_carried_rows(job)

    def _record_paths(self) -> list[str]:
        """The queue's record, when it lies in the repository (one outside it is not committed)."""
        try:
            return [str(self.state.path.resolve().relative_to(self.repo.resolve()))]
        except ValueError:
            return []

    def _save_resume_point(self, job: Job, message: str) -> None:
        """The run folder and the store snapshot as the job's resume point (:mod:`lab.queue.resume_point`)."""
        paths = [p for p in (job.watch, job.snapshot[1] if job.snapshot else None) if p]
        if not paths or not (self.repo / ".git").exists():
            return
        try:
            resume_point.save(self.repo, resume_point.job_ref(job.name), paths, message)
        except RuntimeError as e:  # the run goes on; the next save may succeed
            print(f"queue: saving the resume point failed: {e}", file=sys.stderr)
        if time.time() - self._last_prune > PRUNE_EVERY_S:
            self._last_prune = time.time()
            resume_point.prune_replaced(self.repo)

    def _job_models(self, job: Job) -> tuple[str, ...]:
        """The models whose rows the job's branch copy keeps, asked of arbibench once per job."""
        if job.name not in self._models:
            models, error = progress.job_models(job, self.repo)
            if error is not None:
                self.log(f"queue: {job.name}: `arbibench protocol progress` could not name its models ({error}); "
                         "its copy keeps every model's rows")
            self._models[job.name] = models
        return self._models[job.name]

    def _carry_paths(self, job: Job, *, finished: bool) -> list[str]:
        """Write the job's branch copies (:mod:`lab.queue.carry`) and return their paths for the commit; at the
        job's end the run folder's copy is deleted (its exported checkpoint is committed instead)."""
        paths = []
        if job.watch:
            copy = carry.run_folder_copy(job.name)
            if finished:
                carry.remove(self.repo, copy)
                paths.append(copy)
            else:
                try:
                    if carry.pack_run_folder(self.repo, job.watch, copy):
                        paths.append(copy)
                except OSError as e:  # a file replaced while it was read: the next copy
                    print(f"queue: copying {job.watch} to the branch failed: {e}", file=sys.stderr)
        if job.snapshot and (self.repo / job.snapshot[0]).is_file():
            copy = carry.rows_copy(job.name)
            held = [self.repo / carry.rows_copy(o.name) for o in self.jobs
                    if o.name != job.name and o.snapshot and o.snapshot[0] == job.snapshot[0]]
            try:
                carry.export_rows(self.repo / job.snapshot[0], self._job_models(job), self.repo / copy,
                                  held_elsewhere=[c for c in held if c.is_file()])
                paths.append(copy)
            except (OSError, sqlite3.Error) as e:  # the run goes on; the next copy may succeed
                print(f"queue: copying the outcomes of {job.name!r} to the branch failed: {e}", file=sys.stderr)
        return paths

    def _carry(self, job: Job) -> None:
        """Take the job's resume copies mid-step: the resume point, and the branch copies committed with the
        queue's record; at most every ``carry_every_s``, or now when a session asked (:func:`request_carry`),
        answering it with the commit."""
        request = self.run_dir / CARRY_REQUEST
        asked = request.exists()
        if not self.commit or not (asked or time.time() - self._last_carry >= self.carry_every_s):
            return
        self._last_carry = time.time()
        note = epoch_note(self.repo / job.watch / "state.json") if job.watch else ""
        if job.snapshot:
            snapshot_store(self.repo / job.snapshot[0], self.repo / job.snapshot[1])
        self._save_resume_point(job, f"Queue: {job.name}, resume point{note}")
        copies = self._carry_paths(job, finished=False)
        committed = git_commit([*self._record_paths(), *copies], f"Queue: {job.name}, resume copies{note}", self.repo)
        if asked:
            head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=self.repo, capture_output=True,
                                  text=True).stdout.strip()
            answer = {"job": job.name, "paths": copies, "commit": head if committed else None}
            atomic_write_text(json.dumps(answer) + "\n", self.run_dir / CARRY_RESULT)
            request.unlink(missing_ok=True)

    def _merge_carried_rows(self, job: Job) -> None:
        """Merge into each store the job writes or reads the branch copies of every job that writes that store, so
        a fresh clone starts with what finished jobs measured (a findings report included)."""
        for store in job.stores:
            for other in self.jobs:
                copy = self.repo / carry.rows_copy(other.name)
                if other.snapshot and other.snapshot[0] == store and copy.is_file():
                    if n := carry.merge_rows(copy, self.repo / store):
                        self.log(f"queue: {n} outcome rows of {other.name!r} merged from the branch's {copy.name}")

    def _run_step(self, job: Job, step: tuple[str, ...]) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        self.log(f"queue: $ {' '.join(step)}")
        proc = subprocess.Popen(command_line(step, sys.executable), cwd=self.repo, env=env)
        running = True
        while running:
            try:  # back as soon as the step ends, not at the end of the poll interval
                proc.wait(timeout=POLL_S)
                running = False
            except subprocess.TimeoutExpired:
                pass
            self._carry(job)  # when due or asked; once more after the step ends, as each poll did
        if job.snapshot:  # a local copy of the store as the step left it (no commit)
            snapshot_store(self.repo / job.snapshot[0], self.repo / job.snapshot[1])
        if proc.returncode != 0:
            raise RuntimeError(f"queue job {job.name!r} failed: `{' '.join(step)}` exited with {proc.returncode}")
