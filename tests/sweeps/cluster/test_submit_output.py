"""What `commscale submit` shows of a job's log: the job's own lines, not Ray's."""

from __future__ import annotations

from sweeps.cluster.submit import job_output

CHUNK = ("2026-11-23 14:53:11,531\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
         "Running entrypoint for job raysubmit_x: python -m sweeps.cli run sweep=smoke\n"
         "sweep smoke on mi210x4 (MI210): 34 points, 34 new, 0 already in the lake\n"
         "2026-11-23 14:53:26,814\tWARNING sdk.py:520 -- something Ray says\n")


def test_ray_log_lines_are_left_out_of_a_job_log_unless_verbose():
    assert job_output(CHUNK, verbose=False) == (
        "Running entrypoint for job raysubmit_x: python -m sweeps.cli run sweep=smoke\n"
        "sweep smoke on mi210x4 (MI210): 34 points, 34 new, 0 already in the lake\n")
    assert job_output(CHUNK, verbose=True) == CHUNK
    assert job_output("2026 is a year -- not a log line\n", verbose=False) == "2026 is a year -- not a log line\n"
