"""The docker backends against the shared sandbox and session cases: the warm pool (what ``make_sandbox("docker")``
returns) and the cold one-container-per-execution sandbox; plus the pool's own behaviour (acquire latency, reuse
never dirty, shrink and refill, replacement of broken containers) and the failure modes (image missing, daemon
gone).

Skipped only when dockerd is unreachable or the sandbox image is absent (build it: containers/build-sandbox-image.sh).
"""

from __future__ import annotations

import os
import platform
import resource
import threading
import time

import docker
import pytest

from posttrain.config import DockerPoolConfig, SandboxConfig
from posttrain.sandbox import Execution, make_sandbox, run_many, seccomp
from posttrain.sandbox.docker import DockerPool, DockerSandbox
from posttrain.sandbox.docker.container import AGENT_CAPS
from tests.sandbox.cases import (ALLOCATE_100MB, BURN_CPU, SandboxCases, SessionCases, assert_usage, processes_with,
                                 py, usage_unaccounted)

IMAGE = DockerPoolConfig().image
HOST_UIDS = range(SandboxConfig().host_uid_first, SandboxConfig().host_uid_first + SandboxConfig().host_uids)
ABSENT = DockerPoolConfig(image="posttrain-no-such-image:absent", size=1)


def _why_unavailable() -> str:
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except docker.errors.DockerException as exc:
        return f"dockerd unreachable: {exc}"
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        return f"docker image {IMAGE} absent: run containers/build-sandbox-image.sh"
    finally:
        client.close()
    return ""


REASON = _why_unavailable()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(bool(REASON), reason=REASON)]


def our_containers(**labels) -> list[str]:
    api = docker.from_env().api  # the low-level listing: no per-container inspect racing with auto-removal
    filters = [f"posttrain.owner={os.getpid()}"] + [f"{k}={v}" for k, v in labels.items()]
    try:
        return [c["Id"] for c in api.containers(all=True, filters={"label": filters})]
    finally:
        api.close()


@pytest.fixture(scope="module")
def sandbox():
    box = make_sandbox(SandboxConfig(backend="docker", docker=DockerPoolConfig(size=2, max_size=4)))
    assert box.wait_ready(2, timeout_s=120)
    yield box
    box.close()
    assert our_containers(**{"posttrain.pool": box.pool_id}) == []


@pytest.fixture(scope="module")
def broken_sandbox():
    pool = DockerPool(ABSENT)
    yield pool
    pool.close()


class TestDockerPool(SandboxCases, SessionCases):
    @pytest.fixture
    def sandbox(self, sandbox):
        """The module's pool, quiet: the resets of earlier cases done (they read cgroup files in the background,
        which a case counting this process's open fds would see)."""
        assert sandbox.wait_ready(2, timeout_s=60)
        return sandbox


@pytest.fixture(scope="module")
def cold_sandbox():
    box = DockerSandbox(IMAGE)
    yield box
    box.close()


class TestDockerCold(SandboxCases):
    @pytest.fixture
    def sandbox(self, cold_sandbox):
        return cold_sandbox

    @pytest.fixture
    def broken_sandbox(self):
        return DockerSandbox("posttrain-no-such-image:absent")

    def leftovers(self, token: str) -> list[str]:
        return processes_with(token) + our_containers(**{"posttrain.kind": "cold"})

    def usage_unaccounted(self) -> str:
        return "runc removes a container's cgroup the moment its process exits, before the host can read it"

    # the cold backend is the benchmark's baseline; the slow shared cases are covered by the pool
    test_node_and_bash_see_their_limits = None
    test_results_carry_scheduler_timings = None
    test_huge_output_is_truncated_in_bounded_memory = None


def test_missing_image_is_infra_error():
    r = DockerSandbox("posttrain-no-such-image:absent").run(py("print(1)"))
    assert r.exit_code is None
    assert "No such image" in r.infra_error
    assert our_containers(**{"posttrain.kind": "cold"}) == []
    with DockerPool(ABSENT) as pool:
        t0 = time.monotonic()
        r = pool.run(py("print(1)"))
        assert r.exit_code is None
        assert "No such image" in r.infra_error
        assert time.monotonic() - t0 < 10


def test_unreachable_daemon_is_infra_error(tmp_path):
    r = DockerSandbox(base_url=f"unix://{tmp_path}/no-docker.sock").run(py("print(1)"))
    assert r.exit_code is None
    assert "unreachable" in r.infra_error
    with DockerPool(DockerPoolConfig(base_url=f"unix://{tmp_path}/no-docker.sock", size=1)) as pool:
        r = pool.run(py("print(1)"))
        assert r.exit_code is None
        assert "unreachable" in r.infra_error


HARDENING = ("import os\nstatus = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines())\n"
             "print(os.getuid(), status['CapEff'], status['CapBnd'], status['NoNewPrivs'], status['Seccomp'])\n"
             "for path in ['/', '/etc', '/usr', '/work', '/tmp', '/trusted']:\n"
             "    try:\n        open(path + '/x', 'w').close()\n        print(path, 'writable')\n"
             "    except OSError as e:\n        print(path, e.errno)\n"
             "import socket\nprint(sorted(name for _, name in socket.if_nameindex()))\n"
             "print('pid 1: uid', os.stat('/proc/1').st_uid)\n")


@pytest.mark.parametrize("backend", ["pool", "cold"])
def test_container_is_hardened(backend, sandbox):
    box = sandbox if backend == "pool" else DockerSandbox(IMAGE)
    r = box.run(py(HARDENING))
    lines = r.stdout.splitlines()
    uid, rest = lines[0].split(" ", 1)
    assert int(uid) in HOST_UIDS, r
    assert rest == "0000000000000000 0000000000000000 1 2", r  # a leased uid, no caps, ...
    assert lines[1:7] == ["/ 30", "/etc 30", "/usr 30", "/work writable", "/tmp writable", "/trusted 13"]
    assert lines[7] == "['lo']"  # network none
    assert lines[8] == "pid 1: uid 0"  # the agent (pool) or docker-init (cold): another user, out of reach
    assert r.extra["oom_killed"] is False
    if backend == "pool":
        [cid] = [c for c in our_containers() if c.startswith(r.extra["container"])]
        info = docker.from_env().api.inspect_container(cid)
        host = info["HostConfig"]
        assert (host["ReadonlyRootfs"], host["NetworkMode"], host["CapDrop"], host["SecurityOpt"]) == \
               (True, "none", ["ALL"], ["no-new-privileges", seccomp.docker_security_opt()])  # bwrap's policy
        assert sorted(host["CapAdd"]) == sorted(AGENT_CAPS)  # the agent's, never a program's
        assert info["Config"]["User"] == "0:0"
        assert host["PidsLimit"] > 0
        assert host["Memory"] > 0


@pytest.mark.parametrize("backend", ["pool", "cold"])
def test_memory_bomb_is_oom_killed(backend, sandbox):
    box = sandbox if backend == "pool" else DockerSandbox(IMAGE)
    r = box.run(py("x = [b'x' * 10_000_000 for _ in range(100)]", memory_mb=64))
    assert r.exit_code == 137, r
    assert r.extra["oom_killed"] is True, r
    after = box.run(py("print('fine')"))
    assert after.stdout == "fine\n"  # the pool's container (or a replacement) serves the next execution


@pytest.fixture(scope="module")
def agent_only_pool():
    """A pool without the host's view of its containers (as with a remote daemon): the agent's word only."""
    pool = DockerPool(DockerPoolConfig(size=2, max_size=2), host_checks=False)
    assert pool.wait_ready(2, timeout_s=120)
    yield pool
    pool.close()


@pytest.mark.parametrize("checks", ["host", "agent-only"])
def test_acquire_is_a_list_pop_and_containers_are_reused_clean(checks, sandbox, agent_only_pool):
    sandbox = sandbox if checks == "host" else agent_only_pool
    assert all((box.view is not None) == (checks == "host" and os.geteuid() == 0)
               for box in list(sandbox._boxes.values()))
    dirty = ("import os, subprocess\nopen('/work/left.txt', 'w').write('x'); open('/tmp/left', 'w').write('x')\n"
             "open('/dev/shm/left', 'w').write('x')\n"
             "subprocess.Popen(['sleep', '600'], start_new_session=True)\nos.chmod('/work', 0)\n")
    probe = ("import os, time\ntime.sleep(0.3)\n"
             "mine = [p for p in os.listdir('/proc') if p.isdigit() and p != '1' and"
             " os.stat('/proc/' + p).st_uid == os.getuid()]\n"  # pid 1: the pool's agent
             "print(sorted(os.listdir('/work')), os.listdir('/tmp'), os.listdir('/dev/shm'), len(mine))\n")
    for _ in range(2):
        run_many(sandbox, [py(dirty), py(dirty)], concurrency=2)
        results = run_many(sandbox, [py(probe), py(probe)], concurrency=2)
        assert [r.stdout for r in results] == ["['main.py'] [] [] 1\n"] * 2, results  # nothing of the dirty runs
    acquires = [sandbox.run(py("pass")).extra["acquire_ms"] for _ in range(6)]
    assert sorted(acquires)[3] < 10, acquires


def test_a_reused_container_reports_each_executions_own_cpu_seconds_and_memory_peak(agent_only_pool):
    """The container's cgroup outlives its executions: its CPU time is taken as a difference and its memory peak
    reset before each one, so after 100 MiB and 0.3 CPU seconds the next execution reports its own small figures;
    without the host's view of the container there is no account at all (None)."""
    with DockerPool(DockerPoolConfig(size=1, max_size=1)) as pool:
        assert pool.wait_ready(1, timeout_s=120)
        big, burn, small = (pool.run(py(code)) for code in (ALLOCATE_100MB, BURN_CPU, "print(1)"))
    assert len({r.extra["container"] for r in (big, burn, small)}) == 1, (big, burn, small)
    assert_usage(burn, big, small, usage_unaccounted())
    unseen = agent_only_pool.run(py("print(1)"))
    assert (unseen.exit_code, unseen.cpu_s, unseen.memory_peak_mb) == (0, None, None), unseen


IOPRIO_SET = {"x86_64": 251, "aarch64": 30}[platform.machine()]


def test_programs_cannot_touch_the_agent(sandbox):
    code = ("import ctypes, os, resource, signal\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.ptrace(0x4206, 1, 0, 0), ctypes.get_errno())\n"  # PTRACE_SEIZE the agent
            f"print(libc.syscall({IOPRIO_SET}, 1, 1, 3 << 13), ctypes.get_errno())\n"  # ioprio_set(pid 1, IDLE)
            "for path in ['/proc/1/environ', '/proc/1/mem', '/proc/1/fd/1']:\n    try:\n"
            "        open(path, 'rb').read(1)\n        print(path, 'READ')\n    except OSError as e:\n"
            "        print(path, e.errno)\n"
            "for call in [lambda: resource.prlimit(1, resource.RLIMIT_NOFILE, (3, 3)),"
            " lambda: os.setpriority(os.PRIO_PROCESS, 1, 19), lambda: os.sched_setaffinity(1, {0}),"
            " lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0))]"
            " + [lambda sig=sig: os.kill(1, sig) for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP)]:\n"
            "    try:\n        call()\n        print('DONE')\n    except OSError as e:\n        print(e.errno)\n")
    r = sandbox.run(py(code))
    assert r.stdout == "-1 1\n-1 1\n/proc/1/environ 13\n/proc/1/mem 13\n/proc/1/fd/1 13\n" + "1\n" * 7, r
    assert sandbox.run(py("print('agent alive')")).stdout == "agent alive\n"


def _agent(pool: DockerPool, short_id: str) -> tuple[str, int]:
    """The full id of the pool's container ``short_id`` and its agent's pid on the host."""
    [cid] = [c for c in our_containers(**{"posttrain.pool": pool.pool_id}) if c.startswith(short_id)]
    return cid, docker.from_env().api.inspect_container(cid)["State"]["Pid"]


TAINTS = {"nofile": lambda pid: resource.prlimit(pid, resource.RLIMIT_NOFILE, (64, 64)),
          "nice": lambda pid: os.setpriority(os.PRIO_PROCESS, pid, 19),
          "affinity": lambda pid: os.sched_setaffinity(pid, {min(os.sched_getaffinity(pid))})}


@pytest.mark.skipif(os.geteuid() != 0, reason="tainting the agent from outside needs root on the daemon's host")
@pytest.mark.parametrize("when, taint", [("idle", "nofile"), ("busy", "nice"), ("idle", "affinity")])
def test_a_tainted_container_is_discarded(when, taint):
    """What no program can do any more (they are another uid) is done from the host: the agent must notice."""
    if taint == "affinity" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no affinity to narrow")
    with DockerPool(DockerPoolConfig(size=1, max_size=1)) as pool:
        assert pool.wait_ready(1, timeout_s=120)
        first = pool.run(py("print('first')"))
        cid, agent_pid = _agent(pool, first.extra["container"])
        assert pool.wait_ready(1, timeout_s=30)  # reset, idle again
        if when == "idle":
            TAINTS[taint](agent_pid)
            refused = pool.run(py("print('must not run')"))  # refused before it starts: an infra error, retried
            assert refused.exit_code is None, refused
            assert refused.stdout == "", refused
            assert f"tainted container: {'rlimits' if taint == 'nofile' else taint} changed" in refused.infra_error
        else:
            results: list = []
            slow = threading.Thread(target=lambda: results.append(pool.run(py("import time; time.sleep(1.5)"))))
            slow.start()
            time.sleep(0.7)
            TAINTS[taint](agent_pid)
            slow.join()
            assert results[0].ok, results[0]  # the program's run is unaffected; the reset after it fails
        after = pool.run(py("print('fresh')"))
        assert after.stdout == "fresh\n", after
        assert after.extra["container"] != first.extra["container"], after
        assert pool.stats["reset_failures"] == (when == "busy")
        deadline = time.monotonic() + 20
        while cid in our_containers(**{"posttrain.pool": pool.pool_id}) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert cid not in our_containers(**{"posttrain.pool": pool.pool_id})  # discarded, never reused


def test_a_failure_after_the_program_started_is_its_outcome():
    """The container dies under a running program: the run is the program's (exit unknown, not an infra error, so
    it is scored, not excluded and retried), and the pool replaces the container."""
    with DockerPool(DockerPoolConfig(size=1, max_size=1)) as pool:
        assert pool.wait_ready(1, timeout_s=120)
        [cid] = our_containers(**{"posttrain.pool": pool.pool_id})
        killer = threading.Timer(1.0, lambda: docker.from_env().api.kill(cid))
        killer.start()
        r = pool.run(py("import time\nprint('started', flush=True)\ntime.sleep(20)", timeout_s=30))
        killer.join()
        assert (r.infra_error, r.exit_code, r.timed_out, r.stdout) == ("", None, False, "started\n"), r
        assert "after its program started" in r.extra["discard"]
        assert pool.run(py("print('next')")).stdout == "next\n"


TRUSTED = {"hidden/tests/test_a.py": "def test_a():\n    assert True\n", "hidden/expected.json": "[42]"}
TRUSTED_STAT = ("import os\nst = os.stat('/trusted')\nprint('/trusted', st.st_uid, oct(st.st_mode & 0o7777))\n"
                "try:\n    os.listdir('/trusted')\nexcept OSError as e:\n    print('listing', e.errno)\n"
                "for root, dirs, files in sorted(os.walk('/trusted/hidden')):\n"
                "    for path in [root] + [os.path.join(root, name) for name in sorted(files)]:\n"
                "        st = os.stat(path)\n        print(path, st.st_uid, oct(st.st_mode & 0o7777))\n"
                "print(open('/trusted/hidden/expected.json').read())\n")


@pytest.mark.parametrize("backend", ["pool", "cold"])
def test_trusted_files_are_roots_and_read_only(backend, sandbox):
    box = sandbox if backend == "pool" else DockerSandbox(IMAGE)
    r = box.run(py(TRUSTED_STAT, trusted_files=TRUSTED))
    dirs = "0o755" if backend == "pool" else "0o555"  # root's either way
    assert r.stdout.splitlines() == [
        "/trusted 0 0o111", "listing 13", f"/trusted/hidden 0 {dirs}", "/trusted/hidden/expected.json 0 0o444",
        f"/trusted/hidden/tests 0 {dirs}", "/trusted/hidden/tests/test_a.py 0 0o444", "[42]"], r
    if backend == "pool":  # never seen by a later execution (both containers of the pool), nor by a session
        gone = "import os, time\ntime.sleep(0.3)\nprint(os.path.exists('/trusted/hidden/expected.json'))"
        later = run_many(box, [py(gone)] * 2, concurrency=2)
        assert [x.stdout for x in later] == ["False\n"] * 2, later
        with box.session() as s:
            assert s.run("cat /trusted/hidden/expected.json").exit_code == 1


def test_trusted_files_that_cannot_be_written_are_an_infra_error(sandbox):
    r = sandbox.run(py("print('ran')", trusted_files={"a": "x", "a/b": "y"}))  # "a" is a file and a directory
    assert r.exit_code is None, r
    assert "trusted files" in r.infra_error, r
    assert r.stdout == "", r
    assert sandbox.run(py("print('fine')")).stdout == "fine\n"


def test_pool_shrinks_when_idle_refills_and_replaces_broken_containers():
    with DockerPool(DockerPoolConfig(size=2, min_idle=0, idle_s=1.0, max_uses=3)) as pool:
        assert pool.wait_ready(2, timeout_s=120)
        used = {pool.run(py("pass")).extra["container"] for _ in range(3)}
        deadline = time.monotonic() + 20
        while our_containers(**{"posttrain.pool": pool.pool_id}) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert our_containers(**{"posttrain.pool": pool.pool_id}) == []  # idle: shrunk to min_idle=0
        r = pool.run(py("print('back')"))  # demand again: a container is started on demand, the rest refill
        assert r.stdout == "back\n"
        assert r.extra["container"] not in used
        assert pool.wait_ready(1, timeout_s=60)
        [cid] = [c for c in our_containers(**{"posttrain.pool": pool.pool_id}) if c.startswith(r.extra["container"])]
        docker.from_env().api.kill(cid)  # a container dies under the pool
        results = [pool.run(py("print('ok')")) for _ in range(3)]
        assert any(x.stdout == "ok\n" for x in results)
        assert pool.stats["created"] >= 3
    assert our_containers(**{"posttrain.pool": pool.pool_id}) == []


def test_close_while_running_removes_everything():
    pool = DockerPool(DockerPoolConfig(size=1))
    results = []
    worker = threading.Thread(target=lambda: results.append(pool.run(py("import time; time.sleep(30)",
                                                                        timeout_s=60))))
    worker.start()
    time.sleep(3)
    pool.close()
    worker.join(30)
    assert not worker.is_alive()
    assert results
    assert not results[0].ok
    assert our_containers(**{"posttrain.pool": pool.pool_id}) == []


def test_memory_limit_follows_the_execution(sandbox):
    code = "print(open('/sys/fs/cgroup/memory/memory.limit_in_bytes').read().strip())"
    if not os.path.exists("/sys/fs/cgroup/memory"):
        code = "print(open('/sys/fs/cgroup/memory.max').read().strip())"
    small = sandbox.run(py(code, memory_mb=96))
    large = sandbox.run(py(code, memory_mb=300))
    assert (int(small.stdout), int(large.stdout)) == (96 << 20, 300 << 20)


def test_runtimes_exist_in_the_image(sandbox):
    r = sandbox.run(Execution(files={}, command=["bash", "-c", "python3 --version; node --version"], runtime="bash"))
    assert r.exit_code == 0
    assert r.stdout.startswith("Python 3")
    assert "\nv" in r.stdout
