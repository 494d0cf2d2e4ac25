"""Learning curves of the shipped checkpoints (`arbibench zoo curves`): the readings follow each card's history."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arbibench.cards import PIN_FILE, CheckpointCard, PreviousVersion, TrainingAttempt
from arbibench.cli import app
from arbibench.models.curves import RISING_GAIN, UNDERFIT_GAP, curves_figure, read_curve, training_line
from arbibench.models.markdown import (
    curves_markdown,
    curves_summary,
    paper_budget,
    shipped_cards,
    shipped_curves,
    zoo_readme_markdown,
)
from arbibench.train.paper_recipes import PAPER_RECIPES, paper_epochs

runner = CliRunner()


def _standard_cards() -> dict[str, CheckpointCard]:
    return {n: c for n, c in shipped_cards().items() if not c.adversarial}


def _copy_zoo(dest: Path) -> Path:
    """The shipped cards and pin file (no weights: the curves read cards only)."""
    dest.mkdir()
    shutil.copy(PIN_FILE, dest / PIN_FILE.name)
    for card in PIN_FILE.parent.glob("*.json"):
        shutil.copy(card, dest / card.name)
    return dest


def _history(train: list[float], val: list[float] | None) -> tuple[dict[str, object], ...]:
    return tuple({"epoch": i + 1, "train_loss": 1.0, "train_acc": t, **({} if val is None else {"val_acc": val[i]})}
                 for i, t in enumerate(train))


def test_the_readings_follow_each_shipped_cards_history():
    seen = 0
    for name, card in _standard_cards().items():
        reading = read_curve(card)
        assert reading is not None, name
        history = card.history
        if any("val_acc" not in h for h in history):
            assert reading.val is None and reading.verdict() == "no held-out curve in its card"
            continue
        seen += 1
        last = history[-1]
        assert reading.fit_gap == pytest.approx(100 * (last["train_acc"] - last["val_acc"]))
        vals = [h["val_acc"] for h in history]
        assert reading.best_epoch == history[vals.index(max(vals))]["epoch"]
        q = max(1, len(vals) // 4)
        assert reading.late_gain == pytest.approx(100 * (max(vals[-q:]) - max(vals[:-q])))
        assert reading.underfits == (reading.fit_gap < UNDERFIT_GAP)
        assert reading.rising == (reading.late_gain >= RISING_GAIN)
    assert seen >= 5  # the BNNs' runs kept a held-out split


def test_each_reading_names_its_case():
    card = _standard_cards()["resnet20_irnet"]  # goal 85%

    def verdict(train: list[float], val: list[float] | None, acc: float = 0.78) -> str:
        changed = dataclasses.replace(card, history=_history(train, val), clean_acc=acc)
        reading = read_curve(changed)
        assert reading is not None
        return reading.verdict()

    rising = [0.60, 0.65, 0.70, 0.72, 0.74, 0.75, 0.76, 0.78]
    assert verdict(rising, rising).startswith("underfits and still rising")
    flat = [0.70, 0.75, 0.78, 0.78, 0.78, 0.78, 0.779, 0.779]
    assert verdict(flat, flat).startswith("underfits but flat")
    assert "the recipe" in verdict([t + 0.05 for t in flat], flat)  # fits training 5 points above held-out
    assert verdict(rising, None) == "no held-out curve in its card"
    assert verdict(rising, rising, acc=0.86) == "meets its goal"


def test_a_continued_run_draws_the_run_it_continued(tmp_path):
    card = _standard_cards()["resnet20_irnet"]
    earlier = PreviousVersion(sha256="0" * 64, clean_acc=0.7, history=_history([0.5, 0.6], [0.52, 0.61]))
    continued = dataclasses.replace(card, previous_versions=(*card.previous_versions, earlier))
    reading = read_curve(continued)
    assert reading is not None and reading.previous is not None
    assert reading.previous[1] == pytest.approx((52.0, 61.0))
    from_scratch = dataclasses.replace(continued, recipe={**card.recipe, "init_from": None})
    assert read_curve(from_scratch).previous is None  # type: ignore[union-attr]  # not its continuation


def test_the_training_line_follows_continuations_back_to_their_first_run():
    """A continuation starts from the version shipped before it: the card's init_sha256 names it, and an earlier
    continuation's predecessor is the version before it. Each run counts up to the epoch it shipped."""
    card = _standard_cards()["resnet20_irnet"]
    first = PreviousVersion(sha256="1" * 64, clean_acc=0.69, recipe={"epochs": 12, "init_from": "resnet20_fp"})
    picked = [0.70, 0.74, 0.73]  # a held-out run that shipped its second epoch
    second = PreviousVersion(sha256="2" * 64, clean_acc=0.74,
                             recipe={"epochs": 3, "init_from": card.name, "val_examples": 5000},
                             history=_history([0.7, 0.72, 0.74], picked))
    unrelated = PreviousVersion(sha256="3" * 64, clean_acc=0.6, recipe={"epochs": 99, "init_from": "resnet20_fp"})
    chained = dataclasses.replace(card, previous_versions=(unrelated, first, second), init_sha256="2" * 64,
                                  recipe={**card.recipe, "init_from": card.name},
                                  validation={**(card.validation or {}), "best_epoch": 20})
    line = training_line(chained)
    assert line.epochs == (12, 2, 20) and line.total == 34 and line.complete and line.start == "resnet20_fp"
    assert line.words() == "34 epochs in 3 runs (12 + 2 + 20) from `resnet20_fp`"
    # weights whose predecessor the card does not hold: the count is a lower bound and says so
    lost = training_line(dataclasses.replace(chained, init_sha256="4" * 64))
    assert lost.epochs == (20,) and not lost.complete and lost.words().startswith("at least 20 epochs")
    # a run from scratch is its own line
    scratch = training_line(dataclasses.replace(chained, recipe={**card.recipe, "init_from": None}))
    assert scratch.epochs == (20,) and scratch.words() == "20 epochs from scratch"


def test_every_shipped_line_is_whole_and_ends_at_the_shipped_epoch():
    for name, card in _standard_cards().items():
        line = training_line(card)
        assert line.complete, name  # every continuation's predecessor is in the card
        assert line.epochs[-1] == (card.validation or {}).get("best_epoch", len(card.history)), name
        continued = card.recipe.get("init_from") == name
        assert (len(line.epochs) > 1) == continued, name
        assert line.start != name, name  # the line ends at a run that did not continue the model itself


def test_an_undertrained_reading_says_how_far_from_its_paper_s_budget():
    card = _standard_cards()["resnet20_irnet"]
    rising = [0.60, 0.65, 0.70, 0.72, 0.74, 0.75, 0.76, 0.78]
    base = dataclasses.replace(card, history=_history(rising, rising), clean_acc=0.78, validation=None,
                               recipe={**card.recipe, "init_from": None})
    reading = read_curve(base, paper_epochs=400)
    assert reading is not None
    assert reading.verdict() == ("underfits and still rising at its end: undertrained (8 epochs in all, the paper "
                                 "recipe's 400)")
    assert reading.budget_sentence() == ("The shipped weights were trained 8 epochs from scratch; the paper recipe "
                                         "(`--recipe paper`) runs 400 (2% of it).")
    assert read_curve(base).verdict() == "underfits and still rising at its end: undertrained"  # type: ignore[union-attr]
    cut = dataclasses.replace(_attempt(base), recipe={**base.recipe, "epochs": 10, "init_from": base.name})
    both = read_curve(dataclasses.replace(base, attempts=(cut,)), paper_epochs=400)
    assert both is not None and both.verdict().endswith(
        "(8 epochs in all, the paper recipe's 400; a later run stopped early, at epoch 4 of 10, below it)")
    flat = [0.70, 0.75, 0.78, 0.78, 0.78, 0.78, 0.779, 0.779]  # the budget is the explanation of "undertrained" only
    assert "400" not in read_curve(dataclasses.replace(base, history=_history(flat, flat)), 400).verdict()  # type: ignore[union-attr]


def test_the_paper_budgets_are_the_paper_recipes_epochs():
    budgets = paper_epochs()
    assert set(budgets) == set(PAPER_RECIPES) and budgets["irnet"] == 400 and budgets["reactnet"] == 256
    assert all(budgets[m] == r.settings["epochs"] for m, r in PAPER_RECIPES.items())
    curves = shipped_curves(paper_epochs=budgets)
    page = curves_markdown(curves)
    for name, (card, reading) in curves.items():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{name}` |"))
        assert f"| {reading.line.total} ({budgets[card.method]}) |" in row, name  # type: ignore[union-attr]
        section = page.split(f"### `{name}`", 1)[1].split("### ", 1)[0]
        assert f"the paper recipe (`--recipe paper`) runs {budgets[card.method]}" in section, name
    # an ImageNet card is never read against a CIFAR-10 recipe
    imagenet = dataclasses.replace(next(iter(_standard_cards().values())), dataset="imagenet")
    assert paper_budget(imagenet, budgets) is None


def test_the_page_sums_the_readings_up_by_case():
    curves = shipped_curves(paper_epochs=paper_epochs())
    summary = curves_summary(curves)
    assert summary.startswith(f"Of the {len(curves)} checkpoints, ") and summary in curves_markdown(curves)
    assert all(f"`{name}`" in summary for name in curves)
    card = curves["resnet20_irnet"][0]
    rising = [0.60, 0.65, 0.70, 0.72, 0.74, 0.75, 0.76, 0.78]
    base = dataclasses.replace(card, history=_history(rising, rising), clean_acc=0.78, validation=None,
                               recipe={**card.recipe, "init_from": None})
    short = read_curve(base, paper_epochs=400)
    climb = [0.50 + 0.01 * i for i in range(32)]
    longer = read_curve(dataclasses.replace(base, history=_history(climb, climb)), paper_epochs=256)
    met = read_curve(dataclasses.replace(base, clean_acc=0.86), paper_epochs=400)
    assert short is not None and longer is not None and met is not None
    assert [r.case() for r in (short, longer, met)] == ["undertrained", "undertrained", "met"]
    assert curves_summary({"a": (base, met), "b": (base, short), "c": (base, longer)}) == (
        "Of the 3 checkpoints, 1 meets its goal (`a`); 2 underfit and were still rising when their training ended "
        "(`b`, `c`): their weights have had 8-32 epochs in all, 2%-12% of the 256-400 of their paper recipes.")
    # without the paper recipes' epochs the group is named without a budget
    plain = read_curve(base)
    assert curves_summary({"b": (base, plain)}) == (  # type: ignore[dict-item]
        "Of the one checkpoint, 1 underfits and was still rising when its training ended (`b`).")


def _attempt(card: CheckpointCard, compared_with: str | None = None) -> TrainingAttempt:
    """A 4-epoch continuation that peaked at 77.4% held-out against the shipped model's 77.6%."""
    return TrainingAttempt(date="2026-12-07", compared_with=compared_with or card.sha256,
                           recipe={**card.recipe, "epochs": 4, "init_from": card.name},
                           history=_history([0.70, 0.72, 0.75, 0.76], [0.71, 0.74, 0.774, 0.77]),
                           val_examples=5000, val_acc=0.7742, shipped_val_acc=0.7758, clean_acc=0.765)


def test_a_later_run_that_did_not_ship_decides_the_reading():
    # a shipped run that underfits and still rises reads "undertrained"; a later run of the same recipe that did
    # not beat it says more epochs were tried and did not help, with its numbers
    card = _standard_cards()["resnet20_irnet"]
    rising = [0.60, 0.65, 0.70, 0.72, 0.74, 0.75, 0.76, 0.78]
    base = dataclasses.replace(card, history=_history(rising, rising), clean_acc=0.78)
    assert read_curve(base).verdict().startswith("underfits and still rising")  # type: ignore[union-attr]
    tried = dataclasses.replace(base, attempts=(_attempt(base),))
    reading = read_curve(tried)
    assert reading is not None and len(reading.attempts) == 1
    assert reading.verdict() == "a later 4-epoch run did not beat it: more epochs of that recipe do not reach the goal"
    sentence = reading.sentence()
    assert "A later run of 4 epochs (2026-12-07) did not replace it: held-out 77.42% at its best epoch, 3" in sentence
    assert "against the shipped model's 77.58% on the same images" in sentence
    # an attempt against weights this checkpoint has since replaced says nothing about these weights
    older = dataclasses.replace(base, attempts=(_attempt(base, compared_with="1" * 64),))
    assert read_curve(older).attempts == ()  # type: ignore[union-attr]
    assert read_curve(older).verdict().startswith("underfits and still rising")  # type: ignore[union-attr]
    # a run stopped early (patience, mid-schedule) never reached its low learning rates: it does not settle the
    # question, so the shipped run's own reading stands, and the page says how far the run got
    cut = dataclasses.replace(_attempt(base), recipe={**base.recipe, "epochs": 10, "init_from": base.name})
    stopped = read_curve(dataclasses.replace(base, attempts=(cut,)))
    assert stopped is not None and stopped.attempts[0].stopped_early
    assert stopped.verdict() == ("underfits and still rising at its end: undertrained (a later run stopped early, at "
                                 "epoch 4 of 10, below it)")
    assert "A later run (2026-12-07), stopped early after 4 of its 10 epochs, did not replace it" in stopped.sentence()
    # a whole-schedule run after the cut one decides again
    both = read_curve(dataclasses.replace(base, attempts=(cut, _attempt(base))))
    assert both is not None and both.verdict() == reading.verdict()
    # a model that meets its goal still reads so
    met = dataclasses.replace(tried, clean_acc=0.86)
    assert read_curve(met).verdict() == "meets its goal"  # type: ignore[union-attr]


def test_the_page_and_figure_show_a_later_run_that_did_not_ship():
    curves = shipped_curves()
    name = "resnet20_irnet"
    card, _ = curves[name]
    tried = dataclasses.replace(card, attempts=(_attempt(card),))
    reading = read_curve(tried)
    assert reading is not None
    with_attempt = {**curves, name: (tried, reading)}
    page = curves_markdown(with_attempt, figure="x.png")
    section = page.split(f"### `{name}`", 1)[1].split("### ", 1)[0]
    assert "The later run of 2026-12-07, not shipped: kd: 4 epochs from `resnet20_irnet`" in section
    assert "did not replace it: held-out 77.42%" in section
    assert reading.verdict() in page.split("## Per model", 1)[0]  # the table's row reads it too
    assert page != curves_markdown(curves, figure="x.png")
    figure = curves_figure({n: r for n, (_, r) in with_attempt.items()})
    assert figure.startswith(b"\x89PNG") and figure != curves_figure({n: r for n, (_, r) in curves.items()})


def test_an_attempt_round_trips_through_the_card_file(tmp_path):
    card = _standard_cards()["resnet20_irnet"]
    tried = dataclasses.replace(card, attempts=(_attempt(card),))
    path = tmp_path / "resnet20_irnet.json"
    path.write_text(json.dumps(tried.to_dict()))
    back = CheckpointCard.read(path)
    assert back.attempts == tried.attempts and back.attempts_on_this == tried.attempts
    assert back.attempts[0].best_val == (3, 0.774)  # type: ignore[index]
    assert "attempts" not in card.to_dict()  # a card without attempts writes none (no churn in shipped cards)
    broken = tried.to_dict()
    broken["attempts"][0]["compared_with"] = "not a hash"
    path.write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"attempts\[0\]\.compared_with"):
        CheckpointCard.read(path)


def test_zoo_curves_writes_the_page_and_its_figure(tmp_path):
    zoo = _copy_zoo(tmp_path / "zoo")
    out = tmp_path / "docs" / "curves.md"
    result = runner.invoke(app, ["zoo", "curves", "--out", str(out), "--model-dir", str(zoo)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    png = out.with_suffix(".png").read_bytes()
    assert png.startswith(b"\x89PNG") and "](curves.png)" in page
    standard = _standard_cards()
    for name, card in shipped_cards().items():
        row = [line for line in page.splitlines() if line.startswith(f"| `{name}` |")]
        if card.adversarial:
            assert not row, name
            continue
        assert len(row) == 1 and f"{100 * card.clean_acc:.2f}%" in row[0], name
        reading = read_curve(standard[name], paper_epochs()[card.method])  # the command reads the paper's budget
        assert reading is not None and reading.verdict() in row[0]
        assert f"| {reading.line.total} ({paper_epochs()[card.method]}) |" in row[0]  # type: ignore[union-attr]
        if reading.fit_gap is not None:
            assert f"| {reading.fit_gap:+.1f} |" in row[0]
        assert f"### `{name}`" in page
    again = tmp_path / "again.md"
    assert runner.invoke(app, ["zoo", "curves", "--out", str(again), "--model-dir", str(zoo)]).exit_code == 0
    assert again.with_suffix(".png").read_bytes() == png  # byte-stable: the same cards give the same figure


def test_zoo_curves_without_any_history_is_one_clear_error(tmp_path):
    zoo = _copy_zoo(tmp_path / "zoo")
    for path in zoo.glob("*.json"):
        card = json.loads(path.read_text())
        card["history"] = []
        path.write_text(json.dumps(card))
    out = tmp_path / "curves.md"
    result = runner.invoke(app, ["zoo", "curves", "--out", str(out), "--model-dir", str(zoo)])
    assert result.exit_code == 2 and "training history" in result.output
    assert "Traceback" not in result.output
    assert not out.exists() and not out.with_suffix(".png").exists()


def test_readme_zoo_table_links_each_reading_to_the_page():
    table = zoo_readme_markdown(paper_epochs=paper_epochs())
    curves = shipped_curves(paper_epochs=paper_epochs())
    assert curves
    for name, (_, reading) in curves.items():
        assert f"[{reading.verdict()}](docs/learning-curves.md#{name})" in table


def test_readme_zoo_table_names_each_run_by_how_it_started():
    """A run from scratch is no fine-tune: the kind of run agrees with its start (the FP twin v4 trained from
    scratch, the BNNs distilled from their previous checkpoints)."""
    rows = {line.split("|")[1].strip(" `"): line.split("|")[5].strip() for line in zoo_readme_markdown().splitlines()
            if line.startswith("| `")}
    assert rows["resnet20_fp"].startswith("standard: ") and "from scratch" in rows["resnet20_fp"]
    assert rows["resnet20_bnn"].startswith("kd: ") and "from `resnet20_bnn`" in rows["resnet20_bnn"]
    assert not [name for name, run in rows.items() if run.startswith("fine-tune") and "from scratch" in run]


def test_the_committed_page_is_the_generated_one():
    """docs/learning-curves.md follows the shipped cards: the queue regenerates it (`arbibench zoo curves`) in the
    job after each export, and a hand edit or a forgotten run fails here."""
    page = Path(__file__).resolve().parents[1] / "docs" / "learning-curves.md"
    assert page.read_text() == curves_markdown(shipped_curves(paper_epochs=paper_epochs()),
                                               figure="learning-curves.png"), "run `arbibench zoo curves`"
    for name in shipped_curves():
        assert f"### `{name}`" in page.read_text()  # the anchor README's link names exists
