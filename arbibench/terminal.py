"""The console every ``arbibench`` command prints to, the one way a command reports a user error, and the one way
it reads a comma-separated option or the name of a file to write.

It sits below every package, so each package's ``cli.py`` (data, models, evaluation, train, protocol) prints and
fails the same way without importing a layer above it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

# Errors a command reports as one line instead of a traceback; each package's cli adds its own (DownloadError,
# StoreError). OSError: disk full, read-only folder.
USER_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError, OSError)
# Output that is not a terminal (a log file, a pipe, CI) has no width of its own, and rich would assume 80 columns,
# squeezing the wide tables (`zoo list`, `attacks list`) into cells of two letters. It gets 240 (`zoo list`'s width)
# unless COLUMNS is set.
PIPED_WIDTH = 240
console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else PIPED_WIDTH)


def fail(e: Exception) -> NoReturn:
    """Print a user error (no traceback) and exit with status 2."""
    # the message as it is: brackets escaped ('arbibench[ray]'), and no emoji codes (a model named ':smile:', a
    # surrogate 'tanh:abc' whose ':abc' rich would read as one)
    console.print(f"[bold red]error:[/] {escape(str(e))}", emoji=False)
    raise typer.Exit(2)


def comma_list(text: str, option: str) -> list[str]:
    """The items of a comma-separated option (``--models a,b``, ``--eps 1/255,2/255``), stripped. An empty item
    (``a,,b``, a trailing comma) or an item named twice is a ValueError naming ``option``: a typo is not silently
    dropped, and a model or eps twice would give two rows of the same thing. Text of no item at all (``""``,
    ``","``) gives an empty list, which the caller refuses in its own words."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        return []
    if "" in items:
        raise ValueError(f"{option} {text!r} has an empty item (two commas in a row, or one at an end); remove it")
    twice = sorted({item for item in items if items.count(item) > 1})
    if twice:
        raise ValueError(f"{option} {text!r} names {', '.join(twice)} twice; name each once")
    return items


FILE_METAVAR = "<path>"


def output_file(text: str | Path) -> Path:
    """The parser of an option that names a file to write (``--out``, ``--json``, ``--markdown``). A name that ends
    in a path separator names a folder; read as a Path it would lose the separator and become a file of the folder's
    name, so it is refused here, while the text still has it."""
    text = os.fspath(text)
    if text.endswith(("/", os.sep)):
        raise typer.BadParameter(f"{text!r} ends in {text[-1]!r}, so it names a folder; this option names the file to "
                                 "write: add the file's name after it")
    return Path(text)
