"""Protocol progress: the evaluations a run plans, their committed batches read from its store, and the projection."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from arbibench.evaluation.store import ResultStore
from arbibench.operations.progress import EvaluationProgress, ProtocolProgress, protocol_progress
from arbibench.protocol import presets
from arbibench.protocol.presets import _spec
from arbibench.protocol.run import run_protocol


def _tiny(name: str = "cifar10", quick: bool = False, demo: bool = False) -> presets.Protocol:
    return dataclasses.replace(
        presets.PROTOCOLS["cifar10"], n_white_box=24, n_black_box=8, batch_size=10, sweep_eps=("1/255", "2/255"),
        n_sweep=12, eps_star_attacks=(), quick=True,
        attacks=(_spec("fgsm", "white-box"), _spec("square", "black-box", max_queries=20)),
    )


def test_a_finished_run_is_complete_and_a_deleted_evaluation_is_missing(tmp_path, data_dir):
    protocol = _tiny()
    with ResultStore(tmp_path / "s.db") as db:
        before = protocol_progress(protocol, "resnet20_bnn", db, data_dir=data_dir)
        # white-box 24 images in 3 batches (clean + fgsm), black-box 8 in 1 (clean + square), sweep 12 in 2
        # (one clean pass shared by both eps, apgd_ce at each eps)
        assert (before.done, before.batches) == (0, 3 * 2 + 1 * 2 + 2 * 3)
        run_protocol(protocol, ["resnet20_bnn"], db, data_dir=data_dir, progress=False)
        after = protocol_progress(protocol, "resnet20_bnn", db, data_dir=data_dir)
        assert after.done == after.batches == before.batches
        assert after.hours_left() == (0.0, 0)
        # another model not started on the same store: each evaluation priced at bnn's cost per image of the same
        # evaluation (same images, attack and eps), not at a bound
        other = protocol_progress(protocol, "resnet20_xnor", db, data_dir=data_dir)
        assert other.done == 0 and other.batches == after.batches
        assert [e.label for e in other.evaluations] == [e.label for e in after.evaluations]
        for mine, theirs in zip(other.evaluations, after.evaluations, strict=True):
            assert mine.elsewhere_per_sample == pytest.approx(theirs.per_sample)
        assert other.seconds_left() == pytest.approx([e.seconds for e in after.evaluations])
        db.conn.execute("DELETE FROM batches WHERE eval_key IN "
                        "(SELECT eval_key FROM evaluations WHERE attack = 'fgsm')")
        db.conn.commit()
        partial = protocol_progress(protocol, "resnet20_bnn", db, data_dir=data_dir)
    assert partial.done == after.done - 3
    hours, unknown = partial.hours_left()
    assert unknown == 0 and hours > 0  # fgsm is counted at the dearest measured cost per batch


def test_the_projection_uses_each_evaluation_s_own_cost():
    p = ProtocolProgress("m", "cifar10", [EvaluationProgress("a", 10, 5, 50.0), EvaluationProgress("b", 4, 0, 0.0),
                                          EvaluationProgress("c", 2, 2, 1.0)])
    hours, unknown = p.hours_left()
    assert unknown == 0 and hours == pytest.approx((5 * 10 + 4 * 10) / 3600)
    nothing = ProtocolProgress("m", "cifar10", [EvaluationProgress("a", 3, 0, 0.0)])
    assert nothing.hours_left() == (0.0, 1)


def test_an_unstarted_evaluation_costs_what_the_same_attack_cost_per_image_elsewhere_in_the_run():
    # white-box APGD-CE: 2 s an image; a sweep's APGD-CE on 300 images (3 batches) not started; a dear black-box
    # attack at 100 s an image, and an unstarted attack measured nowhere, which takes the dearest cost per batch
    white = EvaluationProgress("white-box: apgd_ce", 10, 10, 2000.0, attack="apgd_ce", samples=1000, samples_done=1000)
    sweep = EvaluationProgress("sweep eps=0.01: apgd_ce", 3, 0, 0.0, attack="apgd_ce", samples=300)
    dear = EvaluationProgress("black-box: simba", 3, 1, 20000.0, attack="simba", samples=500, samples_done=200)
    other = EvaluationProgress("black-box: rays", 3, 0, 0.0, attack="rays", samples=500)
    hours, unknown = ProtocolProgress("m", "cifar10", [white, sweep, dear, other]).hours_left()
    assert unknown == 0
    assert hours == pytest.approx((300 * 2.0 + 2 * 20000.0 + 3 * 20000.0) / 3600)


def test_each_evaluation_is_priced_and_the_parts_add_up():
    white = EvaluationProgress("white-box: fgsm", 4, 4, 40.0, attack="fgsm", samples=400, samples_done=400)
    black = EvaluationProgress("black-box: square", 2, 1, 360.0, attack="square", samples=200, samples_done=100)
    sweep = EvaluationProgress("sweep eps=0.01: fgsm", 2, 0, 0.0, attack="fgsm", samples=100)
    p = ProtocolProgress("m", "cifar10", [white, black, sweep])
    assert p.seconds_left() == [0.0, 360.0, pytest.approx(100 * 0.1)]
    parts = p.parts()
    assert list(parts) == ["white-box", "black-box", "sweep"]
    assert parts["black-box"] == (pytest.approx(0.1), pytest.approx(0.1))
    assert parts["sweep"] == (0.0, pytest.approx(10 / 3600))
    assert sum(left for _, left in parts.values()) == pytest.approx(p.hours_left()[0])
    unpriced = ProtocolProgress("m", "cifar10", [EvaluationProgress("black-box: rays", 3, 0, 0.0, attack="rays")])
    assert unpriced.seconds_left() == [None] and unpriced.parts() == {"black-box": (0.0, 0.0)}


def test_the_same_evaluation_on_another_model_prices_before_the_same_attack_in_this_run():
    # the sweep's small eps: 1 s an image on another model, against 0.1 s for this run's APGD-CE at the protocol eps
    white = EvaluationProgress("white-box: apgd_ce", 2, 2, 20.0, attack="apgd_ce", samples=200, samples_done=200)
    sweep = EvaluationProgress("sweep eps=0.004: apgd_ce", 2, 0, 0.0, attack="apgd_ce", samples=100,
                               elsewhere_per_sample=1.0)
    started = EvaluationProgress("black-box: hsja", 2, 1, 30.0, attack="hsja", samples=100, samples_done=50,
                                 elsewhere_per_sample=9.0)
    p = ProtocolProgress("m", "cifar10", [white, sweep, started])
    assert p.seconds_left() == [0.0, pytest.approx(100.0), pytest.approx(30.0)]  # a started one keeps its own cost


def test_the_model_s_own_quick_card_prices_what_its_full_run_has_not_reached():
    # an adversarially trained model keeps its images through AutoAttack: another model's cost would price its run
    # several times too low, so its own quick card's cost is taken where it is the dearer
    card_dear = EvaluationProgress("white-box: autoattack", 4, 0, 0.0, attack="autoattack", samples=400,
                                   elsewhere_per_sample=0.01, card_per_sample=5.0)
    store_dear = EvaluationProgress("black-box: hsja", 2, 0, 0.0, attack="hsja", samples=100,
                                    elsewhere_per_sample=2.0, card_per_sample=0.5)
    started = EvaluationProgress("white-box: pgd", 4, 2, 20.0, attack="pgd", samples=400, samples_done=200,
                                 card_per_sample=9.0)
    p = ProtocolProgress("m", "cifar10", [card_dear, store_dear, started])
    assert p.seconds_left() == [pytest.approx(400 * 5.0), pytest.approx(100 * 2.0), pytest.approx(20.0)]


def test_protocol_progress_reads_the_quick_card_of_a_full_run(tmp_path, data_dir):
    full = dataclasses.replace(_tiny(), quick=False, attacks=(_spec("fgsm", "white-box"),
                                                              _spec("square", "black-box", max_queries=5000)))
    card = {"name": "resnet20_bnn", "quick": True, "protocol": "cifar10", "seconds": 25.0,
            "n_examples": {"white-box": 500, "black-box": 100},
            "attacks": {"fgsm": {"family": "white-box", "seconds": 5.0},
                        "square": {"family": "black-box", "seconds": 20.0}}}
    folder = tmp_path / "model_info" / "cifar10" / "Linf"
    folder.mkdir(parents=True)
    (folder / "resnet20_bnn.json").write_text(json.dumps(card))
    with ResultStore(tmp_path / "s.db") as db:
        p = protocol_progress(full, "resnet20_bnn", db, data_dir=data_dir, model_info=tmp_path / "model_info")
        quick = protocol_progress(_tiny(), "resnet20_bnn", db, data_dir=data_dir, model_info=tmp_path / "model_info")
        (folder / "resnet20_bnn.json").write_text(json.dumps({**card, "quick": False}))
        after_full_card = protocol_progress(full, "resnet20_bnn", db, data_dir=data_dir,
                                            model_info=tmp_path / "model_info")
    priced = {e.label: e.card_per_sample for e in p.evaluations}
    # fgsm: 5 s for 500 images; square: 20 s for 100 images, times 5000 / 1000 queries (the quick preset's budget)
    assert priced["white-box: fgsm"] == pytest.approx(0.01)
    assert priced["black-box: square"] == pytest.approx(1.0)
    assert priced["white-box: clean"] is None and priced["sweep eps=0.003922: apgd_ce"] is None
    assert p.seconds_left()[[e.label for e in p.evaluations].index("black-box: square")] == pytest.approx(8 * 1.0)
    # a quick run is priced by its own batches, and a full card is no quick card
    assert all(e.card_per_sample is None for e in quick.evaluations + after_full_card.evaluations)


def test_progress_takes_every_option_of_protocol_run_with_its_defaults():
    """A run's command line with `run` turned into `progress` reports that run: a script that watches runs (the lab's
    queue) never reads their options, and an option renamed in one command and not the other fails here."""
    import typer

    from arbibench.protocol.cli import protocol_app

    group = typer.main.get_command(protocol_app)
    run, progress = (group.commands[c] for c in ("run", "progress"))
    by_name = {p.name: p for p in progress.params}
    for param in run.params:
        assert param.name in by_name, f"protocol progress lacks {param.opts} of protocol run"
        twin = by_name[param.name]
        assert (twin.opts, twin.secondary_opts, twin.default) == (param.opts, param.secondary_opts, param.default), \
            param.name


def _progress_json(args: list[str]) -> dict:
    from arbibench.cli import app

    result = CliRunner().invoke(app, ["protocol", "progress", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_progress_json_counts_each_model_and_evaluation_of_a_run_s_command_line(tmp_path, data_dir, monkeypatch):
    from arbibench.cli import app

    monkeypatch.setattr(presets, "get_protocol", _tiny)
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    store = str(tmp_path / "s.db")
    # nothing stored yet: the models the run names, no store, nothing planned (a quick run has no card projection)
    before = _progress_json(["cifar10", "--models", "resnet20_bnn,resnet20_fp", "--store", store])
    assert before["store_found"] is False and before["store"] == store
    assert [(m["model"], m["batches"], m["done"], m["quick_card_hours"]) for m in before["models"]] == \
        [("resnet20_bnn", None, 0, None), ("resnet20_fp", None, 0, None)]
    with ResultStore(store) as db:
        run_protocol(_tiny(), ["resnet20_bnn"], db, data_dir=data_dir, progress=False)
    # the run's own options that change nothing counted are taken as they are
    run_line = ["cifar10", "--models", "resnet20_bnn,resnet20_fp", "--store", store, "--backend", "processes",
                "--workers", "2", "--device", "cpu"]
    after = _progress_json(run_line)
    bnn, fp = after["models"]
    assert after["store_found"] is True and (bnn["done"], bnn["batches"], bnn["hours_left"]) == (14, 14, 0.0)
    assert sum(e["batches"] for e in bnn["evaluations"]) == 14 and fp["done"] == 0 and fp["batches"] == 14
    assert {e["label"] for e in bnn["evaluations"]} >= {"white-box: fgsm", "black-box: square"}
    # --no-sweep: the sweep's evaluations are not the run's, so not counted
    no_sweep = _progress_json([*run_line, "--no-sweep"])["models"][0]
    assert no_sweep["batches"] < 14 and not any(e["label"].startswith("sweep") for e in no_sweep["evaluations"])
    refused = CliRunner().invoke(app, ["protocol", "progress", *run_line, "--only-attacks", "fgsm", "--json"])
    assert refused.exit_code == 2 and "--only-attacks" in refused.output


def test_the_progress_command_prints_each_model(tmp_path, data_dir, monkeypatch):
    from arbibench.cli import app

    monkeypatch.setattr(presets, "get_protocol", _tiny)
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    missing = CliRunner().invoke(app, ["protocol", "progress", "--models", "resnet20_bnn", "--store",
                                       str(tmp_path / "none.db")])
    assert missing.exit_code == 2 and "has not started" in missing.output
    (tmp_path / "s.db").touch()  # a store that holds nothing yet
    result = CliRunner().invoke(app, ["protocol", "progress", "--models", "resnet20_bnn", "--store",
                                      str(tmp_path / "s.db")])
    assert result.exit_code == 0, result.output
    assert "0/14" in result.output
    with ResultStore(tmp_path / "s.db") as db:
        run_protocol(_tiny(), ["resnet20_bnn"], db, data_dir=data_dir, progress=False)
    detail = CliRunner().invoke(app, ["protocol", "progress", "--models", "resnet20_bnn", "--store",
                                      str(tmp_path / "s.db"), "--evaluations"], env={"COLUMNS": "200"})
    assert detail.exit_code == 0, detail.output
    assert "14/14" in detail.output
    for row in ("white-box: fgsm", "black-box: square", "white-box (all)", "black-box (all)", "sweep (all)"):
        assert row in detail.output


def test_batches_a_gpu_computed_are_done_but_price_nothing():
    # 4 of 10 batches done: 2 on a GPU (1 s each), 2 on a CPU (50 s each): the 6 left cost the CPU's 50 s each
    partly = EvaluationProgress("white-box: autoattack", 10, 4, 102.0, attack="autoattack", samples=1000,
                                samples_done=400, gpu_done=2, gpu_seconds=2.0, gpu_samples=200)
    assert (partly.per_batch, partly.per_sample) == (pytest.approx(50.0), pytest.approx(0.5))
    # all done batches on a GPU: priced as if not started (here by its quick card), not at the GPU's 1 s a batch
    gpu_only = EvaluationProgress("black-box: rays", 3, 1, 1.0, attack="rays", samples=300, samples_done=100,
                                  card_per_sample=2.0, gpu_done=1, gpu_seconds=1.0, gpu_samples=100)
    assert gpu_only.per_batch is None and gpu_only.per_sample is None
    p = ProtocolProgress("m", "cifar10", [partly, gpu_only])
    assert p.seconds_left() == [pytest.approx(6 * 50.0), pytest.approx(2 * 100 * 2.0)]
    # the GPU's batches are done, and the hours so far are the CPU's alone
    assert (p.done, p.gpu_done) == (5, 3) and p.hours_so_far == pytest.approx(100.0 / 3600)
    assert p.parts() == {"white-box": (pytest.approx(100.0 / 3600), pytest.approx(300.0 / 3600)),
                         "black-box": (0.0, pytest.approx(400.0 / 3600))}


def test_protocol_progress_reads_which_batches_a_gpu_computed(tmp_path, data_dir, monkeypatch):
    from arbibench.cli import app

    protocol = _tiny()
    with ResultStore(tmp_path / "s.db") as db:
        run_protocol(protocol, ["resnet20_bnn"], db, data_dir=data_dir, progress=False)
        (key,) = db.conn.execute("SELECT eval_key FROM evaluations WHERE attack = 'fgsm'").fetchone()
        cpu_batch = db.conn.execute("SELECT seconds, n_samples FROM batches WHERE eval_key = ? AND batch_index = 2",
                                    (key,)).fetchone()
        # white-box fgsm's first two batches (of three) recomputed on a GPU, which took a hundredth of the time
        db.conn.execute("UPDATE batch_machines SET machine = 'NVIDIA H200 (cuda)' WHERE eval_key = ? "
                        "AND batch_index < 2", (key,))
        db.conn.execute("UPDATE batches SET seconds = seconds / 100 WHERE eval_key = ? AND batch_index < 2", (key,))
        db.conn.commit()
        seeded = protocol_progress(protocol, "resnet20_bnn", db, data_dir=data_dir)
        other = protocol_progress(protocol, "resnet20_xnor", db, data_dir=data_dir)
    fgsm = next(e for e in seeded.evaluations if e.label == "white-box: fgsm")
    assert (fgsm.done, fgsm.gpu_done, fgsm.gpu_samples) == (3, 2, 20)
    assert fgsm.per_batch == pytest.approx(cpu_batch[0]) and fgsm.per_sample == pytest.approx(cpu_batch[0] / 4)
    assert cpu_batch[1] == 4
    # another model's fgsm, not started, is priced at the CPU's batch alone
    mine = next(e for e in other.evaluations if e.label == "white-box: fgsm")
    assert mine.elsewhere_per_sample == pytest.approx(cpu_batch[0] / 4)
    # the other evaluations, all on the CPU, have no GPU batch
    assert all(e.gpu_done == 0 for e in seeded.evaluations if e is not fgsm)
    monkeypatch.setattr(presets, "get_protocol", _tiny)
    detail = CliRunner().invoke(app, ["protocol", "progress", "--models", "resnet20_bnn", "--store",
                                      str(tmp_path / "s.db"), "--evaluations"], env={"COLUMNS": "200"})
    assert detail.exit_code == 0, detail.output
    assert "3/3 (2 on a GPU)" in detail.output and "14/14 (2 on a GPU)" in detail.output


def _with_eps_star() -> presets.Protocol:
    """The tiny run with an eps* search: FGSM after 4 random corners, radii 16/255 down to 0.25/255 (7 descent
    radii), one bisection round."""
    return dataclasses.replace(_tiny(), eps_star_attacks=("fgsm",), eps_star_draws=4, eps_star_rounds=1,
                               eps_star_factor=2.0, eps_star_floor=0.25 / 255)


def _eps_star_keys(db: ResultStore) -> list[tuple[str, float]]:
    """(key, eps) of the stored FGSM evaluations on the black-box images: the eps* search's, largest radius first."""
    rows = db.conn.execute("SELECT eval_key, spec FROM evaluations WHERE attack = 'fgsm'").fetchall()
    out = []
    for key, spec in rows:
        s = json.loads(spec)
        if s["n_examples"] <= 8:  # each radius attacks the black-box images left; white-box FGSM has 24
            out.append((key, float(s["eps"])))
    return sorted(out, key=lambda r: -r[1])


def test_progress_replays_the_eps_star_search_to_the_radius_the_store_lacks(tmp_path, data_dir):
    protocol = _with_eps_star()
    with ResultStore(tmp_path / "s.db") as db:
        before = protocol_progress(protocol, "resnet20_fp", db, data_dir=data_dir).eps_star
        assert before is not None and before.state == "not started"
        # the search starts at eps_max = 2 x 8/255 with the corners, on every black-box image
        assert (before.phase, before.step, before.steps) == ("descent", 1, 7)
        assert before.radius == pytest.approx(16 / 255) and (before.attack, before.images) == ("corners", 8)
        run_protocol(protocol, ["resnet20_fp"], db, data_dir=data_dir, progress=False)
        done = protocol_progress(protocol, "resnet20_fp", db, data_dir=data_dir)
        assert done.eps_star is not None and done.eps_star.state == "done" and done.eps_star.seconds > 0
        assert done.hours_so_far == pytest.approx(
            (sum(e.cpu_seconds for e in done.evaluations) + done.eps_star.seconds) / 3600)
        # FGSM's batches at the largest radius it ran are lost: the replay stops there, after the corners
        key, eps = _eps_star_keys(db)[0]
        db.conn.execute("DELETE FROM batches WHERE eval_key = ?", (key,))
        db.conn.commit()
        waiting = protocol_progress(protocol, "resnet20_fp", db, data_dir=data_dir).eps_star
    assert waiting is not None and waiting.state == "searching"
    assert (waiting.attack, waiting.radius) == ("fgsm", pytest.approx(eps))
    assert 0 < waiting.images <= 8 and waiting.seconds < done.eps_star.seconds
    assert waiting.describe().startswith(("descent", "bisection")) and "fgsm on" in waiting.describe()
    # a run without eps* has nothing to replay
    assert protocol_progress(_tiny(), "resnet20_bnn", ResultStore(tmp_path / "t.db"), data_dir=data_dir).eps_star \
        is None


def test_progress_counts_a_certify_run_s_certificates_and_computes_none(tmp_path, data_dir, monkeypatch):
    # the verifier takes seconds an image, so a stand-in hands back certificates at once: what is tested is that the
    # run's certificates are the ones progress counts (the same store key) and that progress never runs the verifier
    import arbibench.protocol.certified as certified_module
    from arbibench.verify.certify import ImageCertificate

    calls: list[int] = []

    def stand_in(model, x, y, *, indices, on_image, **kwargs):  # noqa: ANN001, ANN202 - certify's signature
        calls.append(len(indices))
        for i, label in zip(indices.tolist(), y.tolist(), strict=True):
            on_image(ImageCertificate(int(i), int(label), True, 1e-4 / 255, 1.0, (), 2.0, None))

    monkeypatch.setattr(certified_module, "certify", stand_in)
    protocol = dataclasses.replace(_with_eps_star(), eps_star_certify=True)
    with ResultStore(tmp_path / "s.db") as db:
        before = protocol_progress(protocol, "resnet20_bnn", db, data_dir=data_dir)
        assert before.certification is not None
        assert (before.certification.done, before.certification.total) == (0, 8)
        assert before.certification.seconds_left() is None and before.hours_left()[1] >= 1  # nothing prices it yet
        run_protocol(protocol, ["resnet20_bnn"], db, data_dir=data_dir, progress=False)
        assert calls == [8]
        done = protocol_progress(protocol, "resnet20_bnn", db, data_dir=data_dir)
        assert done.certification is not None and done.certification.describe() == "done"
        assert (done.certification.done, done.certification.seconds) == (8, pytest.approx(16.0))
        assert done.hours_left() == (0.0, 0)
        assert done.hours_so_far == pytest.approx((sum(e.cpu_seconds for e in done.evaluations)
                                                   + done.eps_star.seconds + 16.0) / 3600)
        # three certificates lost (a run cut short): counted as left, priced at the mean of the five done
        db.conn.execute("DELETE FROM certificates WHERE rowid IN (SELECT rowid FROM certificates LIMIT 3)")
        db.conn.commit()
        cut = protocol_progress(protocol, "resnet20_bnn", db, data_dir=data_dir)
        assert cut.certification is not None and cut.certification.describe() == "5 of 8 images certified"
        assert cut.certification.seconds_left() == pytest.approx(6.0)
        assert cut.hours_left() == (pytest.approx(6.0 / 3600), 0)
        assert cut.certification.to_json()["summary"] == "5 of 8 images certified"
    assert calls == [8]  # progress replayed the search three times and certified nothing
    # a run without --certify counts no certificates
    with ResultStore(tmp_path / "s.db") as db:
        assert protocol_progress(_with_eps_star(), "resnet20_bnn", db, data_dir=data_dir).certification is None
