"""The cifar10-c preset end to end on a small regenerated set: per-sample outcomes in the store, resume, the
metrics and their intervals, the corruptions cards, the leaderboard panel and the CLI."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from arbibench.cli import app
from arbibench.data.cifar10c import read_cell
from arbibench.data.corruptions.generate import generate_cifar10c
from arbibench.evaluation.corruption_metrics import mean_corruption_accuracy, relative_accuracy
from arbibench.evaluation.store import ResultStore
from arbibench.leaderboard import build_site
from arbibench.leaderboard.cards import CardError
from arbibench.leaderboard.corruptions import load_corruption_cards, parse_corruption_card
from arbibench.machine import computed_on
from arbibench.protocol import CorruptionProtocol, describe, get_protocol
from arbibench.protocol.cards import corruption_card, write_corruption_card
from arbibench.protocol.corruptions import run_corruption_protocol

N = 16
SMALL = ("gaussian_noise", "fog")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("c10c_protocol")
    (root / "cifar10").symlink_to(data_dir / "cifar10")
    generate_cifar10c(N, seed=0, data_dir=root, corruptions=SMALL)
    return root


@pytest.fixture(scope="module")
def protocol() -> CorruptionProtocol:
    return replace(get_protocol("cifar10-c"), corruptions=SMALL, severities=(1, 5), batch_size=5, n_bootstrap=200)


def test_preset() -> None:
    p = get_protocol("cifar10-c")
    assert isinstance(p, CorruptionProtocol) and len(p.corruptions) == 15 and p.severities == (1, 2, 3, 4, 5)
    assert p.corruptions[0] == "shot_noise" and p.n_examples is None
    q = get_protocol("cifar10-c", quick=True)
    assert q.quick and q.n_examples == 500 and "quick" in q.label
    assert dict(describe(p))["threat model"] == "corruptions"
    with pytest.raises(ValueError, match="cifar10-c"):
        get_protocol("cifar10c")


def test_run_resume_and_cards(root: Path, protocol: CorruptionProtocol, tmp_path: Path) -> None:
    db_path = tmp_path / "c.db"
    with ResultStore(db_path) as db:
        results = run_corruption_protocol(protocol, ["resnet20_bnn"], db, data_dir=root, progress=False)
        assert [r.model_name for r in results] == ["resnet20_fp", "resnet20_bnn"]  # the FP twin comes along
        n_batches = db.conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
        n_outcomes = db.conn.execute("SELECT COUNT(*) FROM outcomes").fetchone()[0]
        assert n_batches == 2 * (1 + 4) * (N // 5 + 1) and n_outcomes == 2 * (1 + 4) * N
        # per image: the corrupted image's L2 distance to the clean one is stored as its perturbation
        key, = db.conn.execute("SELECT eval_key FROM evaluations WHERE attack = 'fog@5' AND model_name = "
                               "'resnet20_fp'").fetchone()
        assert (db.outcomes(key).perturbation > 0).all()
        db.conn.execute("DELETE FROM outcomes WHERE batch_index = 1")  # as if killed: batch 1 of every cell lost
        db.conn.execute("DELETE FROM batches WHERE batch_index = 1")
        db.conn.commit()
    with ResultStore(db_path) as db:
        again = run_corruption_protocol(protocol, ["resnet20_bnn", "resnet20_fp"], db, data_dir=root, progress=False)
        assert db.conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0] == n_batches
        # a card's seconds are the compute time its batches stored, not the time a rerun took to read them back
        for r in again:
            keys = [k for k, in db.conn.execute("SELECT eval_key FROM evaluations WHERE model_name = ?",
                                                (r.model_name,))]
            assert len(keys) == 1 + 4 and r.seconds == pytest.approx(sum(db.batch_seconds(k) for k in keys))
            assert r.seconds > 0 and r.machine == computed_on(torch.device("cpu"))  # the seconds' clock
        read_back = run_corruption_protocol(protocol, ["resnet20_bnn"], db, data_dir=root, progress=False)
        assert [r.seconds for r in read_back] == [r.seconds for r in again]
    fp, bnn = results
    for a, b in zip(results, again, strict=True):
        assert a.mca == b.mca and a.cells == b.cells and np.array_equal(a.correct, b.correct)
    assert bnn.fp_twin == "resnet20_fp" and bnn.relative_fp is not None and fp.relative_fp is None
    assert bnn.relative_fp.value == pytest.approx(bnn.mca.value / fp.mca.value)
    assert fp.mca.value == pytest.approx(fp.correct.mean())
    assert fp.source == "regenerated" and fp.generator_seed == 0
    for r in results:
        assert r.mca.low <= r.mca.value <= r.mca.high
        assert r.relative_clean.value == pytest.approx(r.mca.value / r.clean.value)
    info = tmp_path / "model_info"
    path = write_corruption_card(bnn, info)
    assert path == info / "cifar10" / "corruptions" / "resnet20_bnn.json"
    card = json.loads(path.read_text())
    assert card["corruptions_acc"] == round(100 * bnn.mca.value, 2) and card["threat_model"] == "corruptions"
    assert card["seconds"] == round(bnn.seconds, 1) and card["machine"] == bnn.machine
    assert card["corruptions_regenerated"] is True and "regenerated" in card["footnote"]
    cells = "".join(f"{c} {s} {hashlib.sha256(read_cell(c, s, root, N)[0].tobytes()).hexdigest()}\n"
                    for c in sorted(SMALL) for s in (1, 5))
    assert card["corruptions_data_sha256"] == hashlib.sha256(cells.encode()).hexdigest()  # the images measured
    assert set(card["corruptions"]) == set(SMALL) and set(card["corruptions"]["fog"]["severities"]) == {"1", "5"}
    write_corruption_card(fp, info)
    parsed = load_corruption_cards(info)
    assert {c.name for c in parsed} == {"resnet20_fp", "resnet20_bnn"}
    assert next(c for c in parsed if c.name == "resnet20_bnn").corruptions_acc_vs_fp_twin is not None
    # the schema's round trip on a real result: the card read back equals the card written, field by field
    assert next(c for c in parsed if c.name == "resnet20_bnn") == corruption_card(bnn)
    site = build_site(info, tmp_path / "site", "png")
    html = (site.out / "index.html").read_text()
    assert 'id="board-cifar10_corruptions"' in html and "regenerated" in html and "gaussian noise" in html
    assert (site.out / "figures" / "heatmap_corruptions_cifar10.png").is_file()


def test_metrics_by_hand() -> None:
    correct = np.zeros((2, 2, 4), dtype=bool)
    correct[0, 0] = [1, 1, 1, 0]
    correct[1, 1] = [1, 0, 0, 0]
    clean = np.array([1, 1, 1, 1], dtype=bool)
    m = mean_corruption_accuracy(correct, clean, n_boot=100)
    assert m["mca"].value == pytest.approx(4 / 16) and m["corruption"][0].value == pytest.approx(3 / 8)
    assert m["cells"][0][0].value == 0.75 and m["relative_clean"].value == pytest.approx(0.25)
    assert relative_accuracy(correct, correct, n_boot=50).to_list() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="do not match"):
        mean_corruption_accuracy(correct, clean[:3])


def test_bad_card_names_field(tmp_path: Path) -> None:
    with pytest.raises(CardError, match="corruptions_source"):
        parse_corruption_card(tmp_path / "x.json", {"name": "m", "dataset": "cifar10", "clean_acc": 90,
                                                    "corruptions_acc": 70, "corruptions": {"fog": {"acc": 70}},
                                                    "corruptions_source": "made up"})
    with pytest.raises(CardError, match=r"corruptions.fog.acc"):
        parse_corruption_card(tmp_path / "x.json", {"name": "m", "dataset": "cifar10", "clean_acc": 90,
                                                    "corruptions_acc": 70, "corruptions": {"fog": {"acc": 170}},
                                                    "corruptions_source": "official"})


def test_cli(root: Path, tmp_path: Path, data_dir: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["corruptions", "generate", "--n-examples", "3", "--data-dir", str(data_dir),
                              "--out", str(tmp_path / "CIFAR-10-C"), "--corruptions", "fog,contrast"])
    assert out.exit_code == 0, out.output
    assert "regenerated CIFAR-10-C" in out.output
    again = runner.invoke(app, ["corruptions", "generate", "--n-examples", "3", "--data-dir", str(data_dir),
                                "--out", str(tmp_path / "CIFAR-10-C"), "--corruptions", "fog,contrast"])
    assert again.exit_code == 0 and "already there" in again.output  # the same set: kept
    assert "already there" not in out.output and "replaced" not in out.output  # a fresh one is not "already there"
    other = runner.invoke(app, ["corruptions", "generate", "--n-examples", "3", "--data-dir", str(data_dir),
                                "--out", str(tmp_path / "CIFAR-10-C"), "--corruptions", "snow"])
    assert other.exit_code == 0 and "already there" not in other.output
    assert "replaced the set that was there (fog, contrast; seed 0, 3 images)" in other.output
    twice = runner.invoke(app, ["corruptions", "generate", "--n-examples", "3", "--data-dir", str(data_dir),
                                "--out", str(tmp_path / "twice"), "--corruptions", "fog,fog"])
    assert twice.exit_code == 2 and "names fog twice" in twice.output and not (tmp_path / "twice").exists()
    gridded = runner.invoke(app, ["corruptions", "generate", "--n-examples", "3", "--data-dir", str(data_dir),
                                  "--out", str(tmp_path / "elsewhere"), "--corruptions", "fog",
                                  "--grid", str(tmp_path / "g.png")])
    assert gridded.exit_code == 2 and "--grid reads DATA_DIR/CIFAR-10-C" in gridded.output
    assert not (tmp_path / "elsewhere").exists()  # refused before the set was generated
    bad = runner.invoke(app, ["corruptions", "generate", "--n-examples", "0", "--data-dir", str(data_dir)])
    assert bad.exit_code == 2 and "--n-examples must be" in bad.output
    shown = runner.invoke(app, ["protocol", "show", "cifar10-c"])
    assert shown.exit_code == 0 and "elastic_transform" in shown.output
    (tmp_path / "empty").mkdir()
    missing = runner.invoke(app, ["protocol", "run", "cifar10-c", "--models", "resnet20_fp", "--data-dir",
                                  str(tmp_path / "empty"), "--store", str(tmp_path / "s.db")])
    assert missing.exit_code == 2 and "arbibench corruptions generate" in missing.output
