"""CPU seconds from Linux's /proc: a process's own, and the machine's busy time (steal
included, idle and iowait not); None where they cannot be read."""

import os
import sys
import time

import pytest

from floodway.runtime.procstat import TICKS_PER_S, machine_cpu_s, process_cpu_s

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")


@linux
def test_a_process_cpu_grows_while_it_computes() -> None:
    before = process_cpu_s(os.getpid())
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    after = process_cpu_s(os.getpid())
    assert before is not None and after is not None
    assert after - before >= 0.2 - 2 / TICKS_PER_S
    assert process_cpu_s(None) is None
    assert process_cpu_s(2 ** 22 + 12345) is None             # beyond pid_max: no process


def test_the_machine_counts_busy_and_stolen_time_not_idle(tmp_path) -> None:
    stat = tmp_path / "stat"
    #            user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 10 50 9000 40 5 5 30 0 0\ncpu0 50 5 25 4500 20 2 3 15 0 0\n")
    assert machine_cpu_s(str(stat)) == pytest.approx(200 / TICKS_PER_S)
    stat.write_text("garbage\n")
    assert machine_cpu_s(str(stat)) is None
    assert machine_cpu_s(str(tmp_path / "absent")) is None


@linux
def test_this_machine_has_been_busy() -> None:
    assert (machine_cpu_s() or 0.0) > 0.0
