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
  by more epochs of the same recipe: the miss is the recipe;
- *not beaten*: a later run that ran its whole schedule and did not replace the checkpoint (the card's
  ``attempts``) answers the question outright: more training of that run's recipe did not help, whatever the
  shipped run's own curve suggested. A run stopped early (patience, mid-schedule) never reached the low learning
  rates where these runs gain most, so it does not answer it: the shipped run's own reading stands, with a mention.

"Undertrained" is only half an explanation until it says by how much: :func:`training_line` follows the shipped
weights back through the card's earlier versions (a continuation starts from the version shipped before it) and
counts the epochs every run in that line gave them, which the reading sets beside its paper recipe's epochs where the
caller passes them (``paper_epochs``; the recipes live in :mod:`arbibench.train.paper_recipes`, above this layer).

:func:`read_curve` reads one card and :func:`curves_figure` draws the readings; :mod:`arbibench.models.markdown`
renders them as ``docs/learning-curves.md`` (``arbibench zoo curves``). Cards only, no torch.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arbibench.cards import CheckpointCard, PreviousVersion, TrainingAttempt
from arbibench.models.published import published_figure

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType  # annotations only

UNDERFIT_GAP = 2.0  # points: training accuracy on augmented batches at most this far above held-out -> underfits
RISING_GAIN = 0.5  # points: the last quarter's best held-out accuracy above the best before it -> still rising
_TRAIN, _HELD_OUT, _ATTEMPT = "#D55E00", "#0072B2", "#56B4E9"  # Okabe-Ito, as the leaderboard's figures
_STYLE: dict[RcKeyType, Any] = {
    "font.size": 9, "axes.titlesize": 10, "axes.titleweight": "bold", "axes.spines.top": False,
    "axes.spines.right": False, "axes.grid": True, "grid.color": "#e3e6ea", "grid.linewidth": 0.6,
}


def start_words(init_from: str | None) -> str:
    """Where a run started, as the zoo's pages say it: "from scratch", "from `resnet20_fp`" (a weights file by its
    run folder's name)."""
    if not init_from:
        return "from scratch"
    return f"from `{Path(init_from).parent.name if init_from.endswith('.safetensors') else init_from}`"


def _first_best(values: list[float] | tuple[float, ...]) -> int:
    """The index of the first of the highest values: the epoch held-out selection ships."""
    return max(range(len(values)), key=lambda i: (values[i], -i))


@dataclass(frozen=True)
class TrainingLine:
    """The training runs the shipped weights descend from, oldest first: the epochs each gave them (up to the epoch
    it shipped), what the first started from, and whether the card holds the whole line."""

    epochs: tuple[int, ...]
    start: str | None  # the first run's init_from: the FP twin, a weights file; None: from scratch (or incomplete)
    complete: bool  # False where a continuation's predecessor is not among the card's earlier versions

    @property
    def total(self) -> int:
        return sum(self.epochs)

    def words(self) -> str:
        """"82 epochs in 3 runs (12 + 30 + 40) from `resnet20_fp`"; "at least" where the line is incomplete."""
        text = f"{'at least ' if not self.complete else ''}{self.total} epochs"
        if len(self.epochs) > 1:
            text += f" in {len(self.epochs)} runs ({' + '.join(map(str, self.epochs))})"
        if not self.complete:
            return text + " (an earlier run of the line is not in the card)"
        return f"{text} {start_words(self.start)}"


def _shipped_epochs(recipe: dict[str, Any] | None, history: tuple[dict[str, Any], ...] | None,
                    validation: dict[str, Any] | None = None) -> int:
    """The epochs one run gave the weights it shipped: up to its picked epoch under held-out selection, else all it
    ran (its history), else its recipe's."""
    if validation and validation.get("best_epoch"):
        return int(validation["best_epoch"])
    if history:
        if (recipe or {}).get("val_examples") and all(h.get("val_acc") is not None for h in history):
            return int(history[_first_best([float(h["val_acc"]) for h in history])]["epoch"])
        return len(history)
    return int((recipe or {}).get("epochs") or 0)


def training_line(card: CheckpointCard) -> TrainingLine:
    """Follow ``card``'s weights back to the run that did not continue a version of the same model.

    A continuation (``recipe.init_from`` is the model's own name) starts from the version shipped just before it:
    the one whose sha256 the card's ``init_sha256`` names, and for an earlier version (whose record keeps no
    ``init_sha256``) the one before it in ``previous_versions``, the order in which they shipped."""
    epochs = [_shipped_epochs(card.recipe, card.history, card.validation)]
    init_from = card.recipe.get("init_from")
    versions: tuple[PreviousVersion, ...] = card.previous_versions
    index = next((i for i, v in enumerate(versions) if v.sha256 == card.init_sha256), None)
    if card.init_sha256 is None and versions:
        index = len(versions) - 1
    complete = True
    while init_from == card.name:
        if index is None or index < 0:
            complete = False
            break
        version = versions[index]
        epochs.append(_shipped_epochs(version.recipe, version.history))
        init_from = (version.recipe or {}).get("init_from")
        index -= 1
    return TrainingLine(tuple(reversed(epochs)), init_from if complete else None, complete)


@dataclass(frozen=True)
class AttemptCurve:
    """A later run that did not replace the checkpoint (percentages): its curve, its best held-out epoch and the
    shipped checkpoint's figure on the same held-out images, which it did not beat."""

    attempt: TrainingAttempt
    train: tuple[float, ...]
    val: tuple[float, ...] | None

    @property
    def best(self) -> tuple[int, float] | None:
        best = self.attempt.best_val
        return None if best is None else (best[0], 100 * best[1])

    @property
    def shipped_val(self) -> float | None:
        value = self.attempt.shipped_val_acc
        return None if value is None else 100 * value

    @property
    def scheduled(self) -> int:
        """The epochs its recipe planned (its history's length when the recipe does not say)."""
        planned = self.attempt.recipe.get("epochs")
        return int(planned) if isinstance(planned, int) and planned > 0 else len(self.train)

    @property
    def stopped_early(self) -> bool:
        return len(self.train) < self.scheduled

    def sentence(self) -> str:
        """When, how long, and its best held-out epoch against the shipped figure."""
        n, date = len(self.train), self.attempt.date
        text = (f"A later run ({date}), stopped early after {n} of its {self.scheduled} epochs, did not replace it"
                if self.stopped_early else f"A later run of {n} epochs ({date}) did not replace it")
        best, chosen = self.best, self.attempt.val_acc
        if best is not None:  # the figure it was compared on: its best epoch as exported (after any BN re-estimation)
            figure = best[1] if chosen is None else 100 * chosen
            text += f": held-out {figure:.2f}% at its best epoch, {best[0]}"
            if self.shipped_val is not None:
                text += f", against the shipped model's {self.shipped_val:.2f}% on the same images"
        return text


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
    goal: float | None = None  # the zoo's goal for the model, in percent
    previous: tuple[tuple[float, ...], tuple[float, ...] | None] | None = None  # (train, val) of the run it continued
    attempts: tuple[AttemptCurve, ...] = ()  # later runs that did not replace it, oldest first
    line: TrainingLine | None = None  # every run behind the shipped weights (:func:`training_line`)
    paper_epochs: int | None = None  # the epochs of its paper recipe (--recipe paper), where the caller knows them

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

    def case(self) -> str:
        """Which reading applies: "no curve", "met", "not beaten" (a later whole-schedule run did not beat it),
        "recipe" (fits its training batches), "undertrained" (underfits, still rising) or "flat" (underfits, flat)."""
        if self.val is None:
            return "no curve"
        if self.goal_met:
            return "met"
        if any(not a.stopped_early for a in self.attempts):
            return "not beaten"
        if not self.underfits:
            return "recipe"
        return "undertrained" if self.rising else "flat"

    def verdict(self) -> str:
        """The reading in a few words, as README's zoo table shows it."""
        case = self.case()
        if case == "no curve":
            return "no held-out curve in its card"
        if case == "met":
            return "meets its goal"
        if case == "not beaten":
            completed = [a for a in self.attempts if not a.stopped_early]
            return (f"a later {len(completed[-1].train)}-epoch run did not beat it: more epochs of that recipe "
                    "do not reach the goal")
        if case == "recipe":
            own, notes = (f"fits its training batches {self.fit_gap:.1f} points above held-out: the recipe, not the "
                          "budget"), []
        elif case == "undertrained":
            own, notes = "underfits and still rising at its end: undertrained", self._budget()
        else:
            own, notes = "underfits but flat at the end: the schedule or the method's pieces", []
        if self.attempts:
            cut = self.attempts[-1]
            notes.append(f"a later run stopped early, at epoch {len(cut.train)} of {cut.scheduled}, below it")
        return own + (f" ({'; '.join(notes)})" if notes else "")

    def _budget(self) -> list[str]:
        """["82 epochs in all, the paper recipe's 400"]: how far short of the budget of its paper recipe
        (``--recipe paper``) the weights were trained; empty where either figure is unknown."""
        if self.line is None or self.paper_epochs is None:
            return []
        total = f"{'at least ' if not self.line.complete else ''}{self.line.total}"
        return [f"{total} epochs in all, the paper recipe's {self.paper_epochs}"]

    def budget_sentence(self) -> str | None:
        """The training line in a sentence, with its paper recipe's epochs where known."""
        if self.line is None:
            return None
        text = f"The shipped weights were trained {self.line.words()}"
        if self.paper_epochs is not None:
            share = self.line.total / self.paper_epochs
            text += f"; the paper recipe (`--recipe paper`) runs {self.paper_epochs} ({share:.0%} of it)"
        return text + "."

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
        for a in self.attempts:
            text += f". {a.sentence()}"
        return text + f". Reading: {self.verdict()}."


def _history_series(history: tuple[dict[str, Any], ...] | list[dict[str, Any]]
                    ) -> tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...] | None]:
    epochs = tuple(int(h["epoch"]) for h in history)
    train = tuple(100 * float(h["train_acc"]) for h in history)
    vals = [h.get("val_acc") for h in history]
    val = tuple(100 * float(v) for v in vals if v is not None) if all(v is not None for v in vals) else None
    return epochs, train, val


def read_curve(card: CheckpointCard, paper_epochs: int | None = None) -> CurveReading | None:
    """The reading of ``card``'s training history; None for a card without one (e.g. an imported checkpoint).
    ``paper_epochs``: the epochs of the model's paper recipe, which the reading compares with its training line."""
    if not card.history:
        return None
    epochs, train, val = _history_series(card.history)
    best = None
    if val is not None:
        best = epochs[_first_best(val)]  # the first epoch of the best accuracy
    figure = published_figure(card.name)
    goal_met = None if figure is None or card.adversarial else card.clean_acc >= figure.goal
    previous = None
    last = card.previous_versions[-1] if card.previous_versions else None
    if last is not None and last.history and card.recipe.get("init_from") == card.name:  # a continuation
        _, p_train, p_val = _history_series(last.history)
        previous = (p_train, p_val)
    attempts = []
    for attempt in card.attempts_on_this:
        if attempt.history:
            _, a_train, a_val = _history_series(attempt.history)
            attempts.append(AttemptCurve(attempt, a_train, a_val))
    return CurveReading(name=card.name, epochs=epochs, train=train, val=val, best_epoch=best, goal_met=goal_met,
                        goal=None if goal_met is None or figure is None else 100 * figure.goal, previous=previous,
                        attempts=tuple(attempts), line=training_line(card), paper_epochs=paper_epochs)


def curves_figure(curves: dict[str, CurveReading]) -> bytes:
    """One panel per reading: training (dashed) and held-out (solid) accuracy per epoch, the goal as a dotted line;
    a continued run's predecessor drawn in grey before it, later runs that did not ship dash-dotted after it. PNG
    bytes, byte-stable (no timestamp)."""
    import matplotlib as mpl  # start-up: matplotlib only when a figure is drawn
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not curves:
        raise ValueError("no learning curve to draw")
    cols = 4
    rows = -(-len(curves) // cols)
    with mpl.rc_context(_STYLE):
        fig = Figure(figsize=(3.0 * cols, 2.3 * rows), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(rows, cols, squeeze=False)
        for ax, (name, r) in zip(axes.flat, curves.items(), strict=False):
            offset = 0
            if r.previous is not None:
                p_train, p_val = r.previous
                offset = len(p_train)
                before = list(range(1, offset + 1))
                ax.plot(before, p_train, color="#9aa1ab", ls="--", lw=1.0)
                if p_val is not None:
                    ax.plot(before, p_val, color="#9aa1ab", lw=1.0)
            xs = [offset + e for e in r.epochs]
            ax.plot(xs, r.train, color=_TRAIN, ls="--", lw=1.2, label="training (augmented)")
            if r.val is not None:
                ax.plot(xs, r.val, color=_HELD_OUT, lw=1.4, label="held-out")
            after = offset + len(r.epochs)
            for a in r.attempts:  # each later run that did not ship, after the shipped one
                if a.val is not None:
                    ax.plot([after + i for i in range(1, len(a.val) + 1)], a.val, color=_ATTEMPT, lw=1.0, ls="-.",
                            label="held-out, later run not shipped")
                after += len(a.train)
            if r.goal is not None:
                ax.axhline(r.goal, color="#59606b", ls=":", lw=0.9, label="goal")
            ax.set_title(name)
            ax.set_xlabel("epoch")
            ax.set_ylabel("accuracy (%)")
        for ax in list(axes.flat)[len(curves):]:
            ax.set_visible(False)
        with_val = [i for i, r in enumerate(curves.values()) if r.val is not None]
        axes.flat[with_val[0] if with_val else 0].legend(fontsize=7, frameon=False, loc="lower right")
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110, metadata={"Software": None}, facecolor="white")
    return buf.getvalue()
