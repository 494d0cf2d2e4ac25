"""The queue's branch copies: a clone of the branch alone (no resume-point refs) resumes a training at its last copied
epoch and finds the outcomes of every protocol job that wrote the shared store; copies of finished trainings leave
the branch's tree, outcome copies stay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from arbibench.evaluation.store import ResultStore
from lab.queue import carry
from lab.queue.jobs import Job, QueueState
from lab.queue.runner import Runner

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


@pytest.fixture()
def repo(tmp_path, monkeypatch) -> Path:
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    import lab.queue.runner as runner_module

    monkeypatch.setattr(runner_module, "POLL_S", 0.05)
    r = tmp_path / "repo"
    r.mkdir()
    subprocess.run(["git", "-C", str(r), "init", "-q"], check=True)
    (r / "README.md").write_text("x\n")
    subprocess.run(["git", "-C", str(r), "add", "README.md"], check=True)
    subprocess.run(["git", "-C", str(r), "commit", "-q", "-m", "start"], check=True)
    return r


def _clone(repo: Path, to: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(repo), str(to)], check=True)
    return to


def _tree(repo: Path) -> set[str]:
    out = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", "HEAD"], capture_output=True,
                         text=True, check=True)
    return set(out.stdout.split())


def _run(repo: Path, jobs: list[Job], tmp_path: Path, name: str) -> int:
    return Runner(jobs, QueueState.load(repo / "zoo_runs" / "state.json"), repo, tmp_path / name,
                  log=lambda m: None, carry_every_s=0.0).run()


# a training that resumes after the last epoch its run folder records, and logs each epoch it runs
EPOCHS = ("import json, pathlib, time; run = pathlib.Path('run'); run.mkdir(exist_ok=True)\n"
          "st = run / 'state.json'; first = json.loads(st.read_text())['epoch'] + 1 if st.exists() else 0\n"
          "for e in range(first, 3):\n"
          "    (run / 'weights.bin').write_bytes(bytes([e]) * 1000)\n"
          "    with open(run / 'log', 'a') as f: f.write(f'epoch {e}\\n')\n"
          "    st.write_text(json.dumps({'epoch': e})); time.sleep(0.4)\n")
CHECK = ("import json, pathlib, sys; st = json.loads(pathlib.Path('run/state.json').read_text()); "
         "sys.exit(0 if st['epoch'] == 2 and pathlib.Path('run/weights.bin').read_bytes() == bytes([2]) * 1000 "
         "else 3)")


def test_a_clone_without_the_resume_refs_resumes_the_training_from_the_branch_copy(repo, tmp_path):
    fail = [sys.executable, "-c", "raise SystemExit(1)"]  # the session ends here
    job = Job.from_dict({"name": "zoo v3: tiny", "steps": [[sys.executable, "-c", EPOCHS], fail], "watch": "run"})
    with pytest.raises(RuntimeError, match="exited with 1"):
        _run(repo, [job], tmp_path, "runner1")
    copy = carry.run_folder_copy(job.name)
    assert copy == "zoo_runs/carry/zoo-v3-tiny.tar.gz"
    assert copy in _tree(repo) and "run/state.json" not in _tree(repo)

    clone = _clone(repo, tmp_path / "clone")
    assert not (clone / "run").exists()
    assert subprocess.run(["git", "-C", str(clone), "for-each-ref", "refs/arbibench"], capture_output=True,
                          text=True).stdout == ""  # a clone does not fetch the resume points
    resumed = Job.from_dict({"name": "zoo v3: tiny", "steps": [[sys.executable, "-c", EPOCHS],
                                                              [sys.executable, "-c", CHECK]], "watch": "run"})
    # the clone is another work tree: the job starts again at step 1, which finds every epoch done
    assert _run(clone, [resumed], tmp_path, "runner2") == 1
    assert (clone / "run" / "log").read_text() == "epoch 0\nepoch 1\nepoch 2\n"
    assert copy not in _tree(clone)  # the finished job's copy leaves the tree ...
    history = subprocess.run(["git", "-C", str(clone), "log", "--format=%s", "--", copy], capture_output=True,
                             text=True).stdout.splitlines()
    assert history[0] == "Queue: zoo v3: tiny, finished" and len(history) >= 2  # ... and stays in its history


def test_a_branch_copy_behind_the_local_run_folder_is_not_restored(repo):
    run = repo / "run"
    run.mkdir()
    (run / "state.json").write_text(json.dumps({"epoch": 4}))
    assert carry.pack_run_folder(repo, "run", "c.tar.gz")
    (run / "state.json").write_text(json.dumps({"epoch": 6}))
    assert carry.unpack_run_folder(repo, "run", "c.tar.gz") == []
    (run / "state.json").unlink()
    assert carry.unpack_run_folder(repo, "run", "c.tar.gz") == ["run/state.json"]
    assert json.loads((run / "state.json").read_text())["epoch"] == 4
    assert not carry.pack_run_folder(repo, "empty", "d.tar.gz")  # nothing to copy before the first epoch


def _write_rows(store: Path, model: str, n: int) -> str:
    with ResultStore(store) as s:
        key = s.register("hash-" + model, model, "pgd", {"attack": "pgd", "n": n})
        s.commit_batch(key, 0, range(n), [True] * n, [i % 2 == 0 for i in range(n)], [0.03] * n, seconds=1.5)
        s.add_flag(key, "unreliable", "a test flag")
    return key


def test_export_keeps_only_the_job_s_models_and_merging_twice_adds_nothing(tmp_path):
    store, copy, fresh = tmp_path / "full.db", tmp_path / "rows.db.gz", tmp_path / "fresh.db"
    key_a = _write_rows(store, "model_a", 7)
    _write_rows(store, "model_b", 5)
    assert carry.export_rows(store, ("model_a",), copy) == 7
    assert carry.merge_rows(copy, fresh) == 7
    assert carry.merge_rows(copy, fresh) == 0
    with ResultStore(fresh) as s:
        out = s.outcomes(key_a)
        assert list(out.sample_index) == list(range(7)) and int(out.adv_correct.sum()) == 4
        assert s.flags(key_a) == {"unreliable": "a test flag"} and s.batch_seconds(key_a) == 1.5
        names = {r[0] for r in s.conn.execute("SELECT model_name FROM evaluations")}
    assert names == {"model_a"}
    assert carry.export_rows(store, (), copy) == 12  # no model named: the whole store


def test_a_clone_starts_its_store_with_the_outcomes_of_every_job_that_wrote_it(repo, tmp_path):
    write = ("from pathlib import Path; from arbibench.evaluation.store import ResultStore\n"
             "with ResultStore(Path('runs/full.db')) as s:\n"
             "    k = s.register('h-{m}', '{m}', 'pgd', {{'n': 3}})\n"
             "    s.commit_batch(k, 0, range(3), [True] * 3, [True, False, True], [0.0] * 3)\n")
    (repo / "runs").mkdir()
    jobs = [Job.from_dict({"name": f"full protocol: {m}", "steps": [[sys.executable, "-c", write.format(m=m)]],
                           "snapshot": ["runs/full.db", "zoo_runs/full.db"]}) for m in ("m1", "m2")]
    assert _run(repo, jobs, tmp_path, "runner1") == 2
    assert {carry.rows_copy(j.name) for j in jobs} <= _tree(repo)  # outcome copies stay on the branch

    clone = _clone(repo, tmp_path / "clone")
    count = ("import sqlite3, sys; n = sqlite3.connect('runs/full.db').execute("
             "'SELECT COUNT(DISTINCT eval_key), COUNT(*) FROM outcomes').fetchone(); sys.exit(0 if n == (2, 6) else 5)")
    findings = Job.from_dict({"name": "findings", "steps": [[sys.executable, "-c", count]],
                              "snapshot": ["runs/full.db", "zoo_runs/full.db"]})
    assert _run(clone, [*jobs, findings], tmp_path, "runner2") == 1

    # a report job has no snapshot of its own: it finds the rows through the --store its step names
    report_clone = _clone(repo, tmp_path / "report_clone")
    report = Job.from_dict({"name": "report", "steps": [[sys.executable, "-c", count, "--store", "runs/full.db"]]})
    assert report.stores == ("runs/full.db",)
    assert _run(report_clone, [*jobs, report], tmp_path, "runner3") == 1


def test_a_job_cut_off_in_another_work_tree_runs_its_steps_again_and_commits_every_output(repo, tmp_path):
    # step 1's card is committed only when the job ends: a clone of the cut-off job must write it again
    card = [sys.executable, "-c", "import pathlib; pathlib.Path('card.json').write_text('{}')"]
    job = Job.from_dict({"name": "cards", "steps": [card, [sys.executable, "-c", "raise SystemExit(1)"]],
                         "commit": ["card.json"]})
    with pytest.raises(RuntimeError):
        _run(repo, [job], tmp_path, "runner1")
    assert "card.json" not in _tree(repo)
    needs_card = [sys.executable, "-c", "import pathlib; pathlib.Path('card.json').read_text()"]
    again = Job.from_dict({"name": "cards", "steps": [card, needs_card], "commit": ["card.json"]})
    clone = _clone(repo, tmp_path / "clone")
    assert _run(clone, [again], tmp_path, "runner2") == 1
    assert "card.json" in _tree(clone)
    state = json.loads((clone / "zoo_runs" / "state.json").read_text())
    assert state["done_steps"] == {"cards": 2} and state["work_tree"] == {}
    # the same work tree resumes at the step where it stopped: step 1 is not run a second time
    (repo / "card.json").unlink()
    with pytest.raises(RuntimeError, match="exited with 1"):
        _run(repo, [again], tmp_path, "runner1")


def test_status_in_a_clone_reads_the_training_s_epochs_from_the_branch_copy(repo, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from lab.__main__ import app

    run = repo / "run"
    run.mkdir()
    (run / "state.json").write_text(json.dumps({"epoch": 3, "history": [{}] * 4, "elapsed_s": 3600.0}))
    copy = carry.run_folder_copy("zoo v3: tiny")
    assert carry.pack_run_folder(repo, "run", copy)
    (run / "state.json").unlink()
    plan = repo / "queue.json"
    plan.write_text(json.dumps({"jobs": [{"name": "zoo v3: tiny", "steps": [["true"]], "watch": "run",
                                          "budget_epochs": 60}]}))
    monkeypatch.chdir(repo)
    out = CliRunner().invoke(app, ["queue", "status", "--plan", str(plan), "--state", str(repo / "state.json"),
                                   "--run-dir", str(tmp_path / "runner")], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    row = next(line for line in out.output.splitlines() if "zoo v3: tiny" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[1] == "stopped mid-job" and cells[3] == "epoch 4 of 60 (the branch's copy)" and cells[4] == "1.00"


def test_a_session_about_to_end_gets_the_training_s_last_epoch_copied_to_the_branch_at_once(repo, tmp_path):
    import threading

    from lab.queue.runner import request_carry

    run_dir = tmp_path / "runner"
    # epoch 0, then a long epoch 1 that the session does not wait for (it ends when the test stops the step)
    slow = ("import json, pathlib, time; run = pathlib.Path('run'); run.mkdir(exist_ok=True)\n"
            "(run / 'weights.bin').write_bytes(b'0' * 100); (run / 'state.json').write_text(json.dumps({'epoch': 0}))\n"
            "while not pathlib.Path('stop').exists(): time.sleep(0.05)\n")
    job = Job.from_dict({"name": "zoo v3: tiny", "steps": [[sys.executable, "-c", slow]], "watch": "run"})
    runner = Runner([job], QueueState.load(repo / "zoo_runs" / "state.json"), repo, run_dir, log=lambda m: None,
                    carry_every_s=1e9)  # the hourly copy never comes: only the request copies
    with pytest.raises(ValueError, match="no queue is running"):
        request_carry(run_dir, timeout_s=1)
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        for _ in range(200):
            if (repo / "run" / "state.json").exists() and (run_dir / "pid").exists():
                break
            threading.Event().wait(0.05)
        (run_dir / "holders").mkdir(parents=True, exist_ok=True)
        (run_dir / "holders" / "tests").write_text("1\n")
        with pytest.raises(ValueError, match="paused for tests"):
            request_carry(run_dir, timeout_s=1)
        (run_dir / "holders" / "tests").unlink()
        copy = carry.run_folder_copy(job.name)
        assert copy not in _tree(repo)
        answer = request_carry(run_dir, timeout_s=20)
        assert answer.job == "zoo v3: tiny" and answer.paths == [copy] and answer.commit is not None
        assert copy in _tree(repo)
        head = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%h %s", "--abbrev=12"],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert head == f"{answer.commit} Queue: zoo v3: tiny, resume copies"  # the step has no history yet
        assert request_carry(run_dir, timeout_s=20).commit is None  # nothing new since: no empty commit
        clone = _clone(repo, tmp_path / "clone")  # what a checkout rebuilt now finds: epoch 0 of the run
        assert sorted(carry.unpack_run_folder(clone, "run", copy)) == ["run/state.json", "run/weights.bin"]
    finally:
        (repo / "stop").write_text("")
        thread.join(timeout=30)
    assert not thread.is_alive() and copy not in _tree(repo)  # the finished job's copy leaves the branch


def test_machines_travel_with_the_rows_and_an_older_copy_without_them_still_merges(tmp_path):
    store, copy, fresh = tmp_path / "full.db", tmp_path / "rows.db.gz", tmp_path / "fresh.db"
    with ResultStore(store) as s:
        key = s.register("hash-m", "m", "pgd", {"n": 4})
        s.commit_batch(key, 0, range(2), [True] * 2, [True, False], [0.0] * 2, seconds=3.0, machine="GPU X (cuda)")
        s.commit_batch(key, 1, range(2, 4), [True] * 2, [True, True], [0.0] * 2, seconds=1.0, machine="CPU Y")
    assert carry.export_rows(store, (), copy) == 4
    with ResultStore(fresh) as s:  # the destination already computed batch 1 itself: it keeps its own machine
        s.register("hash-m", "m", "pgd", {"n": 4})
        s.commit_batch(key, 1, range(2, 4), [True] * 2, [True, True], [0.0] * 2, seconds=2.0, machine="CPU Z")
    assert carry.merge_rows(copy, fresh) == 2
    with ResultStore(fresh) as s:
        assert s.machine_seconds([key]) == {"GPU X (cuda)": 3.0, "CPU Z": 2.0}
    # a copy written before stores named machines: no batch_machines table, merged all the same
    old = tmp_path / "old.db"
    with ResultStore(old) as s:
        s.register("hash-m", "m", "pgd", {"n": 4})
        s.commit_batch(key, 0, range(2), [True] * 2, [True, False], [0.0] * 2, seconds=3.0)
        s.conn.execute("DROP TABLE batch_machines")
    old_copy, target = tmp_path / "old.db.gz", tmp_path / "target.db"
    carry.export_rows(old, (), old_copy)
    assert carry.merge_rows(old_copy, target) == 2
    with ResultStore(target) as s:
        assert s.machine_seconds([key]) == {None: 3.0}


def test_rows_computed_elsewhere_join_a_job_s_copy_and_its_own_rows_stay(tmp_path):
    queue_store, gpu_store = tmp_path / "queue.db", tmp_path / "gpu.db"
    copy, rows = tmp_path / "carry" / "job.db.gz", tmp_path / "rows.db.gz"
    copy.parent.mkdir()
    own = _write_rows(queue_store, "model_a", 6)  # the queue's own batch of model_a, already carried
    carry.export_rows(queue_store, ("model_a",), copy)
    with ResultStore(gpu_store) as s:  # a GPU computed another evaluation of model_a, and one of model_b
        gpu_a = s.register("hash-model_a", "model_a", "square", {"attack": "square"})
        s.commit_batch(gpu_a, 0, range(4), [True] * 4, [False] * 4, [0.03] * 4, seconds=9.0, machine="H (cuda)")
        gpu_b = s.register("hash-model_b", "model_b", "square", {"attack": "square"})
        s.commit_batch(gpu_b, 0, range(3), [True] * 3, [True] * 3, [0.0] * 3, seconds=9.0, machine="H (cuda)")
    carry.export_rows(gpu_store, (), rows)
    assert carry.add_rows(rows, copy, ("model_a",)) == 4
    assert carry.add_rows(rows, copy, ("model_a",)) == 0  # twice: nothing new
    fresh = tmp_path / "fresh.db"
    assert carry.merge_rows(copy, fresh) == 10
    with ResultStore(fresh) as s:
        assert {r[0] for r in s.conn.execute("SELECT model_name FROM evaluations")} == {"model_a"}
        assert s.machine_seconds([gpu_a]) == {"H (cuda)": 9.0} and s.batch_seconds(own) == 1.5
    # a job none of whose models the rows hold gets no copy at all
    other = tmp_path / "carry" / "other.db.gz"
    assert carry.add_rows(rows, other, ("model_c",)) == 0 and not other.exists()


def test_the_add_rows_command_gives_each_unfinished_job_its_models_rows(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from lab.__main__ import app
    from lab.queue import progress
    from lab.queue.progress import RunProgress

    def ask(args: list[str], repo: Path, *, threads: int = 1) -> RunProgress:
        """arbibench's answer for these made-up models: the run's store and models, as progress names them."""
        store, models = args[args.index("--store") + 1], args[args.index("--models") + 1].split(",")
        return RunProgress(store, (repo / store).is_file(), tuple({"model": m} for m in models))

    monkeypatch.setattr(progress, "ask", ask)
    monkeypatch.chdir(tmp_path)
    gpu_store = tmp_path / "gpu.db"
    for model in ("model_a", "model_b"):
        _write_rows(gpu_store, model, 3)
    carry.export_rows(gpu_store, (), tmp_path / "rows.db.gz")

    def job(model: str) -> dict[str, object]:
        return {"name": f"full protocol: {model}", "snapshot": ["runs/q.db", "zoo_runs/q.db"],
                "steps": [["arbibench", "protocol", "run", "cifar10", "--models", model, "--store", "runs/q.db"]]}

    (tmp_path / "zoo_runs").mkdir()
    (tmp_path / "zoo_runs" / "queue.json").write_text(json.dumps({"jobs": [job("model_a"), job("model_b")]}))
    (tmp_path / "zoo_runs" / "queue_state.json").write_text(json.dumps({"finished": {"full protocol: model_b": "x"}}))
    missing = CliRunner().invoke(app, ["queue", "add-rows", "none.db.gz", "--store", "runs/q.db"])
    assert missing.exit_code == 2 and "no rows at none.db.gz" in missing.output
    wrong = CliRunner().invoke(app, ["queue", "add-rows", "rows.db.gz"])  # default store: no job writes it
    assert wrong.exit_code == 2 and "--store" in wrong.output
    (tmp_path / "runs").mkdir()
    _write_rows(tmp_path / "runs" / "q.db", "model_c", 2)  # the queue's store, as a running job left it
    result = CliRunner().invoke(app, ["queue", "add-rows", "rows.db.gz", "--store", "runs/q.db"])
    assert result.exit_code == 0, result.output
    assert "full protocol: model_a: 3 new outcome rows" in result.output
    assert "3 new outcome rows in runs/q.db" in result.output  # the running job's next copy keeps them
    with ResultStore(tmp_path / "runs" / "q.db") as s:
        names = {r[0] for r in s.conn.execute("SELECT model_name FROM evaluations")}
    assert names == {"model_a", "model_c"}  # model_b's job is finished: its rows stay out of the store too
    assert (tmp_path / carry.rows_copy("full protocol: model_a")).is_file()
    assert not (tmp_path / carry.rows_copy("full protocol: model_b")).exists()  # finished: takes nothing


def _rows(store: Path) -> set[tuple[object, ...]]:
    with ResultStore(store) as s:
        return set(s.conn.execute("SELECT * FROM outcomes")) | set(s.conn.execute("SELECT *, 'b' FROM batches"))


def test_a_copy_leaves_out_the_rows_another_copy_of_its_store_holds(tmp_path):
    # a job that reads every model of the store (a card rewrite) carries only what it added; together, all of it
    store, first, every = tmp_path / "full.db", tmp_path / "first.db.gz", tmp_path / "every.db.gz"
    key_a = _write_rows(store, "model_a", 7)
    assert carry.export_rows(store, ("model_a",), first) == 7
    _write_rows(store, "model_b", 5)
    assert carry.export_rows(store, (), every, held_elsewhere=[first]) == 5
    assert carry.export_rows(store, (), tmp_path / "whole.db.gz") == 12  # without: everything again
    damaged = tmp_path / "damaged.db.gz"
    damaged.write_bytes(first.read_bytes()[:100])
    assert carry.export_rows(store, (), tmp_path / "kept.db.gz", held_elsewhere=[damaged]) == 12  # holds nothing
    fresh = tmp_path / "fresh.db"
    assert carry.merge_rows(every, fresh) == 5
    with ResultStore(fresh) as s:  # model_a's evaluation and flag still travel: a few rows
        assert s.flags(key_a) == {"unreliable": "a test flag"} and len(s.outcomes(key_a).sample_index) == 0
    assert carry.merge_rows(first, fresh) == 7
    assert _rows(fresh) == _rows(store)


def test_compacting_copies_keeps_every_row_of_their_union_once(tmp_path):
    store = tmp_path / "full.db"
    for model, n in (("model_a", 40), ("model_b", 30), ("model_c", 20)):
        _write_rows(store, model, n)
    copies = [tmp_path / f"{name}.db.gz" for name in ("a", "ab", "all")]
    carry.export_rows(store, ("model_a",), copies[0])
    carry.export_rows(store, ("model_a", "model_b"), copies[1])
    carry.export_rows(store, (), copies[2])  # written before copies left anything out: 40 + 70 + 90 rows
    first = copies[0].read_bytes()
    sizes = carry.compact(copies)
    assert all(after <= before for before, after in sizes.values()) and sizes[copies[2]][1] < sizes[copies[2]][0]
    assert copies[0].read_bytes() == first  # the first job's copy lost nothing: not rewritten
    merged, counts = tmp_path / "merged.db", []
    for copy in copies:
        one = tmp_path / f"one-{copy.name}.db"
        carry.merge_rows(copy, one)
        counts.append(len(_rows(one)))
        carry.merge_rows(copy, merged)
    assert _rows(merged) == _rows(store)
    assert sum(counts) == len(_rows(store))  # each row in one copy only


def test_the_compact_command_rewrites_only_finished_jobs_copies(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from lab.__main__ import app

    monkeypatch.chdir(tmp_path)
    store = tmp_path / "runs" / "q.db"
    store.parent.mkdir()
    for model in ("model_a", "model_b"):
        _write_rows(store, model, 10)

    def job(name: str) -> dict[str, object]:
        return {"name": name, "snapshot": ["runs/q.db", "zoo_runs/q.db"], "steps": [["true"]]}

    (tmp_path / "zoo_runs").mkdir()
    names = ("full protocol: model_a", "cards: every model", "findings (running)")
    (tmp_path / "zoo_runs" / "queue.json").write_text(json.dumps({"jobs": [job(n) for n in names]}))
    (tmp_path / "zoo_runs" / "queue_state.json").write_text(
        json.dumps({"finished": {names[0]: "x", names[1]: "y"}}))
    for name, models in zip(names, [("model_a",), (), ()], strict=True):
        Path(carry.rows_copy(name)).parent.mkdir(parents=True, exist_ok=True)
        carry.export_rows(store, models, Path(carry.rows_copy(name)))
    running_before = Path(carry.rows_copy(names[2])).read_bytes()
    result = CliRunner().invoke(app, ["queue", "compact"])
    assert result.exit_code == 0, result.output
    assert "queue: 2 copies" in result.output
    assert Path(carry.rows_copy(names[2])).read_bytes() == running_before  # the unfinished job's copy: untouched
    fresh = tmp_path / "fresh.db"
    for name in names[:2]:
        carry.merge_rows(Path(carry.rows_copy(name)), fresh)
    assert _rows(fresh) == _rows(store)
    one = tmp_path / "cards.db"
    assert carry.merge_rows(Path(carry.rows_copy(names[1])), one) == 10  # model_b's rows alone


def test_outputs_that_fail_the_plan_s_checks_stay_uncommitted_until_they_pass(repo, tmp_path):
    # the job writes a card the test suite refuses: the queue stops, nothing reaches the branch; fixed, it commits
    write = [sys.executable, "-c", "import pathlib; pathlib.Path('card.json').write_text('{\"acc\": 120}')"]
    (repo / "test_card.py").write_text(
        "import json, pathlib\n\n\ndef test_acc_is_a_percentage():\n"
        "    assert 0 <= json.loads(pathlib.Path('card.json').read_text())['acc'] <= 100\n")
    plan = repo / "zoo_runs" / "queue.json"
    plan.parent.mkdir(exist_ok=True)
    job = {"name": "cards", "steps": [write], "commit": ["card.json"]}
    plan.write_text(json.dumps({"checks": ["test_card.py"], "jobs": [job]}))
    state = repo / "zoo_runs" / "state.json"

    def run() -> int:
        return Runner([], QueueState.load(state), repo, tmp_path / "runner", log=lambda m: None, plan=plan).run()

    with pytest.raises(RuntimeError, match="(?s)fail the plan's checks.*acc_is_a_percentage"):
        run()
    assert "card.json" not in _tree(repo)
    assert json.loads(state.read_text())["done_steps"] == {"cards": 1}
    assert "cards" not in QueueState.load(state).finished
    (repo / "card.json").write_text('{"acc": 91.5}')  # fixed by hand (or by the code that writes it, then rerun)
    assert run() == 1
    assert "card.json" in _tree(repo) and "cards" in QueueState.load(state).finished
    plan.write_text(json.dumps({"checks": "test_card.py", "jobs": [job]}))
    with pytest.raises(ValueError, match="list of test paths"):
        run()


def test_new_weights_are_checked_by_every_test_that_names_their_model(repo, tmp_path):
    # a job ships new weights of "m1": the tests naming "m1" run before the commit, those naming only others do not
    ckpt = repo / "ckpt"
    ckpt.mkdir()
    for name in ("m1", "m1_at", "m2"):
        (ckpt / f"{name}.safetensors").write_bytes(b"old")
    subprocess.run(["git", "-C", str(repo), "add", "ckpt"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "weights"], check=True)
    tests = repo / "tests"
    tests.mkdir()
    (tests / "test_m1.py").write_text(
        "import pathlib\n\n\ndef test_m1_keeps_its_property():\n"
        "    assert pathlib.Path('ckpt/m1.safetensors').read_bytes() != b'bad', \"m1\"\n")
    (tests / "test_others.py").write_text(
        "def test_never_selected():\n    raise AssertionError(\"m1_at\" + \"m2\")\n")
    write = [sys.executable, "-c", "import pathlib; pathlib.Path('ckpt/m1.safetensors').write_bytes(b'bad')"]
    plan = repo / "zoo_runs" / "queue.json"
    plan.parent.mkdir(exist_ok=True)
    plan.write_text(json.dumps({"jobs": [{"name": "ship m1", "steps": [write], "commit": ["ckpt"]}]}))
    from lab.queue.runner import tests_naming_changed_weights

    assert tests_naming_changed_weights(repo, ["ckpt"]) == ()  # nothing changed yet
    state = repo / "zoo_runs" / "state.json"

    def run() -> int:
        return Runner([], QueueState.load(state), repo, tmp_path / "runner", log=lambda m: None, plan=plan).run()

    with pytest.raises(RuntimeError, match="(?s)fail the plan's checks.*test_m1_keeps_its_property"):
        run()
    assert tests_naming_changed_weights(repo, ["ckpt"]) == ("tests/test_m1.py",)
    assert subprocess.run(["git", "-C", str(repo), "diff", "--quiet", "HEAD", "--", "ckpt"]).returncode == 1
    (ckpt / "m1.safetensors").write_bytes(b"new")  # weights that keep the property
    assert run() == 1
    assert (ckpt / "m1.safetensors").read_bytes() == b"new" and "ship m1" in QueueState.load(state).finished
    assert subprocess.run(["git", "-C", str(repo), "diff", "--quiet", "HEAD", "--", "ckpt"]).returncode == 0
