"""Run many executions through one sandbox, a few at a time, via the process-wide scheduler.

Results come back in input order, one per execution, always: an exception inside a backend becomes an
``infra_error`` result rather than losing the others. A program failure (nonzero exit, timeout) is never retried;
an infra failure is retried up to ``start_retries`` times. ``extra["attempts"]`` says how many runs it took;
``queue_ms``, ``start_ms`` and ``run_ms`` say where the time went (see ``scheduler.py``).

Example:
    >>> from posttrain.sandbox import make_sandbox, run_many, Execution
    >>> box = make_sandbox("bwrap")
    >>> runs = [Execution(files={}, command=["python3", "-c", f"print({i} * {i})"]) for i in range(4)]
    >>> [r.stdout.strip() for r in run_many(box, runs, concurrency=2)]
    ['0', '1', '4', '9']
"""

from __future__ import annotations

from typing import Sequence

from posttrain.sandbox.base import Execution, ExecutionResult, Sandbox
from posttrain.sandbox.scheduler import default_scheduler, run_one

__all__ = ["run_many", "run_one"]


def run_many(sandbox: Sandbox, executions: Sequence[Execution], concurrency: int = 2, start_retries: int = 2,
             retry_delay_s: float = 0.2) -> list[ExecutionResult]:
    """Run ``executions`` in ``sandbox`` with at most ``concurrency`` in flight; one result per execution, in order.

    The process-wide scheduler also caps the total across concurrent batches and sessions
    (``SandboxConfig.global_concurrency``) and keeps short executions from waiting behind long ones.
    ``retry_delay_s`` grows linearly with the attempt number (0.2 s, 0.4 s, ...) to let a busy daemon recover.
    """
    return default_scheduler().run_many(sandbox, executions, concurrency=concurrency, start_retries=start_retries,
                                        retry_delay_s=retry_delay_s)
