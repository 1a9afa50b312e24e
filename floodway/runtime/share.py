"""How the local runtime shares one machine between the router and its containers.

Locally the containers are processes on the router's own cores. The router keeps its share
by construction, not by luck:

- compute threads: each container gets ``cores // containers`` threads (at least 1) for
  ONNX Runtime and for the libraries beneath it that start pools of their own (OpenMP,
  OpenBLAS, MKL, the tokenizers' Rayon pool), and no more containers run than the cores
  have room for, so all containers together never run more compute threads than there are
  cores;
- priority: a container runs at nice `WORKER_NICE` (10), the router at its own (0); the
  kernel's fair scheduler weighs nice 0 at about ten times nice 10
  (`sched_prio_to_weight`, kernel/sched/core.c), so the router, and a load client beside
  it, run when they need to however busy the containers are, and the containers take what
  is left. While it starts (imports, loading, warm-up) a container runs `BOOT_NICE_EXTRA`
  nicer still, so that a start beside a serving container takes the CPU that container
  leaves rather than half of it; once ready it takes its nice value back where the system
  lets a process lower its own (root, or an RLIMIT_NICE that allows it), else serves on at
  the boot value.

`FLOODWAY_ORT_THREADS` and `FLOODWAY_WORKER_NICE` in the router's environment override
both; a thread variable already set (OMP_NUM_THREADS, ...) is left as it is.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from floodway.build.prefetch import THREADS_ENV

NICE_ENV = "FLOODWAY_WORKER_NICE"
WORKER_NICE = 10
# A starting container's nice value above `WORKER_NICE`: weight 36 against 110 at nice 10,
# about a quarter of a core shared with a serving one (`sched_prio_to_weight`).
BOOT_NICE_EXTRA = 5
# Thread pools a worker's libraries start on their own, sized by these variables.
POOL_ENVS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "RAYON_NUM_THREADS")
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def cores(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """The cores this process may run on: its CPU affinity, bounded by a cgroup v2 CPU
    quota (``cpu.max``, as a container runtime sets it), at least 1."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1
    with contextlib.suppress(OSError, ValueError):
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(int(quota) // int(period))))
    return max(1, n)


@dataclass(frozen=True)
class Share:
    """Each container's compute `threads`, the most containers the cores run at once
    (`machine_cap`), and the containers' `nice` value."""

    threads: int
    machine_cap: int
    nice: int

    @classmethod
    def of(cls, containers: int, *, machine_cores: int | None = None,
           environ: dict[str, str] | os._Environ | None = None) -> Share:
        """The share for `containers` containers (those the warm pool keeps, or the pinned
        count) on `machine_cores` (default `cores()`); the environment's overrides
        applied."""
        env = os.environ if environ is None else environ
        n = machine_cores or cores()
        threads = int(env.get(THREADS_ENV) or 0) or max(1, n // max(1, containers))
        nice = int(env[NICE_ENV]) if env.get(NICE_ENV, "").lstrip("-").isdigit() \
            else WORKER_NICE
        return cls(threads, max(1, n // threads), nice)

    def worker_env(self, environ: dict[str, str] | os._Environ | None = None
                   ) -> dict[str, str]:
        """What a container's environment adds: its threads for ONNX Runtime and, where
        the router's environment does not size them, the other pools; its nice value."""
        env = os.environ if environ is None else environ
        out = {THREADS_ENV: str(self.threads), NICE_ENV: str(self.nice)}
        out.update({k: str(self.threads) for k in POOL_ENVS if not env.get(k)})
        return out


def _named(env: dict[str, str] | os._Environ | None) -> int | None:
    raw = (os.environ if env is None else env).get(NICE_ENV, "")
    return int(raw) if raw.lstrip("-").isdigit() else None


def lower_priority(environ: dict[str, str] | os._Environ | None = None, *,
                   extra: int = 0) -> int:
    """In a container process, first thing: take the nice value `NICE_ENV` names plus
    `extra` (at most 19; never a higher priority than it has: raising one needs
    privileges). Returns the nice value now in force."""
    named = _named(environ)
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if named is None:
        return current
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, max(current, min(19, named + extra)))
    return os.getpriority(os.PRIO_PROCESS, 0)


def serving_priority(environ: dict[str, str] | os._Environ | None = None) -> int:
    """In a container that is ready: back from its boot value to the nice value `NICE_ENV`
    names, where the system lets it (else it stays). Returns the nice value in force."""
    named = _named(environ)
    if named is not None:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, max(0, min(19, named)))
    return os.getpriority(os.PRIO_PROCESS, 0)


__all__ = ["BOOT_NICE_EXTRA", "NICE_ENV", "POOL_ENVS", "WORKER_NICE", "Share", "cores",
           "lower_priority", "serving_priority"]
