"""The scheduler with a fake backend (sleeps, no sandbox): limits, tiers, deadlines, retries, cancellation."""

from __future__ import annotations

import threading
import time

import pytest

from posttrain.sandbox import Execution, ExecutionResult
from posttrain.sandbox.scheduler import LONG, SHORT, Scheduler, _Batch

pytestmark = pytest.mark.unit


class FakeSandbox:
    """``run`` sleeps ``float(command[1])`` seconds; records what ran concurrently and when."""

    name = "fake"

    def __init__(self, fail_times: int = 0):
        self.lock = threading.Lock()
        self.running: set[str] = set()
        self.peak = 0
        self.peak_long = 0
        self.log: list[tuple[str, str, float]] = []  # (event, label, time)
        self.fail_times = fail_times
        self.calls = 0

    def run(self, execution: Execution) -> ExecutionResult:
        label = execution.stdin
        with self.lock:
            self.calls += 1
            fail = self.calls <= self.fail_times
            self.running.add(label)
            self.peak = max(self.peak, len(self.running))
            self.peak_long = max(self.peak_long, sum(x.startswith("L") for x in self.running))
            self.log.append(("start", label, time.monotonic()))
        time.sleep(float(execution.command[1]))
        with self.lock:
            self.running.discard(label)
            self.log.append(("end", label, time.monotonic()))
        if fail:
            return ExecutionResult(exit_code=None, infra_error="daemon hiccup")
        return ExecutionResult(exit_code=int(execution.command[2]) if len(execution.command) > 2 else 0,
                               stdout=label)

    def close(self) -> None:
        pass

    def started(self, label: str) -> float:
        return next(t for event, name, t in self.log if event == "start" and name == label)

    def ended(self, label: str) -> float:
        return next(t for event, name, t in self.log if event == "end" and name == label)


def job(label: str, seconds: float, timeout_s: float = 5.0, **kw) -> Execution:
    return Execution(files={}, command=["sleep", str(seconds)], stdin=label, timeout_s=timeout_s, **kw)


def test_results_in_order_with_timings_and_a_batch_cap():
    box = FakeSandbox()
    sched = Scheduler(max_concurrency=8)
    results = sched.run_many(box, [job(f"s{i}", 0.05) for i in range(8)], concurrency=3)
    assert [r.stdout for r in results] == [f"s{i}" for i in range(8)]
    assert box.peak == 3
    assert all(r.extra["tier"] == SHORT and r.extra["attempts"] == 1 for r in results)
    assert results[-1].queue_ms > 50 > results[0].queue_ms


def test_global_limit_holds_across_concurrent_batches():
    box = FakeSandbox()
    sched = Scheduler(max_concurrency=3)
    out = []
    threads = [threading.Thread(target=lambda n=n: out.append(sched.run_many(
        box, [job(f"{n}-{i}", 0.05) for i in range(6)], concurrency=4))) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert box.peak == 3
    assert len(out) == 3
    assert all(len(r) == 6 for r in out)


def test_short_work_is_never_queued_behind_long_work():
    box = FakeSandbox()
    sched = Scheduler(max_concurrency=2, long_slots=1, short_timeout_s=10)
    longs = [sched.submit(box, job(f"L{i}", 0.6, timeout_s=60)) for i in range(3)]
    time.sleep(0.05)
    shorts = [sched.submit(box, job(f"S{i}", 0.05, timeout_s=1)) for i in range(4)]
    short_results = [f.result() for f in shorts]
    assert max(r.queue_ms for r in short_results) < 400  # they never waited for a long one to finish
    assert [f.result().extra["tier"] for f in longs] == [LONG] * 3
    assert box.peak_long == 1  # long work keeps to its own slot
    assert box.ended("S3") < box.ended("L0")


def test_long_work_is_not_starved_by_a_stream_of_short_work():
    box = FakeSandbox()
    sched = Scheduler(max_concurrency=2, long_slots=1, short_timeout_s=10)
    shorts = [sched.submit(box, job(f"S{i}", 0.1, timeout_s=1)) for i in range(12)]
    long = sched.submit(box, job("L0", 0.1, timeout_s=60))
    assert long.result().ok
    assert all(f.result().ok for f in shorts)
    assert box.started("L0") < box.ended("S11") - 0.3  # it took the long slot as soon as that slot freed


def test_queue_timeout_expires_a_job_as_an_infra_error():
    box = FakeSandbox()
    sched = Scheduler(max_concurrency=1)
    blocker = sched.submit(box, job("L", 1.0))
    t0 = time.monotonic()
    late = sched.submit(box, job("late", 0.0, queue_timeout_s=0.2)).result()
    assert "queue timeout" in late.infra_error
    assert late.exit_code is None
    assert time.monotonic() - t0 < 0.8
    assert blocker.result().ok
    assert "late" not in [name for _, name, _ in box.log]


def test_a_hung_backend_is_reported_instead_of_waited_for():
    box = FakeSandbox()
    sched = Scheduler(max_concurrency=2, hang_grace_s=0.3)
    t0 = time.monotonic()
    r = sched.submit(box, job("stuck", 2.0, timeout_s=0.2)).result()
    assert "did not return" in r.infra_error
    assert time.monotonic() - t0 < 1.5
    assert sched.stats()["running"][SHORT] == 1  # its slot stays taken until the backend really returns


def test_infra_errors_are_retried_then_reported_and_program_failures_are_not():
    box = FakeSandbox(fail_times=2)
    sched = Scheduler(max_concurrency=2)
    [ok] = sched.run_many(box, [job("a", 0)], start_retries=2, retry_delay_s=0)
    assert ok.ok
    assert ok.extra["attempts"] == 3
    box = FakeSandbox(fail_times=5)
    [bad] = sched.run_many(box, [job("b", 0)], start_retries=1, retry_delay_s=0)
    assert bad.infra_error == "daemon hiccup"
    assert bad.extra["attempts"] == 2
    [failed] = sched.run_many(FakeSandbox(), [Execution({}, ["sleep", "0", "3"])], start_retries=2)
    assert (failed.exit_code, failed.extra["attempts"]) == (3, 1)


def test_cancel_drops_queued_jobs_and_lets_running_ones_finish():
    box = FakeSandbox()
    sched = Scheduler(max_concurrency=1)
    batch = _Batch(cap=1)
    futures = [sched.submit(box, job(f"c{i}", 0.2), _batch=batch) for i in range(4)]
    time.sleep(0.05)
    assert sched.cancel(batch) == 3
    assert futures[0].result().ok
    assert all(f.cancelled() for f in futures[1:])
    assert sched.stats()["queued"] == {SHORT: 0, LONG: 0}


def test_caller_interrupted_while_waiting_cancels_the_rest_of_its_batch():
    box = FakeSandbox()
    sched = Scheduler(max_concurrency=1)

    class Interrupted(BaseException):
        pass

    real_result = type(sched.submit(box, job("warmup", 0))).result
    calls = []

    def interrupting_result(self, timeout=None):
        calls.append(1)
        if len(calls) == 2:
            raise Interrupted
        return real_result(self, timeout)

    from concurrent.futures import Future
    Future.result, saved = interrupting_result, Future.result
    try:
        with pytest.raises(Interrupted):
            sched.run_many(box, [job(f"i{i}", 0.1) for i in range(5)], concurrency=1)
    finally:
        Future.result = saved
    time.sleep(0.4)
    assert sched.stats()["queued"] == {SHORT: 0, LONG: 0}
    assert len([e for e in box.log if e[0] == "start"]) <= 3  # warmup, i0, maybe i1: the rest never ran


def test_configure_validates_and_splits_slots():
    with pytest.raises(ValueError, match="max_concurrency=0"):
        Scheduler(max_concurrency=0)
    with pytest.raises(ValueError, match="long_cpu_share=0"):
        Scheduler(long_cpu_share=0)
    with pytest.raises(ValueError, match="deprioritise_max=-1"):
        Scheduler(deprioritise_max=-1)
    assert Scheduler(max_concurrency=1).long_slots == 1
    assert Scheduler(max_concurrency=8).long_slots == 4
    assert Scheduler(max_concurrency=4, long_slots=9).long_slots == 3  # at least one slot stays short-only
