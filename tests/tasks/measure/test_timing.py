"""The clocks a CPU step is timed by: what each counts, on real calls (no torch needed)."""

import time

import pytest

from tasks.measure.timing import THREAD_CPU, WALL, clock_ns, cpu_clock, sample_times


def _waits():  # a call whose thread is off its core, as a busy machine's time slices leave it
    time.sleep(0.05)


def test_the_thread_clock_leaves_out_the_time_the_thread_spends_off_its_core():
    wall = sample_times(_waits, repeats=2, clock=WALL)
    cpu = sample_times(_waits, repeats=2, clock=THREAD_CPU)
    assert len(wall) == len(cpu) == 2
    assert min(wall) >= 0.05 and max(cpu) < 0.025


def test_the_thread_clock_counts_the_work_the_thread_does():
    def works():
        began = time.thread_time()
        while time.thread_time() - began < 0.02:
            pass

    assert min(sample_times(works, repeats=2, clock=THREAD_CPU)) >= 0.02


def test_one_thread_is_timed_by_its_cpu_clock_and_more_by_the_wall_clock():
    assert cpu_clock(1) == THREAD_CPU
    assert cpu_clock(0) == cpu_clock(2) == cpu_clock(16) == WALL


def test_an_unknown_clock_is_refused():
    with pytest.raises(ValueError, match="clock='cycles'"):
        clock_ns("cycles")
