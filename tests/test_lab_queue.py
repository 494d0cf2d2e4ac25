"""The lab's long-job queue: a killed queue resumes a training at its next epoch with the same weights as an
uninterrupted run, finished steps are not run again, pause/resume stop and continue the running step by holder, a job
is one commit, and protocol progress comes from ``arbibench protocol progress --json``."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.queue import progress as progress_module
from lab.queue.jobs import Job, QueueState, load_checks, load_plan
from lab.queue.progress import RunProgress
from lab.queue.runner import Runner, pause, resume, running_pid

# A tiny real training (bnn, 128 CIFAR-10 images, 3 epochs, 64 held out) as a queue step.
TRAIN_STEP = (
    "import sys; from arbibench.train import Recipe, train; "
    "train(Recipe(method='bnn', epochs=3, batch_size=64, train_examples=128, optimizer='adam', lr=1e-3, "
    "val_examples=64), sys.argv[1], sys.argv[2], log=print, eval_examples=100)"
)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _plan(tmp_path: Path, jobs: list[dict]) -> Path:
    plan = tmp_path / "queue.json"
    plan.write_text(json.dumps({"jobs": jobs}))
    return plan


def _queue_cmd(tmp_path: Path, plan: Path) -> list[str]:
    return [sys.executable, "-m", "lab", "queue", "run", "--plan", str(plan), "--state",
            str(tmp_path / "state.json"), "--run-dir", str(tmp_path / "runner"), "--no-commit", "--threads", "1"]


def _wait_for(predicate, timeout: float = 240.0) -> None:
    end = time.time() + timeout
    while not predicate():
        if time.time() > end:
            raise AssertionError("timed out")
        time.sleep(0.2)


def test_a_killed_queue_resumes_the_training_at_its_next_epoch(tmp_path, data_dir):
    repo = Path.cwd()
    ref = tmp_path / "reference"
    subprocess.run([sys.executable, "-c", TRAIN_STEP, str(ref), str(data_dir)], check=True, capture_output=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    run = tmp_path / "queued"
    plan = _plan(tmp_path, [{"name": "tiny", "steps": [[sys.executable, "-c", TRAIN_STEP, str(run), str(data_dir)],
                                                         [sys.executable, "-c", "print('after')"]],
                             "watch": str(run)}])
    queue = subprocess.Popen(_queue_cmd(tmp_path, plan), cwd=repo, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state_json = run / "state.json"
    _wait_for(lambda: state_json.exists() and json.loads(state_json.read_text())["epoch"] >= 0)
    os.killpg(queue.pid, signal.SIGKILL)  # the runner and its training, mid-run
    queue.wait()
    killed_at = json.loads(state_json.read_text())["epoch"]
    assert killed_at < 2, "the kill came too late to test a resume"
    assert QueueState.load(tmp_path / "state.json").done_steps == {}
    out = subprocess.run(_queue_cmd(tmp_path, plan), cwd=repo, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert _digest(run / "model.safetensors") == _digest(ref / "model.safetensors")
    timeless = [{k: v for k, v in json.loads((d / "summary.json").read_text()).items()
                 if k not in ("train_time_s", "epoch_seconds")} for d in (run, ref)]
    assert timeless[0] == timeless[1]
    state = QueueState.load(tmp_path / "state.json")
    assert state.done_steps == {"tiny": 2} and "tiny" in state.finished
    # a finished queue runs nothing again
    again = subprocess.run(_queue_cmd(tmp_path, plan), cwd=repo, capture_output=True, text=True)
    assert "0 job(s) finished" in again.stdout


def test_pause_stops_the_running_step_until_every_holder_resumes(tmp_path):
    counter = tmp_path / "count"
    tick = (f"import time, pathlib\nfor i in range(10**6): pathlib.Path({str(counter)!r}).write_text(str(i)); "
            "time.sleep(0.05)")
    plan = _plan(tmp_path, [{"name": "ticker", "steps": [[sys.executable, "-c", tick]]}])
    run_dir = tmp_path / "runner"
    queue = subprocess.Popen(_queue_cmd(tmp_path, plan), start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: counter.exists() and counter.read_text() != "" and running_pid(run_dir) is not None)
        assert "paused" in pause(run_dir, "tests")
        assert "paused" in pause(run_dir, "bench")
        time.sleep(0.5)
        frozen = counter.read_text()
        time.sleep(1.0)
        assert counter.read_text() == frozen
        assert "still paused for bench" in resume(run_dir, "tests")
        time.sleep(1.0)
        assert counter.read_text() == frozen
        assert "resumed" in resume(run_dir, "bench")
        _wait_for(lambda: counter.read_text() not in ("", frozen), timeout=20)
    finally:
        os.killpg(queue.pid, signal.SIGKILL)
        queue.wait()


def test_a_failing_step_stops_the_queue_and_is_not_recorded(tmp_path):
    plan = _plan(tmp_path, [{"name": "bad", "steps": [[sys.executable, "-c", "raise SystemExit(3)"]]},
                            {"name": "later", "steps": [[sys.executable, "-c", "print(1)"]]}])
    out = subprocess.run(_queue_cmd(tmp_path, plan), capture_output=True, text=True)
    assert out.returncode == 2
    assert "exited with 3" in out.stdout
    assert QueueState.load(tmp_path / "state.json").finished == {}


def test_plans_with_mistakes_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="unique"):
        load_plan(_plan(tmp_path, [{"name": "a", "steps": [["x"]]}, {"name": "a", "steps": [["y"]]}]))
    with pytest.raises(ValueError, match="unknown fields"):
        load_plan(_plan(tmp_path, [{"name": "a", "steps": [["x"]], "stpes": []}]))
    with pytest.raises(FileNotFoundError, match="no queue plan"):
        load_plan(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="plain name"):
        pause(tmp_path, "../x")


def test_the_shipped_plan_loads_and_holds_the_zoo_continuations():
    jobs = load_plan(Path(__file__).resolve().parents[1] / "zoo_runs" / "queue.json")
    zoo = {j.name: j for j in jobs if j.name.startswith("zoo v3: ")}
    assert len(zoo) == 7 and zoo["zoo v3: resnet20_reactnet"].budget_epochs == 60
    # every continuation ships with its cards regenerated: pin, quick protocol, corruptions, deploy check, board
    for job in zoo.values():
        commands = [" ".join(s[1:3]) for s in job.steps if s[0] == "arbibench"]
        assert commands == ["train --arch", "zoo pin", "protocol run", "corruptions generate", "protocol run",
                            "protocol deploy-check", "protocol run", "leaderboard markdown"], job.name
        assert "deployed" in [s for s in job.steps if s[0] == "arbibench"][6]  # the deployed network deciding
    assert all(isinstance(j, Job) and j.steps for j in jobs)
    assert any(j.snapshot for j in jobs)  # the full-protocol stores are carried across sessions
    # a job's outputs are committed only once the tests that read cards, boards and README accept them
    checks = load_checks(Path(__file__).resolve().parents[1] / "zoo_runs" / "queue.json")
    assert "tests/test_card_files.py" in checks and "tests/test_leaderboard.py" in checks
    assert all((Path(__file__).resolve().parents[1] / c).is_file() for c in checks), checks


def test_the_shipped_findings_read_only_stores_an_earlier_job_carried():
    """A findings report must not start hours of attacks, nor depend on a store a lost checkout took with it: each
    report step is --stored-only and reads a store that an earlier job snapshots (and so carries to the branch)."""
    jobs = load_plan(Path(__file__).resolve().parents[1] / "zoo_runs" / "queue.json")
    findings = [i for i, j in enumerate(jobs) if j.name.startswith("findings: ")]
    assert findings
    for i in findings:
        carried = {j.snapshot[0] for j in jobs[:i] if j.snapshot}
        reports = [s for s in jobs[i].steps if list(s[:3]) == ["arbibench", "protocol", "report"]]
        assert reports and all("--stored-only" in s for s in reports), jobs[i].name
        assert set(jobs[i].stores) <= carried, (jobs[i].name, set(jobs[i].stores) - carried)


def _full_protocol_models(job: Job) -> list[str]:
    """The models of the job's full protocol runs, read off the plan (a check of the plan's text, not the runner)."""
    runs = [s for s in job.steps if list(s[:4]) == ["arbibench", "protocol", "run", "cifar10"]
            and "--quick" not in s and "--demo" not in s]
    return [m for s in runs for m in s[s.index("--models") + 1].split(",")]


def test_the_shipped_plan_measures_each_checkpoint_after_it_ships_and_reports_after_its_cards():
    """A retrained BNN's full run must wait for its zoo v3 export (a full card of replaced weights is hours lost),
    and a findings page must come after the full runs of every model it names (else it names them incomplete)."""
    jobs = load_plan(Path(__file__).resolve().parents[1] / "zoo_runs" / "queue.json")
    full_at: dict[str, list[int]] = {}  # a model's full runs, in order: a new checkpoint gets one more
    for i, j in enumerate(jobs):
        for m in _full_protocol_models(j):
            full_at.setdefault(m, []).append(i)
    assert {"resnet20_fp_at", "resnet20_bireal_at", "resnet20_reactnet_at"} <= set(full_at)
    for i, job in enumerate(jobs):
        if job.name.startswith(("zoo v3: ", "zoo v4 (CPU): ")):
            model = job.name.removeprefix("zoo v3: ").removeprefix("zoo v4 (CPU): ").split(" ")[0].rstrip(",")
            assert any(k > i for k in full_at.get(model, [])), (
                f"{model}: no full protocol runs after its retrained checkpoint ships")
    findings = [(i, j) for i, j in enumerate(jobs) if j.name.startswith("findings: ")]
    assert findings
    for i, job in findings:
        report = next(s for s in job.steps if "--markdown" in s)
        models = report[report.index("--models") + 1].split(",")
        late = [m for m in models if not any(k < i for k in full_at.get(m, []))]
        assert not late, (job.name, late)


# Which plan step writes a model's card in each folder of model_info/cifar10 (a retrained model must renew them all,
# or the card of its replaced weights ships beside the new checkpoint and test_shipped_cards fails on main).
CARD_WRITERS = {
    "Linf": lambda s: s[:4] == ["arbibench", "protocol", "run", "cifar10"] and "--inference" not in s,
    "Linf/deployed": lambda s: s[:4] == ["arbibench", "protocol", "run", "cifar10"] and "deployed" in s,
    "corruptions": lambda s: s[:4] == ["arbibench", "protocol", "run", "cifar10-c"],
    "deploy": lambda s: s[:3] == ["arbibench", "protocol", "deploy-check"],
    "grid_check": lambda s: s[:3] == ["arbibench", "protocol", "grid-check"],
}


def test_every_waiting_training_renews_every_card_of_its_model():
    root = Path(__file__).resolve().parents[1]
    jobs = load_plan(root / "zoo_runs" / "queue.json")
    finished = QueueState.load(root / "zoo_runs" / "queue_state.json").finished
    waiting = [j for j in jobs if j.name.startswith("zoo v4 (CPU): ") and j.name not in finished]
    missing = []
    for job in waiting:
        model = job.name.removeprefix("zoo v4 (CPU): ").split(" ")[0].rstrip(",")
        for folder, writes in CARD_WRITERS.items():
            has_card = (root / "model_info" / "cifar10" / folder / f"{model}.json").is_file()
            renewed = any(writes(list(s)) and model in s[s.index("--models") + 1].split(",") for s in job.steps
                          if "--models" in s)
            if has_card and not renewed:
                missing.append(f"{model}: {folder}")
    assert missing == [], "training jobs that leave a card of the replaced weights: " + ", ".join(missing)


def test_the_runner_refuses_a_second_runner(tmp_path):
    run_dir = tmp_path / "runner"
    run_dir.mkdir()
    (run_dir / "pid").write_text(f"{os.getpid()}\n")  # this very process stands for a live runner
    other = Runner([], QueueState(tmp_path / "s.json"), tmp_path, run_dir, commit=False, log=lambda m: None)
    (run_dir / "pid").write_text(f"{os.getppid()}\n")
    with pytest.raises(RuntimeError, match="already running"):
        other.run()


def test_a_job_added_to_the_plan_while_the_queue_runs_is_run_next(tmp_path):
    plan = tmp_path / "queue.json"
    marker = tmp_path / "b-ran"
    job_b = {"name": "b", "steps": [["python", "-c", f"open({str(marker)!r}, 'w')"]]}
    add_b = (f"import json, pathlib; p = pathlib.Path({str(plan)!r}); d = json.loads(p.read_text()); "
             f"d['jobs'].append(json.loads({json.dumps(job_b)!r})); p.write_text(json.dumps(d))")
    plan.write_text(json.dumps({"jobs": [{"name": "a", "steps": [[sys.executable, "-c", add_b]]}]}))
    out = subprocess.run(_queue_cmd(tmp_path, plan), capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert marker.exists() and "2 job(s) finished" in out.stdout
    assert set(QueueState.load(tmp_path / "state.json").finished) == {"a", "b"}


def test_a_job_s_outputs_are_committed_together_when_it_ends(tmp_path):
    # a card written by step 1 and the board made from it by step 2 land in one commit, never the card alone
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "README.md").write_text("x\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)
    card, board = repo / "cards" / "m.json", repo / "BOARD.md"
    steps = [[sys.executable, "-c", f"import pathlib; p = pathlib.Path({str(card)!r}); p.parent.mkdir(); "
                                    "p.write_text('{}')"],
             [sys.executable, "-c", f"open({str(board)!r}, 'w').write('board')"]]
    jobs = [Job.from_dict({"name": "cards", "steps": steps, "commit": ["cards", "BOARD.md"]})]
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        Runner(jobs, QueueState(repo / "state.json"), repo, tmp_path / "runner", log=lambda m: None).run()
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    log = subprocess.run([*git, "log", "--name-only", "--format=@%s"], capture_output=True, text=True).stdout
    by_subject: dict[str, set[str]] = {}
    for line in filter(None, log.splitlines()):
        if line.startswith("@"):
            subject = line[1:]
            by_subject[subject] = set()
        else:
            by_subject[subject].add(line)
    # one commit for the job: its outputs and the queue's record, no commit per step
    assert list(by_subject) == ["Queue: cards, finished", "start"]
    assert by_subject["Queue: cards, finished"] == {"cards/m.json", "BOARD.md", "state.json"}


def test_run_folders_and_store_copies_go_to_the_job_s_resume_point_not_the_branch(tmp_path, monkeypatch):
    # Checkpoints change every epoch: on the branch they would add megabytes of history an epoch. They go to one
    # commit on the job's own ref, replaced at each save, and the next runner restores the folder from it.
    import sqlite3

    import lab.queue.runner as runner_module
    from lab.queue import resume_point

    repo = tmp_path / "repo"
    repo.mkdir()
    for k, v in {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                 "GIT_COMMITTER_EMAIL": "t@t"}.items():
        monkeypatch.setenv(k, v)
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "README.md").write_text("x\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)
    monkeypatch.setattr(runner_module, "POLL_S", 0.05)
    epochs = ("import json, pathlib, sqlite3, time; run = pathlib.Path('run'); run.mkdir(exist_ok=True)\n"
              "sqlite3.connect('store.db').execute('CREATE TABLE IF NOT EXISTS t (x)').connection.commit()\n"
              "for e in range(2):\n"
              "    (run / 'weights.bin').write_bytes(bytes([e]) * 1000)\n"
              "    (run / 'state.json').write_text(json.dumps({'epoch': e})); time.sleep(0.5)\n")
    job = Job.from_dict({"name": "zoo v3: tiny", "steps": [[sys.executable, "-c", epochs]], "watch": "run",
                         "snapshot": ["store.db", "copy.db"], "commit": []})
    Runner([job], QueueState(repo / "state.json"), repo, tmp_path / "runner", log=lambda m: None,
           carry_every_s=0.2).run()

    ref = resume_point.job_ref("zoo v3: tiny")
    assert ref == "refs/arbibench/queue/zoo-v3-tiny"
    branch_files = subprocess.run([*git, "log", "--name-only", "--format="], capture_output=True, text=True).stdout
    assert not {"run/weights.bin", "run/state.json", "copy.db"} & set(branch_files.split())
    assert "state.json" in branch_files.split()  # the queue's record is on the branch
    saved = subprocess.run([*git, "ls-tree", "-r", "--name-only", ref], capture_output=True, text=True).stdout.split()
    assert set(saved) == {"run/state.json", "run/weights.bin", "copy.db"}
    assert subprocess.run([*git, "rev-list", "--count", ref], capture_output=True, text=True).stdout.strip() == "1"
    assert subprocess.run([*git, "status", "--porcelain", "--", "run"], capture_output=True, text=True).stdout == \
        "?? run/\n"  # nothing staged on the branch's index

    # a fresh work tree (the run folder and the copy gone) gets them back, the state file last
    for f in ("run/weights.bin", "run/state.json", "copy.db"):
        (repo / f).unlink()
    restored = resume_point.restore(repo, ref, "run", ["copy.db"])
    assert restored[-1] == "run/state.json" and set(restored) == set(saved)
    assert json.loads((repo / "run" / "state.json").read_text())["epoch"] == 1
    assert (repo / "run" / "weights.bin").read_bytes() == bytes([1]) * 1000
    with sqlite3.connect(repo / "copy.db") as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]
    # a run folder ahead of the resume point is never overwritten by it
    (repo / "run" / "state.json").write_text(json.dumps({"epoch": 7}))
    assert resume_point.restore(repo, ref, "run", ["copy.db"]) == []
    assert resume_point.restore(repo, "refs/arbibench/queue/none", "run", []) == []

    # replaced resume points leave the disk once they are over an hour old; the current one stays
    old = subprocess.run([*git, "hash-object", "--stdin"], input=bytes([0]) * 1000, capture_output=True).stdout
    old = old.decode().strip()
    assert subprocess.run([*git, "cat-file", "-e", old]).returncode == 0  # epoch 0's weights, replaced
    resume_point.prune_replaced(repo)
    assert subprocess.run([*git, "cat-file", "-e", old]).returncode == 0  # too recent to drop
    two_hours_ago = time.time() - 7200
    for f in (repo / ".git" / "objects").rglob("*"):
        if f.is_file():
            os.utime(f, (two_hours_ago, two_hours_ago))
    resume_point.prune_replaced(repo)
    assert subprocess.run([*git, "cat-file", "-e", old], capture_output=True).returncode != 0
    assert set(subprocess.run([*git, "ls-tree", "-r", "--name-only", ref], capture_output=True,
                              text=True).stdout.split()) == set(saved)


def test_status_names_the_running_job_and_a_training_s_hours_so_far(tmp_path, monkeypatch):
    # The runner takes jobs in plan order: with a live runner the first unfinished job is the running one, even
    # before its first step ends; a training reports the hours its run folder records.
    from typer.testing import CliRunner

    from lab.__main__ import app

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "state.json").write_text(json.dumps({"epoch": 2, "history": [{}, {}, {}], "elapsed_s": 5400.0,
                                                "recipe": {"epochs": 10}}))
    plan = _plan(tmp_path, [{"name": "done", "steps": [["true"]], "watch": "gone", "budget_epochs": 60},
                            {"name": "training", "steps": [["true"]], "watch": "run"},
                            {"name": "later", "steps": [["true"]], "budget_epochs": 30}])
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"done_steps": {"done": 1}, "finished": {"done": "2026-12-02 12:00 UTC"},
                                 "elapsed_s": {"done": 36.0}}))
    runner_dir = tmp_path / "runner"
    runner_dir.mkdir()
    args = ["queue", "status", "--plan", str(plan), "--state", str(state), "--run-dir", str(runner_dir)]

    def rows() -> dict[str, list[str]]:
        out = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
        assert out.exit_code == 0, out.output
        cells = [[c.strip() for c in line.split("│")[1:-1]] for line in out.output.splitlines() if "│" in line]
        return {c[0]: c[1:] for c in cells if c and c[0]}

    stopped = rows()  # no runner: the training is stopped mid-job, the next job waits
    assert stopped["training"][0] == "stopped mid-job" and stopped["later"][0] == "waiting"
    assert stopped["training"][2:4] == ["epoch 3 of 10", "1.50"]
    (runner_dir / "pid").write_text(f"{os.getpid()}\n")  # a live process stands for the runner
    live = rows()
    assert live["done"][0].startswith("finished") and live["training"][0] == "running"
    assert live["done"][2] == ""  # a finished training whose run folder is gone claims no epoch count
    assert live["later"][0] == "waiting" and live["later"][2] == "epoch 0 of 30"
    (runner_dir / "pid").unlink()  # every step of "later" ran, but the plan's checks held its commit back
    state.write_text(json.dumps({**json.loads(state.read_text()), "done_steps": {"done": 1, "later": 1}}))
    assert rows()["later"][0] == "outputs await the checks"


def test_status_projects_a_full_protocol_job_from_its_quick_card(tmp_path, monkeypatch):
    # Before a full-protocol job stores its first batch, its hours come from the model's shipped quick card:
    # white-box attack times x20 (500 -> 10,000 images), black-box x5 (100 -> 500) and up to x5 more (the budget).
    from typer.testing import CliRunner

    from arbibench.operations.projection import project_from_quick_card
    from arbibench.protocol import get_protocol
    from lab.__main__ import app

    root = Path(__file__).resolve().parents[1]
    # the shipped card's attack times, read as a quick card's (500 white-box and 100 black-box images): the shipped
    # card may be a full card already, so its sizes are set to the quick preset's
    quick = get_protocol("cifar10", quick=True)
    card = {**json.loads((root / "model_info" / "cifar10" / "Linf" / "resnet20_fp_at.json").read_text()),
            "quick": True, "n_examples": {"white-box": quick.n_white_box, "black-box": quick.n_black_box}}
    assert card["n_examples"] == {"white-box": 500, "black-box": 100}
    model_info = tmp_path / "model_info"
    (model_info / "cifar10" / "Linf").mkdir(parents=True)
    (model_info / "cifar10" / "Linf" / "resnet20_fp_at.json").write_text(json.dumps(card))
    white = sum(a["seconds"] for a in card["attacks"].values() if a["family"] == "white-box")
    black = sum(a["seconds"] for a in card["attacks"].values() if a["family"] == "black-box")
    p = project_from_quick_card(card)
    assert p.white_box_h == pytest.approx(white * 20 / 3600)
    assert p.black_box_h[0] == pytest.approx(black * 5 / 3600)
    assert p.black_box_h[1] == pytest.approx(black * 5 / 3600 + 4 * 5 / 3600 * sum(
        a["seconds"] for name, a in card["attacks"].items() if a["family"] == "black-box" and name != "transfer"))
    with pytest.raises(ValueError, match="not a quick card"):
        project_from_quick_card({**card, "quick": False})

    monkeypatch.chdir(tmp_path)
    step = ["arbibench", "protocol", "run", "cifar10", "--models", "resnet20_fp_at", "--store", "full.db",
            "--model-info", str(model_info)]
    plan = _plan(tmp_path, [{"name": "full", "steps": [step], "snapshot": ["full.db", "copy.db"]}])
    args = ["queue", "status", "--plan", str(plan), "--state", str(tmp_path / "state.json"),
            "--run-dir", str(tmp_path / "runner")]
    out = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    low, high = p.total_h
    assert f"{low:.1f}-{high:.1f} (quick cards)" in out.output and "not started" in out.output

    # the store is shared: it exists (another model's job wrote it) but holds no batch of this job's models, so the
    # quick card still gives the hours, not "0.0 left"
    (tmp_path / "full.db").touch()
    _answer(monkeypatch, {"store": "full.db", "store_found": True, "models": [
        _model("resnet20_fp_at", done=0, batches=80, hours_left=0.0, quick_card_hours=[low, high])]})
    out = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert f"{low:.1f}-{high:.1f} (quick cards)" in out.output and "batches 0/80" in out.output


def _model(name: str, **counts: object) -> dict[str, object]:
    """One model of an ``arbibench protocol progress --json`` answer."""
    return {"model": name, "batches": None, "done": 0, "gpu_done": 0, "hours_so_far": 0.0, "hours_left": None,
            "not_started": 0, "evaluations": [], "quick_card_hours": None, **counts}


def _answer(monkeypatch: pytest.MonkeyPatch, answer: dict[str, object]) -> list[tuple[list[str], int]]:
    """Every ``protocol progress --json`` the queue asks gets ``answer``; returns the (arguments, threads) asked."""
    asked: list[tuple[list[str], int]] = []

    def fake(args: list[str], repo: Path, *, threads: int = 1) -> RunProgress:
        asked.append((args, threads))
        return RunProgress(str(answer["store"]), bool(answer["store_found"]), tuple(answer["models"]))

    monkeypatch.setattr(progress_module, "ask", fake)
    return asked


def _full_protocol_plan(tmp_path: Path) -> Path:
    """A plan of one full-protocol job on resnet20_fp whose store (full.db, empty) exists in ``tmp_path``."""
    (tmp_path / "full.db").touch()
    step = ["arbibench", "protocol", "run", "cifar10", "--models", "resnet20_fp", "--store", "full.db"]
    return _plan(tmp_path, [{"name": "full", "steps": [step], "snapshot": ["full.db", "copy.db"]}])


def test_status_counts_a_protocol_job_s_hours_from_its_stored_batches(tmp_path, monkeypatch):
    # A protocol step runs for many hours across sessions; the queue's record gets its time only when it ends, the
    # store gets each batch's seconds as it commits it, so the hours so far come from there, as arbibench counts them.
    from typer.testing import CliRunner

    from lab.__main__ import app

    # 63 of 103 batches stored, 3 of them on a GPU (another clock: not in the hours), 2.00 h so far and 7.0 h left
    asked = _answer(monkeypatch, {"store": "full.db", "store_found": True, "models": [
        _model("resnet20_fp", done=63, batches=103, gpu_done=3, hours_so_far=2.0, hours_left=7.0)]})
    monkeypatch.chdir(tmp_path)
    plan = _full_protocol_plan(tmp_path)
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"elapsed_s": {"full": 60.0}}))
    out = CliRunner().invoke(app, ["queue", "status", "--plan", str(plan), "--state", str(state),
                                   "--run-dir", str(tmp_path / "runner")], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    # the step's own arguments, read by arbibench (never by the queue), on one thread beside the running job
    assert asked == [(["cifar10", "--models", "resnet20_fp", "--store", "full.db"], 1)]
    row = next([c.strip() for c in line.split("│")[1:-1]] for line in out.output.splitlines() if "│ full" in line)
    assert row[3] == "batches 63/103, 3 on a GPU" and row[4] == "2.00" and row[5] == "7.0"


def test_status_shows_a_protocol_job_behind_a_retraining_as_waiting_for_it(tmp_path, monkeypatch):
    # A full-protocol job planned after a continuation of its model will measure the weights that training ships;
    # its store holds the rows of the weights it replaces, so their batches and hours are not this job's progress.
    from typer.testing import CliRunner

    from lab.__main__ import app

    asked = _answer(monkeypatch, {"store": "full.db", "store_found": True, "models": [
        _model("resnet20_fp", done=80, batches=80, hours_so_far=1.5, hours_left=0.0)]})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "full.db").touch()
    train = ["arbibench", "train", "--arch", "resnet20", "--method", "bnn", "--recipe", "long", "--export"]
    full = ["arbibench", "protocol", "run", "cifar10", "--models", "{}", "--store", "full.db"]
    jobs = [{"name": "train bnn", "steps": [train], "budget_epochs": 40},
            {"name": "full bnn", "steps": [[a.format("resnet20_bnn") for a in full]],
             "snapshot": ["full.db", "copy.db"]},
            {"name": "full fp", "steps": [[a.format("resnet20_fp") for a in full]], "snapshot": ["full.db", "copy.db"]}]
    plan = _plan(tmp_path, jobs)
    state = tmp_path / "state.json"
    args = ["queue", "status", "--plan", str(plan), "--state", str(state), "--run-dir", str(tmp_path / "runner")]

    def rows() -> dict[str, list[str]]:
        out = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
        assert out.exit_code == 0, out.output
        cells = [[c.strip() for c in line.split("│")[1:-1]] for line in out.output.splitlines() if "│" in line]
        return {c[0]: c[1:] for c in cells if c and c[0]}

    waiting = rows()
    assert waiting["full bnn"][2] == "after the training of resnet20_bnn" and waiting["full bnn"][4] == ""
    assert waiting["full fp"][2] == "batches 80/80"  # another model's job reads its store as before
    assert [a for a, _ in asked] == [["cifar10", "--models", "resnet20_fp", "--store", "full.db"]]
    state.write_text(json.dumps({"finished": {"train bnn": "2026-12-07 20:00 UTC"}}))
    assert rows()["full bnn"][2] == "batches 80/80"  # once the training is done, its store speaks for it


def test_a_job_names_the_models_it_trains_and_measures():
    job = Job.from_dict({"name": "j", "steps": [
        ["arbibench", "train", "--arch", "resnet20", "--method", "xnor", "--recipe", "long", "--export", "--compile"],
        ["arbibench", "train", "--method", "reactnet", "--recipe", "at"],
        ["arbibench", "train", "--models", "resnet18_fp,resnet18_bnn", "--recipe", "paper"],
        ["arbibench", "protocol", "run", "cifar10", "--quick", "--models", "resnet20_xnor,resnet20_fp"],
        ["arbibench", "protocol", "deploy-check", "cifar10", "--models", "resnet20_bnn"]]})
    assert job.trains == ("resnet20_xnor", "resnet20_reactnet_at", "resnet18_fp", "resnet18_bnn")
    assert job.measures == ("resnet20_xnor", "resnet20_fp")  # protocol runs only: their stores are what status reads
    assert Job.from_dict({"name": "k", "steps": [["true"]]}).trains == ()


def test_status_without_the_data_reports_instead_of_downloading(tmp_path, monkeypatch, data_dir):
    # Planning a protocol job reads the CIFAR-10 test images; a status in a shell without ARBIBENCH_DATA must say so,
    # not start a 170 MB download (nor fail with a network error): arbibench protocol progress refuses, the status
    # shows its reason.
    from typer.testing import CliRunner

    import arbibench.data.cifar10 as cifar10_module
    from lab.__main__ import app

    monkeypatch.chdir(tmp_path)
    plan = _full_protocol_plan(tmp_path)
    empty = tmp_path / "no-data"
    empty.mkdir()
    out = CliRunner().invoke(app, ["queue", "status", "--plan", str(plan), "--state", str(tmp_path / "state.json"),
                                   "--run-dir", str(tmp_path / "runner")],
                             env={"COLUMNS": "250", "ARBIBENCH_DATA": str(empty)})
    assert out.exit_code == 0, out.output
    assert "unknown: CIFAR-10's test images are not in the data folder" in out.output
    assert not list(empty.iterdir())  # nothing downloaded
    assert not cifar10_module.has_cifar10("test", empty)
    assert cifar10_module.has_cifar10("test", data_dir)  # the real data folder is found


def test_resume_copies_wait_for_their_interval_not_each_epoch(tmp_path, monkeypatch):
    # Three epochs within the hour: no resume point and no branch copy; the job's one commit when it ends.
    import lab.queue.runner as runner_module
    from lab.queue import resume_point

    repo = tmp_path / "repo"
    repo.mkdir()
    for k, v in {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                 "GIT_COMMITTER_EMAIL": "t@t"}.items():
        monkeypatch.setenv(k, v)
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "README.md").write_text("x\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)
    monkeypatch.setattr(runner_module, "POLL_S", 0.05)

    def epochs(folder: str, seconds: float) -> list[str]:
        return [sys.executable, "-c", f"import json, pathlib, time; run = pathlib.Path({folder!r}); run.mkdir()\n"
                "for e in range(3):\n"
                "    (run / 'state.json').write_text(json.dumps({'epoch': e, 'history': [{}] * (e + 1)}))\n"
                f"    time.sleep({seconds})\n"
                "pathlib.Path('model.bin').write_bytes(b'w')\n"]

    job = Job.from_dict({"name": "train", "steps": [epochs("run", 0.3), ["true"]], "watch": "run",
                         "commit": ["model.bin"]})
    Runner([job], QueueState(repo / "state.json"), repo, tmp_path / "runner", log=lambda m: None).run()
    subjects = subprocess.run([*git, "log", "--format=%s"], capture_output=True, text=True).stdout.splitlines()
    assert subjects == ["Queue: train, finished", "start"]
    assert not resume_point.exists(repo, resume_point.job_ref("train"))
    # with a short interval the copies come: one ref commit replaced at each, the run folder's copy on the branch
    job = Job.from_dict({"name": "train2", "steps": [epochs("run2", 0.6)], "watch": "run2"})
    Runner([job], QueueState(repo / "state.json"), repo, tmp_path / "runner", log=lambda m: None,
           carry_every_s=0.5).run()
    subjects = subprocess.run([*git, "log", "--format=%s"], capture_output=True, text=True).stdout.splitlines()
    copies = [s for s in subjects if s.startswith("Queue: train2, resume copies, after epoch")]
    assert 1 <= len(copies) <= 4 and subjects[0] == "Queue: train2, finished"
    assert resume_point.exists(repo, resume_point.job_ref("train2"))


def test_a_protocol_job_s_progress_says_where_its_eps_star_searches_stand():
    # Every batch of the attacks is stored, so the batches say "done" while the eps* searches (no projected hours)
    # still run: the progress must name them, or the status reads 0 hours left for a job with hours to go.
    from lab.queue.cli import _protocol_progress

    searching = {"state": "searching", "summary": "descent 9 of 15: apgd_ce on 31 images at 0.0312/255",
                 "hours_so_far": 0.1}
    models = [_model("resnet20_fp", done=401, batches=401, hours_so_far=0.8, hours_left=0.0,
                     eps_star={"state": "done", "summary": "done", "hours_so_far": 0.2}),
              _model("resnet20_bnn", done=401, batches=401, hours_so_far=1.0, hours_left=0.0, eps_star=searching),
              _model("resnet20_xnor", done=401, batches=401, hours_so_far=0.9, hours_left=0.0,
                     eps_star={"state": "not started", "summary": "not started", "hours_so_far": 0.0})]
    shown, hours, seconds, _ = _protocol_progress([RunProgress("full.db", True, tuple(models))])
    assert shown == ("batches 1203/1203; eps* 1/3 models, resnet20_bnn: descent 9 of 15: apgd_ce on 31 images at "
                     "0.0312/255")
    assert hours == 0.0 and seconds == pytest.approx(2.7 * 3600)
    every_done = [{**m, "eps_star": {"state": "done", "summary": "done", "hours_so_far": 0.2}} for m in models]
    assert _protocol_progress([RunProgress("full.db", True, tuple(every_done))])[0] == "batches 1203/1203"
    no_search = [{**m, "eps_star": None} for m in models]
    assert _protocol_progress([RunProgress("full.db", True, tuple(no_search))])[0] == "batches 1203/1203"


def test_a_certify_job_s_progress_counts_its_certificates_after_the_search():
    # after the eps* search a --certify run spends its time in the verifier: the status says how many images are
    # certified instead of reading "done"
    from lab.queue.cli import _protocol_progress

    done = {"state": "done", "summary": "done", "hours_so_far": 0.2}
    certifying = {"done": 13, "total": 500, "summary": "13 of 500 images certified", "hours_so_far": 0.02,
                  "hours_left": 0.7}
    models = [_model("resnet20_bnn", done=401, batches=401, hours_so_far=1.5, hours_left=0.7, eps_star=done,
                     certification=certifying)]
    shown = _protocol_progress([RunProgress("full.db", True, tuple(models))])[0]
    assert shown == "batches 401/401; resnet20_bnn: 13 of 500 images certified"
    finished = [{**models[0], "certification": {**certifying, "done": 500, "summary": "done"}}]
    assert _protocol_progress([RunProgress("full.db", True, tuple(finished))])[0] == "batches 401/401"


def test_a_resumable_benchmark_s_run_folder_counts_its_own_steps(tmp_path: Path) -> None:
    # a per-image AutoAttack piece keeps its finished components in a run folder the queue carries like a training's:
    # the commit note counts components, not epochs
    from lab.queue.runner import epoch_note

    state = tmp_path / "state.json"
    state.write_text(json.dumps({"epoch": 2, "unit": "component", "recipe": {"epochs": 8},
                                 "history": [{"epoch": 1}, {"epoch": 2}]}))
    assert epoch_note(state) == ", after component 2 of 8"
    state.write_text(json.dumps({"epoch": 3, "recipe": {"epochs": 40}, "history": [{"epoch": 3, "val_acc": 0.8}]}))
    assert epoch_note(state) == ", after epoch 3 of 40, validation accuracy 80.00%"
