"""The ``arbibench protocol`` commands, one module each: the protocol owns its command line, and ``arbibench/cli.py``
only wires it in (``arbibench sweep`` lives beside them, in :mod:`arbibench.protocol.cli.sweep`).

Every module here imports torch only inside the command that needs it (each such import says ``# start-up:``), so
``arbibench protocol --help`` and a command's ``--help`` answer without it.
"""

from __future__ import annotations

import typer

from arbibench.protocol.cli.deploy_check import protocol_deploy_check
from arbibench.protocol.cli.grid_check import protocol_grid_check
from arbibench.protocol.cli.progress import protocol_progress_command
from arbibench.protocol.cli.report import protocol_report
from arbibench.protocol.cli.run import protocol_run
from arbibench.protocol.cli.show import protocol_show

protocol_app = typer.Typer(help="The ARBiBench protocol presets: show and run them.", no_args_is_help=True)
protocol_app.command("show")(protocol_show)
protocol_app.command("run")(protocol_run)
protocol_app.command("report")(protocol_report)
protocol_app.command("grid-check")(protocol_grid_check)
protocol_app.command("deploy-check")(protocol_deploy_check)
protocol_app.command("progress")(protocol_progress_command)

__all__ = ["protocol_app"]
