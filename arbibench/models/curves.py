"""Learning curves of the shipped checkpoints, and what each says about the model's miss of its goal.

A zoo BNN below its paper invites one question before any robustness verdict: is it undertrained, or is its recipe
wrong? The checkpoint card keeps the training run's per-epoch record (``history``: training accuracy on the augmented
batches, held-out accuracy on the 5,000 training images the run never trained on), and that record answers it:

- *underfits*: at the last epoch the network classifies its own augmented training batches no better than
  held-out images (gap below :data:`UNDERFIT_GAP` points), so it has capacity left that more training can use;
- *still rising*: the best held-out accuracy of the run's last quarter beats the best before it by at least
  :data:`RISING_GAIN` points. Under a cosine or one-cycle schedule part of that late gain is the annealing itself,
  so the reading says "rising", never "would reach the goal";
- a network that fits its training batches well above held-out (gap >= :data:`UNDERFIT_GAP`) will not reach its goal
  by more epochs of the same recipe: the miss is the recipe.

:func:`read_curve` reads one card; :func:`curves_markdown` renders ``docs/learning-curves.md`` and
:func:`curves_figure` its figure (``arbibench zoo curves``). Cards only, no torch, like :mod:`markdown`.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arbibench.cards import CheckpointCard
from arbibench.files import atomic_write_bytes
from arbibench.models.markdown import goal_status, paper_status, recipe_summary, shipped_cards
from arbibench.models.published import published_figure

UNDERFIT_GAP = 2.0  # points: training accuracy on augmented batches at most this far above held-out -> underfits
RISING_GAIN = 0.5  # points: the last quarter's best held-out accuracy above the best before it -> still rising


@dataclass(frozen=True)
class CurveReading:
    """One checkpoint's last training run, as its card recorded it, and the reading of its curve.

    Accuracies are percentages. ``val`` is None where the run kept no held-out split (runs from before held-out
    selection, and adversarial runs, whose history records robust accuracy instead)."""

    name: str
    epochs: tuple[int, ...]
    train: tuple[float, ...]
    val: tuple[float, ...] | None
    best_epoch: int | None
    goal_met: bool | None  # None: no goal (adversarially trained or not in the published table)
    previous: tuple[tuple[float, ...], tuple[float, ...] | None] | None = None  # (train, val) of the run it continued

    @property
    def fit_gap(self) -> float | None:
        """Training minus held-out accuracy at the last epoch, in points."""
        return None if self.val is None else self.train[-1] - self.val[-1]

    @property
    def late_gain(self) -> float | None:
        """The best held-out accuracy of the last quarter of the epochs minus the best before it, in points."""
        if self.val is None or len(self.val) < 4:
            return None
        q = max(1, len(self.val) // 4)
        return max(self.val[-q:]) - max(self.val[:-q])

    @property
    def late_epochs(self) -> int:
        return max(1, len(self.epochs) // 4)

    @property
    def underfits(self) -> bool | None:
        gap = self.fit_gap
        return None if gap is None else gap < UNDERFIT_GAP

    @property
    def rising(self) -> bool | None:
        gain = self.late_gain
        return None if gain is None else gain >= RISING_GAIN

    def verdict(self) -> str:
        """The reading in a few words, as README's zoo table shows it."""
        if self.val is None:
            return "no held-out curve in its card"
        if self.goal_met:
            return "meets its goal"
        if not self.underfits:
            return (f"fits its training batches {self.fit_gap:.1f} points above held-out: the recipe, not the "
                    "budget")
        if self.rising:
            return "underfits and still rising at its end: undertrained"
        return "underfits but flat at the end: the schedule or the method's pieces"

    def sentence(self) -> str:
        """The reading with its numbers, as ``docs/learning-curves.md`` states it."""
        n = len(self.epochs)
        if self.val is None:
            return (f"{n} epochs; the card records training accuracy only ({self.train[0]:.1f}% -> "
                    f"{self.train[-1]:.1f}% on augmented batches), no held-out split: retraining with "
                    "`--val-examples 5000` gives this model a curve to read.")
        gap, gain = self.fit_gap, self.late_gain
        text = (f"Held-out accuracy {self.val[0]:.1f}% at epoch 1, best {max(self.val):.1f}% at epoch "
                f"{self.best_epoch}; training accuracy at the last epoch {self.train[-1]:.1f}% against held-out "
                f"{self.val[-1]:.1f}% (gap {gap:+.1f} points)")
        if gain is not None:
            text += f"; the last {self.late_epochs} epochs {'added' if gain >= 0 else 'lost'} {abs(gain):.1f} points"
        return text + f". Reading: {self.verdict()}."


def _history_series(history: tuple[dict[str, Any], ...] | list[dict[str, Any]]
                    ) -> tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...] | None]:
    epochs = tuple(int(h["epoch"]) for h in history)
    train = tuple(100 * float(h["train_acc"]) for h in history)
    vals = [h.get("val_acc") for h in history]
    val = tuple(100 * float(v) for v in vals if v is not None) if all(v is not None for v in vals) else None
    return epochs, train, val


def read_curve(card: CheckpointCard) -> CurveReading | None:
    """The reading of ``card``'s training history; None for a card without one (e.g. an imported checkpoint)."""
    if not card.history:
        return None
    epochs, train, val = _history_series(card.history)
    best = None
    if val is not None:
        best = epochs[max(range(len(val)), key=lambda i: (val[i], -i))]  # the first epoch of the best accuracy
    figure = published_figure(card.name)
    goal_met = None if figure is None or card.adversarial else card.clean_acc >= figure.goal
    previous = None
    last = card.previous_versions[-1] if card.previous_versions else None
    if last is not None and last.history and card.recipe.get("init_from") == card.name:  # a continuation
        _, p_train, p_val = _history_series(last.history)
        previous = (p_train, p_val)
    return CurveReading(name=card.name, epochs=epochs, train=train, val=val, best_epoch=best, goal_met=goal_met,
                        previous=previous)


def shipped_curves(model_dir: str | os.PathLike[str] | None = None) -> dict[str, tuple[CheckpointCard, CurveReading]]:
    """Every shipped standard-trained checkpoint with a training history, with its reading, in the pin file's
    order."""
    out = {}
    for name, card in shipped_cards(model_dir).items():
        if card.adversarial:  # no accuracy goal, and its history records adversarial training accuracy
            continue
        reading = read_curve(card)
        if reading is not None:
            out[name] = (card, reading)
    return out


GENERATED_BY = "arbibench zoo curves"


def curves_markdown(model_dir: str | os.PathLike[str] | None = None, *, figure: str | None = None) -> str:
    """``docs/learning-curves.md``: per shipped model, its goal and paper, the numbers of its curve and the reading;
    ``figure`` (a path relative to the page) is linked under the table."""
    curves = shipped_curves(model_dir)
    if not curves:
        raise ValueError("no shipped checkpoint card has a training history; export a run with `arbibench train "
                         "--export` first")
    lines = [
        f"<!-- Generated by `{GENERATED_BY}` from the checkpoint cards; do not edit by hand. -->",
        "# Learning curves of the shipped checkpoints",
        "",
        "Each checkpoint card keeps its last training run, epoch by epoch: training accuracy on the augmented "
        "batches it trained on (measured during the epoch, as the weights moved), and held-out accuracy on the last "
        "5,000 CIFAR-10 training images, which the run "
        "never trained on and which picked the shipped epoch (the test set is measured once, at export). A model "
        f"whose training accuracy at the last epoch is less than {UNDERFIT_GAP:g} points above held-out *underfits*: "
        "it has capacity the run did not use. Its curve is *still rising* when the best held-out accuracy of the "
        f"run's last quarter beats the best before by {RISING_GAIN:g} points or more; under cosine and one-cycle "
        "schedules part of that late gain is the annealing, so rising says the run ended too soon, not that more "
        "epochs would reach the goal. The adversarially trained checkpoints have no accuracy goal and are not shown.",
        "",
        "| model | clean accuracy (test) | goal | paper | last run | held-out: epoch 1 -> best (epoch) | train - "
        "held-out at the end | last quarter | reading |",
        "| --- | ---: | --- | --- | ---: | --- | ---: | ---: | --- |",
    ]
    for name, (card, r) in curves.items():
        goal = goal_status(name, card.clean_acc, adversarial=card.adversarial)
        paper = paper_status(name, card.clean_acc, adversarial=card.adversarial)
        if r.val is None:
            held, gap, late = "-", "-", "-"
        else:
            held = f"{r.val[0]:.1f}% -> {max(r.val):.1f}% ({r.best_epoch})"
            gap = f"{r.fit_gap:+.1f}"
            late = "-" if r.late_gain is None else f"{r.late_gain:+.1f} in {r.late_epochs}"
        lines.append(f"| `{name}` | {100 * card.clean_acc:.2f}% | {goal} | {paper} | {len(r.epochs)} epochs | "
                     f"{held} | {gap} | {late} | {r.verdict()} |")
    if figure is not None:
        lines += ["", f"![Training and held-out accuracy per epoch of each shipped checkpoint's last run]({figure})"]
    lines += ["", "## Per model", ""]
    for name, (card, r) in curves.items():
        lines += [f"### `{name}`", "", f"Recipe: {recipe_summary(card)}.", "", r.sentence()]
        if r.previous is not None:
            lines += ["", f"It continued a run of {len(r.previous[0])} epochs, drawn before it in the figure."]
        lines.append("")
    return "\n".join(lines)


def curves_figure(model_dir: str | os.PathLike[str] | None = None) -> bytes:
    """One panel per shipped model with a history: training (dashed) and held-out (solid) accuracy per epoch, the
    goal as a dotted line; a continued run's predecessor drawn in grey before it. PNG bytes, byte-stable."""
    import matplotlib as mpl  # plotting only when a figure is asked for
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from arbibench.leaderboard.figures import PALETTE, STYLE

    curves = shipped_curves(model_dir)
    if not curves:
        raise ValueError("no shipped checkpoint card has a training history")
    cols = 4
    rows = -(-len(curves) // cols)
    with mpl.rc_context(STYLE):
        fig = Figure(figsize=(3.0 * cols, 2.3 * rows), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(rows, cols, squeeze=False)
        for ax, (name, (card, r)) in zip(axes.flat, curves.items(), strict=False):
            offset = 0
            if r.previous is not None:
                p_train, p_val = r.previous
                offset = len(p_train)
                before = list(range(1, offset + 1))
                ax.plot(before, p_train, color="#9aa1ab", ls="--", lw=1.0)
                if p_val is not None:
                    ax.plot(before, p_val, color="#9aa1ab", lw=1.0)
            xs = [offset + e for e in r.epochs]
            ax.plot(xs, r.train, color=PALETTE[1], ls="--", lw=1.2, label="training (augmented)")
            if r.val is not None:
                ax.plot(xs, r.val, color=PALETTE[0], lw=1.4, label="held-out")
            figure = published_figure(name)
            if figure is not None and not card.adversarial:
                ax.axhline(100 * figure.goal, color="#59606b", ls=":", lw=0.9, label="goal")
            ax.set_title(name)
            ax.set_xlabel("epoch")
            ax.set_ylabel("accuracy (%)")
        for ax in list(axes.flat)[len(curves):]:
            ax.set_visible(False)
        with_val = [i for i, (_, r) in enumerate(curves.values()) if r.val is not None]
        axes.flat[with_val[0] if with_val else 0].legend(fontsize=7, frameon=False, loc="lower right")
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110, metadata={"Software": None}, facecolor="white")
    return buf.getvalue()


def write_curves(out: str | os.PathLike[str], model_dir: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
    """``out`` (the page) and its figure beside it (``<stem>.png``), each written atomically; returns both paths."""
    page = Path(out)
    png = page.with_suffix(".png")
    text = curves_markdown(model_dir, figure=png.name)
    data = curves_figure(model_dir)
    atomic_write_bytes(data, png)
    atomic_write_bytes(text.encode("utf-8"), page)
    return page, png
