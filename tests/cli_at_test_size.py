"""The real ``arbibench`` command line with the protocol preset and the training recipe shrunk to test size.

The crash tests (``test_faults.py``) kill real processes running real commands on real data; the quick protocol
(12 attacks on 500 images) and a training run on 50,000 images take minutes to hours, so this wrapper replaces
only the *sizes*: the protocol keeps its shape (white-box and black-box family, eps sweep, cards) with one cheap
attack per family on a few images, and training keeps its loop, checkpoints and export with 64 training images.
Everything else, the store, the cards, the writes and the fault points, is the code users run.

Usage: ``python tests/cli_at_test_size.py <arbibench arguments>``.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import replace

import arbibench.protocol.presets as protocol_module
import arbibench.train as train_module
from arbibench.cli import app
from arbibench.protocol import BLACK_BOX, WHITE_BOX, AttackSpec, Protocol

_full_protocol = protocol_module.get_protocol
_full_recipe = train_module.default_recipe
EVAL_EXAMPLES = 50  # test images of the training run's accuracy figures


def tiny_protocol(name: str, quick: bool = False, demo: bool = False) -> Protocol:
    """The preset with fgsm (white-box) and a 20-query Square attack (black-box) on 20 / 10 images."""
    preset = _full_protocol(name, quick, demo)
    sizes = {
        "attacks": (AttackSpec("fgsm", WHITE_BOX), AttackSpec("square", BLACK_BOX, (("max_queries", 20),))),
        "n_white_box": 20,
        "n_black_box": 10,
        "batch_size": 10,
        "sweep_attack": "fgsm",
        "sweep_eps": ("4/255", "8/255"),
        "n_sweep": 20,
        "eps_star_attacks": ("fgsm",),
        "eps_star_rounds": 2,
        "eps_star_draws": 10,
        "eps_star_floor": 0.25 / 255,  # 6 halvings below 16/255, not 14: the descent itself is tested elsewhere
    }
    return replace(preset, **{k: v for k, v in sizes.items() if hasattr(preset, k)})


def tiny_recipe(method: str, *, paper: bool = False, kind: str = "finetune",
                arch: str = "resnet20") -> train_module.Recipe:
    """The method's recipe on the first 64 training images in batches of 32."""
    recipe = _full_recipe(method, paper=paper, kind=kind, arch=arch)
    recipe.train_examples, recipe.batch_size = 64, 32
    return recipe


if __name__ == "__main__":
    # the commands look these up on their modules when they run (arbibench/protocol/cli/, arbibench/train/cli.py)
    protocol_module.get_protocol = tiny_protocol
    train_module.default_recipe = tiny_recipe
    train_module.train = functools.partial(train_module.train, eval_examples=EVAL_EXAMPLES)
    app(sys.argv[1:], prog_name="arbibench")
