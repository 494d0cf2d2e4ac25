"""The model-card schema (arbibench.cards): one declaration read and written by the same code.

A card written from a real evaluation reads back equal field by field; today's committed cards (schema 1, key
``card_version``) still read and write back byte-identical apart from the version key; the module loads without
torch; bad versions and fields are refused with the file and field named.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from arbibench.cards import (
    SCHEMA_VERSION,
    CardError,
    CorruptionCard,
    ModelCard,
    card_json,
    parse_card,
    parse_corruption_card,
    percent,
    read_card_json,
)

ROOT = Path(__file__).resolve().parents[1]
# result cards (the protocol's and the corruptions'); the deploy and grid checks' cards have schemas of their own
COMMITTED = sorted(p for p in (ROOT / "model_info").rglob("*.json") if p.parent.name not in ("deploy", "grid_check"))
DEPLOY_CARDS = sorted((ROOT / "model_info").glob("*/deploy/*.json"))


def _parse(path: Path, data: dict) -> ModelCard | CorruptionCard:
    reader = parse_corruption_card if data.get("threat_model") == "corruptions" else parse_card
    return reader(path, data)


def test_committed_cards_still_read() -> None:
    assert len(COMMITTED) >= 8  # the shipped protocol and corruptions cards
    for path in COMMITTED:
        data = read_card_json(path)
        card = _parse(path, data)
        assert card.name == path.stem and card.schema_version in (1, SCHEMA_VERSION)
        # the schema knows every field a committed card holds: writing it back loses nothing, changes nothing
        expected = {("schema_version" if k == "card_version" else k): v for k, v in data.items()}
        expected["schema_version"] = SCHEMA_VERSION
        assert card_json(card) == expected, path
        assert list(card_json(card)) == list(expected), path  # and keeps the field order
        assert _parse(path, card_json(card)) == replace(card, schema_version=SCHEMA_VERSION)


def test_committed_deploy_cards_still_read() -> None:
    from arbibench.leaderboard.deploy import load_deploy_cards

    cards = load_deploy_cards(ROOT / "model_info")
    assert [c.name for c in cards] == [p.stem for p in DEPLOY_CARDS]
    for card in cards:
        assert card.kind == "deploy_check" and len(card.checkpoint_sha256) == 64
        for row in card.transfer_to_deployed:
            assert 0 <= row.also_fool_deployed <= row.fooled_simulation <= row.attacked


def test_benchmark_card_round_trip(tmp_path: Path, data_dir: Path) -> None:
    from arbibench.evaluation.benchmark import benchmark

    result = benchmark(
        "resnet20_bnn", n_examples=16, attacks=("fgsm", "square"), data_dir=data_dir, store=tmp_path / "s.db",
        progress=False, checks=False, to_disk=True, model_info=tmp_path / "mi", batch_size=16, eps_star=("fgsm",),
        eps_star_rounds=2, eps_star_floor=0.01 / 255, eps_star_draws=3,
    )
    path = tmp_path / "mi" / "cifar10" / "Linf" / "resnet20_bnn.json"
    written = result.to_card()
    read = parse_card(path, json.loads(path.read_text()))
    assert read == written  # every field, nested ones too
    assert read.attacks["square"].family == "black-box" and read.attacks["fgsm"].family == "white-box"
    assert read.clean_acc == percent(result.clean_acc) and read.eps_star is not None and read.subset
    assert read.attacks["fgsm"].name == "fgsm" and read.path == path
    assert read.eps_star is not None and read.eps_star.probe_draws == 3
    assert read.eps_star.eps_floor == pytest.approx(0.01 / 255)


def test_module_loads_without_torch(tmp_path: Path) -> None:
    """The leaderboard's reader must not pull torch: run the module alone with torch made unimportable."""
    code = (
        "import importlib.util, sys; sys.modules['torch'] = None; "
        f"spec = importlib.util.spec_from_file_location('cards', {str(ROOT / 'arbibench' / 'cards.py')!r}); "
        "m = importlib.util.module_from_spec(spec); sys.modules['cards'] = m; spec.loader.exec_module(m); "
        f"import json, pathlib; p = pathlib.Path({str(COMMITTED[0])!r}); m.parse_card(p, json.loads(p.read_text()))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _minimal() -> dict:
    return {"name": "m", "dataset": "cifar10", "threat_model": "Linf", "clean_acc": 90.0, "worst_case_acc": 1.0,
            "attacks": {"pgd": {"family": "white-box", "acc_star": 1.0, "acc_norm": 0.01}},
            "rs": {"all": 0.01}, "rs_mean": {"all": 0.01}}


def test_versions() -> None:
    path = Path("m.json")
    assert parse_card(path, _minimal()).schema_version == 1  # no version key: the first layout
    assert parse_card(path, {**_minimal(), "card_version": 1}).schema_version == 1
    assert card_json(parse_card(path, _minimal()))["schema_version"] == SCHEMA_VERSION
    with pytest.raises(CardError, match="newer arbibench .* upgrade arbibench") as info:
        parse_card(path, {**_minimal(), "schema_version": SCHEMA_VERSION + 1})
    assert info.value.field == "schema_version"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda c: c["attacks"]["pgd"].update(acc_star=101), "attacks.pgd.acc_star"),
        (lambda c: c.update(sweep=[{"attack": "pgd", "eps": 0.1, "acc_star": 5, "interval": [1]}]),
         "sweep[0].interval"),
        (lambda c: c.update(n_examples={"all": "40"}), "n_examples.all"),
        (lambda c: c.update(eps_star={"curve": [{"eps": -1}]}), "eps_star.curve[0].eps"),
    ],
)
def test_bad_fields_are_named(edit, field: str) -> None:
    data = _minimal()
    edit(data)
    with pytest.raises(CardError) as info:
        parse_card(Path("m.json"), data)
    assert info.value.field == field


def test_a_methods_authors_and_venue_come_from_its_paper() -> None:
    from arbibench.models.methods import METHODS, get_method

    m = get_method("bireal")
    assert (m.authors, m.venue) == ("Liu et al.", "ECCV 2018")
    assert (get_method("dorefa").authors, get_method("dorefa").venue) == ("Zhou et al.", "arXiv:1606.06160")
    for method in METHODS.values():
        assert method.paper.startswith(method.authors + ", ") and method.paper.endswith(", " + method.venue)
