"""``peak_memory`` counts the processes a stage starts (the vLLM engine's, the sandboxes'), not only its own, and keeps
the highest reading, not the last."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from posttrain.memory import peak_memory, tree_rss_mb

pytestmark = pytest.mark.unit

HOLD = "import sys, time; block = bytearray(200 << 20); print('held', flush=True); time.sleep(float(sys.argv[1]))"


def test_a_child_process_memory_is_in_the_peak_after_it_ended():
    before = tree_rss_mb()
    with peak_memory(interval=0.05) as memory:
        child = subprocess.Popen([sys.executable, "-c", HOLD, "0.5"], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "held"
        time.sleep(0.2)  # at least one sample while the child holds its 200 MiB
        child.wait()
    assert memory.peak_mb >= before + 190  # the child's block, though it has ended
    assert tree_rss_mb() < memory.peak_mb - 150  # the peak, not the last reading
