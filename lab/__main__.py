"""``python -m lab``: the lab's commands (``python -m lab queue --help``)."""

from __future__ import annotations

import typer

from lab.queue.cli import queue_app

app = typer.Typer(help="The maintainers' lab (not installed with arbibench): the machine's queue of long jobs.",
                  no_args_is_help=True, add_completion=False)
app.add_typer(queue_app, name="queue")

if __name__ == "__main__":
    app(prog_name="python -m lab")
