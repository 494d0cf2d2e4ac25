"""The CLI's default thread count: no more torch threads than the cores the process may use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from arbibench.machine import available_cores, cgroup_cpu_limit, default_threads, wait_policy

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity (Linux)")


def _run(code: str, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_cgroup_v2_quota_is_read_in_cores(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(str(tmp_path)) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(str(tmp_path)) is None


def test_cgroup_v1_quota_is_read_in_cores(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(str(tmp_path)) == 2.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(str(tmp_path)) is None
    assert cgroup_cpu_limit(str(tmp_path / "absent")) is None


def test_a_thread_count_the_user_chose_is_kept() -> None:
    assert default_threads({"OMP_NUM_THREADS": "3"}) is None
    assert default_threads({"MKL_NUM_THREADS": "1"}) is None
    assert default_threads({}) == available_cores()


@needs_affinity
def test_affinity_limits_the_cores() -> None:
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        assert available_cores() == 1
    finally:
        os.sched_setaffinity(0, before)


@needs_affinity
def test_the_cli_start_caps_torch_threads_at_the_affinity() -> None:
    # a fresh process: OpenMP reads OMP_NUM_THREADS once, when torch loads
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from arbibench.cli import _cap_threads; _cap_threads(); import torch; print(torch.get_num_threads())")
    assert _run(code) == "1"


def test_idle_workers_sleep_only_on_a_busy_machine_and_never_against_the_users_choice() -> None:
    assert wait_policy({}, load=2.1, cores=2) == "PASSIVE"  # a 2-thread neighbour on 2 cores
    assert wait_policy({}, load=1.0, cores=2) == "PASSIVE"  # half the cores busy
    assert wait_policy({}, load=0.3, cores=2) is None  # idle: spinning costs nothing there
    assert wait_policy({}, load=4.0, cores=64) is None  # a few busy cores of many
    assert wait_policy({}, load=40.0, cores=64) == "PASSIVE"
    assert wait_policy({"OMP_WAIT_POLICY": "ACTIVE"}, load=9.0, cores=2) is None


@needs_affinity
def test_the_cli_start_sets_the_wait_policy_it_decides() -> None:
    code = ("import os; from arbibench.cli import _cap_threads; from arbibench.machine import wait_policy; "
            "expected = wait_policy(); _cap_threads(); print(os.environ.get('OMP_WAIT_POLICY'), expected)")
    got, expected = _run(code).split()
    assert got == expected  # "None None" on an idle machine, "PASSIVE PASSIVE" on a busy one
    assert _run(code, OMP_WAIT_POLICY="ACTIVE").split() == ["ACTIVE", "None"]
