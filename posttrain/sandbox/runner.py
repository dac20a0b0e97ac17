"""Run many executions through one sandbox, a few at a time, retrying only sandboxes that failed to start.

Results come back in input order, one per execution, always: an exception inside a backend becomes an
``infra_error`` result rather than losing the others. A program failure (nonzero exit, timeout) is never retried;
an infra failure is retried up to ``start_retries`` times. ``extra["attempts"]`` says how many runs it took.

Example:
    >>> from posttrain.sandbox import make_sandbox, run_many, Execution
    >>> box = make_sandbox("bwrap")
    >>> runs = [Execution(files={}, command=["python3", "-c", f"print({i} * {i})"]) for i in range(4)]
    >>> [r.stdout.strip() for r in run_many(box, runs, concurrency=2)]
    ['0', '1', '4', '9']
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from posttrain.sandbox.base import Execution, ExecutionResult, Sandbox


def run_many(sandbox: Sandbox, executions: Sequence[Execution], concurrency: int = 2, start_retries: int = 2,
             retry_delay_s: float = 0.2) -> list[ExecutionResult]:
    """Run ``executions`` in ``sandbox`` with ``concurrency`` in flight; one result per execution, in order.

    ``retry_delay_s`` grows linearly with the attempt number (0.2 s, 0.4 s, ...) to let a busy daemon recover.
    """
    if not executions:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(executions))),
                            thread_name_prefix=f"sandbox-{sandbox.name}") as pool:
        futures = [pool.submit(run_one, sandbox, ex, start_retries, retry_delay_s) for ex in executions]
        return [f.result() for f in futures]


def run_one(sandbox: Sandbox, execution: Execution, start_retries: int = 2,
            retry_delay_s: float = 0.2) -> ExecutionResult:
    """Run one execution, retrying while the result is an infra error; never raises."""
    attempts = 0
    while True:
        attempts += 1
        try:
            result = sandbox.run(execution)
        except Exception as exc:  # a backend bug must not lose the result or the batch
            result = ExecutionResult(exit_code=None, infra_error=f"{sandbox.name} raised {type(exc).__name__}: {exc}")
        if not result.infra_error or attempts > start_retries:
            result.extra["attempts"] = attempts
            return result
        time.sleep(retry_delay_s * attempts)
