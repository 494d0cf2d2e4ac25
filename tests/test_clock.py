"""The active clock leaves out the time a queue pause (SIGSTOP) held the process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from arbibench.clock import ActiveClock, Lap

CHILD = """
import json, time
from arbibench.clock import ActiveClock, Lap
w = Lap(ActiveClock(tick=0.1, threshold=0.5))
print("ready", flush=True)
t = time.monotonic()
while time.monotonic() - t < 4.0:   # busy, as a training epoch is
    sum(range(10_000))
active, stopped = w.lap()
print(json.dumps({"active": active, "stopped": stopped}), flush=True)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="SIGSTOP is POSIX")
def test_a_stopped_process_counts_only_its_running_time():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(2.5)
        os.kill(child.pid, signal.SIGCONT)
        out = json.loads(child.stdout.readline())
    finally:
        child.wait(timeout=30)
    # the child's loop runs 4 s of monotonic time, of which about 2.5 s it stood stopped
    assert 2.0 < out["stopped"] < 3.2, out
    assert 0.8 < out["active"] < 2.0, out


def test_without_a_stop_all_the_time_is_active():
    w = Lap(ActiveClock(tick=0.05, threshold=0.5))
    time.sleep(0.6)
    active, stopped = w.lap()
    assert stopped == 0.0 and 0.55 < active < 1.5


FORKED = """
import json, os, time
from arbibench.clock import ActiveClock, Lap
clock = ActiveClock(tick=0.1, threshold=0.5)
r, w = os.pipe()
if os.fork() == 0:  # the child inherits the clock but not its watcher thread
    lap = Lap(clock)
    time.sleep(2.0)  # idle and not stopped: without a watcher of its own this would read as a stop
    os.write(w, json.dumps(lap.lap()).encode())
    os._exit(0)
os.close(w)
print(os.read(r, 200).decode(), flush=True)
os.wait()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_keeps_a_working_clock():
    out = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    active, stopped = json.loads(out.stdout)
    assert stopped == 0.0 and 1.9 < active < 3.0, out
