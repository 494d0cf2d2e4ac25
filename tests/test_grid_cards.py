"""The grid-check card: a real check of the shipped resnet20_bnn and its FP twin on real CIFAR-10 images writes one
card per model that reads back equal; a corrupted card is refused naming the field; LEADERBOARD.md's "8-bit inputs"
table and the findings page's section render from the cards and follow their numbers."""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import with_value
from typer.testing import CliRunner

from arbibench.cards import (
    GRID_CHECK,
    CardError,
    FindingsDocument,
    GridCheckCard,
    check_card_path,
    read_card_json,
    shipped_sha256,
    stale_checkpoint,
)
from arbibench.cli import app

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("resnet20_bnn", "resnet20_fp")
EPS = ("1/255", "4/255")
runner = CliRunner()


@pytest.fixture(scope="module")
def checked(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """``protocol grid-check --model-info`` on the shipped resnet20_bnn and resnet20_fp: 12 real test images,
    APGD-CE with 5 steps at 1/255 and 4/255. Returns the model-info folder, the --json file and the output."""
    out = tmp_path_factory.mktemp("grid")
    model_info, json_out = out / "model_info", out / "grid.json"
    result = runner.invoke(app, ["protocol", "grid-check", "--models", ",".join(MODELS), "-n", "12", "--attack",
                                 "apgd_ce(steps=5)", "--eps", ",".join(EPS), "--batch-size", "6", "--data-dir",
                                 str(data_dir), "--model-info", str(model_info), "--json", str(json_out)],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return model_info, json_out, result.output


def _cards(model_info: Path) -> dict[str, GridCheckCard]:
    return {m: GridCheckCard.read(check_card_path(model_info, "cifar10", GRID_CHECK, m)) for m in MODELS}


def _points(d: Any) -> str:
    """A difference of ratios in points as both pages print it, computed here from the card's numbers."""
    return f"{100 * d.value:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]"


def test_the_check_writes_one_card_per_model_that_reads_back_equal(checked: tuple[Path, Path, str]) -> None:
    model_info, json_out, output = checked
    pins = shipped_sha256()
    listing = json.loads(json_out.read_text())["checks"]
    for i, (name, card) in enumerate(_cards(model_info).items()):
        path = model_info / "cifar10" / "grid_check" / f"{name}.json"
        assert card.path == path and f"wrote {path}" in output.replace("\n", "")
        data = read_card_json(path)
        assert card.to_dict() == data == listing[i]  # one schema: the card is what --json lists
        assert GridCheckCard.parse(path, card.to_dict()) == card
        assert (card.name, card.kind, card.schema_version, card.n_images) == (name, GRID_CHECK, 2, 12)
        assert card.attack["name"] == "apgd_ce" and card.attack["steps"] == 5
        assert card.checkpoint_sha256 == pins[name] and stale_checkpoint(card, pins) is None
        assert [r.eps_text for r in card.rows] == list(EPS)
        for r in card.rows:
            assert r.n_images == 12 and r.survived <= r.float_fooled <= 12
            assert r.acc_grid.value <= r.acc_grid_attack.value
            assert r.difference.value == pytest.approx(r.acc_grid.value - r.acc_float.value)
            assert (r.survival is None) == (r.float_fooled == 0)
            if r.survival is not None:
                assert r.survival.value == r.survived / r.float_fooled


def test_the_measurements_json_of_earlier_checks_still_reads() -> None:
    """docs/measurements/grid_check.json predates the card: each entry of its "checks" names its model
    ``model_name`` and has no version; it reads as a version-1 card and writes back in the current layout."""
    path = ROOT / "docs" / "measurements" / "grid_check.json"
    entries = json.loads(path.read_text())["checks"]
    assert [e["model_name"] for e in entries] == list(MODELS)
    for entry in entries:
        card = GridCheckCard.parse(path, entry)
        assert card.name == entry["model_name"] and card.schema_version == 1 and card.kind == GRID_CHECK
        assert card.rows[0].difference.value == entry["rows"][0]["difference"]["value"]
        written = card.to_dict()
        assert written["name"] == entry["model_name"] and "model_name" not in written
        assert GridCheckCard.parse(path, written) == replace(card, schema_version=2)
        for key in set(entry) - {"model_name", "wall_seconds"}:
            assert written[key] == entry[key], key
    with pytest.raises(CardError, match="field 'name': is missing"):  # a current card must name the model 'name'
        GridCheckCard.parse(path, {**entries[0], "schema_version": 2})


def test_a_corrupted_card_is_refused_naming_the_field(checked: tuple[Path, Path, str], tmp_path: Path) -> None:
    from arbibench.leaderboard.cards import LeaderboardError
    from arbibench.leaderboard.grid import load_grid_cards

    path = check_card_path(checked[0], "cifar10", GRID_CHECK, "resnet20_bnn")
    data = read_card_json(path)
    cases: list[tuple[list[str | int], Any, str, str]] = [
        (["rows", 1, "acc_grid", "value"], 1.5, "rows[1].acc_grid.value", "1.5 is outside [0.0, 1.0]"),
        (["rows", 0, "difference"], [0.0, 0.0, 0.0], "rows[0].difference", "expected a JSON object"),
        (["rows", 0, "survived"], 13, "rows[0].survived", "expected survived <= float_fooled"),
        (["checkpoint_sha256"], "abc", "checkpoint_sha256", "expected a sha256"),
        (["clean_acc", "low"], None, "clean_acc.low", "expected a number, got null"),
        (["kind"], "deploy_check", "kind", "expected 'grid_check'"),
        (["schema_version"], 99, "schema_version", "upgrade arbibench"),
    ]
    for where, value, name, problem in cases:
        bad = with_value(data, where, value)
        with pytest.raises(CardError) as raised:
            GridCheckCard.parse(path, bad)
        assert raised.value.field == name and problem in str(raised.value), raised.value
        assert str(raised.value).startswith(f"{path}: field '{name}': ")
    with pytest.raises(CardError, match="field 'rows': is missing"):
        GridCheckCard.parse(path, {k: v for k, v in data.items() if k != "rows"})
    # the leaderboard and the report refuse the folder, naming the file and the field
    folder = tmp_path / "cifar10" / "grid_check"
    folder.mkdir(parents=True)
    bad = copy.deepcopy(data)
    bad["rows"][1]["float_fooled"] = "many"
    (folder / "resnet20_bnn.json").write_text(json.dumps(bad))
    with pytest.raises(LeaderboardError, match=r"resnet20_bnn\.json: field 'rows\[1\]\.float_fooled': expected an "):
        load_grid_cards(tmp_path)
    assert load_grid_cards(tmp_path / "nothing here") == []


def _write(card: GridCheckCard, model_info: Path) -> None:
    path = check_card_path(model_info, card.dataset, GRID_CHECK, card.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(card.to_dict(), indent=2))


def _with_row(card: GridCheckCard, i: int, **changes: Any) -> GridCheckCard:
    rows = list(card.rows)
    rows[i] = replace(rows[i], **changes)
    return replace(card, rows=tuple(rows))


def _board(model_info: Path, out: Path) -> str:
    result = runner.invoke(app, ["leaderboard", "markdown", "--model-info", str(model_info), "--out", str(out),
                                 "--date", "2026-12-07"])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_leaderboard_shows_8_bit_inputs_from_the_cards(checked: tuple[Path, Path, str], tmp_path: Path) -> None:
    from arbibench.cards import Interval, Proportion

    model_info = tmp_path / "model_info"
    shutil.copytree(ROOT / "model_info", model_info)
    shutil.rmtree(model_info / "cifar10" / "grid_check", ignore_errors=True)  # the zoo's own grid cards, if any
    assert "8-bit inputs" not in _board(model_info, tmp_path / "none.md")  # no grid card, no section
    cards = _cards(checked[0])
    for card in cards.values():
        _write(card, model_info)
    text = _board(model_info, tmp_path / "board.md")
    section = _section(text, "8-bit inputs")
    assert text.index("## 8-bit inputs") < text.index("## Model zoo")
    assert "--model-info model_info`" in section  # the folder the cards were read from
    for name, card in cards.items():
        row = next(line for line in section.splitlines() if line.startswith(f"| `{name}` |"))
        assert f"apgd_ce, 12 images | {100 * card.clean_acc.value:.1f}% |" in row
        for r in card.rows:
            assert f"{100 * r.acc_float.value:.1f}% → {100 * r.acc_grid.value:.1f}%, {_points(r.difference)}" in row
            survive = "no float example" if r.survival is None else (
                f"{100 * r.survival.value:.0f}% of {r.float_fooled} survive")
            assert survive in row
    # other numbers, another table; replaced weights are marked
    bnn = _with_row(cards["resnet20_bnn"], 0, acc_float=Proportion(value=0.25, low=0.1, high=0.5),
                    acc_grid=Proportion(value=0.5, low=0.25, high=0.75),
                    difference=Interval(value=0.25, low=0.0833, high=0.4167), float_fooled=6, survived=3,
                    survival=Proportion(value=0.5, low=0.19, high=0.81))
    _write(replace(bnn, checkpoint_sha256="0" * 64), model_info)
    changed = _section(_board(model_info, tmp_path / "changed.md"), "8-bit inputs")
    assert changed != section
    row = next(line for line in changed.splitlines() if line.startswith("| `resnet20_bnn` (stale"))
    assert "25.0% → 50.0%, +25.0 [+8.3, +41.7]; 50% of 6 survive" in row


def _page(rows: list[dict[str, Any]] | None, stale: list[str]) -> str:
    """The findings page of a report whose only content is its grid rows (None: the report read no grid card),
    through the document's own schema."""
    from arbibench.leaderboard.findings import findings_markdown

    grid = {} if rows is None else {"grid": rows, "grid_stale": stale}
    document = FindingsDocument.parse(Path("findings.json"), {"protocol": "cifar10", "findings": [], **grid}).to_dict()
    setup = {"dataset": "cifar10", "threat_model": "Linf", "eps": "8/255", "white_box": [], "black_box": [],
             "white_box_images": "-", "black_box_images": "-", "queries": [], "sweep_attack": "-", "sweep_eps": [],
             "sweep_images": 0}
    return findings_markdown({**document, "date": "2026-12-07", "setup": setup, "models": [], "claims": None,
                              "standard_twins": [], "left_out": {}}, command="arbibench protocol report cifar10")


def test_the_findings_page_says_what_the_grid_changes(checked: tuple[Path, Path, str]) -> None:
    from arbibench.protocol.report import grid_findings

    cards = _cards(checked[0])
    pins = shipped_sha256()
    rows, stale = grid_findings(cards.values(), [("resnet20_bnn", "resnet20_fp")], "cifar10", pins)
    assert stale == [] and [(r.model, r.twin, r.eps_text) for r in rows] == [
        (m, "resnet20_fp" if m == "resnet20_bnn" else None, e) for m in MODELS for e in EPS]
    assert grid_findings(cards.values(), [("resnet20_xnor", "resnet20_fp")], "cifar10", pins)[0] == [
        r for r in rows if r.model == "resnet20_fp"]  # only the compared models
    assert grid_findings(cards.values(), [("resnet20_bnn", "resnet20_fp")], "imagenet", pins) == ([], [])
    document = [r.to_dict() for r in rows]
    assert FindingsDocument.parse(Path("f.json"), FindingsDocument(protocol="p", findings=(), grid=tuple(rows),
                                                                  grid_stale=()).to_dict()).grid == tuple(rows)
    page = _page(document, [])
    section = _section(page, "On 8-bit inputs")
    assert "apgd_ce on the first 12 test images" in section and "1 BNN and 1 FP twin" in section
    for e in EPS:
        line = next(x for x in section.splitlines() if x.startswith(f"| {e} |"))
        for card in cards.values():  # one model per group: its own shift is the group's largest
            r = card.row(e)
            assert r is not None and f"`{card.name}` {_points(r.difference)}" in line
    moved = [(n, e) for n, c in cards.items() for e in EPS if (row := c.row(e)) and row.difference.excludes_zero]
    if moved:
        assert f"in {len(moved)} of 4 model-eps pairs" in section
    else:
        assert "No model's ACC* on the grid differs from its float ACC* beyond the 95% interval" in section
    # an interval that excludes zero is named with its numbers; with none, the page says so
    shifted = [dict(r, difference=[0.25, 0.1, 0.4]) if (r["model"], r["eps_text"]) == ("resnet20_bnn", "4/255")
               else dict(r, difference=[0.0, -0.05, 0.05]) for r in document]
    text = _section(_page(shifted, []), "On 8-bit inputs")
    assert "in 1 of 4 model-eps pairs (BNNs: `resnet20_bnn` at 4/255 +25.0 [+10.0, +40.0]; FP twins: none" in text
    assert "| 4/255 | `resnet20_bnn` +25.0 [+10.0, +40.0] | 1 of 1 |" in text
    calm = _section(_page([dict(r, difference=[0.0, -0.05, 0.05]) for r in document], []), "On 8-bit inputs")
    assert "differs from its float ACC* beyond the 95% interval at any eps (2 models)" in calm
    # survival: words only where the Wilson intervals set every BNN apart from every twin
    low, high = [0.2, 0.1, 0.3], [0.9, 0.8, 0.95]
    apart = [dict(r, survival=low if r["twin"] else high, float_fooled=10, survived=2 if r["twin"] else 9)
             for r in document]
    assert ("At 1/255, 4/255, rounding to 8 bits undoes more of every BNN's float adversarial examples than of any "
            "FP twin's") in _page(apart, [])
    flipped = [dict(r, survival=high if r["twin"] else low) for r in apart]
    assert "undoes fewer of every BNN's" in _page(flipped, [])
    overlapping = [dict(r, survival=[0.5, 0.2, 0.8]) for r in apart]
    assert "does not separate the BNNs from the FP twins at any eps" in _page(overlapping, [])
    # a card of replaced weights is left out and named; no card, no section
    rows, stale = grid_findings(cards.values(), [("resnet20_bnn", "resnet20_fp")], "cifar10",
                                {**pins, "resnet20_bnn": "0" * 64})
    assert stale == ["resnet20_bnn"] and {r.model for r in rows} == {"resnet20_fp"}
    assert "replaced since: `resnet20_bnn`" in _page([r.to_dict() for r in rows], stale)
    assert "## On 8-bit inputs" not in _page(None, [])
