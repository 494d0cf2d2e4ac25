"""Training time without the intervals the process was stopped.

The machine's queue pauses a training with SIGSTOP while tests or benchmarks run (``arbibench queue pause``), for
minutes at a time. A wall clock counts those minutes as training: the zoo v3 cards' epoch times carry 10-40% of
them. A stopped process cannot count its own stop, but it sees the gap afterwards: a daemon thread wakes every
``tick`` seconds, and a wake-up later than ``tick + threshold`` means the whole process stood still that long (a busy
2-core machine wakes a sleeping thread within milliseconds).
"""

from __future__ import annotations

import threading
import time
from types import TracebackType


class ActiveStopwatch:
    """Seconds since :meth:`lap` was last called (or since start), with the stopped intervals apart."""

    def __init__(self, tick: float = 0.5, threshold: float = 2.0) -> None:
        self.tick, self.threshold = tick, threshold
        self._stopped = 0.0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="arbibench-stopwatch", daemon=True)
        self._lap_wall = self._lap_stopped = 0.0

    def __enter__(self) -> ActiveStopwatch:
        self._lap_wall = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        last = time.monotonic()
        while not self._done.wait(self.tick):
            now = time.monotonic()
            late = now - last - self.tick
            if late > self.threshold:
                with self._lock:
                    self._stopped += late
            last = now

    @property
    def stopped_seconds(self) -> float:
        """All the time the process was seen stopped since the stopwatch started."""
        with self._lock:
            return self._stopped

    def lap(self) -> tuple[float, float]:
        """(active seconds, stopped seconds) since the previous lap; active = wall time - stopped time."""
        now, stopped = time.monotonic(), self.stopped_seconds
        wall, paused = now - self._lap_wall, stopped - self._lap_stopped
        self._lap_wall, self._lap_stopped = now, stopped
        return max(wall - paused, 0.0), paused
