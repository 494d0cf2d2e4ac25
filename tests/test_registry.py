"""The attack registry: AutoAttack's names as aliases, attack specs from the command line validated by each
attack's config, and ``arbibench attacks list``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arbibench.attacks import (
    ATTACKS,
    FAMILIES,
    attack_defaults,
    attacks_from_spec,
    get_attack,
    parse_attack_spec,
)
from arbibench.cli import app

runner = CliRunner()


def test_autoattack_names_are_aliases_with_the_same_store_key() -> None:
    for alias, name in (("apgd-ce", "apgd_ce"), ("APGD-T", "apgd_t"), ("fab-t", "fab_t"), ("apgd-dlr", "apgd_dlr")):
        attack = get_attack(alias)
        assert attack.name == name and attack.config_dict() == get_attack(name).config_dict()
    components = get_attack("autoattack", components=("apgd-ce", "square")).components_run
    assert components == ["apgd_ce", "square"]


def test_every_attack_declares_family_and_norms() -> None:
    for name, cls in ATTACKS.items():
        assert cls.family in FAMILIES and set(cls.norms) <= {"Linf", "L2"} and cls.norms, name
    assert (ATTACKS["rays"].family, ATTACKS["rays"].norms) == ("decision-based", ("Linf",))
    assert ATTACKS["square"].family == "score-based" and ATTACKS["transfer"].family == "transfer"
    assert ATTACKS["cw_l2"].norms == ("L2",) and ATTACKS["pgd"].family == "white-box"


def test_attack_specs() -> None:
    assert parse_attack_spec("square(max_queries=300), pgd(steps=20, loss=margin),fgsm") == [
        ("square", {"max_queries": 300}), ("pgd", {"steps": 20, "loss": "margin"}), ("fgsm", {})]
    assert parse_attack_spec("apgd_ce@tanh:5,T=16,pgd") == [("apgd_ce@tanh:5,T=16", {}), ("pgd", {})]
    assert parse_attack_spec("pgd(rel_stepsize=1/4)") == [("pgd", {"rel_stepsize": 0.25})]
    assert parse_attack_spec("autoattack(components=('apgd-ce', 'square'))") == [
        ("autoattack", {"components": ("apgd-ce", "square")})]
    square, pgd = attacks_from_spec("square(max_queries=300),pgd(steps=20)")
    assert square.config.max_queries == 300 and pgd.config.steps == 20
    assert attack_defaults(type(pgd))["steps"] != 20  # the default is untouched


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("squar(max_queries=3)", "unknown attack 'squar'"),
        ("square(max_queries=0)", "square: max_queries must be an integer >= 1"),
        ("square(budget=3)", "unknown parameter 'budget' for attack 'square'"),
        ("square(max_queries=3", "unclosed bracket"),
        ("pgd(steps)", "write parameters as name=value"),
        ("pgd(steps=1, steps=2)", "sets 'steps' twice"),
        (" , ", "names no attack"),
    ],
)
def test_bad_specs_name_the_problem(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        attacks_from_spec(spec)


def test_attacks_list() -> None:
    res = runner.invoke(app, ["attacks", "list"], terminal_width=200)
    assert res.exit_code == 0, res.output
    for words in ("square", "score-based", "decision-based", "transfer", "apgd-t", "max_queries=5000", "Linf, L2"):
        assert words in res.output
    assert "pgd_adaptive" not in res.output
    assert "pgd_adaptive" in runner.invoke(app, ["attacks", "list", "--adaptive"], terminal_width=200).output


def test_eval_takes_attack_parameters(tmp_path: Path, data_dir: Path) -> None:
    args = ["eval", "-m", "resnet20_bnn", "-n", "8", "--data-dir", str(data_dir), "--store", str(tmp_path / "s.db"),
            "--no-checks", "--json", str(tmp_path / "r.json"), "--batch-size", "8"]
    res = runner.invoke(app, [*args, "--attacks", "square(max_queries=30),apgd-ce(steps=3)"])
    assert res.exit_code == 0, res.output
    attacks = json.loads((tmp_path / "r.json").read_text())["attacks"]
    assert attacks["square"]["config"]["max_queries"] == 30 and attacks["apgd_ce"]["config"]["steps"] == 3
    bad = runner.invoke(app, [*args, "--attacks", "square(max_queries=-1)"])
    assert bad.exit_code == 2 and "max_queries must be an integer >= 1" in " ".join(bad.output.split())
