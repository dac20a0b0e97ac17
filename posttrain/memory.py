"""Peak memory of a stage: ``peak_memory``, the resident memory of this process and every process it started (the
vLLM engine's, torch elastic's ranks), sampled while a block runs.

A stage's figure is what a pod running that stage alone must hold: on a cluster each task is its own pod; in a local
``pyflyte run`` the live engine and trainer stay in the process between stages, so each stage's peak includes them.
Resident set sizes are summed over the processes, so pages they share are counted in each (an upper bound).

Example:
    >>> with peak_memory(interval=0.01) as memory:
    ...     block = bytearray(64 << 20)   # 64 MiB, touched
    >>> memory.peak_mb >= 64
    True
"""

from __future__ import annotations

import threading

import psutil


def tree_rss_mb(process: psutil.Process | None = None) -> float:
    """Resident MB of ``process`` (default: this one) and all its descendants; processes that end meanwhile count 0."""
    root = process or psutil.Process()
    total = 0
    for member in [root, *root.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except psutil.Error:  # it ended between the listing and the reading
            continue
    return total / 2**20


class peak_memory:  # lower case: used like a function, ``with peak_memory() as memory``
    """The highest ``tree_rss_mb`` seen from entering the block to leaving it, read every ``interval`` seconds by a
    daemon thread (and once at each end); ``peak_mb`` is readable during the block too."""

    def __init__(self, interval: float = 0.2):
        self.interval, self.peak_mb = interval, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-memory", daemon=True)

    def _read(self) -> None:
        self.peak_mb = max(self.peak_mb, tree_rss_mb())

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._read()

    def __enter__(self) -> peak_memory:
        self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._read()
