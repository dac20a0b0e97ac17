"""Nothing of ours survives: after success, failure and timeout, after an exception in the caller, at interpreter
exit without ``close()``, and after the caller is killed outright (then the next process's reaper removes what
the dead owner left: containers by their owner labels, session workspaces by their names)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from posttrain.config import DockerPoolConfig, SandboxConfig
from posttrain.sandbox import Execution, lifecycle, make_sandbox, run_many
from tests.sandbox.cases import BACKENDS, BWRAP, containers_of, processes_with, wait_until, workspaces_of

pytestmark = pytest.mark.integration

def sleeper(token: str, seconds: int = 300, timeout_s: float = 120) -> Execution:
    return Execution(files={"s.py": "import sys, time\nprint('up', flush=True)\ntime.sleep(int(sys.argv[2]))\n"},
                     command=["python3", "s.py", token, str(seconds)], timeout_s=timeout_s)


@pytest.mark.parametrize("backend", BACKENDS)
def test_success_failure_and_timeout_leave_nothing(backend):
    token = f"pt-life-{uuid.uuid4().hex}"
    cfg = SandboxConfig(backend=backend, docker=DockerPoolConfig(size=2, max_size=3))
    with make_sandbox(cfg) as box:
        runs = [Execution(files={}, command=["python3", "-c", "print('ok')", token]),
                Execution(files={}, command=["python3", "-c", "raise SystemExit(3)", token]),
                sleeper(token, timeout_s=1)]
        ok, failed, late = run_many(box, runs, concurrency=3)
        assert (ok.exit_code, failed.exit_code, late.timed_out) == (0, 3, True)
        with box.session(timeout_s=5) as session:
            session.run(f"python3 -c 'import time; time.sleep(60)' {token} & echo bg")
        assert wait_until(lambda: processes_with(token) == []), processes_with(token)
        assert workspaces_of(os.getpid()) == []
    assert containers_of(os.getpid()) == [] or backend == "bwrap"
    assert wait_until(lambda: processes_with(token) == [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_exception_in_the_caller_cleans_everything_up(backend):
    token = f"pt-life-{uuid.uuid4().hex}"
    results = []
    with pytest.raises(RuntimeError, match="caller failed"):
        with make_sandbox(SandboxConfig(backend=backend, docker=DockerPoolConfig(size=1))) as box:
            session = box.session(timeout_s=60)
            session.write_file("work.txt", "in progress")
            worker = threading.Thread(target=lambda: results.append(box.run(sleeper(token))), daemon=True)
            worker.start()
            assert wait_until(lambda: processes_with(token) != [], 60)
            raise RuntimeError("caller failed")
    worker.join(30)
    assert not worker.is_alive()
    assert results
    assert not results[0].ok  # the run in flight was killed, not waited for
    assert wait_until(lambda: processes_with(token) == [])
    assert workspaces_of(os.getpid()) == []
    assert session.closed
    assert containers_of(os.getpid()) == [] or backend == "bwrap"


CHILD = textwrap.dedent("""
    import sys, threading, time
    from posttrain.config import DockerPoolConfig, SandboxConfig
    from posttrain.sandbox import Execution, make_sandbox
    backend, token, close = sys.argv[1], sys.argv[2], sys.argv[3] == "close"
    box = make_sandbox(SandboxConfig(backend=backend, docker=DockerPoolConfig(size=2)))
    session = box.session(timeout_s=120)
    session.write_file("state.txt", "x")
    run = Execution(files={"s.py": "import time\\ntime.sleep(300)"}, command=["python3", "s.py", token],
                    timeout_s=200)
    threading.Thread(target=box.run, args=(run,), daemon=True).start()
    threading.Thread(target=session.run, args=(f"python3 -c 'import time; time.sleep(300)' {token}",),
                     daemon=True).start()
    time.sleep(3)
    print("ready", flush=True)
    if close:
        sys.exit(0)  # no close(): atexit must clean up
    time.sleep(600)
""")


def start_child(backend: str, token: str, mode: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", CHILD, backend, token, mode], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[2])
    assert child.stdout.readline().strip() == "ready"
    return child


def test_a_close_while_a_run_is_starting_kills_that_run_too(monkeypatch):
    """bwrap: a run whose process started before ``close()`` but was registered after it (the race a loaded machine
    widens) is killed all the same, not left running to its deadline."""
    from posttrain.sandbox import bwrap

    if not BWRAP:
        pytest.skip("bwrap missing")
    token = f"pt-life-{uuid.uuid4().hex}"
    box = make_sandbox(SandboxConfig(backend="bwrap"))
    started = subprocess.Popen

    def popen_then_close(*args, **kwargs):  # close() lands between the process start and its registration
        proc = started(*args, **kwargs)
        box.close()
        return proc

    monkeypatch.setattr(bwrap.subprocess, "Popen", popen_then_close)
    result = box.run(sleeper(token, seconds=300, timeout_s=120))
    assert not result.ok, result
    assert not result.timed_out, result
    assert result.run_ms < 30_000, result
    assert wait_until(lambda: processes_with(token) == [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_caller_leaves_only_what_the_next_reaper_removes(backend):
    token = f"pt-life-{uuid.uuid4().hex}"
    child = start_child(backend, token, "kill")
    assert wait_until(lambda: len(processes_with(token)) >= 2, 30), "the child's sandboxes did not start"
    assert workspaces_of(child.pid) or backend == "docker"
    child.send_signal(signal.SIGKILL)
    child.wait()
    if backend == "bwrap":  # --die-with-parent: the sandboxes die with their owner, nothing is left but its dirs
        assert wait_until(lambda: processes_with(token) == []), processes_with(token)
        assert workspaces_of(child.pid)  # the session's, and each run's tmpfs mounts (as root)
        assert lifecycle.reap_workspaces() >= 1
        assert workspaces_of(child.pid) == []
        assert f"posttrain-sbx-{child.pid}-" not in Path("/proc/self/mountinfo").read_text()  # unmounted too
    else:  # the agents see their channel close and exit, the containers remove themselves; the reaper takes the rest
        import docker

        gone = wait_until(lambda: containers_of(child.pid) == [], 15)
        lifecycle.reap_containers(docker.from_env().api)
        assert gone
        assert containers_of(child.pid) == []  # they removed themselves; the reaper is the backstop
        assert wait_until(lambda: processes_with(token) == [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_interpreter_exit_without_close_cleans_up(backend):
    token = f"pt-life-{uuid.uuid4().hex}"
    child = start_child(backend, token, "close")
    assert child.wait(60) == 0
    assert wait_until(lambda: processes_with(token) == []), processes_with(token)
    assert workspaces_of(child.pid) == []
    assert containers_of(child.pid) == []


def test_reapers_spare_live_owners(tmp_path):
    mine = lifecycle.workspace_dir(str(tmp_path))
    dead = tmp_path / f"{lifecycle.WORKSPACE_PREFIX}999999999-1-x"
    dead.mkdir()
    (dead / "work").mkdir()
    (dead / "work" / "f").write_text("x")
    assert lifecycle.reap_workspaces(str(tmp_path)) == 1
    assert mine.exists()
    assert not dead.exists()
    assert lifecycle.owner_alive(lifecycle.owner_labels())
    assert not lifecycle.owner_alive({**lifecycle.owner_labels(), lifecycle.OWNER_START: "1"})  # a recycled pid
    assert not lifecycle.owner_alive({**lifecycle.owner_labels(), lifecycle.BOOT: "an-earlier-boot"})
