"""The Ray executor (``--backend ray``): store batches computed by Ray actors, committed by the driver, row for row
a local run's.

Each worker is an actor holding ``worker_threads`` CPUs (default: the driver's torch thread count, so that it
computes with the driver's thread count). It caches models by (zoo name, checkpoint sha256) and refuses to compute
with a checkpoint whose sha256 is not the one the driver loaded, or whose weights hash to another store key; it
checks that each batch's images arrive with the driver's dtype, shape and strides. The driver keeps at most
``IN_FLIGHT_PER_WORKER`` batches per worker queued, the most expensive first (query attacks, then by budget), and
commits each finished batch in its own transaction. A batch whose worker died (killed, out of memory, node lost) goes
back to the queue and runs on a live worker (Ray restarts the dead actor; one that is not back within
``REVIVE_S`` is dropped, and with none left the run stops with an error); an error raised by an attack stops the
run, as in the local runner (the caller's ``close()`` stops the workers), and a rerun resumes from the store. A
cluster address that refuses or never answers fails within ``CONNECT_TIMEOUT_S``, naming the address.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import ray
import torch
from ray.exceptions import RayActorError, RayTaskError
from rich.progress import Progress

from arbibench.attacks import Attack
from arbibench.evaluation.batch import BatchOutcome
from arbibench.evaluation.batch_jobs import BatchJob, BatchTask, WorkerExecutor
from arbibench.evaluation.executors import ExecutorError
from arbibench.evaluation.plan import CLEAN, commit_outcome
from arbibench.evaluation.store import hash_json

IN_FLIGHT_PER_WORKER = 2  # one batch computing, one waiting at the actor so that it never idles on a round trip
WORKER_START_S = 120.0
MAX_ATTEMPTS = 5  # a batch whose worker died this many times stops the run (something kills every worker)
RESTART_PAUSE_S = 5.0  # between probes of a worker that died and is not back yet
REVIVE_S = WORKER_START_S  # a worker that died and is not back within this long is dropped
POLL_S = 1.0  # the driver waits on results at most this long at a time, to notice workers that did not come back
# ray.init retries an address where no Ray head answers for ever: a refused or unreachable cluster address fails
# within this many seconds instead, with one error naming it. The backend connects when it is opened, before any model
# or data is loaded, so that with the command's start-up (importing torch and Ray: about 5 s on a loaded 2-core CPU) a
# command given a dead address ends within the 30 s README promises.
CONNECT_TIMEOUT_S = 20.0


def _refused(address: str, timeout: float) -> str | None:
    """Why nothing answers at a ``host:port`` address (refused, no route, no answer in time), or None if it does."""
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not port.isdigit():
        return None  # "auto", "ray://host:port" (Ray Client): ray.init resolves those itself
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return None
    except ConnectionRefusedError:
        return "connection refused (nothing listens on that port)"
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as e:
        return e.strerror or str(e)


class _OffMainThread(logging.Filter):
    """Hides Ray's note that ray.init ran off the main thread: :func:`connect_ray` sets that SIGTERM handler itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    sys.exit(signum)  # as Ray's own handler: SIGTERM unwinds the driver, so that close() and the store's exits run


def connect_ray(address: str | None, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """``ray.init`` on ``address``, or one ExecutorError naming the address within about ``timeout`` seconds.

    A port that refuses or never answers is found by a plain TCP connection first; a port that answers but where no
    Ray head accepts the driver is found by a watchdog on ``ray.init`` (which would otherwise retry for ever; its
    thread is left behind, as a failed connection leaves nothing to close). Without an address, a private Ray is
    started on this machine, as ray.init does.
    """
    options: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False, "logging_level": "warning"}
    if address is None:
        ray.init(**options)
        return
    deadline = time.monotonic() + timeout  # one budget for the TCP probe and ray.init together
    if why := _refused(address, timeout):
        raise ExecutorError(
            f"cannot reach the Ray cluster at {address}: {why}. Start its head (`ray start --head`), or pass the "
            "address that `ray start` printed to --address (or $RAY_ADDRESS)"
        )
    done, failure = threading.Event(), []

    def init() -> None:
        try:
            ray.init(address=address, **options)
        except Exception as e:  # noqa: BLE001 - handed to the caller's thread below
            failure.append(e)
        finally:
            done.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    quiet = _OffMainThread()
    logging.getLogger("ray._private.worker").addFilter(quiet)
    try:
        threading.Thread(target=init, name="arbibench-ray-connect", daemon=True).start()
        if not done.wait(max(deadline - time.monotonic(), 0.0)):
            raise ExecutorError(
                f"the Ray cluster at {address} did not accept this driver within {timeout:g} s: is a Ray head of the "
                "same version listening there? check with `ray status --address ...`"
            )
    finally:
        logging.getLogger("ray._private.worker").removeFilter(quiet)
    if failure:
        raise ExecutorError(f"cannot connect to the Ray cluster at {address}: {failure[0]}") from failure[0]


class BatchWorker:
    """A Ray actor computing store batches with :func:`compute_batch`; models and attacks are cached."""

    def __init__(self, threads: int) -> None:
        torch.set_num_threads(threads)
        self.models: dict[tuple[str, str, str], torch.nn.Module] = {}
        self.attacks: dict[str, Attack] = {}

    def info(self) -> tuple[int, int]:
        """(process id, torch threads): the driver checks the thread count, the crash tests use the pid."""
        return os.getpid(), torch.get_num_threads()

    def compute(self, task: BatchTask, key: str, attack_box: list[Any] | None,
                config_hash: str | None) -> tuple[BatchOutcome, float, str]:
        """One store batch (``attack_box``: ``[ObjectRef of the attack]``, ``None`` for the clean pass): its columns,
        compute seconds and what computed it."""
        attack = None
        if attack_box is not None:
            if key not in self.attacks:
                got = ray.get(attack_box[0])
                if hash_json(got.config_dict()) != config_hash:
                    raise ExecutorError(f"the attack of evaluation {key[:12]} arrived with another configuration")
                self.attacks[key] = got
            attack = self.attacks[key]
        return task.compute(attack, self.models)


class RayExecutor(WorkerExecutor):
    """Store batches on a Ray cluster: ``address`` is the head (``"auto"``, ``host:port``; default
    ``$RAY_ADDRESS``, else a private Ray on this machine bound to 127.0.0.1); ``workers`` actors (default: as
    many as the cluster's CPUs allow) of ``worker_threads`` torch threads each (default: the driver's)."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        workers: int | None = None,
        worker_threads: int | None = None,
        model_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(workers, worker_threads, model_dir)
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.workers = workers
        self.actors: list[Any] = []
        self.pids: list[int] = []  # of the workers as started (a restarted worker has another)
        self.retried = 0  # batches sent again because their worker died
        self.lost_workers: set[int] = set()  # workers that died and did not come back; given no more batches
        self.revived = 0  # times a worker that died came back (restarted by Ray) and got batches again
        self._probes: dict[Any, int] = {}  # probe ref -> worker that died, until it answers
        self._probe_deadline: dict[int, float] = {}  # worker that died -> when it is dropped unless back
        self._reprobe_at: dict[int, float] = {}  # worker whose probe failed (still down) -> when to probe again
        self.on_commit: Callable[[int], None] | None = None  # called with the number of batches committed so far
        self._committed = 0
        self._we_started_ray = False
        self._attack_refs: dict[str, Any] = {}
        self._connect()  # now, before the caller loads a model or opens a store: a dead address is refused at once

    # -- workers --------------------------------------------------------------------------------------------------
    def _connect(self) -> None:
        """Join the cluster (or start the private Ray) unless this process already has."""
        if ray.is_initialized():
            return
        if self.address is None and ray._private.ray_constants.ENABLE_RAY_CLUSTER:
            raise ExecutorError(
                "a private Ray started from this process would listen on every network interface; pass --address "
                "(a running cluster, e.g. one started with `ray start --head --node-ip-address=127.0.0.1`), or "
                "set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 before arbibench imports Ray"
            )
        connect_ray(self.address, CONNECT_TIMEOUT_S)  # read now: a test may shorten it
        self._we_started_ray = True

    def _start(self) -> None:
        if self.actors:
            return
        self._connect()  # again after close()
        cpus = int(ray.cluster_resources().get("CPU", 0))  # type: ignore[no-untyped-call]  # ray: unannotated
        n = self.workers or max(1, cpus // self.worker_threads)
        if n * self.worker_threads > cpus:
            raise ExecutorError(
                f"{n} workers x {self.worker_threads} threads need {n * self.worker_threads} CPUs; the cluster has "
                f"{cpus}: lower --workers or --worker-threads"
            )
        actor = ray.remote(BatchWorker).options(num_cpus=self.worker_threads, max_restarts=-1, max_task_retries=0)
        self.actors = [actor.remote(self.worker_threads) for _ in range(n)]
        try:
            infos = ray.get([a.info.remote() for a in self.actors], timeout=WORKER_START_S)
        except ray.exceptions.GetTimeoutError as e:
            raise ExecutorError(
                f"{n} Ray workers did not start within {WORKER_START_S:g} s; check `ray status` on the cluster (free "
                "CPUs, the same Ray and arbibench versions on every node) and that this driver can reach it"
            ) from e
        self.pids = [pid for pid, _ in infos]
        wrong = [threads for _, threads in infos if threads != self.worker_threads]
        if wrong:
            raise ExecutorError(f"workers run {wrong[0]} torch threads, not the {self.worker_threads} asked for")

    def close(self) -> None:
        for a in self.actors:
            ray.kill(a)
        self.actors, self.pids = [], []
        self.lost_workers.clear()
        self._probes.clear()
        self._probe_deadline.clear()
        self._reprobe_at.clear()
        self._attack_refs.clear()
        if self._we_started_ray and ray.is_initialized():
            ray.shutdown()
            self._we_started_ray = False

    # -- driver ---------------------------------------------------------------------------------------------------
    def _submit(self, job: BatchJob, worker: int) -> Any:
        box, config_hash = None, None
        if job.attack is not None:
            if job.key not in self._attack_refs:
                self._attack_refs[job.key] = ray.put(job.attack)
            box, config_hash = [self._attack_refs[job.key]], hash_json(job.attack.config_dict())
        return self.actors[worker].compute.remote(job.task(self._model_spec(job.plan)), job.key, box, config_hash)

    def _run_jobs(self, jobs: list[BatchJob], progress: Progress, task: Any) -> None:
        """Keep every usable worker fed until all jobs are committed.

        A worker whose batch failed because it died gets nothing new until it answers a probe (Ray restarts it):
        one that has not come back within ``REVIVE_S`` (no free CPU for it, its node gone) is dropped, so the
        driver never waits on a worker that will not return; with every worker dropped the run stops with an error.
        """
        queue = deque(jobs)
        in_flight: dict[Any, tuple[BatchJob, int]] = {}
        load = [0] * len(self.actors)
        while queue or in_flight:
            while queue:
                ready = [w for w, n in enumerate(load) if n < IN_FLIGHT_PER_WORKER and not self._down(w)]
                if not ready:
                    break
                job = queue.popleft()
                if job.plan.ctx.store.has_batch(job.key, job.batch_index):  # committed by another driver
                    progress.advance(task, job.size)
                    continue
                worker = min(ready, key=lambda w: load[w])
                in_flight[self._submit(job, worker)] = (job, worker)
                load[worker] += 1
            self._tend_probes()
            if not in_flight and not self._probes:
                time.sleep(0.2)  # every worker that is not dropped waits for its next probe
                continue
            done, _ = ray.wait([*in_flight, *self._probes], num_returns=1, timeout=POLL_S)
            if not done:
                continue
            (ref,) = done
            if ref in self._probes:
                self._probe_answered(ref)
                continue
            job, worker = in_flight.pop(ref)
            load[worker] -= 1
            try:
                outcome, seconds, machine = ray.get(ref)
            except RayActorError as e:  # the worker died: the batch goes to a live worker, the worker is probed
                self._probe(worker)
                job.attempts += 1
                if job.attempts >= MAX_ATTEMPTS:
                    raise ExecutorError(
                        f"batch {job.batch_index} of {job.attack.name if job.attack else CLEAN} lost its worker "
                        f"{job.attempts} times ({e}); see the Ray logs of the cluster at {self._where()}"
                    ) from e
                self.retried += 1
                queue.appendleft(job)
                continue
            except RayTaskError as e:  # the attack (or a check) raised: stop like the local runner
                raise e.as_instanceof_cause() from None  # type: ignore[no-untyped-call]
            commit_outcome(job.plan.ctx, job.key, outcome, seconds, machine)
            self._committed += 1
            progress.advance(task, len(outcome.clean_correct))
            if self.on_commit is not None:
                self.on_commit(self._committed)

    def _where(self) -> str:
        return self.address or "this machine"

    def _probe(self, worker: int) -> None:
        """Ask a worker that died whether Ray has restarted it (its queue is empty: it answers as soon as it is up)."""
        if worker not in self._probes.values() and worker not in self._reprobe_at and worker not in self.lost_workers:
            self._probes[self.actors[worker].info.remote()] = worker
            self._probe_deadline.setdefault(worker, time.monotonic() + REVIVE_S)

    def _probe_answered(self, ref: Any) -> None:
        """A dead worker's probe came back: it is usable again, or (still down) probed again after a pause."""
        worker = self._probes.pop(ref)
        try:
            ray.get(ref)
        except RayActorError:
            self._reprobe_at[worker] = time.monotonic() + RESTART_PAUSE_S
        else:
            self._probe_deadline.pop(worker, None)
            self.revived += 1

    def _tend_probes(self) -> None:
        """Probe again the workers due, drop those that did not come back in time; with none left, one error."""
        now = time.monotonic()
        for worker, when in list(self._reprobe_at.items()):
            if now >= when:
                del self._reprobe_at[worker]
                self._probe(worker)
        for worker, deadline in list(self._probe_deadline.items()):
            if now > deadline:
                self._lose(worker)
        if len(self.lost_workers) == len(self.actors):
            raise ExecutorError(
                f"every Ray worker of the cluster at {self._where()} died and none came back within "
                f"{REVIVE_S:g} s (no free CPUs for them, or their nodes are gone); check `ray status`, then "
                "rerun: the committed batches are kept"
            )

    def _down(self, worker: int) -> bool:
        """Whether a worker is being probed after dying, or was dropped."""
        return worker in self._probe_deadline or worker in self.lost_workers

    def _lose(self, worker: int) -> None:
        self.lost_workers.add(worker)
        self._probe_deadline.pop(worker, None)
        self._reprobe_at.pop(worker, None)
        for ref in [r for r, w in self._probes.items() if w == worker]:
            del self._probes[ref]
        ray.kill(self.actors[worker], no_restart=True)  # a restart that comes later must not take CPUs
