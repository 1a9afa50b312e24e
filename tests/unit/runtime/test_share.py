"""The router's share of the machine: threads and container cap from cores and containers,
the environment's overrides, and the workers' priority."""

from __future__ import annotations

import os

import pytest

from floodway.build.prefetch import THREADS_ENV
from floodway.runtime.share import (
    BOOT_NICE_EXTRA,
    NICE_ENV,
    POOL_ENVS,
    WORKER_NICE,
    Share,
    cores,
    lower_priority,
)


@pytest.mark.parametrize(("machine", "containers", "threads", "cap"), [
    (2, 2, 1, 2), (2, 8, 1, 2), (8, 2, 4, 2), (16, 3, 5, 3), (1, 4, 1, 1), (4, 1, 4, 1),
])
def test_containers_together_never_run_more_compute_threads_than_cores(machine, containers,
                                                                        threads, cap):
    share = Share.of(containers, machine_cores=machine, environ={})
    assert (share.threads, share.machine_cap) == (threads, cap)
    assert share.threads * share.machine_cap <= machine
    assert share.nice == WORKER_NICE


def test_the_environment_overrides_threads_and_nice_and_keeps_pools_it_sized():
    env = {THREADS_ENV: "3", NICE_ENV: "4", "OMP_NUM_THREADS": "7"}
    share = Share.of(2, machine_cores=8, environ=env)
    assert (share.threads, share.machine_cap, share.nice) == (3, 2, 4)
    out = share.worker_env(env)
    assert out[THREADS_ENV] == "3" and out[NICE_ENV] == "4"
    assert "OMP_NUM_THREADS" not in out                        # the user's value stays
    assert all(out[k] == "3" for k in POOL_ENVS if k != "OMP_NUM_THREADS")


def test_cores_is_bounded_by_a_cgroup_quota(tmp_path):
    quota = tmp_path / "cpu.max"
    quota.write_text("100000 100000\n")
    assert cores(quota) == 1
    quota.write_text("max 100000\n")
    assert cores(quota) == len(os.sched_getaffinity(0))
    assert cores(tmp_path / "missing") == len(os.sched_getaffinity(0))


def test_a_worker_only_ever_lowers_its_own_priority():
    """Run in a child: a process's nice value cannot be raised back without privileges."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        boot, again = pool.apply(_nice_twice)
    start = os.getpriority(os.PRIO_PROCESS, 0)
    assert boot == max(start, min(19, WORKER_NICE + BOOT_NICE_EXTRA))
    assert again == boot   # asking for a smaller value than in force changes nothing


def _nice_twice() -> tuple[int, int]:
    boot = lower_priority({NICE_ENV: str(WORKER_NICE)}, extra=BOOT_NICE_EXTRA)
    return boot, lower_priority({NICE_ENV: "0"})
