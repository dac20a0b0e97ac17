"""Tier preemption on the CPU: while short executions run, the long ones running beside them yield the CPU.

The scheduler (``scheduler.py``) gives each long-tier job a ``CpuPriority`` and hands it to the backend with the
execution (``Execution.priority``). The backend attaches, for as long as the execution runs, the cgroup its CPU time
is charged to (``weighted``): bwrap the execution's own group; a warm slot the slot's group (the execution's group is
nested in it, and weights count among sibling groups only); a pooled Docker container its container's group, seen
through the host's view (a local daemon, as root). While a short-tier job runs, the scheduler lowers every running
long job's priority: the CPU weight of its groups drops to ``share`` of what it was (1%: cgroup v1 ``cpu.shares``
1024 -> 10, v2 ``cpu.weight`` 100 -> 1); when no short job runs any more, the weight it had comes back.

Why weights, not freezing: when every core is busy the kernel shares CPU time between sibling groups in proportion
to their weights, and it leaves no core idle. So a short execution gets a core as soon as it wants one, the long
ones keep what it leaves (2 cores, one short execution: a whole core for the long ones), and every long deadline
still measures progress. A frozen group would hold its memory, leave cores idle, and its deadline would have to stop
with it on every backend (a warm slot's and a container's deadlines are kept inside them).

Bound: a long job yields for ``limit_s`` at most in all (the scheduler's ``deprioritise_max`` of its deadline); past
that it keeps its own weight to its end (logged), so that a stream of short work cannot starve it into a timeout.
A long job whose cgroup was weighted says in its result for how long it yielded: ``extra["deprioritised_s"]``, and
``extra["deprioritise_limit_hit"]`` when the bound ended it. A backend without such a group (no cgroups here, a
remote Docker daemon, the cold Docker variant) is not weighted, and its results say nothing.

Example (anything with ``cpu_weight`` and ``set_cpu_weight`` can be weighted, as a ``cgroup.Cgroup`` is):
    >>> class Group:
    ...     weight = 1024
    ...     def cpu_weight(self): return self.weight
    ...     def set_cpu_weight(self, weight): self.weight = weight
    >>> priority, group = CpuPriority(share=0.01, limit_s=5.0), Group()
    >>> with weighted(priority, group):
    ...     priority.lower()
    ...     lowered = group.weight
    ...     priority.restore()
    >>> lowered, group.weight, list(priority.record())  # the result says for how long it yielded
    (10, 1024, ['deprioritised_s'])
    >>> CpuPriority(share=0.01, limit_s=5.0).record()  # never weighted: nothing to say
    {}
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Protocol

log = logging.getLogger(__name__)


class Weighable(Protocol):
    def cpu_weight(self) -> int | None: ...

    def set_cpu_weight(self, weight: int) -> None: ...


class CpuPriority:
    """The CPU weight of the cgroups one long job runs in: the scheduler calls ``lower`` and ``restore``, the
    backend attaches and detaches the groups (``weighted``). Thread-safe."""

    def __init__(self, share: float, limit_s: float):
        if not 0 < share <= 1:
            raise ValueError(f"share={share}: must be in (0, 1]")
        self.share, self.limit_s = share, limit_s
        self.limit_hit = False  # it yielded limit_s in all: it keeps its weight from then on
        self._lock = threading.Lock()
        self._groups: dict[Weighable, int] = {}  # attached group -> the weight it had
        self._low = False
        self._ever_attached = False
        self._yielded_s = 0.0
        self._since: float | None = None  # when its groups began to yield (lowered, with a group attached)

    def lower(self) -> None:
        """Its groups yield: their weight drops to ``share`` of their own (unless the bound was reached)."""
        with self._lock:
            if not self._low and not self.limit_hit:
                self._set(True)

    def restore(self) -> None:
        """Its groups get their own weight back."""
        with self._lock:
            if self._low:
                self._set(False)

    def attach(self, group: Weighable) -> None:
        """Weight ``group`` from now on (it yields at once if the job is lowered); a group whose weight cannot be
        read (gone) is left alone."""
        with self._lock:
            weight = group.cpu_weight()
            if weight is None:
                return
            self._groups[group] = weight
            self._ever_attached = True
            if self._low:
                _write(group, self._lowered(weight))
            self._tick()

    def detach(self, group: Weighable) -> None:
        """Stop weighting ``group``: it gets its own weight back (a pooled container serves other jobs next)."""
        with self._lock:
            weight = self._groups.pop(group, None)
            if weight is not None and self._low:
                _write(group, weight)
            self._tick()

    def enforce_limit(self) -> bool:
        """End the yielding for good once it has lasted ``limit_s``; True the moment it does."""
        with self._lock:
            if self.limit_hit or self._yielded() <= self.limit_s:
                return False
            self.limit_hit = True
            self._set(False)
        log.info("a long sandbox job yielded the CPU for %.1f s, its bound: it keeps its weight to its end",
                 self.limit_s)
        return True

    def record(self) -> dict:
        """What a result says about it: for how long it yielded, whether the bound ended that; {} when no group
        was ever attached (nothing was weighted)."""
        with self._lock:
            if not self._ever_attached:
                return {}
            return {"deprioritised_s": round(self._yielded(), 3),
                    **({"deprioritise_limit_hit": True} if self.limit_hit else {})}

    # ---- internals (the lock held) -------------------------------------------------------------------------------
    def _set(self, low: bool) -> None:
        self._low = low
        for group, weight in self._groups.items():
            _write(group, self._lowered(weight) if low else weight)
        self._tick()

    def _lowered(self, weight: int) -> int:
        return max(1, round(weight * self.share))

    def _tick(self) -> None:
        """Keep the clock of the time its groups yielded: running while lowered with a group attached."""
        yielding = self._low and bool(self._groups)
        now = time.monotonic()
        if yielding and self._since is None:
            self._since = now
        elif not yielding and self._since is not None:
            self._yielded_s += now - self._since
            self._since = None

    def _yielded(self) -> float:
        return self._yielded_s + (time.monotonic() - self._since if self._since is not None else 0.0)


def _write(group: Weighable, weight: int) -> None:
    try:
        group.set_cpu_weight(weight)
    except OSError as exc:  # the group is gone (its execution ended): nothing left to weight
        log.debug("cannot set the CPU weight of %s: %s", group, exc)


@contextmanager
def weighted(priority: CpuPriority | None, group: Weighable | None) -> Iterator[None]:
    """Let ``priority`` weight ``group`` for the duration of the block (a no-op when either is None)."""
    if priority is None or group is None:
        yield
        return
    priority.attach(group)
    try:
        yield
    finally:
        priority.detach(group)
