"""A private Ray head on loopback only, for tests/test_ray_executor.py and the benchmarks that need a real cluster.

A module, not a script: the test imports it as ``benchmarks.ray_head`` (pytest puts the repository root on
``sys.path``), a benchmark script beside it as ``ray_head``.

The head is ``ray start --head --block``, a child process stopped by its PID (never ``ray stop``, which would stop
every Ray on the machine). Ray rewrites ``--node-ip-address=127.0.0.1`` to the machine's interface address unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (then it advertises and binds 127.0.0.1); every port is given explicitly and
:func:`listening_addresses` lets the caller check that no process of the cluster listens anywhere else.
Authentication is Ray's token mode, with a token made for this head. Workers run at the driver's niceness
(``RAY_worker_niceness=0``), not Ray's default 15, which would starve them on a machine shared with other work.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LOOPBACK = ("127.0.0.1", "[::ffff:127.0.0.1]")


@dataclass(frozen=True)
class RayHead:
    address: str  # 127.0.0.1:<gcs port>, for --address / ray.init(address=...)
    env: dict[str, str]  # what a driver's environment needs to reach the head (and to advertise 127.0.0.1 itself)
    pid: int  # of `ray start --block`; the cluster's processes are its descendants


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def process_tree(pid: int) -> set[int]:
    """``pid`` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        found.add(p)
        todo += children.get(p, [])
    return found


def listening_addresses(pids: set[int]) -> list[str]:
    """Local addresses on which one of ``pids`` listens (TCP); needs ``ss`` (iproute2)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3] for line in out.splitlines() if any(f"pid={p}," in line for p in pids)]


@contextmanager
def loopback_head(num_cpus: int = 2, start_timeout_s: float = 90.0) -> Iterator[RayHead]:
    """Start a Ray head on 127.0.0.1 only; stop it (by PID, and whatever it left behind) on exit.

    Raises ``RuntimeError`` with the end of the head's log when it does not start within ``start_timeout_s``.
    """
    gcs, node, objects, agent, agent_grpc, env_agent, metrics = free_ports(7)
    temp = tempfile.mkdtemp(prefix="arbi-ray-")  # short: Ray's socket paths must fit in 107 bytes
    env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16),
           "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1", "RAY_worker_niceness": "0"}
    cmd = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
           f"--port={gcs}", f"--node-manager-port={node}", f"--object-manager-port={objects}",
           f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
           f"--runtime-env-agent-port={env_agent}", f"--metrics-export-port={metrics}", "--include-dashboard=false",
           "--dashboard-host=127.0.0.1", f"--num-cpus={num_cpus}", f"--temp-dir={temp}",
           "--disable-usage-stats"]  # fmt: skip
    log_path = Path(temp) / "head.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed below
    head = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + start_timeout_s
        while "Ray runtime started" not in log_path.read_text():
            if head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield RayHead(f"127.0.0.1:{gcs}", env, head.pid)
    finally:
        cluster = process_tree(head.pid)
        head.terminate()  # ray start --block stops the processes it started on SIGTERM
        try:
            head.wait(30)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        for pid in cluster - {head.pid}:  # anything it left behind, by PID
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
        shutil.rmtree(temp, ignore_errors=True)
