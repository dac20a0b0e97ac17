"""Peak memory of a stage: ``peak_memory``, the resident memory of this process and every process it started (the
vLLM engine's, torch elastic's ranks), sampled while a block runs.

A stage's figure is what a pod running that stage alone must hold: on a cluster each task is its own pod; in a local
``pyflyte run`` the live engine and trainer stay in the process between stages, so each stage's peak includes them.
Resident set sizes are summed over the processes, so pages they share are counted in each (an upper bound).

Before a stage holds a model, ``check_fits`` compares what it will need with what the machine (or the container's
memory limit) has left, and fails with a message that says what to change: the update's need is
``update_memory_mb``, its weights, gradients and optimizer state before any activation. A local run checks once
before it starts (``tasks/preflight.py``) that the update fits beside the live engines (``engine_memory_mb``), which
stay alive through it; the update checks again when it loads (a cluster pod checks its own).

Example:
    >>> with peak_memory(interval=0.01) as memory:
    ...     block = bytearray(64 << 20)   # 64 MiB, touched
    >>> memory.peak_mb >= 64
    True
    >>> round(update_memory_mb(parameters=494_000_000, trainable=494_000_000, bf16=True))  # 0.5B, full, bf16
    9422
    >>> round(update_memory_mb(parameters=494_000_000, trainable=9_000_000, bf16=True))   # LoRA
    4797
    >>> check_fits(9422, 4000, "the update of qwen2-0.5b", "set train.lora_rank")
    Traceback (most recent call last):
    ...
    posttrain.memory.NotEnoughMemory: the update of qwen2-0.5b needs ~9.2 GiB, 3.9 GiB available: set train.lora_rank
"""

from __future__ import annotations

import threading
from pathlib import Path

import psutil

# cgroup v2, then v1: the container's memory limit and what it uses (a limit above the machine's memory means none)
_CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"))


class NotEnoughMemory(MemoryError):
    """A stage would not fit in the memory left; the message says what it needs, what there is and what to change."""


def update_memory_mb(parameters: int, trainable: int, bf16: bool) -> float:
    """MB the update holds before activations: every parameter's module copy (2 bytes in bf16, 4 in fp32) and the
    fp32 copy a save writes from (4), and for each trainable one its gradient (the module's dtype), AdamW's two fp32
    moments and, in bf16, DeepSpeed's fp32 master copy. Frozen parameters (LoRA's base) add the base's own fp32
    values, read to merge the adapter (4). A floor: activations come on top (measured: benchmarks/one_iteration.py)."""
    module = 2 if bf16 else 4
    per_trainable = module + 8 + (4 if bf16 else 0)
    return (parameters * (module + 4) + trainable * per_trainable + (parameters - trainable) * 4) / 2**20


def update_kind(lora_rank: int) -> str:
    """How an update trains, as the memory checks' messages name it.

    >>> update_kind(0), update_kind(16)
    ('full fine-tune', 'LoRA rank 16')
    """
    return f"LoRA rank {lora_rank}" if lora_rank else "full fine-tune"


def engine_memory_mb(parameters: int, bf16: bool, kv_cache_gib: float) -> float:
    """MB one CPU vLLM engine holds at least: its weights in its dtype and its KV cache (``VLLM_CPU_KVCACHE_SPACE``).
    A floor: its runtime comes on top (~1.9 GB per engine measured at 0.5B: benchmarks/one_iteration.py)."""
    return parameters * (2 if bf16 else 4) / 2**20 + kv_cache_gib * 1024


def available_mb() -> float:
    """MB this process may still allocate: the machine's available memory, or less under a container limit."""
    available = psutil.virtual_memory().available
    for limit_file, usage_file in _CGROUP_FILES:
        try:
            limit, usage = (int(Path(f).read_text().split()[0]) for f in (limit_file, usage_file))
        except (OSError, ValueError):  # no such cgroup version here, or "max" (no limit)
            continue
        available = min(available, max(0, limit - usage))
        break
    return available / 2**20


def check_fits(needed_mb: float, available: float, what: str, remedy: str) -> None:
    """Raise ``NotEnoughMemory`` when ``needed_mb`` exceeds ``available`` (MB), naming ``what`` and the ``remedy``."""
    if needed_mb > available:
        raise NotEnoughMemory(f"{what} needs ~{needed_mb / 1024:.1f} GiB, {available / 1024:.1f} GiB available: "
                              f"{remedy}")


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
