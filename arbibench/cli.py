"""The ``arbibench`` command line: wiring only. Each package owns its commands in its own ``cli.py`` (train and
recalibrate, eval and import, zoo, corruptions, protocol and sweep, attacks, leaderboard); this module builds the
app and adds them."""

from __future__ import annotations

import typer

from arbibench.attacks.cli import attacks_app
from arbibench.data.cli import corruptions_app
from arbibench.evaluation.cli import eval_, import_
from arbibench.leaderboard.cli import leaderboard_app
from arbibench.models.cli import zoo_app
from arbibench.protocol.cli import protocol_app, sweep
from arbibench.queue.cli import queue_app
from arbibench.train.cli import recalibrate, train

app = typer.Typer(
    help="arbibench: adversarial robustness benchmark for binarized neural networks (ARBiBench protocol).",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """arbibench: adversarial robustness benchmark for binarized neural networks (ARBiBench protocol)."""


app.command("train")(train)
app.command("recalibrate")(recalibrate)
app.command("eval")(eval_)
app.command("import")(import_)
app.add_typer(zoo_app, name="zoo")
app.add_typer(corruptions_app, name="corruptions")
app.add_typer(protocol_app, name="protocol")
app.command("sweep")(sweep)
app.add_typer(attacks_app, name="attacks")
app.add_typer(leaderboard_app, name="leaderboard")
app.add_typer(queue_app, name="queue")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
