"""``python -m lab queue``: run, inspect, pause and resume the machine's one queue of long jobs."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from arbibench.terminal import USER_ERRORS, console, fail
from lab.queue import carry
from lab.queue.jobs import Job, QueueState, load_plan
from lab.queue.progress import RunProgress, job_models, protocol_runs, run_progress
from lab.queue.runner import Runner, request_carry, running_pid
from lab.queue.runner import pause as do_pause
from lab.queue.runner import resume as do_resume

# what a queue command reports as one line: user errors, and a job step that failed (RuntimeError)
QUEUE_ERRORS: tuple[type[Exception], ...] = (*USER_ERRORS, RuntimeError)

queue_app = typer.Typer(
    help="The machine's one queue of long jobs (zoo training, full-protocol cards): one job at a time, resumable, "
    "each finished job committed to git with its outputs. Pause it while tests or benchmarks run.",
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
    commit: bool = typer.Option(True, help="Commit each finished job, and the running job's resume copies, to git."),
    carry_every: float = typer.Option(
        60.0, min=1.0, help="Minutes between the running job's resume copies (its run folder or store rows on the "
        "branch, its resume point): the most of a job that a lost checkout costs."
    ),
    run_dir: Path = typer.Option(RUN_DIR, help="Runner files: pid, pause holders (not tracked)."),
) -> None:
    """Run every unfinished job in order; a killed queue resumes at the step and epoch where it stopped."""
    try:
        jobs = load_plan(plan)
        if only is not None and only not in {j.name for j in jobs}:
            raise ValueError(f"no job named {only!r} in {plan}; jobs: {', '.join(j.name for j in jobs)}")
        runner = Runner(jobs, QueueState.load(state), Path.cwd(), run_dir, threads=threads, commit=commit,
                        log=console.log, plan=plan, carry_every_s=carry_every * 60)
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
    retrained: set[str] = set()  # models an unfinished training earlier in the plan will replace
    for job in jobs:
        behind = ([m for m in job.measures if m in retrained]
                  if job.name not in st.finished and not job.trains else [])
        if behind:  # its stores hold the rows of the weights the training replaces, not of the ones it will measure
            table.add_row(job.name, "waiting", f"{st.done_steps.get(job.name, 0)}/{len(job.steps)}",
                          f"after the training of {', '.join(behind)}",
                          f"{st.elapsed_s.get(job.name, 0.0) / 3600:.2f}", "")
            continue
        if job.name not in st.finished:
            retrained.update(job.trains)
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
    progress, left, cards = "", None, None
    seconds = st.elapsed_s.get(job.name, 0.0)
    runs = protocol_runs(job)
    if runs and job.name not in st.finished and job.snapshot:  # a long protocol job: batches from its stores
        answers = [run_progress(step, Path.cwd(), job.snapshot) for step in runs]
        progress, left, stored_s, cards = _protocol_progress(answers)
        seconds = max(seconds, stored_s)  # a step's time reaches the record only when it ends; its batches' sooner
    elif job.watch and (run_state := _run_state(job)) is not None:
        done = len(run_state.get("history", []))
        budget = job.budget_epochs or run_state.get("recipe", {}).get("epochs", done)
        per_epoch = run_state.get("elapsed_s", 0.0) / max(done, 1)
        seconds = max(seconds, run_state.get("elapsed_s", 0.0))  # a training's step ends only with the run
        unit = run_state.get("unit", "epoch")  # a training's epochs; a resumable benchmark's own steps
        progress = f"{unit} {done} of {budget}" + ("" if (Path(job.watch) / "state.json").is_file() else
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
    elif st.done_steps.get(job.name) == len(job.steps):  # every step ran: the plan's checks held its commit back
        label = "outputs await the checks"
    elif st.done_steps.get(job.name) or (job.watch and _run_state(job) is not None):
        label = "stopped mid-job"
    else:
        label = "waiting"
    return label, progress, seconds, left, cards


def _run_state(job: Job) -> dict[str, Any] | None:
    """A training job's state.json: its run folder's, else that of its copy on the branch (a fresh clone)."""
    assert job.watch is not None
    local = Path(job.watch) / "state.json"
    if local.is_file():
        return dict(json.loads(local.read_text()))
    return carry.copied_state(Path.cwd(), job.watch, carry.run_folder_copy(job.name))


def _protocol_progress(answers: list[RunProgress]
                       ) -> tuple[str, float | None, float, tuple[float, float] | None]:
    """A protocol job's "batches done/total", projected hours left, the seconds its stored batches took and, while
    nothing of it is stored, the (low, high) hours its models' quick cards project; summed over its runs' answers
    from ``arbibench protocol progress --json``."""
    errors = [a.error for a in answers if a.error is not None]
    if errors:
        return f"unknown: {errors[0]}", None, 0.0, None
    models = [m for a in answers for m in a.models]
    done = sum(int(m["done"]) for m in models)
    if not done:  # nothing of these models stored yet (a store shared with other jobs included)
        lows_highs = [m["quick_card_hours"] for m in models]
        cards = None if not models or None in lows_highs else (sum(h[0] for h in lows_highs),
                                                               sum(h[1] for h in lows_highs))
        planned = [m["batches"] for m in models]
        shown = "not started" if None in planned or not planned else f"batches 0/{sum(planned)}"
        return shown, None, 0.0, cards
    total = sum(int(m["batches"] or 0) for m in models)
    unknown = sum(int(m["not_started"] or 0) for m in models)
    gpu = sum(int(m["gpu_done"]) for m in models)
    note = f" ({unknown} evaluations not started: not counted)" if unknown else ""
    on_gpu = f", {gpu} on a GPU" if gpu else ""
    hours = sum(float(m["hours_left"] or 0.0) for m in models)
    return (f"batches {done}/{total}{on_gpu}{note}{_eps_star_note(models)}", hours,
            sum(float(m["hours_so_far"]) for m in models) * 3600, None)


def _eps_star_note(models: list[dict[str, Any]]) -> str:
    """"; eps* k/n models, MODEL: where its search stands" while a run's eps* searches are not all done (they have
    no projected hours: each radius attacks what the last one left); then, for a --certify run, "; MODEL: N of M
    images certified" until its certificates are done; "" when all is done or the run has neither."""
    searches = [(m["model"], m["eps_star"]) for m in models if m.get("eps_star")]
    waiting = [(name, e) for name, e in searches if e["state"] != "done"]
    if not waiting:
        certifying = [(m["model"], m["certification"]) for m in models
                      if m.get("certification") and m["certification"]["done"] < m["certification"]["total"]]
        return "".join(f"; {name}: {c['summary']}" for name, c in certifying)
    now = next(((name, e) for name, e in waiting if e["state"] == "searching"), waiting[0])
    return f"; eps* {len(searches) - len(waiting)}/{len(searches)} models, {now[0]}: {now[1]['summary']}"


@queue_app.command("pause")
def pause(
    holder: str = typer.Option(..., help="Who pauses (a plain name, e.g. 'tests'); resume with the same name."),
    run_dir: Path = typer.Option(RUN_DIR, help="Runner files."),
) -> None:
    """Stop the queue (SIGSTOP to the runner and its children) while tests or a benchmark run."""
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
    errors: tuple[type[Exception], ...] = (*QUEUE_ERRORS, sqlite3.Error)  # a damaged rows file is sqlite's
    try:
        if not rows.is_file():
            raise FileNotFoundError(f"no rows at {rows}: pass the rows.db.gz a run elsewhere wrote")
        finished = QueueState.load(state).finished
        candidates = [j for j in load_plan(plan) if j.snapshot and j.snapshot[0] == store and j.name not in finished]
        models = {j.name: _named_job_models(j) for j in candidates}
        jobs = [j for j in candidates if models[j.name]]
        if not jobs:
            raise ValueError(f"no unfinished protocol job of {plan} writes {store} for named models; "
                             "pass the store its jobs write with --store")
        added = {j.name: carry.add_rows(rows, Path(carry.rows_copy(j.name)), models[j.name]) for j in jobs}
        # the running job's hourly copy is written from the store: without them there, it would drop them again
        in_store = (carry.merge_models(rows, Path(store), tuple(sorted({m for j in jobs for m in models[j.name]})))
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


@queue_app.command("compact")
def compact(
    plan: Path = typer.Option(PLAN, help="The queue's plan: whose branch copies share a store."),
    state: Path = typer.Option(STATE, help="The queue's record of finished jobs (only their copies are rewritten)."),
) -> None:
    """Rewrite the finished protocol jobs' branch copies so that each row of a store is in one copy only (copies
    written before the queue left out what the others hold); merged together they hold the same rows. Commit the
    copies it names. An unfinished job's copy is left to the job, which writes it that way at its next copy."""
    errors: tuple[type[Exception], ...] = (*QUEUE_ERRORS, sqlite3.Error)
    try:
        finished = QueueState.load(state).finished
        stores: dict[str, list[Path]] = {}
        for job in load_plan(plan):
            if job.snapshot and job.name in finished and Path(carry.rows_copy(job.name)).is_file():
                stores.setdefault(job.snapshot[0], []).append(Path(carry.rows_copy(job.name)))
        sizes = {copy: size for copies in stores.values() for copy, size in carry.compact(copies).items()}
    except errors as e:
        fail(e)
    for copy, (before, after) in sizes.items():
        if after != before:
            console.print(f"queue: {copy}: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
    total = sum(b for b, _ in sizes.values()), sum(a for _, a in sizes.values())
    console.print(f"queue: {len(sizes)} copies, {total[0] / 1e6:.1f} MB -> {total[1] / 1e6:.1f} MB")


def _named_job_models(job: Job) -> tuple[str, ...]:
    """The models a protocol job adds to its store, as ``arbibench protocol progress`` names them; a refusal there
    is this command's error."""
    models, error = job_models(job, Path.cwd())
    if error is not None:
        raise ValueError(f"job {job.name!r}: arbibench protocol progress refused its run: {error}")
    return models
