"""Load test (slow; CI runs it): 2000 executions at concurrency 8, a mix of passing, failing and timing-out programs,
on each backend. Every result must be accounted for (right program, right outcome, in order), with no infra error
and nothing left behind (processes, containers, workspaces)."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from posttrain.config import DockerPoolConfig, SandboxConfig
from posttrain.sandbox import Execution, make_sandbox, run_many
from tests.sandbox.cases import BACKENDS, containers_of, processes_with, wait_until, workspaces_of

pytestmark = pytest.mark.integration

TOTAL, CONCURRENCY = 2000, 8


def program(i: int, token: str) -> tuple[Execution, str]:
    """The i-th execution and the outcome it must have: pass, fail or timeout."""
    kind = i % 20
    if kind == 0:  # 5 %: past the deadline
        return Execution(files={}, command=["bash", "-c", f"echo start {i}; exec sleep 30", token], runtime="bash",
                         timeout_s=1), "timeout"
    if kind in (1, 2, 3, 4, 5):  # 25 %: failing python
        return Execution(files={"main.py": f"print({i})\nraise SystemExit({i % 7 + 1})\n"},
                         command=["python3", "main.py", token]), "fail"
    if kind in (6, 7, 8):  # 15 %: failing or passing bash
        return Execution(files={"t.sh": f"echo {i}; exit {i % 2}"}, command=["bash", "t.sh", token],
                         runtime="bash"), "fail" if i % 2 else "pass"
    return Execution(files={"main.py": f"import sys\nprint({i} * 2, len(sys.argv))\n"},
                     command=["python3", "main.py", token]), "pass"


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_2000_executions_at_concurrency_8(backend):
    token = f"pt-load-{uuid.uuid4().hex}"
    jobs = [program(i, token) for i in range(TOTAL)]
    cfg = SandboxConfig(backend=backend, batch_concurrency=CONCURRENCY,
                        docker=DockerPoolConfig(size=CONCURRENCY, max_size=CONCURRENCY + 2))
    t0 = time.monotonic()
    with make_sandbox(cfg) as box:
        if backend == "docker":
            box.wait_ready(CONCURRENCY, timeout_s=180)
        results = run_many(box, [ex for ex, _ in jobs], concurrency=CONCURRENCY)
        if backend == "docker":
            assert box.stats["reset_failures"] == 0
            assert len(containers_of(os.getpid())) <= CONCURRENCY + 2
    wall = time.monotonic() - t0
    assert len(results) == TOTAL
    outcomes = {"pass": 0, "fail": 0, "timeout": 0}
    for i, ((_, want), r) in enumerate(zip(jobs, results)):
        assert not r.infra_error, (i, r)
        if want == "timeout":
            assert r.timed_out, (i, r)
            assert r.stdout in ("", f"start {i}\n"), (i, r)  # (on a loaded machine the deadline
            # can come before the first line)
        elif i % 20 in (1, 2, 3, 4, 5):
            assert (r.exit_code, r.stdout) == (i % 7 + 1, f"{i}\n"), (i, r)
        elif i % 20 in (6, 7, 8):
            assert (r.exit_code, r.stdout) == (i % 2, f"{i}\n"), (i, r)
        else:
            assert (r.exit_code, r.stdout) == (0, f"{i * 2} 2\n"), (i, r)
        outcomes[want] += 1
    print(f"{backend}: {TOTAL} executions in {wall:.1f} s ({TOTAL / wall:.1f}/s), outcomes {outcomes}")
    assert wait_until(lambda: processes_with(token) == [], 10), processes_with(token)[:5]
    assert containers_of(os.getpid()) == []
    assert workspaces_of(os.getpid()) == []
