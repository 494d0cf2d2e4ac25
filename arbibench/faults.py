"""Fault-injection points: where the crash tests kill a real ``arbibench`` process (stdlib only, any layer may call).

A crash test must kill the process at a chosen *moment* (between writing a batch and committing it, halfway
through an atomic file write), and a sleep cannot choose a moment. So the code marks its critical moments with
``fault_point("name")`` and the test starts the process with

    ARBIBENCH_FAULT=<name>[@<n>]

which makes the process send itself SIGKILL on its n-th arrival (default: the first) at that point: the same
death as ``kill -9`` or the OOM killer, with no cleanup, no ``finally`` and no atexit. ``ARBIBENCH_PAUSE`` (same
syntax) with ``ARBIBENCH_PAUSE_DIR=<dir>`` instead makes it stop there: it creates ``<dir>/paused`` and blocks
opening the FIFO ``<dir>/resume`` until the test opens it for writing (two writers racing for one batch are
tested this way). Outside tests the variables are unset and a fault point costs two dictionary lookups. The
points (``tests/test_faults.py`` stops processes at all but ``train.export``):

================================  ==================================================================================
``store.commit.before``           a batch is computed, its transaction not begun
``store.commit.during``           the batch's rows are inserted, the transaction not committed
``store.commit.after``            the transaction is committed
``card.write``                    a model card's temporary file is written, not yet renamed over the card
``examples.write``                the adversarial-examples file's temporary is written, not yet renamed
``checkpoint.write``              a training checkpoint's temporary file is written, not yet renamed
``train.export``                  training has finished, the export into the zoo folder not begun
``site.page``                     the leaderboard site is half written in its temporary folder
``site.swap``                     the old site is moved aside, the new one not yet renamed into place
================================  ==================================================================================
"""

from __future__ import annotations

import os
import signal

KILL_ENV, PAUSE_ENV, PAUSE_DIR_ENV = "ARBIBENCH_FAULT", "ARBIBENCH_PAUSE", "ARBIBENCH_PAUSE_DIR"
_arrivals: dict[str, int] = {}


def _hit(env: str, name: str) -> bool:
    """Whether ``$env`` (``<point>[@<n>]``) names this point and this is its n-th arrival."""
    spec = os.environ.get(env)
    if not spec:
        return False
    point, _, nth = spec.partition("@")
    if point != name:
        return False
    key = f"{env}:{name}"
    _arrivals[key] = _arrivals.get(key, 0) + 1
    return _arrivals[key] == int(nth or 1)


def fault_point(name: str) -> None:
    """SIGKILL this process, or pause it, here if ``$ARBIBENCH_FAULT`` / ``$ARBIBENCH_PAUSE`` names this point."""
    if _hit(KILL_ENV, name):
        os.kill(os.getpid(), signal.SIGKILL)
    if _hit(PAUSE_ENV, name):
        folder = os.environ[PAUSE_DIR_ENV]
        with open(os.path.join(folder, "paused"), "w") as marker:
            marker.write(f"{name}\n")
        with open(os.path.join(folder, "resume")) as fifo:  # blocks until the test opens the FIFO to write
            fifo.read()
