"""The machine's one queue of long jobs: zoo training runs and full-protocol cards, one at a time, resumable.

A job is a list of idempotent commands (``arbibench train`` resumes from its last epoch, ``arbibench protocol run``
from its last store batch), so a queue killed at any moment resumes where it stopped: finished steps are recorded in
the queue's state file, and the running step picks up from its own checkpoint. While a job runs, the queue commits its
checkpoint folder to git after every epoch, and a snapshot of its result store every few minutes, so that the next
session (or machine) resumes from the repository alone.

The test suite and benchmarks must not share the cores with a training: ``arbibench queue pause --holder NAME``
stops the queue's processes (SIGSTOP) until every holder has said ``resume``.
"""
