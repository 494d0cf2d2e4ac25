"""What each zoo model's paper publishes for its backbone on CIFAR-10, and the zoo's goal for it.

A reader who knows a method's paper compares the zoo's clean accuracy with the paper's figure first, so the card,
``arbibench zoo list`` and README show both and the gap. Most BNN papers report ImageNet only: there the figure is
None and ``source`` says so (a later paper's re-run is cited only where one was checked). The facts and their
sources are collected in ``docs/paper-recipes.md``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PublishedFigure:
    """A paper's CIFAR-10 top-1 accuracy for the zoo model's backbone (None: the paper has none) and the goal the
    zoo's checkpoint is trained towards."""

    acc: float | None
    source: str
    kind: str  # "paper", "official code", "later paper" or "none"
    goal: float

    def gap(self, clean_acc: float) -> float | None:
        """The zoo checkpoint's accuracy minus the published figure (negative: below the paper)."""
        return None if self.acc is None else clean_acc - self.acc

    def as_card(self) -> dict[str, object]:
        return {"acc": self.acc, "source": self.source, "kind": self.kind, "goal": self.goal}


_NO_CIFAR = "reports ImageNet only; no CIFAR-10 ResNet-20 figure in the paper"
PUBLISHED: dict[str, PublishedFigure] = {
    "resnet20_fp": PublishedFigure(
        0.9125, "He et al., CVPR 2016, CIFAR-10 table: ResNet-20 8.75% error", "paper", 0.915),
    "resnet20_irnet": PublishedFigure(
        0.865, "htqin/IR-Net README: ResNet-20 W1/A1 with a shortcut around every binary convolution, as the zoo's "
        "(Qin et al., CVPR 2020 give 85.4% for the plain structure)", "official code", 0.85),
    "resnet20_dorefa": PublishedFigure(
        0.793, "Qin et al., CVPR 2020 (IR-Net), CIFAR-10 table: DoReFa-Net W1/A1 ResNet-20; the DoReFa-Net paper "
        "reports SVHN and ImageNet only", "later paper", 0.80),
    "resnet20_bnn": PublishedFigure(
        None, "Hubara et al., NeurIPS 2016 train a VGG-like network on CIFAR-10; no ResNet-20 figure", "none", 0.80),
    "resnet20_xnor": PublishedFigure(None, f"Rastegari et al., ECCV 2016 {_NO_CIFAR}", "none", 0.80),
    "resnet20_xnorpp": PublishedFigure(None, f"Bulat & Tzimiropoulos, BMVC 2019 {_NO_CIFAR}", "none", 0.82),
    "resnet20_bireal": PublishedFigure(None, f"Liu et al., ECCV 2018 {_NO_CIFAR}", "none", 0.85),
    "resnet20_reactnet": PublishedFigure(None, f"Liu et al., ECCV 2020 {_NO_CIFAR}", "none", 0.85),
    # The second backbone of the BNN-robustness literature (CIFAR ResNet-18), trained once the ResNet-20 zoo is done.
    "resnet18_fp": PublishedFigure(None, "He et al., CVPR 2016 train ResNet-20 to -110 on CIFAR-10, no ResNet-18",
                                   "none", 0.94),
    "resnet18_bnn": PublishedFigure(None, "Hubara et al., NeurIPS 2016: no CIFAR-10 ResNet-18 figure", "none", 0.88),
    "resnet18_bireal": PublishedFigure(None, f"Liu et al., ECCV 2018 {_NO_CIFAR.replace('20', '18')}", "none", 0.88),
    "resnet18_reactnet": PublishedFigure(None, f"Liu et al., ECCV 2020 {_NO_CIFAR.replace('20', '18')}", "none", 0.88),
}


def published_figure(name: str) -> PublishedFigure | None:
    """The published figure and goal of the zoo model ``name`` (None for a model without one, e.g. imports)."""
    return PUBLISHED.get(name)
