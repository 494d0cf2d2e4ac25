"""The processes executor (``--backend processes``): store batches computed by worker processes on this machine,
committed by the driver.

For a machine with more cores than one process keeps busy, or a GPU that one process may leave idle between small
kernels (a ResNet-20 on 32x32 images gives each kernel little work; not measured here): ``workers`` processes,
started fresh (``spawn``: CUDA cannot be shared across ``fork``), each with ``worker_threads`` torch threads
(default: the driver's, so that a CPU run rounds as the local run does and stores the same rows), all on the run's
device. Each worker loads the model by zoo name and refuses a checkpoint or weights that are not the driver's; the
driver keeps ``IN_FLIGHT_PER_WORKER`` batches per worker submitted, the most expensive first, and alone writes the
store, one transaction per batch. A worker that dies (killed, out of memory) stops the run with one error; a rerun
resumes from the store. No Ray, no network: the workers talk to the driver through pipes.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import torch
from rich.progress import Progress, TaskID

from arbibench.attacks import Attack
from arbibench.evaluation.batch import BatchOutcome
from arbibench.evaluation.batch_jobs import BatchJob, BatchTask, WorkerExecutor
from arbibench.evaluation.executors import ExecutorError
from arbibench.evaluation.plan import commit_outcome

IN_FLIGHT_PER_WORKER = 2  # one batch computing, one waiting in the pipe so that no worker idles on a round trip

# per worker process: the models it has loaded, by (name, checkpoint sha256, device)
_models: dict[tuple[str, str, str], torch.nn.Module] = {}


def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)


def _worker_info() -> tuple[int, int]:
    """(process id, torch threads) of the worker that answers."""
    return os.getpid(), torch.get_num_threads()


def _compute(task: BatchTask, attack: Attack | None) -> tuple[BatchOutcome, float, str]:
    """One store batch, in a worker (``attack=None``: the clean pass)."""
    return task.compute(attack, _models)


class ProcessExecutor(WorkerExecutor):
    """Store batches on ``workers`` local processes (default: this machine's CPUs / ``worker_threads``) of
    ``worker_threads`` torch threads each (default: the driver's)."""

    name = "processes"

    def __init__(
        self,
        workers: int | None = None,
        worker_threads: int | None = None,
        model_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(workers, worker_threads, model_dir)
        self.workers = workers or max(1, (os.cpu_count() or 1) // self.worker_threads)
        self.pool: ProcessPoolExecutor | None = None
        self.pids: list[int] = []  # of the workers that answered at the start
        self.committed = 0  # batches computed by the workers and committed by the driver
        self.on_commit: Callable[[int], None] | None = None  # called with the number of batches committed so far

    def _start(self) -> None:
        if self.pool is not None:
            return
        self.pool = ProcessPoolExecutor(
            max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker,
            initargs=(self.worker_threads,),
        )  # fmt: skip
        try:
            # every worker starts now (a pool starts them on demand): an environment where they cannot fails here
            infos = {f.result() for f in [self.pool.submit(_worker_info) for _ in range(self.workers)]}
        except BrokenProcessPool as e:
            self.close()
            raise ExecutorError(f"the {self.workers} worker processes did not start ({e}); try --backend local") from e
        self.pids = sorted(pid for pid, _ in infos)
        wrong = [threads for _, threads in infos if threads != self.worker_threads]
        if wrong:
            self.close()
            raise ExecutorError(f"workers run {wrong[0]} torch threads, not the {self.worker_threads} asked for")

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        self.pids = []

    def _submit(self, job: BatchJob) -> Future[tuple[BatchOutcome, float, str]]:
        assert self.pool is not None
        return self.pool.submit(_compute, job.task(self._model_spec(job.plan)), job.attack)

    def _run_jobs(self, jobs: list[BatchJob], progress: Progress, task: TaskID) -> None:
        """Keep ``IN_FLIGHT_PER_WORKER`` batches per worker submitted until every job is committed."""
        queue = list(reversed(jobs))  # popped from the end: the most expensive first
        in_flight: dict[Future[Any], BatchJob] = {}
        try:
            while queue or in_flight:
                while queue and len(in_flight) < IN_FLIGHT_PER_WORKER * self.workers:
                    job = queue.pop()
                    if job.plan.ctx.store.has_batch(job.key, job.batch_index):  # committed by another driver
                        progress.advance(task, job.size)
                        continue
                    in_flight[self._submit(job)] = job
                if not in_flight:
                    continue
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in done:
                    job = in_flight.pop(future)
                    # an attack's error stops the run, as in the local runner
                    outcome, seconds, machine = future.result()
                    commit_outcome(job.plan.ctx, job.key, outcome, seconds, machine)
                    self.committed += 1
                    progress.advance(task, job.size)
                    if self.on_commit is not None:
                        self.on_commit(self.committed)
        except BrokenProcessPool as e:
            raise ExecutorError(
                "a worker process died (killed, or out of memory) while batches were computing; rerun the same "
                "command: the committed batches are kept"
            ) from e
        finally:
            for future in in_flight:
                future.cancel()
