"""Behaviour every sandbox backend must show, written once and run against each real backend.

A backend's test module subclasses ``SandboxCases`` (pytest collects the subclass, not this base) and provides
two fixtures: ``sandbox`` (a working backend) and ``broken_sandbox`` (one whose sandbox cannot start); it may
override ``leftovers(token)``, which lists anything of a run still alive after it returned. Backends that offer
sessions (``sandbox.session()``) also get ``SessionCases``.

Example (tests/sandbox/test_bwrap.py):
    @pytest.fixture(scope="module")
    def sandbox():
        yield make_sandbox("bwrap")

    class TestBwrap(SandboxCases):
        pass
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import tempfile
import time
import uuid

import pytest

from posttrain.config import DockerPoolConfig
from posttrain.sandbox import Execution, ExecutionResult, SessionError, cgroup, run_many
from posttrain.sandbox.docker.container import docker_unavailable_reason


def py(code: str, **kw) -> Execution:
    """An execution running ``code`` as main.py with python3."""
    return Execution(files={"main.py": code}, command=["python3", "main.py"], **kw)


BURN_CPU = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\n"  # 0.3 CPU s
ALLOCATE_100MB = "x = bytearray(100 << 20)\nx[::4096] = b'x' * len(x[::4096])\n"  # every page touched


def usage_unaccounted() -> str:
    """Why sandboxes here report no CPU seconds or memory peak ("" when they do): each backend reads them from a
    cgroup it makes (bwrap) or from the container's, whose peak only root resets (docker)."""
    if os.geteuid() != 0:
        return "not root"
    return cgroup.limits_unavailable_reason()


def assert_usage(burn: ExecutionResult, big: ExecutionResult, small: ExecutionResult, why_not: str) -> None:
    """CPU seconds and memory peaks in their bands: ``burn`` ran ~0.3 s of CPU, ``big`` held 100 MiB, ``small``
    little (each the execution's own); or, where the backend cannot account them (``why_not``), None."""
    for r in (burn, big, small):
        assert not r.infra_error, r
        assert r.exit_code == 0, r
    if why_not:
        assert {(r.cpu_s, r.memory_peak_mb) for r in (burn, big, small)} == {(None, None)}, why_not
        return
    assert 0.29 <= burn.cpu_s < 1.0, burn.cpu_s
    assert small.cpu_s < 0.2, small.cpu_s
    assert big.memory_peak_mb > 100, big.memory_peak_mb
    assert small.memory_peak_mb < 40, small.memory_peak_mb


def processes_with(token: str) -> list[str]:
    """Command lines of host processes whose argv contains ``token`` (sandboxed processes are visible on the host)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if token in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def assert_never_connected(listener: socket.socket, message: str) -> None:
    """Fail with ``message`` if a connection is waiting on the non-blocking ``listener``."""
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        return
    conn.close()
    raise AssertionError(message)


class SandboxCases:
    def leftovers(self, token: str) -> list[str]:
        return processes_with(token)

    def usage_unaccounted(self) -> str:
        """Why this backend reports no CPU seconds or memory peak here ("" when it does)."""
        return usage_unaccounted()

    def test_passing_program(self, sandbox):
        r = sandbox.run(py("print(6 * 7)"))
        assert (r.exit_code, r.stdout, r.stderr, r.infra_error, r.timed_out) == (0, "42\n", "", "", False)
        assert r.ok
        assert r.run_ms > 0

    def test_cpu_seconds_and_memory_peak_are_each_executions_own(self, sandbox):
        burn, big, small = (sandbox.run(py(code)) for code in (BURN_CPU, ALLOCATE_100MB, "print(1)"))
        assert_usage(burn, big, small, self.usage_unaccounted())

    def test_failing_program(self, sandbox):
        r = sandbox.run(py("def f():\n    return 1 / 0\nf()\n"))
        assert r.exit_code == 1
        assert not r.ok
        assert not r.infra_error
        assert "Traceback" in r.stderr
        assert "ZeroDivisionError" in r.stderr

    def test_files_stdin_and_workspace(self, sandbox):
        code = ("import sys, os, json\nfrom pkg.helper import VALUE\n"
                "open('out.txt', 'w').write('ok')\n"
                "print(json.dumps([VALUE, sys.stdin.read(), os.getcwd(), os.getuid() != 0, sorted(os.listdir('.'))]))")
        r = sandbox.run(Execution(files={"main.py": code, "pkg/__init__.py": "", "pkg/helper.py": "VALUE = 7"},
                                  command=["python", "main.py"], stdin="héllo"))
        assert r.ok, r
        assert r.stdout.strip() == '[7, "h\\u00e9llo", "/work", true, ["main.py", "out.txt", "pkg"]]'

    def test_environment_is_minimal_with_a_private_tmp(self, sandbox):
        code = ("import os, tempfile\nwith tempfile.NamedTemporaryFile() as f:\n    f.write(b'x')\n"
                "print(sorted(set(os.environ) - {'PWD', 'HOSTNAME'}), os.environ['HOME'], os.listdir('/tmp'))")
        r = sandbox.run(py(code))
        assert r.stdout == "['HOME', 'LANG', 'PATH'] /tmp []\n", r

    def test_node_and_bash_runtimes(self, sandbox):
        node = sandbox.run(Execution(files={"a.js": "console.log([1, 2].map(x => x * 2).join(','))"},
                                     command=["node", "a.js"], runtime="node"))
        bash = sandbox.run(Execution(files={"a.sh": "echo $((6 * 7)) $(whoami)"}, command=["bash", "a.sh"],
                                     runtime="bash"))
        assert (node.exit_code, node.stdout) == (0, "2,4\n"), node
        assert (bash.exit_code, bash.stdout) == (0, "42 sandbox\n"), bash

    def test_missing_command_is_a_program_failure(self, sandbox):
        r = sandbox.run(Execution(files={}, command=["no-such-program"]))
        assert (r.exit_code, r.infra_error) == (127, "")

    def test_invalid_file_name_is_reported(self, sandbox):
        r = sandbox.run(Execution(files={"../escape.py": ""}, command=["python3", "-c", "pass"]))
        assert r.exit_code is None
        assert "files['../escape.py']" in r.infra_error

    @pytest.mark.parametrize("bad, field", [
        ({"stdin": "\ud800"}, "stdin"), ({"files": {"a.py": "x = '\udcff'"}}, "files['a.py']"),
        ({"command": ["python3", "-c", "\ud800"]}, "command[2]"), ({"command": []}, "command"),
        ({"memory_mb": 0}, "memory_mb"), ({"memory_mb": -1}, "memory_mb"), ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": float("nan")}, "timeout_s"), ({"max_output_bytes": -5}, "max_output_bytes"),
        ({"runtime": "ruby"}, "runtime"), ({"tier": "urgent"}, "tier"), ({"queue_timeout_s": -1.0}, "queue_timeout_s"),
    ])
    def test_bad_execution_is_refused_before_anything_starts(self, sandbox, bad, field):
        fds = open_fds()
        [r] = run_many(sandbox, [Execution(**{"files": {}, "command": ["python3", "-c", "pass"], **bad})])
        assert r.exit_code is None, r
        assert r.infra_error.startswith(f"invalid execution: {field}: "), r
        assert r.extra["invalid"], r.extra
        assert r.extra["attempts"] == 1, r.extra  # refused at once, never retried
        assert "container" not in r.extra
        assert "acquire_ms" not in r.extra  # no container was even taken
        # nothing opened, nothing leaked (a thread an earlier test left winding down may hold one for a moment)
        assert wait_until(lambda: open_fds() <= fds, 2.0), (open_fds(), fds)

    def test_deadline_kills_everything(self, sandbox):
        token = f"pt-sleeper-{uuid.uuid4().hex}"
        code = ("import subprocess, sys, time\n"
                "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', sys.argv[1]])\n"
                "print('started', flush=True)\ntime.sleep(60)\n")
        t0 = time.monotonic()
        r = sandbox.run(Execution(files={"main.py": code}, command=["python3", "main.py", token], timeout_s=1.5))
        elapsed = time.monotonic() - t0
        assert r.timed_out, r
        assert r.exit_code is None, r
        assert not r.infra_error, r
        assert r.stdout == "started\n"
        assert 1.5 <= elapsed < 6, elapsed
        deadline = time.monotonic() + 3  # a killed pid namespace / container is reaped asynchronously
        while (left := self.leftovers(token)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == []

    def test_no_network_even_to_host_loopback(self, sandbox):
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(8)
            listener.setblocking(False)
            port = listener.getsockname()[1]
            code = ("import socket\ntry:\n"
                    f"    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
                    "    print('CONNECTED')\nexcept OSError as e:\n    print('BLOCKED', type(e).__name__)\n")
            r = sandbox.run(py(code, timeout_s=10))
            assert r.exit_code == 0, r
            assert r.stdout.startswith("BLOCKED"), r
            assert_never_connected(listener, "the sandbox reached a host listener")

    def test_memory_bomb_fails_without_hurting_the_host(self, sandbox):
        code = "chunks = []\nfor _ in range(400):\n    chunks.append(b'x' * 10_000_000)\nprint('survived')\n"
        t0 = time.monotonic()
        r = sandbox.run(py(code, memory_mb=128, timeout_s=20))
        assert not r.timed_out, r
        assert not r.infra_error, r
        assert r.exit_code != 0
        assert "survived" not in r.stdout
        assert time.monotonic() - t0 < 15

    def test_fork_bomb_is_contained(self, sandbox):
        code = ("import os, time\nn = 0\ntry:\n    for _ in range(1000):\n        if os.fork() == 0:\n"
                "            time.sleep(2)\n            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\n"
                "print(n)\n")
        r = sandbox.run(py(code, timeout_s=15))
        assert r.exit_code == 0, r
        assert not r.infra_error, r
        assert 0 < int(r.stdout) < 200

    def test_huge_output_is_truncated_in_bounded_memory(self, sandbox):
        code = "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 1_000_000)\nprint('tail', file=sys.stderr)"
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        r = sandbox.run(py(code, max_output_bytes=65536, timeout_s=30))
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        assert r.exit_code == 0, r.stderr
        assert r.output_truncated, r.stderr
        assert not r.timed_out, r.stderr
        assert r.stdout.startswith("x" * 65536)
        assert r.stdout.endswith("[... output truncated at 65536 bytes ...]")
        assert r.stderr == "tail\n"
        assert grown_mb < 50, f"capturing 100 MB grew our peak RSS by {grown_mb:.0f} MB"

    def test_run_many_keeps_order_and_bounds_concurrency(self, sandbox):
        code = "import sys, time\nt = time.time()\ntime.sleep(1)\nprint(sys.argv[1], t, time.time())"
        runs = [Execution(files={"main.py": code}, command=["python3", "main.py", str(i)]) for i in range(5)]
        results = run_many(sandbox, runs, concurrency=2)
        assert all(r.ok for r in results), results
        rows = [r.stdout.split() for r in results]
        assert [row[0] for row in rows] == ["0", "1", "2", "3", "4"]
        intervals = [(float(start), float(end)) for _, start, end in rows]
        overlap = max(sum(s <= t < e for s, e in intervals) for t, _ in intervals)
        assert overlap == 2, intervals

    def test_run_many_never_loses_a_result(self, sandbox):
        results = run_many(sandbox, [None, py("print('fine')")], concurrency=2, start_retries=1, retry_delay_s=0)
        assert "AttributeError" in results[0].infra_error
        assert results[0].extra["attempts"] == 2
        assert results[1].stdout == "fine\n"
        assert results[1].extra["attempts"] == 1

    def test_sandbox_failure_is_infra_error_and_retried(self, broken_sandbox):
        [r] = run_many(broken_sandbox, [py("print(1)")], start_retries=2, retry_delay_s=0)
        assert isinstance(r, ExecutionResult), r
        assert r.infra_error, r
        assert r.exit_code is None, r
        assert r.extra["attempts"] == 3

    def test_program_failures_are_not_retried(self, sandbox):
        [r] = run_many(sandbox, [py("raise SystemExit(5)")], start_retries=2)
        assert (r.exit_code, r.extra["attempts"]) == (5, 1)

    def test_results_carry_scheduler_timings(self, sandbox):
        runs = [py("print(1)"), py("print(2)"), py("print(3)")]
        results = run_many(sandbox, runs, concurrency=1)
        assert [r.stdout for r in results] == ["1\n", "2\n", "3\n"]
        for r in results:
            assert r.queue_ms >= 0, r
            assert r.start_ms > 0, r
            assert r.run_ms > 0, r
            assert r.extra["tier"] == "short"
            assert r.extra["attempts"] == 1
        assert results[2].queue_ms > results[0].queue_ms  # the third waited for the first two (concurrency 1)

    def test_node_and_bash_see_their_limits(self, sandbox):
        node = sandbox.run(Execution(files={"a.js": "const a = []; for (;;) a.push(new Array(1e6).fill(1));"},
                                     command=["node", "a.js"], runtime="node", memory_mb=128, timeout_s=20))
        assert node.exit_code not in (0, None), node
        assert not node.infra_error, node
        assert not node.timed_out, node
        bash = sandbox.run(Execution(files={}, command=["bash", "-c", "while :; do :; done"], runtime="bash",
                                     timeout_s=1))
        assert bash.timed_out
        assert not bash.infra_error


def sandbox_processes() -> str:
    """A bash program listing the processes of the sandbox user other than itself and pid 1 (a backend's init)."""
    return ('for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = "$$" ] || [ "$p" = 1 ] && continue; '
            'u=$(awk \'/^Uid:/ {print $2}\' "$d/status" 2>/dev/null); '
            '[ "$u" = "$(id -u)" ] && [ "$p" != "$BASHPID" ] && tr "\\0" " " < "$d/cmdline" && echo; done; true')


class SessionCases:
    """Sessions of a backend (fixture ``sandbox`` with a ``session()`` method)."""

    def test_each_step_reports_its_own_cpu_seconds_and_memory_peak(self, sandbox):
        with sandbox.session(timeout_s=20) as s:
            s.write_file("burn.py", BURN_CPU)
            s.write_file("big.py", ALLOCATE_100MB)
            burn, big, small = (s.run(["python3", name], runtime="python") for name in ("burn.py", "big.py", "-V"))
            assert_usage(burn, big, small, usage_unaccounted())
            logged = [(step.cpu_s, step.memory_peak_mb) for step in s.log[2:]]
            assert logged == [(r.cpu_s, r.memory_peak_mb) for r in (burn, big, small)]

    def test_session_keeps_the_workspace_and_logs_every_step(self, sandbox):
        with sandbox.session(timeout_s=10) as s:
            s.write_file("src/app.py", "print('v1')\n")
            first = s.run("python3 src/app.py && echo made > out.txt")
            second = s.run(["cat", "out.txt"])
            assert (first.stdout, second.stdout) == ("v1\n", "made\n")
            assert s.read_file("out.txt") == "made\n"
            assert [step.kind for step in s.log] == ["write", "run", "run", "read"]
            step = s.log[1]
            assert step.command == "bash -c 'python3 src/app.py && echo made > out.txt'"
            assert (step.exit_code, step.stdout_bytes, step.truncated, step.timed_out) == (0, 3, False, False)
            assert step.duration_ms > 0
            assert [e.index for e in s.log] == [0, 1, 2, 3]

    def test_snapshot_and_restore_roll_the_workspace_back(self, sandbox):
        with sandbox.session(timeout_s=10) as s:
            s.write_file("keep.txt", "original")
            s.run("mkdir -p d/e && echo deep > d/e/f.txt && ln -s keep.txt link")
            snap = s.snapshot()
            assert snap.size > 0
            changed = s.run("echo changed > keep.txt; rm -r d; echo new > new.txt; mkdir locked; chmod 0 locked")
            assert changed.exit_code == 0
            s.restore(snap)
            listing = s.run("find . -printf '%p %y\\n' | sort; cat keep.txt link d/e/f.txt").stdout
            assert listing.splitlines() == [". d", "./d d", "./d/e d", "./d/e/f.txt f", "./keep.txt f", "./link l",
                                            "originaloriginaldeep"]
            s.restore(snap)  # a snapshot can be restored again
            assert s.read_file("keep.txt") == "original"
            assert [step.kind for step in s.log].count("restore") == 2

    def test_step_output_is_truncated_to_the_budget_with_a_marker(self, sandbox):
        with sandbox.session(timeout_s=10, output_bytes=1000) as s:
            r = s.run("head -c 100000 /dev/zero | tr '\\0' x; echo tail >&2")
            assert r.output_truncated
            assert r.stdout == "x" * 1000 + "\n[... output truncated at 1000 bytes ...]"
            assert r.stderr == "tail\n"
            assert (s.log[-1].stdout_bytes, s.log[-1].truncated) == (100000, True)

    def test_processes_and_tmp_do_not_outlive_a_step(self, sandbox):
        token = f"pt-step-{uuid.uuid4().hex}"
        with sandbox.session(timeout_s=10) as s:
            s.run(f"(exec -a {token} sleep 300) & echo x > /tmp/scratch; echo started")
            after = s.run(sandbox_processes() + "; ls -A /tmp")
            assert after.exit_code == 0, after
            assert token not in after.stdout, after
            assert "scratch" not in after.stdout, after
            timed = s.run("sleep 30", timeout_s=1)
            assert timed.timed_out
            assert s.log[-1].timed_out
            assert s.log[-1].exit_code is None
            assert s.run("echo alive").stdout == "alive\n"  # the session survives a step's deadline
        assert processes_with(token) == []

    def test_file_operations_never_follow_links_onto_the_host(self, sandbox, tmp_path):
        secret = tmp_path / "host-secret.txt"
        secret.write_text("HOST-SECRET-CONTENT")
        with sandbox.session(timeout_s=10) as s:
            s.run(f"ln -s {secret} leak; ln -s {tmp_path} dirleak")
            with pytest.raises(SessionError):
                s.read_file("leak")
            with pytest.raises(SessionError):
                s.write_file("dirleak/planted.txt", "pwned")
            with pytest.raises(SessionError):
                s.write_file("../escape.txt", "x")
        assert secret.read_text() == "HOST-SECRET-CONTENT"
        assert sorted(os.listdir(tmp_path)) == ["host-secret.txt"]

    def test_bad_session_input_is_refused_before_the_step(self, sandbox):
        with sandbox.session(timeout_s=10) as s:
            with pytest.raises(SessionError, match=r"run\(\): stdin: not encodable as UTF-8"):
                s.run("cat", stdin="\ud800")
            with pytest.raises(SessionError, match=r"write_file\('a.txt'\): content not encodable"):
                s.write_file("a.txt", "\udcff")
            assert s.log == []
            assert s.run("echo ok").stdout == "ok\n"

    def test_a_closed_session_refuses_work(self, sandbox):
        s = sandbox.session(timeout_s=5)
        s.close()
        s.close()  # idempotent
        with pytest.raises(SessionError, match="closed"):
            s.run("true")


# Both real backends as test parameters, each skipped (with the reason) only where it is truly absent.
BWRAP = shutil.which("bwrap") is not None


def docker_reason() -> str:
    return docker_unavailable_reason(DockerPoolConfig().image)


DOCKER = docker_reason()
BACKENDS = [pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP, reason="bwrap missing")),
            pytest.param("docker", marks=pytest.mark.skipif(bool(DOCKER), reason=DOCKER))]


def containers_of(pid: int) -> list[str]:
    if DOCKER:
        return []
    import docker

    api = docker.from_env().api  # the low-level listing: no per-container inspect racing with auto-removal
    try:
        return [c["Id"] for c in api.containers(all=True, filters={"label": f"posttrain.owner={pid}"})]
    finally:
        api.close()


def workspaces_of(pid: int) -> list[str]:
    return [p for p in os.listdir(tempfile.gettempdir()) if p.startswith(f"posttrain-sbx-{pid}-")]


def open_fds() -> int:
    """How many file descriptors this process has open."""
    return len(os.listdir("/proc/self/fd"))


def wait_until(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
