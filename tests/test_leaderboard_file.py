"""LEADERBOARD.md is generated from the shipped cards (``arbibench leaderboard markdown``) and cannot go stale: this
test regenerates it from ``model_info/`` and the checkpoint cards and fails when the committed file differs. README
shows at most the top rows of its ranking, copied from it, and this checks they still match too."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from arbibench.cli import app

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "LEADERBOARD.md"
FIX = "regenerate it: arbibench leaderboard markdown --out LEADERBOARD.md"


def _committed_date(text: str) -> str:
    found = re.search(r"Generated on (\d{4}-\d{2}-\d{2}) by", text)
    assert found, "LEADERBOARD.md names no generation date; " + FIX
    return found.group(1)


def test_leaderboard_file_is_what_the_cards_generate(tmp_path: Path) -> None:
    committed = COMMITTED.read_text(encoding="utf-8")
    out = tmp_path / "LEADERBOARD.md"
    result = CliRunner().invoke(app, ["leaderboard", "markdown", "--out", str(out), "--model-info",
                                      str(ROOT / "model_info"), "--date", _committed_date(committed)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == committed, "LEADERBOARD.md differs from the cards; " + FIX


def test_leaderboard_file_holds_every_card_and_every_shipped_checkpoint() -> None:
    from arbibench.cards import shipped_sha256

    text = COMMITTED.read_text(encoding="utf-8")
    ranking = text.split("## Model zoo")[0]
    zoo = text.split("## Model zoo")[1].split("## Provenance")[0]
    for card in sorted((ROOT / "model_info").glob("*/*/*.json")):
        if card.parent.name != "corruptions":
            assert f"`{card.stem}`" in ranking, card
    for name, sha in shipped_sha256().items():
        assert f"| `{name}` |" in zoo, name
        assert f"`{name}` {sha[:12]}" in text.split("## Provenance")[1], name


def test_provenance_names_the_machines_the_result_cards_were_computed_on() -> None:
    from arbibench.leaderboard import load_cards

    provenance = COMMITTED.read_text(encoding="utf-8").split("## Provenance")[1]
    machines: dict[str, int] = {}
    for card in load_cards(ROOT / "model_info"):
        where = card.machine or "machine not recorded"
        machines[where] = machines.get(where, 0) + 1
    assert machines
    for where, n in machines.items():
        assert f"{where} ({n} card{'s' if n != 1 else ''})" in provenance, where


def test_readme_top_rows_are_the_generated_ones() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- top rows of LEADERBOARD.md -->")[1].split("<!-- end of top rows -->")[0]
    rows = [line for line in block.splitlines() if line.startswith("|")]
    assert len(rows) >= 3, "README's leaderboard excerpt lost its rows"
    generated = COMMITTED.read_text(encoding="utf-8").splitlines()
    for row in rows:
        assert row in generated, f"README row not in LEADERBOARD.md (copy the top rows again): {row}"


def test_a_changed_card_makes_the_file_differ(tmp_path: Path) -> None:
    """The comparison above can fail: one changed number in one card changes the generated file."""
    import shutil

    model_info = tmp_path / "model_info"
    shutil.copytree(ROOT / "model_info", model_info)
    card = model_info / "cifar10" / "Linf" / "resnet20_fp.json"
    text = card.read_text(encoding="utf-8")
    changed = re.sub(r'"clean_acc": [0-9.]+', '"clean_acc": 12.34', text, count=1)
    assert changed != text, "the card has no clean_acc to change"
    card.write_text(changed, encoding="utf-8")
    out = tmp_path / "LEADERBOARD.md"
    committed = COMMITTED.read_text(encoding="utf-8")
    result = CliRunner().invoke(app, ["leaderboard", "markdown", "--out", str(out), "--model-info", str(model_info),
                                      "--date", _committed_date(committed)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") != committed
    assert "| 12.3% |" in out.read_text(encoding="utf-8")


def test_markdown_date_must_be_a_date(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["leaderboard", "markdown", "--out", str(tmp_path / "x.md"), "--date", "today"])
    assert result.exit_code == 2 and "YYYY-MM-DD" in result.output
    assert not (tmp_path / "x.md").exists()


def test_markdown_copies_the_top_rows_into_a_readme(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    original = (ROOT / "README.md").read_text(encoding="utf-8")
    stale = re.sub(r"^\| 1\b", "| 1 (stale)", original, count=1, flags=re.MULTILINE)  # the first rank of the excerpt
    assert stale != original
    readme.write_text(stale, encoding="utf-8")
    out = tmp_path / "LEADERBOARD.md"
    date = _committed_date(COMMITTED.read_text(encoding="utf-8"))
    result = CliRunner().invoke(app, ["leaderboard", "markdown", "--out", str(out), "--date", date,
                                      "--model-info", str(ROOT / "model_info"), "--readme", str(readme)])
    assert result.exit_code == 0, result.output
    assert readme.read_text(encoding="utf-8") == original  # the committed README holds exactly these rows
    readme.write_text("# no markers here\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["leaderboard", "markdown", "--out", str(tmp_path / "other.md"), "--date", date,
                                      "--readme", str(readme)])
    assert result.exit_code == 2 and "markers" in result.output
    assert not (tmp_path / "other.md").exists()  # nothing written when the README cannot take the rows


def test_leaderboard_file_holds_the_corruption_cards() -> None:
    from arbibench.cards import parse_corruption_card, read_card_json

    section = COMMITTED.read_text(encoding="utf-8").split("## Common corruptions")[1].split("## ")[0]
    for path in sorted((ROOT / "model_info").glob("*/corruptions/*.json")):
        card = parse_corruption_card(path, read_card_json(path))
        row = next(line for line in section.splitlines() if line.startswith(f"| `{card.name}` |"))
        assert f"| {card.corruptions_acc:.1f}% [" in row and ("regenerated" in row) == card.regenerated


def test_readme_zoo_table_is_the_generated_one() -> None:
    """README's short zoo table (accuracy, goal, last training run, machine) is what the checkpoint cards give now."""
    from arbibench.leaderboard.markdown import ZOO_BEGIN, ZOO_END, with_block
    from arbibench.models.markdown import zoo_readme_markdown
    from arbibench.train.paper_recipes import paper_epochs

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count(ZOO_BEGIN) == readme.count(ZOO_END) == 1, "README lost its zoo table markers"
    assert with_block(readme, ZOO_BEGIN, ZOO_END, zoo_readme_markdown(paper_epochs=paper_epochs())) == readme, (
        "README's zoo table differs from the checkpoint cards; regenerate it: arbibench leaderboard markdown "
        "--out LEADERBOARD.md --readme README.md")
    block = readme.split(ZOO_BEGIN)[1].split(ZOO_END)[0]
    assert "| `resnet20_reactnet` |" in block and "trained on" in block


def test_zoo_table_markers_are_optional_but_paired() -> None:
    import pytest

    from arbibench.leaderboard.markdown import ZOO_BEGIN, ZOO_END, with_block

    assert with_block("# my BNN\n", ZOO_BEGIN, ZOO_END, "| a |\n") == "# my BNN\n"  # a user's README without the table
    filled = with_block(f"x\n{ZOO_BEGIN}\nold\n{ZOO_END}\ny\n", ZOO_BEGIN, ZOO_END, "| a |\n")
    assert filled == f"x\n{ZOO_BEGIN}\n| a |\n{ZOO_END}\ny\n"
    with pytest.raises(ValueError, match="one of each"):
        with_block(f"x\n{ZOO_BEGIN}\n", ZOO_BEGIN, ZOO_END, "| a |\n")


def test_readme_deploy_paragraph_is_the_generated_one() -> None:
    """README's findings of the deploy checks are written from the deploy cards of the shipped checkpoints."""
    from arbibench.cards import shipped_sha256
    from arbibench.leaderboard.deploy import deploy_summary_markdown, load_deploy_cards
    from arbibench.leaderboard.markdown import DEPLOY_BEGIN, DEPLOY_END, with_block

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count(DEPLOY_BEGIN) == readme.count(DEPLOY_END) == 1, "README lost its deploy-check markers"
    text = deploy_summary_markdown(load_deploy_cards(ROOT / "model_info"), shipped_sha256())
    assert with_block(readme, DEPLOY_BEGIN, DEPLOY_END, text) == readme, (
        "README's deploy-check paragraph differs from the cards; regenerate it: arbibench leaderboard markdown "
        "--out LEADERBOARD.md --readme README.md")


def test_deploy_paragraph_follows_the_cards() -> None:
    """A card of replaced weights is left out and named; a direct attack whose difference excludes zero turns the
    verdict; the counts are the cards' sums."""
    from dataclasses import replace

    from arbibench.cards import Interval
    from arbibench.leaderboard.deploy import deploy_summary_markdown, load_deploy_cards

    cards = load_deploy_cards(ROOT / "model_info")
    pins = {c.name: c.checkpoint_sha256 for c in cards}
    text = " ".join(deploy_summary_markdown(cards, pins).split())
    fooled = sum(t.fooled_simulation for c in cards for t in c.transfer_to_deployed)
    also = sum(t.also_fool_deployed for c in cards for t in c.transfer_to_deployed)
    assert f"{also:,} of the {fooled:,} adversarial examples" in text and f"for {len(cards)} zoo BNNs" in text
    stale = dict(pins, **{cards[0].name: "0" * 64})
    left_out = " ".join(deploy_summary_markdown(cards, stale).split())
    assert f"for {len(cards) - 1} zoo BNNs" in left_out and left_out.endswith(f"replaced since: {cards[0].name}.")
    first = cards[0].direct_attacks
    moved = replace(first[0], difference=Interval(value=0.2, low=0.1, high=0.3))
    changed = [replace(cards[0], direct_attacks=(moved, *first[1:])), *cards[1:]]
    turned = " ".join(deploy_summary_markdown(changed, pins).split())
    assert "1 difference excluding zero" in turned and "does not carry over" in turned
