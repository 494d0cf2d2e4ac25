"""The machine's one queue of long jobs: zoo training runs and full-protocol cards, one at a time, resumable.

A job is a list of idempotent commands (``arbibench train`` resumes from its last epoch, ``arbibench protocol run``
from its last store batch), so a queue killed at any moment resumes where it stopped: finished steps are recorded in
the queue's state file, and the running step picks up from its own checkpoint. A job's outputs are committed in one
commit when it ends; while it runs, its resume copies are taken at most hourly (and when a session about to end asks),
so that the next session (or machine) resumes from the repository alone.

The test suite and benchmarks must not share the cores with a training: ``python -m lab queue pause --holder NAME``
stops the queue's processes (SIGSTOP) until every holder has said ``resume``.
"""
