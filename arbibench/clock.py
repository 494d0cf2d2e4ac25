"""A clock that stands still while the process is stopped: compute time that queue pauses cannot inflate.

A job runner may pause a long job with SIGSTOP while tests or benchmarks run (``make test`` does), for
minutes at a time. Wall clocks count those minutes: the zoo v3 cards' epoch times carry 10-40% of them, and a full
protocol's stored batch seconds (which its projection check compares with the projection) would too. A stopped
process cannot count its own stop, but it sees the gap afterwards: a daemon thread looks at the clock every ``tick``
seconds, and when no look came for longer than ``tick + threshold`` the whole process stood still for the excess (a
busy 2-core machine wakes a sleeping thread within milliseconds). Every reading checks the gap too, so a reading
right after the process resumes already leaves the stop out.
"""

from __future__ import annotations

import os
import threading
import time
import weakref

TICK_S = 0.5
THRESHOLD_S = 2.0


class ActiveClock:
    """Seconds on a monotonic clock, less every interval the process was seen stopped."""

    def __init__(self, tick: float = TICK_S, threshold: float = THRESHOLD_S) -> None:
        self.tick, self.threshold = tick, threshold
        self._stopped = 0.0
        self._start_watching()
        _CLOCKS.add(self)

    def _start_watching(self) -> None:
        """A fresh lock and watcher thread: at construction, and in a forked child, which inherits neither a running
        watcher (without one every long interval would read as a stop) nor a lock it can trust."""
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._thread = threading.Thread(target=self._watch, name="arbibench-active-clock", daemon=True)
        self._thread.start()

    def reading(self) -> tuple[float, float]:
        """(active seconds since an arbitrary origin, seconds seen stopped since the clock started), read together:
        differences of two active readings leave out the stops between them."""
        with self._lock:
            now = time.monotonic()
            late = now - self._last - self.tick
            if late > self.threshold:
                self._stopped += late
            self._last = now
            return now - self._stopped, self._stopped

    def _watch(self) -> None:
        while True:
            time.sleep(self.tick)
            self.reading()

    def now(self) -> float:
        """Active seconds since an arbitrary origin (a drop-in for ``time.perf_counter`` in durations)."""
        return self.reading()[0]


_CLOCK: ActiveClock | None = None
_CLOCK_LOCK = threading.Lock()
_CLOCKS: weakref.WeakSet[ActiveClock] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _CLOCK_LOCK
    _CLOCK_LOCK = threading.Lock()
    for clock in list(_CLOCKS):
        clock._start_watching()


os.register_at_fork(after_in_child=_after_fork_in_child)


def active_clock() -> ActiveClock:
    """The process's clock (its watcher thread starts at the first call)."""
    global _CLOCK
    with _CLOCK_LOCK:
        if _CLOCK is None:
            _CLOCK = ActiveClock()
        return _CLOCK


class Lap:
    """Active and stopped seconds between :meth:`lap` calls, on the process's clock."""

    def __init__(self, clock: ActiveClock | None = None) -> None:
        self.clock = clock or active_clock()
        self._active, self._stopped = self.clock.reading()

    def lap(self) -> tuple[float, float]:
        """(active seconds, stopped seconds) since the previous lap or since this Lap was made."""
        active, stopped = self.clock.reading()
        out = (active - self._active, stopped - self._stopped)
        self._active, self._stopped = active, stopped
        return out
