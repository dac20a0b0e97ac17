"""``benchmarks/loop.py``'s ``run_to_end``: the workflow a benchmark starts ends with the benchmark, killed or
interrupted, instead of running on in the background."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

# a benchmark whose "workflow" sleeps: it prints the sleeper's pid, then waits on it
BENCHMARK = f"""
import sys
sys.path.insert(0, {str(BENCHMARKS)!r})
from loop import run_to_end
run_to_end(["sh", "-c", "echo $$ > {{pid_file}}; exec sleep 300"])
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has ended; only its parent has not reaped it yet
        return stat.read().split(") ")[-1][0] != "Z"


def wait_for(condition, timeout_s: float = 20) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_the_exit_code_and_output_come_back():
    from loop import run_to_end

    assert run_to_end([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"]) == (3, "out\n", "")


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_a_killed_benchmark_takes_its_workflow_with_it(tmp_path, stop_signal):
    pid_file = tmp_path / "pid"
    benchmark = subprocess.Popen([sys.executable, "-c", BENCHMARK.format(pid_file=pid_file)])
    try:
        assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip()), "the workflow never started"
        workflow = int(pid_file.read_text())
        assert alive(workflow)
        benchmark.send_signal(stop_signal)
        assert benchmark.wait(20) != 0
        assert wait_for(lambda: not alive(workflow)), f"workflow {workflow} outlived its benchmark"
    finally:
        benchmark.kill()
