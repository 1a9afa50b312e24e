"""CPU seconds as Linux's ``/proc`` counts them: a process's own (``/proc/<pid>/stat``:
user + system time) and the whole machine's (``/proc/stat``: every core's busy time,
stolen time included). `floodway serve` reports each container's in ``GET /readyz``;
`floodway bench` reads the machine's to tell when other work took cores from a run. Both
are None where ``/proc`` is absent (not Linux) or the process has exited.

Source: proc(5), the Linux man-pages project (fields 14-15 of ``/proc/<pid>/stat``; the
first line of ``/proc/stat``), in clock ticks of ``sysconf(_SC_CLK_TCK)``.
"""

from __future__ import annotations

import os

try:
    TICKS_PER_S = float(os.sysconf("SC_CLK_TCK"))
except (AttributeError, ValueError, OSError):   # no sysconf (Windows): /proc is absent too
    TICKS_PER_S = 100.0


def process_cpu_s(pid: int | None) -> float | None:
    """CPU seconds process `pid` has run (user + system), None when not known."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
        fields = text[text.rindex(b")") + 2:].split()   # the name may hold spaces
        return (int(fields[11]) + int(fields[12])) / TICKS_PER_S
    except (OSError, ValueError, IndexError):
        return None


def machine_cpu_s(path: str = "/proc/stat") -> float | None:
    """CPU seconds the machine's cores have been busy since boot, summed over cores: user,
    nice, system, irq, softirq and steal (time the hypervisor gave to another guest);
    not idle or iowait. None when not known."""
    try:
        with open(path, "rb") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / TICKS_PER_S
    except (OSError, ValueError, IndexError):
        return None


__all__ = ["TICKS_PER_S", "machine_cpu_s", "process_cpu_s"]
