"""BNN vs FP twin findings: paired bootstrap of the mean-ACC_norm difference and the verdict it supports."""

from __future__ import annotations

import numpy as np
import pytest

from arbibench.evaluation.bootstrap import Estimate
from arbibench.evaluation.findings import (
    LESS_ROBUST,
    MORE_ROBUST,
    NOT_DISTINGUISHABLE,
    PairedOutcomes,
    TwinComparison,
    column_findings,
    compare_to_twin,
    twin_findings,
    verdict,
    verdict_counts,
)


def _rows(comparisons: list[TwinComparison]) -> list[dict]:
    """The comparisons as the findings document holds them, which the leaderboard renders."""
    return [c.to_dict() for c in comparisons]


def _outcomes(rng: np.random.Generator, n: int, clean_p: float, robust_p: dict[str, float]) -> PairedOutcomes:
    clean = rng.random(n) < clean_p
    return PairedOutcomes(clean, {a: clean & (rng.random(n) < p) for a, p in robust_p.items()})


def test_verdict_follows_the_interval():
    assert verdict(Estimate(0.1, 0.02, 0.2)) == MORE_ROBUST
    assert verdict(Estimate(-0.1, -0.2, -0.01)) == LESS_ROBUST
    assert verdict(Estimate(0.05, -0.01, 0.1)) == NOT_DISTINGUISHABLE
    assert verdict(Estimate(0.0, 0.0, 0.0)) == NOT_DISTINGUISHABLE


def test_clear_differences_get_clear_verdicts_and_the_point_value_is_the_paper_metric():
    rng = np.random.default_rng(0)
    strong = _outcomes(rng, 500, 0.8, {"pgd": 0.6, "square": 0.7})
    weak = _outcomes(rng, 500, 0.9, {"pgd": 0.05, "square": 0.1})
    row = compare_to_twin("bnn", "fp", "white-box", strong, weak, n_boot=500)
    expected_bnn = np.mean([strong.adversarial[a].mean() / strong.clean.mean() for a in ("pgd", "square")])
    expected_fp = np.mean([weak.adversarial[a].mean() / weak.clean.mean() for a in ("pgd", "square")])
    assert row.bnn.value == pytest.approx(expected_bnn) and row.fp.value == pytest.approx(expected_fp)
    assert row.difference.value == pytest.approx(expected_bnn - expected_fp)
    assert row.difference.low <= row.difference.value <= row.difference.high
    assert row.verdict == MORE_ROBUST and row.difference.low > 0
    assert compare_to_twin("bnn", "fp", "white-box", weak, strong, n_boot=500).verdict == LESS_ROBUST


def test_same_or_broken_models_are_not_distinguishable():
    rng = np.random.default_rng(1)
    a = _outcomes(rng, 300, 0.8, {"pgd": 0.3})
    same = compare_to_twin("bnn", "fp", "black-box", a, a, n_boot=300)
    assert same.difference.to_list() == [0.0, 0.0, 0.0] and same.verdict == NOT_DISTINGUISHABLE
    broken = PairedOutcomes(a.clean, {"pgd": np.zeros(300, bool)})
    zero = compare_to_twin("bnn", "fp", "black-box", broken, broken, n_boot=300)
    assert zero.bnn.value == zero.fp.value == 0.0 and zero.verdict == NOT_DISTINGUISHABLE


def test_verdict_matches_the_interval_on_random_cases():
    rng = np.random.default_rng(2)
    for _ in range(20):
        p, q = rng.random(2)
        row = compare_to_twin("b", "f", "sweep pgd", _outcomes(rng, 200, 0.8, {"e1": p, "e2": p / 2}),
                              _outcomes(rng, 200, 0.8, {"e1": q, "e2": q / 2}), n_boot=200, seed=3)
        assert row.verdict == verdict(row.difference)
        assert row.difference.low <= row.difference.value + 1e-12 <= row.difference.high + 2e-12


def test_pairing_uses_the_same_images_and_only_shared_columns():
    rng = np.random.default_rng(4)
    a = _outcomes(rng, 100, 0.8, {"pgd": 0.5, "fab": 0.5})
    b = _outcomes(rng, 100, 0.8, {"pgd": 0.5})
    assert compare_to_twin("b", "f", "white-box", a, b, n_boot=100).columns == ("pgd",)
    with pytest.raises(ValueError, match="same 100 images"):
        compare_to_twin("b", "f", "white-box", a, _outcomes(rng, 99, 0.8, {"pgd": 0.5}))
    with pytest.raises(ValueError, match="share no attack"):
        compare_to_twin("b", "f", "white-box", a, _outcomes(rng, 100, 0.8, {"square": 0.5}))


def test_twin_findings_pairs_each_bnn_with_its_twin_in_every_shared_setting():
    rng = np.random.default_rng(5)
    out = {
        "fp": {"white-box": _outcomes(rng, 200, 0.9, {"pgd": 0.0}), "black-box": _outcomes(rng, 50, 0.9, {"sq": 0.2})},
        "bnn": {"white-box": _outcomes(rng, 200, 0.7, {"pgd": 0.4})},
        "orphan": {"white-box": _outcomes(rng, 200, 0.7, {"pgd": 0.4})},
    }
    rows = twin_findings(out, {"bnn": "fp", "fp": "fp", "orphan": "missing"}, n_boot=200)
    assert [(r.model, r.twin, r.setting) for r in rows] == [("bnn", "fp", "white-box")]
    assert rows[0].verdict == MORE_ROBUST
    assert verdict_counts(rows) == {MORE_ROBUST: 1, LESS_ROBUST: 0, NOT_DISTINGUISHABLE: 0}


def test_column_findings_show_which_attack_carries_a_family_verdict():
    rng = np.random.default_rng(6)
    n = 2000
    clean = np.ones(n, bool)
    broken = np.zeros(n, bool)
    # both networks fall to 0% under pgd; the BNN keeps more images under fgsm only
    bnn = {"white-box": PairedOutcomes(clean, {"fgsm": rng.random(n) < 0.3, "pgd": broken})}
    fp = {"white-box": PairedOutcomes(clean, {"fgsm": rng.random(n) < 0.1, "pgd": broken, "cw": broken})}
    family = twin_findings({"bnn": bnn, "fp": fp}, {"bnn": "fp"}, n_boot=300)
    rows = column_findings({"bnn": bnn, "fp": fp}, {"bnn": "fp"}, n_boot=300)
    assert family[0].verdict == MORE_ROBUST
    assert [(r.setting, r.columns) for r in rows] == [("white-box", ("fgsm",)), ("white-box", ("pgd",))]
    assert [r.verdict for r in rows] == [MORE_ROBUST, NOT_DISTINGUISHABLE]
    assert rows[0].bnn.value == pytest.approx(bnn["white-box"].adversarial["fgsm"].mean())
    # the family's point value is the mean of its columns' (one clean pass for all of them)
    assert family[0].difference.value == pytest.approx(np.mean([r.difference.value for r in rows]))


def test_column_findings_split_a_sweep_whose_mean_hides_opposite_verdicts():
    rng = np.random.default_rng(7)
    n = 2000
    clean = np.ones(n, bool)
    bnn = {"sweep pgd": PairedOutcomes(clean, {"1/255": rng.random(n) < 0.2, "2/255": rng.random(n) < 0.4})}
    fp = {"sweep pgd": PairedOutcomes(clean, {"1/255": rng.random(n) < 0.4, "2/255": rng.random(n) < 0.2})}
    family = twin_findings({"bnn": bnn, "fp": fp}, {"bnn": "fp"}, n_boot=300)
    rows = column_findings({"bnn": bnn, "fp": fp}, {"bnn": "fp"}, n_boot=300)
    assert family[0].verdict == NOT_DISTINGUISHABLE
    assert [(r.columns[0], r.verdict) for r in rows] == [("1/255", LESS_ROBUST), ("2/255", MORE_ROBUST)]


def test_the_page_says_which_white_box_verdicts_autoattack_does_not_back():
    from arbibench.leaderboard.findings import _autoattack_sentence

    rng = np.random.default_rng(8)
    n = 2000
    clean, broken = np.ones(n, bool), np.zeros(n, bool)
    fp = {"white-box": PairedOutcomes(clean, {"fgsm": rng.random(n) < 0.1, "autoattack": broken})}
    # "masked": more robust under FGSM only; "robust": also under AutoAttack
    masked = {"white-box": PairedOutcomes(clean, {"fgsm": rng.random(n) < 0.4, "autoattack": broken})}
    robust = {"white-box": PairedOutcomes(clean, {"fgsm": rng.random(n) < 0.4, "autoattack": rng.random(n) < 0.2})}
    outcomes, twins = {"masked": masked, "robust": robust, "fp": fp}, {"masked": "fp", "robust": "fp"}
    family = _rows(twin_findings(outcomes, twins, n_boot=300))
    columns = _rows(column_findings(outcomes, twins, n_boot=300))
    assert [r["verdict"] for r in family] == [MORE_ROBUST, MORE_ROBUST]
    text = _autoattack_sentence(columns, family)
    assert "of 2 pairs: more robust 1, not distinguishable 1." in text
    assert 'For 1 of them the white-box row above says "more robust"' in text
    # README's paragraph has no rows above it: the counts alone
    assert _autoattack_sentence(columns, family, name_carried=False) == text.split(" For ")[0]
    without = [r for r in columns if r["columns"][0] != "autoattack"]
    assert _autoattack_sentence(without, family) == ""
    backed = [r for r in columns if r["model"] == "robust"]
    assert "For" not in _autoattack_sentence(backed, family)  # AutoAttack backs the robust pair's verdict


def test_the_columns_that_separate_pairs_are_named_in_the_settings_order():
    from arbibench.leaderboard.findings import _separating_columns

    rng = np.random.default_rng(9)
    n = 2000
    clean = np.ones(n, bool)
    fp = {"white-box": PairedOutcomes(clean, {a: rng.random(n) < 0.1 for a in ("fgsm", "pgd", "cw_linf")})}
    # the first pair separates only under cw_linf, the second only under fgsm; pgd separates neither
    first = {"white-box": PairedOutcomes(clean, {"fgsm": fp["white-box"].adversarial["fgsm"],
                                                 "pgd": fp["white-box"].adversarial["pgd"],
                                                 "cw_linf": rng.random(n) < 0.5})}
    second = {"white-box": PairedOutcomes(clean, {"fgsm": rng.random(n) < 0.5,
                                                  "pgd": fp["white-box"].adversarial["pgd"],
                                                  "cw_linf": fp["white-box"].adversarial["cw_linf"]})}
    columns = column_findings({"a": first, "b": second, "fp": fp}, {"a": "fp", "b": "fp"}, n_boot=300)
    assert _separating_columns(_rows(columns)).endswith("white-box fgsm, cw_linf (2 of 3).")


def test_the_page_reads_adversarially_trained_pairs_apart_from_the_claims():
    from arbibench.leaderboard.findings import _trained_pair_lines, _trained_pair_sentence
    from arbibench.protocol.claims import standard_twin

    rng = np.random.default_rng(9)
    n = 2000
    clean = np.ones(n, bool)

    def white(fgsm: float, autoattack: float) -> dict[str, PairedOutcomes]:
        return {"white-box": PairedOutcomes(clean, {"fgsm": rng.random(n) < fgsm,
                                                    "autoattack": rng.random(n) < autoattack})}

    # the AT BNN beats its AT twin under FGSM and loses under AutoAttack; the standard pair is not an AT pair
    outcomes = {"resnet20_bireal_at": white(0.8, 0.1), "resnet20_fp_at": white(0.5, 0.45),
                "resnet20_bnn": white(0.3, 0.0), "resnet20_fp": white(0.1, 0.0)}
    twins = {"resnet20_bireal_at": "resnet20_fp_at", "resnet20_bnn": "resnet20_fp"}
    family = _rows(twin_findings(outcomes, twins, n_boot=300))
    columns = _rows(column_findings(outcomes, twins, n_boot=300))
    standard = [t for t in twins.values() if standard_twin(t)]  # as the findings document lists them
    assert standard == ["resnet20_fp"]
    lines = _trained_pair_lines(family, columns, None, standard)
    assert lines[1] == "## Adversarially trained pairs"
    pair_lines = [x for x in lines if x.startswith("- ")]
    assert len(pair_lines) == 1 and pair_lines[0].startswith("- `resnet20_bireal_at` against `resnet20_fp_at`:")
    assert "AutoAttack alone less robust, -0.3" in pair_lines[0]
    assert "Its white-box attacks disagree: more robust under fgsm; less robust under autoattack." in pair_lines[0]
    # an earlier report's verdict is set beside each setting's
    at_row = next(f for f in family if f["model"] == "resnet20_bireal_at")
    previous = {"protocol": "cifar10 (quick)", "findings": [{**at_row, "verdict": "moved"}]}
    assert "], moved in cifar10 (quick); AutoAttack" in _trained_pair_lines(family, columns, previous, standard)[-1]
    previous["findings"] = [at_row]
    assert "], the same in cifar10 (quick); AutoAttack" in _trained_pair_lines(family, columns, previous, standard)[-1]
    sentence = _trained_pair_sentence(family, columns, standard)
    assert sentence.startswith("Adversarially trained pairs, outside the paper's claims: `resnet20_bireal_at`")
    assert sentence.endswith(f"AutoAttack alone {LESS_ROBUST}.") and "resnet20_bnn" not in sentence
    standard_only = [f for f in family if f["model"] == "resnet20_bnn"]
    assert _trained_pair_lines(standard_only, columns, None, standard) == []
    assert _trained_pair_sentence(standard_only, columns, standard) == ""


# --- on a real protocol run: resnet20_bnn against resnet20_fp on CIFAR-10 test images -------------------------------


@pytest.fixture(scope="module")
def tiny_protocol():
    from dataclasses import replace

    from arbibench.protocol import BLACK_BOX, WHITE_BOX, AttackSpec, get_protocol

    return replace(
        get_protocol("cifar10", quick=True),
        attacks=(AttackSpec("fgsm", WHITE_BOX), AttackSpec("square", BLACK_BOX, (("max_queries", 50),)),
                 AttackSpec("transfer", BLACK_BOX, (("attack", "fgsm"),))),
        n_white_box=60, n_black_box=20, sweep_attack="fgsm", sweep_eps=("1/255", "4/255"), n_sweep=40,
        eps_star_attacks=(), batch_size=30,
    )


@pytest.fixture(scope="module")
def twin_run(tiny_protocol, data_dir, tmp_path_factory):
    from arbibench.evaluation.store import ResultStore
    from arbibench.protocol.run import run_protocol

    db_path = tmp_path_factory.mktemp("findings") / "store.db"
    with ResultStore(db_path) as db:
        results = run_protocol(tiny_protocol, ["resnet20_fp", "resnet20_bnn"], db, data_dir=data_dir, progress=False)
    return results, db_path


def test_protocol_findings_pair_each_family_and_the_sweep(twin_run):
    from arbibench.protocol import BLACK_BOX, WHITE_BOX
    from arbibench.protocol.run import protocol_findings, self_transfer_attacks

    results, _ = twin_run
    rows = protocol_findings(results)
    by_setting = {r.setting: r for r in rows}
    assert set(by_setting) == {WHITE_BOX, BLACK_BOX, "sweep fgsm"}
    fp, bnn = results
    for family in (WHITE_BOX, BLACK_BOX):
        row = by_setting[family]
        assert (row.model, row.twin) == ("resnet20_bnn", "resnet20_fp")
        assert row.n_examples == bnn.n_examples[family] and row.verdict == verdict(row.difference)
    # white-box: the point values are the protocol's own mean ACC_norm of each model
    white = by_setting[WHITE_BOX]
    assert white.bnn.value == pytest.approx(bnn.rs_mean[WHITE_BOX]) and white.fp.value == pytest.approx(
        fp.rs_mean[WHITE_BOX])
    # black-box: the FP twin is its own transfer surrogate, so transfer is white-box against it and left out
    assert self_transfer_attacks(fp) == {"transfer"} and self_transfer_attacks(bnn) == set()
    black = by_setting[BLACK_BOX]
    assert black.columns == ("square",)
    norm = {(r.model_name, a.name): a.acc_norm for r in results for a in r.attacks}
    assert black.bnn.value == pytest.approx(norm["resnet20_bnn", "square"])
    assert black.fp.value == pytest.approx(norm["resnet20_fp", "square"])
    assert {a.name for a in fp.family(BLACK_BOX)} == {"square", "transfer"}  # the card keeps it
    sweep = by_setting["sweep fgsm"]
    assert sweep.columns == ("1/255", "4/255") and sweep.n_examples == 40
    assert sweep.bnn.value == pytest.approx(np.mean([p["acc_norm"] for p in bnn.sweep]))
    # each attack and eps on its own: the family rows' columns, one row each, at the cards' ACC_norm
    columns = protocol_findings(results, per_column=True)
    assert [(r.setting, r.columns[0]) for r in columns] == [(f.setting, c) for f in rows for c in f.columns]
    for r in columns:
        if r.setting == "sweep fgsm":
            expected = next(p["acc_norm"] for p in bnn.sweep if p["eps_text"] == r.columns[0])
        else:
            expected = norm["resnet20_bnn", r.columns[0]]
        assert r.bnn.value == pytest.approx(expected) and r.verdict == verdict(r.difference)


def test_cli_report_reads_the_store_and_writes_json(twin_run, tiny_protocol, tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    import arbibench.cli as cli
    from arbibench.evaluation.store import ResultStore
    from arbibench.protocol.cli import common

    _, db_path = twin_run
    monkeypatch.setattr(common, "protocol_preset", lambda name, quick, demo=False: tiny_protocol)
    with ResultStore(db_path) as db:
        before = db.conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
    out = tmp_path / "findings.json"
    res = CliRunner().invoke(cli.app, ["protocol", "report", "cifar10", "--quick", "--models",
                                       "resnet20_fp,resnet20_bnn", "--store", str(db_path), "--json", str(out)],
                             env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "BNN vs FP twin" in res.output and "sweep fgsm" in res.output
    assert "each attack and eps on its own" not in res.output  # the terminal keeps the family rows by default
    per_attack = CliRunner().invoke(cli.app, ["protocol", "report", "cifar10", "--quick", "--models",
                                              "resnet20_fp,resnet20_bnn", "--store", str(db_path), "--per-attack"],
                                    env={"COLUMNS": "250"})
    assert per_attack.exit_code == 0, per_attack.output
    assert "each attack and eps on its own" in per_attack.output
    for setting in ("white-box: fgsm", "black-box: square", "sweep fgsm: 1/255", "sweep fgsm: 4/255"):
        assert setting in per_attack.output
    assert "ARBiBench's claims on these models" in res.output and "Different BNNs behave alike" in res.output
    payload = json.loads(out.read_text())
    assert {r["setting"] for r in payload["findings"]} == {"white-box", "black-box", "sweep fgsm"}
    assert [(r["setting"], r["columns"]) for r in payload["per_column"]] == [
        ("white-box", ["fgsm"]), ("black-box", ["square"]), ("sweep fgsm", ["1/255"]), ("sweep fgsm", ["4/255"])]
    for r in payload["findings"]:
        assert r["verdict"] == verdict(Estimate(*r["difference"]))
    with ResultStore(db_path) as db:  # everything came from the store
        assert db.conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0] == before
    alone = CliRunner().invoke(cli.app, ["protocol", "report", "cifar10", "--models", "resnet20_bnn",
                                         "--store", str(db_path)])
    assert alone.exit_code == 2 and "include both" in alone.output


def _check_claims_section(text: str, rows: list[str], earlier: dict) -> None:
    """The paper's claims on the page, read off the same verdicts, beside what the earlier report made of them."""
    claims = text.split("## The paper's claims on this zoo", 1)[1].split("\n## ", 1)[0].splitlines()
    claim_rows = [line for line in claims if line.startswith("| ") and "---" not in line][1:]
    assert len(claim_rows) == 4 and claims[4].endswith("| cifar10 (quick) |")
    white = next(r for r in claim_rows if "under white-box attacks" in r)
    now = [c.strip() for c in next(r for r in rows if "| white-box (" in r).strip("|").split("|")][7]  # verdict
    before = next(f for f in earlier["findings"] if f["setting"] == "white-box")["verdict"]  # the edited one
    assert f"| 1 | {int(now == 'less robust')} | {int(now == 'more robust')} |" in white
    assert white.endswith(f"| {'holds (1 of 1)' if before == 'less robust' else 'does not hold (0 of 1)'} |")


def _check_column_section(columns: str) -> None:
    """Each attack and eps on its own: counted over the pairs, then the pair's rows beside the earlier report's."""
    column_rows = [line for line in columns.splitlines() if line.startswith("| `resnet20_bnn` | `resnet20_fp` |")]
    assert [[c.strip() for c in r.split("|")[3:5]] for r in column_rows] == [
        ["white-box", "fgsm"], ["black-box", "square"], ["sweep fgsm", "1/255"], ["sweep fgsm", "4/255"]]
    assert "Verdicts that differ from cifar10 (quick)'s: 2 of 4." in columns
    # counted over the pairs first: one pair here, so each attack's row holds its one verdict
    summary = [line for line in columns.split("Each pair:", 1)[0].splitlines() if line.startswith("| ")][2:]
    verdicts = {(c[0], c[1]): c for c in ([x.strip() for x in r.strip("|").split("|")] for r in summary)}
    assert list(verdicts) == [("white-box", "fgsm"), ("black-box", "square"), ("sweep fgsm", "1/255"),
                              ("sweep fgsm", "4/255")]
    heads = ["more robust", "less robust", "not distinguishable"]
    for row in column_rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        counts = verdicts[cells[2], cells[3]]
        assert counts[2] == "1" and counts[3 + heads.index(cells[8])] == "1" and sorted(counts[3:]) == ["0", "0", "1"]


def test_stored_only_report_computes_nothing_and_writes_the_dated_page(twin_run, tiny_protocol, tmp_path,
                                                                       monkeypatch, data_dir):
    import json
    import shutil
    import sqlite3

    from typer.testing import CliRunner

    import arbibench.cli as cli
    from arbibench.protocol.cli import common

    _, db_path = twin_run
    db = tmp_path / "store.db"
    shutil.copy(db_path, db)
    monkeypatch.setattr(common, "protocol_preset", lambda name, quick, demo=False: tiny_protocol)
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))

    def batches() -> int:
        with sqlite3.connect(db) as conn:
            return conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0]

    before = batches()
    earlier = tmp_path / "earlier.json"
    assert CliRunner().invoke(cli.app, ["protocol", "report", "cifar10", "--models", "resnet20_fp,resnet20_bnn",
                                        "--store", str(db), "--json", str(earlier)]).exit_code == 0
    payload = json.loads(earlier.read_text())
    payload["protocol"] = "cifar10 (quick)"
    flipped = payload["findings"][0]
    flipped["verdict"] = "more robust" if flipped["verdict"] != "more robust" else "less robust"
    for row in payload["per_column"][:2]:
        row["verdict"] = "more robust" if row["verdict"] != "more robust" else "less robust"
    earlier.write_text(json.dumps(payload))

    page = tmp_path / "findings.md"
    args = ["protocol", "report", "cifar10", "--models", "resnet20_fp,resnet20_bnn,resnet20_reactnet", "--store",
            str(db), "--stored-only", "--markdown", str(page), "--compare", str(earlier)]
    res = CliRunner().invoke(cli.app, args, env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert batches() == before  # resnet20_reactnet, never run into this store, was not computed
    text = page.read_text()
    assert text.startswith("# Findings: BNNs against their FP twins, protocol cifar10")
    assert "`resnet20_reactnet`: resnet20_reactnet: no evaluation of it in" in text  # left out without planning it
    families, columns = text.split("## Each attack and each eps on its own", 1)
    rows = [line for line in families.splitlines() if line.startswith("| `resnet20_bnn` | `resnet20_fp` |")]
    assert len(rows) == len(payload["findings"]) == 3
    assert f"Verdicts that differ from cifar10 (quick)'s: 1 of {len(rows)}." in families
    _check_column_section(columns)
    assert "--stored-only" in text  # the page names the command that made it
    _check_claims_section(text, rows, payload)

    # a model with one batch missing is left out, so its pair has no finding and the page says so
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM batches WHERE rowid = (SELECT MAX(rowid) FROM batches)")
    res = CliRunner().invoke(cli.app, args, env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    text = page.read_text()
    assert "No BNN's protocol is complete together with its FP twin's yet." in text
    assert "no evaluation of it in" in text and text.count("batches in") == 1  # reactnet, and the model that lost one

    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    res = CliRunner().invoke(cli.app, [*args[:-1], str(bad)])
    assert res.exit_code == 2 and "not the --json of `arbibench protocol report`" in res.output


def test_the_readme_paragraph_links_the_page_and_says_which_claims_hold(twin_run, tiny_protocol, tmp_path,
                                                                        monkeypatch, data_dir):
    """`protocol report` writes the page and the findings document; only `leaderboard markdown --readme` edits
    README, with the paragraph it renders from that document."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    import arbibench.cli as cli
    from arbibench.leaderboard.findings import FINDINGS_BEGIN, FINDINGS_END
    from arbibench.leaderboard.markdown import README_BEGIN, README_END
    from arbibench.protocol.cli import common

    _, db = twin_run
    monkeypatch.setattr(common, "protocol_preset", lambda name, quick, demo=False: tiny_protocol)
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    readme = tmp_path / "README.md"
    top = f"{README_BEGIN}\n{README_END}\n"
    readme.write_text(f"# top\n\n{top}\n{FINDINGS_BEGIN}\nnot yet\n{FINDINGS_END}\n\nthe rest\n")
    page, document = tmp_path / "docs" / "findings.md", tmp_path / "findings.json"
    page.parent.mkdir()
    monkeypatch.chdir(tmp_path)  # the page is named as a user names it, relative to where the report runs
    args = ["protocol", "report", "cifar10", "--models", "resnet20_fp,resnet20_bnn,resnet20_reactnet", "--store",
            str(db), "--stored-only", "--markdown", "docs/findings.md"]
    res = CliRunner().invoke(cli.app, [*args, "--readme", str(readme)])
    assert res.exit_code == 2 and "No such option" in res.output  # the report edits no README
    res = CliRunner().invoke(cli.app, [*args, "--json", str(document)], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert f"leaderboard markdown --readme README.md --findings {document}" in res.output
    assert "not yet" in readme.read_text()
    assert json.loads(document.read_text())["page"] == "docs/findings.md"
    model_info = Path(__file__).resolve().parents[1] / "model_info"
    board = ["leaderboard", "markdown", "--model-info", str(model_info), "--out", str(tmp_path / "LEADERBOARD.md")]
    res = CliRunner().invoke(cli.app, [*board, "--readme", str(readme), "--findings", str(document)])
    assert res.exit_code == 0, res.output
    assert "replaced weights" not in res.output  # the report measured the checkpoints shipped now
    text = readme.read_text()
    assert text.startswith("# top\n\n") and f"{FINDINGS_BEGIN}\n**[Findings, protocol " in text
    assert text.endswith(f"\n{FINDINGS_END}\n\nthe rest\n")
    paragraph = text.split(FINDINGS_BEGIN)[1].split(FINDINGS_END)[0]
    assert "](docs/findings.md)**: 3 BNN-versus-twin comparisons over the 2 models" in paragraph
    assert "Not complete yet: `resnet20_reactnet`." in paragraph
    # each tested claim with the status the page gives it
    claim_rows = page.read_text().split("## The paper's claims on this zoo", 1)[1].splitlines()
    white = next(r for r in claim_rows if "under white-box attacks" in r).strip("|").split("|")
    assert f"under white-box attacks: {white[-1].strip()}" in paragraph
    # which attacks the verdicts rest on, read off the page's per-attack rows
    columns = page.read_text().split("## Each attack and each eps on its own", 1)[1]
    fgsm = next(r for r in columns.splitlines() if r.startswith("| `resnet20_bnn` | `resnet20_fp` | white-box | fgsm"))
    differs = fgsm.strip("|").split("|")[8].strip() != "not distinguishable"
    assert f"white-box {'fgsm (1' if differs else 'none (0'} of 1)" in paragraph
    # a document without a page, or --findings without --readme: one error naming the fix
    no_page = tmp_path / "no_page.json"
    no_page.write_text(json.dumps({**json.loads(document.read_text()), "page": None}))
    res = CliRunner().invoke(cli.app, [*board, "--readme", str(readme), "--findings", str(no_page)])
    assert res.exit_code == 2 and "names no page" in res.output
    res = CliRunner().invoke(cli.app, [*board, "--findings", str(document)])
    assert res.exit_code == 2 and "pass --readme too" in res.output



def test_a_findings_document_of_replaced_weights_is_named_when_readme_links_it(tmp_path):
    """README's paragraph speaks for the checkpoints the page measured: `leaderboard markdown --findings` still writes
    it, and names each model the page measured at weights the zoo has replaced since."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    import arbibench.cli as cli
    from arbibench.cards import shipped_sha256
    from arbibench.leaderboard.findings import FINDINGS_BEGIN, FINDINGS_END
    from arbibench.leaderboard.markdown import README_BEGIN, README_END

    root = Path(__file__).resolve().parents[1]
    measured = json.loads((root / "docs" / "measurements" / "findings_full_v4.json").read_text())
    bnn = next(m for m in measured["models"] if m["model"] == "resnet20_bnn")
    bnn["checkpoint_sha256"] = "0" * 64
    measured["page"] = str(root / measured["page"])
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(measured))
    readme = tmp_path / "README.md"
    readme.write_text(f"# top\n\n{README_BEGIN}\n{README_END}\n\n{FINDINGS_BEGIN}\nnot yet\n{FINDINGS_END}\n")
    res = CliRunner().invoke(cli.app, ["leaderboard", "markdown", "--model-info", str(root / "model_info"), "--out",
                                       str(tmp_path / "LEADERBOARD.md"), "--readme", str(readme), "--findings",
                                       str(stale)], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "not yet" not in readme.read_text()  # the paragraph is written all the same
    shipped = shipped_sha256()["resnet20_bnn"][:12]
    assert f"the findings page measured replaced weights: resnet20_bnn at 000000000000, shipped {shipped}" in res.output

def test_the_report_reads_grid_cards_into_its_document_and_page(twin_run, tiny_protocol, tmp_path, monkeypatch,
                                                                data_dir):
    """With grid-check cards under --model-info, the findings document holds each compared model's grid rows and the
    page says what the grid changes; without them neither has a word of it, and a malformed card is refused."""
    import json

    from typer.testing import CliRunner

    import arbibench.cli as cli
    from arbibench.attacks import get_attack
    from arbibench.cards import GRID_CHECK, FindingsDocument, check_card_path
    from arbibench.files import atomic_write_json
    from arbibench.protocol.cli import common
    from arbibench.protocol.grid_check import run_grid_check

    _, db = twin_run
    monkeypatch.setattr(common, "protocol_preset", lambda name, quick, demo=False: tiny_protocol)
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    model_info = tmp_path / "model_info"
    for name in ("resnet20_bnn", "resnet20_fp"):  # real checks: 8 test images, APGD-CE with 2 steps
        card = run_grid_check(name, n_examples=8, attack=get_attack("apgd_ce", steps=2), eps_values=("2/255",),
                              data_dir=data_dir)
        atomic_write_json(card.to_dict(), check_card_path(model_info, "cifar10", GRID_CHECK, name))
    page, document = tmp_path / "findings.md", tmp_path / "findings.json"
    args = ["protocol", "report", "cifar10", "--models", "resnet20_fp,resnet20_bnn", "--store", str(db),
            "--stored-only", "--markdown", str(page), "--json", str(document)]
    res = CliRunner().invoke(cli.app, [*args, "--model-info", str(model_info)], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    doc = FindingsDocument.read(document)
    assert doc.grid is not None and doc.grid_stale == ()
    assert [(r.model, r.twin, r.eps_text) for r in doc.grid] == [("resnet20_bnn", "resnet20_fp", "2/255"),
                                                                  ("resnet20_fp", None, "2/255")]
    text = page.read_text()
    assert f"--model-info {model_info}" in text.split("\n")[2]  # the page names the command that made it
    row = next(x for x in text.split("## On 8-bit inputs", 1)[1].splitlines() if x.startswith("| 2/255 |"))
    for r in doc.grid:
        d = r.difference
        assert f"`{r.model}` {100 * d.value:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]" in row
    # no grid card where the report looks: no section, no grid in the document
    res = CliRunner().invoke(cli.app, [*args, "--model-info", str(tmp_path / "empty")], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "## On 8-bit inputs" not in page.read_text() and "grid" not in json.loads(document.read_text())
    card_file = check_card_path(model_info, "cifar10", GRID_CHECK, "resnet20_fp")
    bad = json.loads(card_file.read_text())
    bad["rows"][0]["acc_grid"]["value"] = 2.0
    card_file.write_text(json.dumps(bad))
    res = CliRunner().invoke(cli.app, [*args, "--model-info", str(model_info)], env={"COLUMNS": "250"})
    assert res.exit_code == 2 and "field 'rows[0].acc_grid.value'" in res.output.replace("\n", "")

def test_the_leaderboard_names_the_verdicts_and_claims_as_the_protocol_does():
    """The leaderboard renders the findings document by the names the protocol writes into it, without importing
    the protocol: the two vocabularies must be the same."""
    from arbibench.leaderboard import findings as page
    from arbibench.protocol.claims import UNTESTED
    from arbibench.protocol.presets import BLACK_BOX, WHITE_BOX
    from arbibench.protocol.run import ALL

    assert page.VERDICTS == (MORE_ROBUST, LESS_ROBUST, NOT_DISTINGUISHABLE) == tuple(verdict_counts([]))
    assert (page.WHITE_BOX, page.BLACK_BOX, page.ALL, page.UNTESTED) == (WHITE_BOX, BLACK_BOX, ALL, UNTESTED)


def test_the_page_says_whether_median_eps_star_tells_the_bnns_of_one_twin_apart(twin_run, tiny_protocol, tmp_path,
                                                                                 monkeypatch):
    """The findings document of a real run, a second BNN added beside resnet20_bnn (a copy of its rows under another
    name) and both given a correct-image eps* interval: the page says whether the two are told apart."""
    import copy
    import json

    from typer.testing import CliRunner

    import arbibench.cli as cli
    from arbibench.leaderboard.findings import findings_markdown
    from arbibench.protocol.cli import common

    _, db = twin_run
    monkeypatch.setattr(common, "protocol_preset", lambda name, quick, demo=False: tiny_protocol)
    out = tmp_path / "findings.json"
    res = CliRunner().invoke(cli.app, ["protocol", "report", "cifar10", "--quick", "--models",
                                       "resnet20_fp,resnet20_bnn", "--store", str(db), "--json", str(out)])
    assert res.exit_code == 0, res.output
    document = json.loads(out.read_text())
    assert "Median eps" not in findings_markdown(document, command="report")  # no eps* in this run: no sentence

    def page(bnn: tuple[float, float], other: tuple[float, float]) -> str:
        doc = copy.deepcopy(document)
        bnn_row = next(r for r in doc["models"] if r["model"] == "resnet20_bnn")
        twin_row = copy.deepcopy(bnn_row)
        twin_row["model"] = "resnet20_xnor"
        doc["models"].append(twin_row)
        doc["findings"] += [{**f, "model": "resnet20_xnor"} for f in doc["findings"] if f["model"] == "resnet20_bnn"]
        for row, (low, high) in ((bnn_row, bnn), (twin_row, other)):
            mid, ci = (low + high) / 2 / 255, [low / 255, high / 255]  # a descent search's summary, in input units
            row["eps_star"] = {"norm": "Linf", "median_eps_star": mid, "median_eps_star_ci95": ci,
                               "median_eps_star_correct": mid, "median_eps_star_correct_ci95": ci,
                               "eps_floor": 1e-3 / 255, "censored": 0.0}
        return " ".join(findings_markdown(doc, command="report").split())

    assert ("Median eps\\* tells apart every pair of the 2 BNNs that share the FP twin `resnet20_fp` (95% intervals "
            "disjoint: `resnet20_bnn` < `resnet20_xnor`).") in page((0.01, 0.02), (0.05, 0.09))
    assert ("Median eps\\* does not tell apart the 2 BNNs that share the FP twin `resnet20_fp`: their 95% intervals "
            "all overlap.") in page((0.01, 0.06), (0.05, 0.09))
