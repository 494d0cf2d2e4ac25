"""``arbibench queue``: run, inspect, pause and resume the machine's one queue of long jobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from arbibench.terminal import USER_ERRORS, console, fail

if TYPE_CHECKING:
    from arbibench.queue.jobs import Job, ProtocolRunStep, QueueState

# what a queue command reports as one line: user errors, and a job step that failed (RuntimeError)
QUEUE_ERRORS: tuple[type[Exception], ...] = (*USER_ERRORS, RuntimeError)

queue_app = typer.Typer(
    help="The machine's one queue of long jobs (zoo training, full-protocol cards): one job at a time, resumable, "
    "committed to git as it goes. Pause it while tests or benchmarks run.",
    no_args_is_help=True,
)

PLAN = Path("zoo_runs/queue.json")
STATE = Path("zoo_runs/queue_state.json")
RUN_DIR = Path("runs/queue")


@queue_app.command("run")
def run(
    plan: Path = typer.Option(PLAN, help="The queue's plan: JSON {'jobs': [{name, steps, watch, commit, ...}]}."),
    state: Path = typer.Option(STATE, help="Where finished steps are recorded (tracked in git)."),
    only: str | None = typer.Option(None, help="Run only the job of this name."),
    max_jobs: int | None = typer.Option(None, min=1, help="Stop after this many jobs."),
    threads: int = typer.Option(2, min=1, help="OMP_NUM_THREADS of each step."),
    commit: bool = typer.Option(True, help="Commit each epoch's checkpoint and each finished job to git."),
    run_dir: Path = typer.Option(RUN_DIR, help="Runner files: pid, pause holders (not tracked)."),
) -> None:
    """Run every unfinished job in order; a killed queue resumes at the step and epoch where it stopped."""
    from arbibench.queue.jobs import QueueState, load_plan  # start-up: --help stays light
    from arbibench.queue.runner import Runner

    try:
        jobs = load_plan(plan)
        if only is not None and only not in {j.name for j in jobs}:
            raise ValueError(f"no job named {only!r} in {plan}; jobs: {', '.join(j.name for j in jobs)}")
        runner = Runner(jobs, QueueState.load(state), Path.cwd(), run_dir, threads=threads, commit=commit,
                        log=console.log, plan=plan)
        n = runner.run(only=only, max_jobs=max_jobs)
    except QUEUE_ERRORS as e:
        fail(e)
    console.print(f"queue: {n} job(s) finished in this run")


@queue_app.command("status")
def status(
    plan: Path = typer.Option(PLAN, help="The queue's plan."),
    state: Path = typer.Option(STATE, help="The queue's record of finished steps."),
    run_dir: Path = typer.Option(RUN_DIR, help="Runner files."),
) -> None:
    """Each job's progress: finished, running or waiting; epochs done of the budget and the projected hours left."""
    from rich.table import Table  # start-up: --help stays light

    from arbibench.queue.jobs import QueueState, load_plan  # start-up: --help stays light
    from arbibench.queue.runner import running_pid

    try:
        jobs = load_plan(plan)
        st = QueueState.load(state)
    except USER_ERRORS as e:
        fail(e)
    pid = running_pid(run_dir)
    table = Table("job", "state", "steps", "progress", "hours so far", "hours left (projected)")
    total_left = 0.0
    from_cards = [0.0, 0.0]  # protocol jobs with nothing stored yet: projected from their models' quick cards
    # the runner takes the jobs in plan order, so the first unfinished one is the one it runs
    current = next((j.name for j in jobs if j.name not in st.finished), None) if pid else None
    for job in jobs:
        label, progress, seconds, left, cards = _job_progress(job, st, current)
        total_left += left or 0.0
        shown = "" if left is None else f"{left:.1f}"
        if cards is not None:
            from_cards = [from_cards[0] + cards[0], from_cards[1] + cards[1]]
            shown = f"{cards[0]:.1f}-{cards[1]:.1f} (quick cards)"
        table.add_row(job.name, label, f"{st.done_steps.get(job.name, 0)}/{len(job.steps)}", progress,
                      f"{seconds / 3600:.2f}", shown)
    console.print(table)
    holders = sorted(p.name for p in (run_dir / "holders").glob("*")) if (run_dir / "holders").is_dir() else []
    console.print(f"runner: {'PID ' + str(pid) if pid else 'not running'}"
                  + (f", paused for {', '.join(holders)}" if holders else "")
                  + f"; projected hours left where known: {total_left:.1f}"
                  + (f", and {from_cards[0]:.1f}-{from_cards[1]:.1f} for the protocol jobs not started, from their "
                     "models' quick cards (white-box x20 images, black-box x5 images and up to x5 queries)"
                     if from_cards[1] else ""))


def _job_progress(job: Job, st: QueueState, current: str | None
                  ) -> tuple[str, str, float, float | None, tuple[float, float] | None]:
    """One job's state label, progress, hours so far (as seconds), projected hours left (None: unknown) and, for a
    protocol job with nothing stored, the (low, high) hours its models' quick cards project."""
    from arbibench.queue.jobs import protocol_run_step  # start-up: --help stays light

    progress, left, cards = "", None, None
    seconds = st.elapsed_s.get(job.name, 0.0)
    runs = [r for r in (protocol_run_step(s) for s in job.steps) if r is not None and r.models]
    if runs and job.name not in st.finished and job.snapshot:  # a long protocol job: batches from its store
        progress, left, stored_s = _protocol_progress(runs, job.snapshot)
        seconds = max(seconds, stored_s)  # a step's time reaches the record only when it ends; its batches' sooner
        if left is None:
            cards = _quick_card_projection(runs)
    elif job.watch and (run_state := _run_state(job)) is not None:
        done = len(run_state.get("history", []))
        budget = job.budget_epochs or run_state.get("recipe", {}).get("epochs", done)
        per_epoch = run_state.get("elapsed_s", 0.0) / max(done, 1)
        seconds = max(seconds, run_state.get("elapsed_s", 0.0))  # a training's step ends only with the run
        progress = f"epoch {done} of {budget}" + ("" if (Path(job.watch) / "state.json").is_file() else
                                                  " (the branch's copy)")
        if run_state.get("stopped_early"):
            progress += " (stopped early)"
        else:
            left = per_epoch * max(budget - done, 0) / 3600
    elif job.budget_epochs and job.name not in st.finished:  # a finished job's run folder may be gone: no figure
        progress = f"epoch 0 of {job.budget_epochs}"
    if job.name in st.finished:
        return f"finished {st.finished[job.name]}", progress, seconds, 0.0, None
    if job.name == current:
        label = "running"
    elif st.done_steps.get(job.name) or (job.watch and _run_state(job) is not None):
        label = "stopped mid-job"
    else:
        label = "waiting"
    return label, progress, seconds, left, cards


def _run_state(job: Job) -> dict[str, Any] | None:
    """A training job's state.json: its run folder's, else that of its copy on the branch (a fresh clone)."""
    from arbibench.queue import carry  # start-up: --help stays light

    assert job.watch is not None
    local = Path(job.watch) / "state.json"
    if local.is_file():
        return dict(json.loads(local.read_text()))
    return carry.copied_state(Path.cwd(), job.watch, carry.run_folder_copy(job.name))


def _protocol_progress(runs: list[ProtocolRunStep], snapshot: tuple[str, str]) -> tuple[str, float | None, float]:
    """"batches done/total" of a protocol job's models, the projected hours left and the seconds its stored batches
    took, read from its store (the working copy while it runs, else the tracked snapshot); planning loads each
    model, a second or two each."""
    import torch  # start-up: only for protocol jobs

    path = Path(snapshot[0]) if Path(snapshot[0]).is_file() else Path(snapshot[1])
    if not path.is_file():
        return "not started", None, 0.0
    threads = torch.get_num_threads()
    # Status runs beside the queue, whose job holds both cores: planning checks each model on a few images, and torch's
    # OpenMP workers spinning against the job's made a status of the full queue take 144 s instead of 13 (2 cores).
    torch.set_num_threads(1)
    try:
        return _stored_progress(runs, path)
    finally:
        torch.set_num_threads(threads)


def _stored_progress(runs: list[ProtocolRunStep], path: Path) -> tuple[str, float | None, float]:
    from arbibench.data.cifar10 import has_cifar10  # start-up: loads numpy, only for protocol jobs
    from arbibench.evaluation.store import ResultStore  # start-up: loads torch, only for protocol jobs
    from arbibench.operations.progress import protocol_progress  # start-up: as above
    from arbibench.protocol.presets import Protocol, get_protocol  # start-up: as above

    done = total = unknown = gpu = 0
    hours = so_far = 0.0
    with ResultStore(path) as db:
        for run in runs:
            protocol = get_protocol(run.preset, run.quick)
            if not isinstance(protocol, Protocol):  # protocol_run_step leaves out corruption runs
                continue
            if protocol.dataset == "cifar10" and not has_cifar10("test"):  # planning reads the test images, and a
                return "unknown: CIFAR-10 not found (set ARBIBENCH_DATA)", None, 0.0  # status never downloads them
            for model in run.models:
                p = protocol_progress(protocol, model, db, inference=run.inference, model_info=run.model_info)
                done, total = done + p.done, total + p.batches
                h, u = p.hours_left()
                hours, unknown, so_far = hours + h, unknown + u, so_far + p.hours_so_far  # a CPU's hours
                gpu += p.gpu_done
    if not done:  # a shared store, but nothing of these models in it yet: their quick cards give the hours
        return f"batches 0/{total}", None, 0.0
    note = f" ({unknown} evaluations not started: not counted)" if unknown else ""
    on_gpu = f", {gpu} on a GPU" if gpu else ""
    return f"batches {done}/{total}{on_gpu}{note}", hours, so_far * 3600


def _quick_card_projection(runs: list[ProtocolRunStep]) -> tuple[float, float] | None:
    """Hours (low, high) of a full protocol job that has stored nothing, from its models' quick cards; None where a
    model has no quick card or the job is not a full run."""
    from arbibench.operations.projection import project_model  # start-up: as above

    low = high = 0.0
    for run in runs:
        if run.quick:
            return None
        for model in run.models:
            p = project_model(run.model_info, model, run.preset)
            if p is None:
                return None
            low, high = low + p.total_h[0], high + p.total_h[1]
    return low, high


@queue_app.command("pause")
def pause(
    holder: str = typer.Option(..., help="Who pauses (a plain name, e.g. 'tests'); resume with the same name."),
    run_dir: Path = typer.Option(RUN_DIR, help="Runner files."),
) -> None:
    """Stop the queue (SIGSTOP to the runner and its children) while tests or a benchmark run."""
    from arbibench.queue.runner import pause as do_pause  # start-up: --help stays light

    try:
        console.print(do_pause(run_dir, holder))
    except USER_ERRORS as e:
        fail(e)


@queue_app.command("resume")
def resume(
    holder: str = typer.Option(..., help="The name given to pause."),
    run_dir: Path = typer.Option(RUN_DIR, help="Runner files."),
) -> None:
    """Let the queue go on once no other holder keeps it paused."""
    from arbibench.queue.runner import resume as do_resume  # start-up: --help stays light

    try:
        console.print(do_resume(run_dir, holder))
    except USER_ERRORS as e:
        fail(e)


@queue_app.command("carry")
def carry_now(
    timeout: float = typer.Option(120.0, min=1.0, help="Seconds to wait for the runner's answer."),
    run_dir: Path = typer.Option(RUN_DIR, help="Runner files."),
) -> None:
    """Copy the running job's progress to the branch now (before a session ends): a checkout rebuilt from the branch
    resumes from it instead of from the last hourly copy."""
    from arbibench.queue.runner import request_carry  # start-up: --help stays light

    try:
        answer = request_carry(run_dir, timeout_s=timeout)
    except USER_ERRORS as e:  # TimeoutError included
        fail(e)
    paths = ", ".join(answer.paths) or "nothing (the job has no run folder or store yet)"
    if answer.commit:
        console.print(f"queue: {answer.job}: copied {paths} to the branch in commit {answer.commit}")
    else:
        console.print(f"queue: {answer.job}: {paths} unchanged since the last copy; nothing committed")


@queue_app.command("add-rows")
def add_rows(
    rows: Path = typer.Argument(..., help="Outcome rows computed elsewhere, as a gzip'd store (rows.db.gz of "
                                "benchmarks/full_protocol_gpu.sh)."),
    store: str = typer.Option("runs/queue/full_protocol.db", help="The queue store the rows belong to: only "
                              "the jobs that write it take them."),
    plan: Path = typer.Option(PLAN, help="The queue's plan."),
    state: Path = typer.Option(STATE, help="The queue's record of finished jobs (they take nothing)."),
) -> None:
    """Give each unfinished protocol job its models' rows from a store computed elsewhere (a lent GPU): they join the
    job's carried copy, whose own rows stay, and the queue's store where there is one here, and the job's run skips
    those batches. A running job planned its batches when it started: restart the queue to skip them at once (one it
    computes anyway keeps the rows stored first). Commit the copies it names."""
    import sqlite3

    from arbibench.queue import carry  # start-up: --help stays light
    from arbibench.queue.jobs import QueueState, load_plan
    from arbibench.queue.runner import job_models

    errors: tuple[type[Exception], ...] = (*QUEUE_ERRORS, sqlite3.Error)  # a damaged rows file is sqlite's
    try:
        if not rows.is_file():
            raise FileNotFoundError(f"no rows at {rows}: pass the rows.db.gz a run elsewhere wrote")
        finished = QueueState.load(state).finished
        jobs = [j for j in load_plan(plan)
                if j.snapshot and j.snapshot[0] == store and j.name not in finished and job_models(j)]
        if not jobs:
            raise ValueError(f"no unfinished protocol job of {plan} writes {store} for named models; "
                             "pass the store its jobs write with --store")
        added = {j.name: carry.add_rows(rows, Path(carry.rows_copy(j.name)), job_models(j)) for j in jobs}
        # the running job's hourly copy is written from the store: without them there, it would drop them again
        in_store = (carry.merge_models(rows, Path(store), tuple(sorted({m for j in jobs for m in job_models(j)})))
                    if Path(store).is_file() else None)
    except errors as e:
        fail(e)
    if in_store:
        console.print(f"queue: {in_store} new outcome rows in {store}")
    changed = {name: n for name, n in added.items() if n}
    for name, n in changed.items():
        console.print(f"queue: {name}: {n} new outcome rows in {carry.rows_copy(name)}")
    if not changed:
        console.print(f"queue: {rows} holds no rows that an unfinished job's carried copy lacks")
