"""One scheduler in front of every sandbox backend: a global concurrency limit, tiered slots, deadlines, timings.

Executions (and session steps) are queued in two tiers by deadline: **short** (``timeout_s <= short_timeout_s``)
and **long**. Of the ``max_concurrency`` slots, ``long_slots`` are long slots and the rest are reserved for short
work, so short executions never wait behind long ones; a long slot prefers long work and takes short work only when
no long job waits, so long executions are never starved either. (With ``max_concurrency=1`` the single slot is
shared: long first, then short.) Within a tier, jobs start in submission order. ``run_many`` batches also have
their own cap (``concurrency``), so a batch never has more in flight than it asked for.

Per-execution deadlines: the backend kills a program at its ``timeout_s``; the scheduler adds two guarantees on
top: a job not started within its queue timeout (``Execution.queue_timeout_s`` or the scheduler's) comes back as an
infra error, and a backend that has not returned ``hang_grace_s`` after the deadline is reported hung (infra error)
so a caller never waits on a stuck daemon. Infra errors are retried ``start_retries`` times (growing delay), then
reported; program failures are never retried. Results carry ``queue_ms`` (waiting for a slot), ``start_ms`` (the
backend getting an isolated environment ready) and ``run_ms``, plus ``extra["tier"]``, ``extra["slot"]`` and
``extra["attempts"]``.

Long work yields the CPU to short work (``priority.py``): reserved slots keep short jobs from waiting for a *slot*,
but running long jobs would still share the cores with them. So while a short-tier job runs, every running long-tier
job's cgroup gets ``long_cpu_share`` of its CPU weight (the kernel then gives a short execution the core it wants,
the long ones what is left), and its weight back when no short job runs; each long job yields for at most
``deprioritise_max`` of its deadline in all. Results of long jobs whose cgroup was weighted carry
``extra["deprioritised_s"]`` (``deprioritise_long=False``: none of this).

The process-wide scheduler (``default_scheduler()``) is what ``run_many`` and sessions use; ``make_sandbox(cfg)``
applies ``cfg``'s scheduling fields to it. If the caller's thread is interrupted (an exception while waiting), the
batch's queued jobs are cancelled; running ones end at their deadlines and clean up after themselves.

Example:
    >>> from posttrain.sandbox import Execution, make_sandbox
    >>> sched = Scheduler(max_concurrency=2)
    >>> box = make_sandbox("bwrap")
    >>> runs = [Execution(files={}, command=["python3", "-c", f"print({i})"]) for i in range(3)]
    >>> results = sched.run_many(box, runs, concurrency=2)
    >>> [r.stdout for r in results], results[0].extra["tier"], results[0].queue_ms >= 0
    (['0\\n', '1\\n', '2\\n'], 'short', True)
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from posttrain.sandbox.base import Execution, ExecutionResult, Sandbox
from posttrain.sandbox.priority import CpuPriority

SHORT, LONG = "short", "long"
MONITOR_PERIOD_S = 0.1


@dataclass(eq=False)
class _Batch:
    cap: float
    in_flight: int = 0
    queues: dict = field(default_factory=lambda: {SHORT: deque(), LONG: deque()})


@dataclass(eq=False)
class _Job:
    seq: int
    fn: Callable[[CpuPriority | None], object]  # given the job's CPU priority (long jobs that yield), or None
    infra: Callable[[str], object]  # builds the result reported when the job expires or hangs
    timeout_s: float
    tier: str
    batch: _Batch
    submitted: float
    queue_deadline: float | None
    future: Future = field(default_factory=Future)
    started: float | None = None
    slot: str = ""
    priority: CpuPriority | None = None


class Scheduler:
    """Thread-safe; one thread per running job (no idle threads), one monitor thread while work exists."""

    def __init__(self, max_concurrency: int = 16, long_slots: int = 0, short_timeout_s: float = 30.0,
                 queue_timeout_s: float = 0.0, hang_grace_s: float = 120.0, deprioritise_long: bool = True,
                 long_cpu_share: float = 0.01, deprioritise_max: float = 0.5):
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._batches: dict[int, _Batch] = {}
        self._running_jobs: set[_Job] = set()
        self._running = {SHORT: 0, LONG: 0}  # occupied slots by slot kind
        self._monitor: threading.Thread | None = None
        self.configure(max_concurrency=max_concurrency, long_slots=long_slots, short_timeout_s=short_timeout_s,
                       queue_timeout_s=queue_timeout_s, hang_grace_s=hang_grace_s,
                       deprioritise_long=deprioritise_long, long_cpu_share=long_cpu_share,
                       deprioritise_max=deprioritise_max)

    def configure(self, *, max_concurrency: int, long_slots: int = 0, short_timeout_s: float = 30.0,
                  queue_timeout_s: float = 0.0, hang_grace_s: float = 120.0, deprioritise_long: bool = True,
                  long_cpu_share: float = 0.01, deprioritise_max: float = 0.5) -> "Scheduler":
        """Change the limits; running jobs keep their slots (and CPU priorities), new dispatches follow the new
        limits."""
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency={max_concurrency}: must be at least 1")
        if not 0 < long_cpu_share <= 1:
            raise ValueError(f"long_cpu_share={long_cpu_share}: must be in (0, 1]")
        if deprioritise_max < 0:
            raise ValueError(f"deprioritise_max={deprioritise_max}: must be at least 0")
        with self._cond:
            self.max_concurrency = max_concurrency
            wanted = long_slots or max(1, max_concurrency // 2)
            self.long_slots = max_concurrency if max_concurrency == 1 else min(wanted, max_concurrency - 1)
            self.short_timeout_s, self.queue_timeout_s = short_timeout_s, queue_timeout_s
            self.hang_grace_s = hang_grace_s
            self.deprioritise_long, self.long_cpu_share = deprioritise_long, long_cpu_share
            self.deprioritise_max = deprioritise_max
            self._dispatch()
        return self

    # ---- submitting ---------------------------------------------------------------------------------------------
    def tier_of(self, timeout_s: float, tier: str = "") -> str:
        if tier in (SHORT, LONG):
            return tier
        return SHORT if timeout_s <= self.short_timeout_s else LONG

    def submit(self, sandbox: Sandbox, execution: Execution, *, start_retries: int = 2, retry_delay_s: float = 0.2,
               concurrency: int | None = None, _batch: _Batch | None = None) -> Future:
        """Queue one execution; the future's result is its ``ExecutionResult`` (never an exception)."""
        timeout_s = float(getattr(execution, "timeout_s", 0) or 0)
        queue_timeout = getattr(execution, "queue_timeout_s", None)
        return self._submit(lambda priority: run_one(sandbox, replace(execution, priority=priority) if priority
                                                     else execution, start_retries, retry_delay_s),
                            lambda msg: ExecutionResult(exit_code=None, infra_error=msg,
                                                        extra={"backend": getattr(sandbox, "name", "?")}),
                            timeout_s, self.tier_of(timeout_s, getattr(execution, "tier", "")), queue_timeout,
                            _batch or _Batch(cap=concurrency or float("inf")))

    def call(self, fn: Callable[[CpuPriority | None], object], *, timeout_s: float,
             infra: Callable[[str], object], tier: str = "") -> object:
        """Run ``fn(priority)`` in a slot of the right tier and return what it returns (session steps use this);
        ``priority`` is the job's ``CpuPriority`` (a long job that yields to short ones: hand it to the backend as
        ``Execution.priority``), else None.

        ``infra(message)`` builds the value returned instead if the job expires in the queue or hangs."""
        job_future = self._submit(fn, infra, timeout_s, self.tier_of(timeout_s, tier), None,
                                  _Batch(cap=float("inf")))
        return job_future.result()

    def run_many(self, sandbox: Sandbox, executions: Sequence[Execution], concurrency: int = 2,
                 start_retries: int = 2, retry_delay_s: float = 0.2) -> list[ExecutionResult]:
        """One result per execution, in order; at most ``concurrency`` of this batch in flight."""
        if not executions:
            return []
        batch = _Batch(cap=max(1, concurrency))
        futures = [self.submit(sandbox, ex, start_retries=start_retries, retry_delay_s=retry_delay_s, _batch=batch)
                   for ex in executions]
        try:
            return [f.result() for f in futures]
        except BaseException:
            self.cancel(batch)
            raise

    def cancel(self, batch: _Batch) -> int:
        """Drop the batch's jobs that have not started; returns how many."""
        with self._cond:
            dropped = [job for queue in batch.queues.values() for job in queue]
            for queue in batch.queues.values():
                queue.clear()
            self._batches.pop(id(batch), None)
        for job in dropped:
            job.future.cancel()
        return len(dropped)

    def stats(self) -> dict:
        """Slots in use and jobs waiting, per tier."""
        with self._cond:
            queued = {tier: sum(len(b.queues[tier]) for b in self._batches.values()) for tier in (SHORT, LONG)}
            return {"max_concurrency": self.max_concurrency, "long_slots": self.long_slots,
                    "running": dict(self._running), "queued": queued}

    # ---- internals ----------------------------------------------------------------------------------------------
    def _submit(self, fn, infra, timeout_s: float, tier: str, queue_timeout: float | None, batch: _Batch) -> Future:
        now = time.monotonic()
        queue_timeout = self.queue_timeout_s if queue_timeout is None else queue_timeout
        job = _Job(seq=next(self._seq), fn=fn, infra=infra, timeout_s=timeout_s, tier=tier, batch=batch,
                   submitted=now, queue_deadline=now + queue_timeout if queue_timeout else None)
        with self._cond:
            if tier == LONG and self.deprioritise_long:
                job.priority = CpuPriority(self.long_cpu_share, self.deprioritise_max * timeout_s)
            self._batches[id(batch)] = batch
            batch.queues[tier].append(job)
            self._dispatch()
            self._ensure_monitor()
        return job.future

    def _head(self, tier: str) -> _Job | None:
        """The oldest waiting job of ``tier`` among batches still under their cap."""
        best = None
        for batch in self._batches.values():
            queue = batch.queues[tier]
            if queue and batch.in_flight < batch.cap and (best is None or queue[0].seq < best.seq):
                best = queue[0]
        return best

    def _dispatch(self) -> None:
        """Start jobs while slots are free (caller holds the lock)."""
        while True:
            short_free = self.max_concurrency - self.long_slots - self._running[SHORT]
            long_free = self.long_slots - self._running[LONG]
            short_job, long_job = self._head(SHORT), self._head(LONG)
            if short_job and short_free > 0:
                job, slot = short_job, SHORT
            elif long_free > 0 and (long_job or short_job):
                job, slot = long_job or short_job, LONG
            else:
                self._reweigh()
                return
            job.batch.queues[job.tier].popleft()
            job.batch.in_flight += 1
            job.slot, job.started = slot, time.monotonic()
            self._running[slot] += 1
            self._running_jobs.add(job)
            threading.Thread(target=self._work, args=(job,), name=f"sandbox-{job.tier}-{job.seq}",
                             daemon=True).start()

    def _reweigh(self) -> None:
        """Running long jobs yield the CPU while a short job runs, and get it back when none does (lock held)."""
        short_running = any(job.tier == SHORT for job in self._running_jobs)
        for job in self._running_jobs:
            if job.priority is not None:
                job.priority.lower() if short_running else job.priority.restore()

    def _work(self, job: _Job) -> None:
        try:
            result = job.fn(job.priority)
        except BaseException as exc:  # noqa: BLE001 - a job must always produce a result
            result = job.infra(f"scheduler job raised {type(exc).__name__}: {exc}")
        self._annotate(job, result)
        with self._cond:  # the slot (and the CPU it held the long jobs off) is given back before the caller hears
            self._running[job.slot] -= 1
            self._running_jobs.discard(job)
            job.batch.in_flight -= 1
            if job.batch.in_flight == 0 and not any(job.batch.queues.values()):
                self._batches.pop(id(job.batch), None)
            self._dispatch()
            self._cond.notify_all()
        _complete(job, result)

    def _annotate(self, job: _Job, result) -> None:
        if isinstance(result, ExecutionResult) or hasattr(result, "extra"):
            queue_ms = ((job.started or job.submitted) - job.submitted) * 1000
            if isinstance(result, ExecutionResult):
                result.queue_ms = queue_ms
            result.extra.update(tier=job.tier, slot=job.slot, queue_ms=round(queue_ms, 3),
                                **(job.priority.record() if job.priority else {}))

    def _ensure_monitor(self) -> None:
        if self._monitor is None or not self._monitor.is_alive():
            self._monitor = threading.Thread(target=self._watch, name="sandbox-scheduler-monitor", daemon=True)
            self._monitor.start()

    def _watch(self) -> None:
        """Expire jobs past their queue deadline; report jobs whose backend hangs past deadline + grace."""
        while True:
            expired, hung = [], []
            with self._cond:
                now = time.monotonic()
                for key, batch in list(self._batches.items()):
                    for queue in batch.queues.values():
                        for job in [j for j in queue if j.queue_deadline is not None and j.queue_deadline < now]:
                            queue.remove(job)
                            expired.append(job)
                    if batch.in_flight == 0 and not any(batch.queues.values()):
                        del self._batches[key]
                for job in self._running_jobs:
                    if not job.future.done() and now - job.started > job.timeout_s + self.hang_grace_s:
                        hung.append(job)
                    if job.priority is not None:
                        job.priority.enforce_limit()
                idle = not self._running_jobs and not any(q for b in self._batches.values()
                                                         for q in b.queues.values())
                if idle:
                    self._monitor = None
                    return
            for job in expired:
                _complete(job, job.infra(f"not started within its queue timeout "
                                         f"({job.queue_deadline - job.submitted:.1f} s)"))
            for job in hung:
                result = job.infra(f"sandbox backend did not return within {job.timeout_s + self.hang_grace_s:.0f} s "
                                   f"(deadline {job.timeout_s:.1f} s + grace {self.hang_grace_s:.0f} s)")
                self._annotate(job, result)
                _complete(job, result)
            time.sleep(MONITOR_PERIOD_S)


def _complete(job: _Job, result) -> None:
    try:
        job.future.set_result(result)
    except InvalidStateError:
        pass  # already completed (by the monitor) or cancelled


def run_one(sandbox: Sandbox, execution: Execution, start_retries: int = 2,
            retry_delay_s: float = 0.2) -> ExecutionResult:
    """Run one execution, retrying while the result is an infra error (not an invalid execution); never raises."""
    attempts = 0
    while True:
        attempts += 1
        try:
            result = sandbox.run(execution)
        except Exception as exc:  # a backend bug must not lose the result or the batch
            result = ExecutionResult(exit_code=None, infra_error=f"{sandbox.name} raised {type(exc).__name__}: {exc}")
        if not result.infra_error or attempts > start_retries or result.extra.get("invalid"):
            result.extra["attempts"] = attempts
            return result
        time.sleep(retry_delay_s * attempts)


_default: Scheduler | None = None
_default_lock = threading.Lock()


def default_scheduler() -> Scheduler:
    """The process-wide scheduler (made with ``SandboxConfig``'s defaults on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            from posttrain.config import SandboxConfig

            _default = configure_from(Scheduler(), SandboxConfig())
        return _default


def configure_from(scheduler: Scheduler, cfg) -> Scheduler:
    """Apply a ``SandboxConfig``'s scheduling fields to ``scheduler``."""
    return scheduler.configure(max_concurrency=cfg.global_concurrency, long_slots=cfg.long_slots,
                               short_timeout_s=cfg.short_timeout_s, queue_timeout_s=cfg.queue_timeout_s,
                               hang_grace_s=cfg.hang_grace_s, deprioritise_long=cfg.deprioritise_long,
                               long_cpu_share=cfg.long_cpu_share, deprioritise_max=cfg.deprioritise_max)
