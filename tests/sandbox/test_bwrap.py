"""The bubblewrap backend against the shared sandbox and session cases, plus what only bwrap has (setup failures,
limits, the hardening flags, host workspaces of sessions)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from posttrain.sandbox import Execution, bwrap, cgroup, make_sandbox
from posttrain.sandbox.bwrap import BwrapSandbox
from tests.sandbox.cases import SandboxCases, SessionCases, py

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")]


@pytest.fixture(scope="module")
def sandbox():
    box = make_sandbox("bwrap")
    yield box
    box.close()


@pytest.fixture(scope="module")
def broken_sandbox():
    """bwrap fails its own setup (a bind source that does not exist) after it has forked."""
    return BwrapSandbox(extra_ro_binds=[("/nonexistent-posttrain-path", "/x")])


class TestBwrap(SandboxCases, SessionCases):
    pass


def test_missing_bwrap_binary_is_infra_error():
    r = BwrapSandbox(bwrap="/nonexistent/bwrap").run(py("print(1)"))
    assert r.exit_code is None
    assert "/nonexistent/bwrap" in r.infra_error


@pytest.fixture
def slow_bwrap():
    """bwrap whose setup takes 1.5 s more (as on a loaded host), as a script every leased uid may run."""
    folder = Path(tempfile.mkdtemp(prefix="posttrain-slow-bwrap-"))
    folder.chmod(0o755)
    script = folder / "bwrap"
    script.write_text(f"#!/bin/sh\nsleep 1.5\nexec {shutil.which('bwrap')} \"$@\"\n")
    script.chmod(0o755)
    yield str(script)
    shutil.rmtree(folder)


def test_the_deadline_counts_from_the_program_start_and_a_stuck_setup_is_infra(slow_bwrap, monkeypatch):
    box = BwrapSandbox(bwrap=slow_bwrap)
    r = box.run(py("import time\ntime.sleep(0.5)\nprint('done')", timeout_s=1.0))
    assert (r.exit_code, r.stdout, r.timed_out, r.infra_error) == (0, "done\n", False, ""), r
    assert r.start_ms >= 1500, r  # the setup is the sandbox's time ...
    assert 500 <= r.run_ms < 1000, r  # ... and the program's is its own
    r = box.run(py("import time\ntime.sleep(3)", timeout_s=1.0))
    assert r.timed_out, r
    assert r.exit_code is None, r
    assert not r.infra_error, r
    assert 1000 <= r.run_ms < 2500, r

    monkeypatch.setattr(bwrap, "SETUP_LIMIT_S", 0.5)
    r = box.run(py("print('never')", timeout_s=5.0))
    assert (r.exit_code, r.stdout, r.timed_out) == (None, "", False), r
    assert "bwrap setup did not finish in 0.5 s" in r.infra_error, r


def test_program_printing_like_bwrap_is_not_infra_error():
    r = BwrapSandbox().run(py("import sys\nprint('bwrap: Can\\'t find source path', file=sys.stderr)\nsys.exit(1)"))
    assert (r.exit_code, r.infra_error) == (1, "")


@pytest.mark.skipif(os.geteuid() != 0, reason="bwrap's own tmpfs takes no inode cap: only root mounts them capped")
def test_writable_mounts_cap_their_inodes_and_are_gone_after_the_run():
    """One inode per 4 KB of each writable tmpfs (bwrap's --tmpfs has no nr_inodes: they are mounted on the host)."""
    box = BwrapSandbox()
    ours = f"posttrain-sbx-{os.getpid()}-*"
    before = set(Path(tempfile.gettempdir()).glob(ours))
    r = box.run(Execution(files={"a.txt": "x"}, command=["bash", "-c", "stat -f -c %c /work /tmp /dev/shm; "
                                                          "ls -ld /work /tmp /dev/shm | cut -c1-10; ls /work"],
                          runtime="bash"))
    assert r.stdout.split() == [str(box.workspace_mb * 256), str(box.tmp_mb * 256), "4096",
                                "drwxrwxrwt", "drwxrwxrwt", "drwxr-xr-x", "a.txt"], r  # ls sorts its arguments
    assert set(Path(tempfile.gettempdir()).glob(ours)) <= before  # unmounted and removed


@pytest.mark.skipif(os.geteuid() != 0, reason="bwrap's own tmpfs takes no inode cap: only root mounts them capped")
def test_empty_files_are_bounded_where_no_cgroup_charges_them():
    """Without a cgroup nothing charges the kernel memory of empty files (an inode and a dentry each): the mounts'
    inode caps are what bound it (once 527,347 files, +525 MB of slab, under a 256 MB memory_mb)."""
    code = ("import os\ncount, refused = 0, []\nfor d in ('/tmp', '/dev/shm', '/work'):\n    try:\n"
            "        while count < 200_000:\n            os.close(os.open(f'{d}/f{count}', os.O_CREAT))\n"
            "            count += 1\n    except OSError as e:\n        refused.append(e.errno)\nprint(count, refused)\n")
    box = BwrapSandbox(aggregate_limits=False)
    r = box.run(py(code, memory_mb=256, timeout_s=20))
    count, refused = r.stdout.split(" ", 1)
    assert r.exit_code == 0, r
    assert int(count) <= (box.workspace_mb + box.tmp_mb + 16) * 256, r
    assert refused.strip() == "[28, 28, 28]", r  # ENOSPC on each mount


def test_limits_and_isolation_inside():
    code = ("import os, resource as r\n"
            "print(r.getrlimit(r.RLIMIT_AS)[0] >> 20, r.getrlimit(r.RLIMIT_NPROC)[0], r.getrlimit(r.RLIMIT_CORE)[0],"
            " r.getrlimit(r.RLIMIT_CPU)[0], os.getpid())\n"
            "print(sorted(os.listdir('/etc')), os.path.exists('/root'), os.path.exists('/home'))\n"
            "open('/usr/lib/x', 'w')\n")
    r = BwrapSandbox(max_processes=32).run(py(code, memory_mb=300, timeout_s=4))
    limits, visible, _ = r.stdout.split("\n")
    assert limits.split()[:4] == ["300", "32", "0", "5"]
    assert int(limits.split()[4]) < 10  # a fresh pid namespace
    assert visible == "['group', 'hosts', 'passwd'] False False"
    assert r.exit_code == 1
    assert "Read-only file system" in r.stderr


def test_hardening_seen_from_inside():
    code = ("import os\nstatus = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines())\n"
            "print(status['Seccomp'], status['CapEff'], status['NoNewPrivs'], os.getsid(0) == os.getpid() or "
            "os.getsid(0) != 0)\n"
            "for path in ['/', '/dev', '/etc', '/usr']:\n"
            "    try:\n        open(path + '/x', 'w')\n        print(path, 'WRITABLE')\n"
            "    except OSError as e:\n        print(path, e.errno)\n"
            "import subprocess\nprint(subprocess.run(['df', '-k', '/work', '/tmp', '/dev/shm'], capture_output=True,"
            " text=True).stdout.split()[8:])\n"
            "env = sorted(v.split('=')[0] for v in open('/proc/1/environ').read().split('\\0') if v)\n"
            "print(os.getpid(), env, sorted(os.listdir('/proc/self/fd')))\n")
    r = BwrapSandbox(workspace_mb=8, tmp_mb=4).run(py(code))
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["2", "0000000000000000", "1"] or lines[0].split()[:2] == ["2", "0000000000000000"]
    assert lines[1:5] == ["/ 30", "/dev 30", "/etc 30", "/usr 30"], r.stdout  # EROFS everywhere but /work, /tmp
    sizes = lines[5]
    assert "8192" in sizes, sizes
    assert "4096" in sizes, sizes  # /work and /tmp are capped tmpfs
    # the program is the sandbox's pid 1 (no bwrap init above it), with only its own environment and descriptors
    assert lines[6] == "1 ['HOME', 'LANG', 'PATH', 'PWD'] ['0', '1', '2', '3']", lines[6]


def test_kernel_interfaces_are_closed_by_seccomp():
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "for name, nr in [('keyctl', 250), ('bpf', 321), ('perf_event_open', 298), ('unshare', 272),"
            " ('io_uring_setup', 425), ('mount', 165)]:\n"
            "    rc = libc.syscall(nr, 0, 0, 0, 0, 0)\n"
            "    print(name, rc, ctypes.get_errno())\n")
    r = BwrapSandbox().run(py(code))
    if os.uname().machine != "x86_64":
        pytest.skip("syscall numbers above are x86-64's")
    assert r.stdout.splitlines() == [f"{n} -1 1" for n in ("keyctl", "bpf", "perf_event_open", "unshare",
                                                           "io_uring_setup", "mount")], r.stdout


@pytest.fixture
def workspace_root(tmp_path):
    """A directory bwrap (running as nobody when we are root) can reach: pytest's own tmp dirs are 0700."""
    root = tempfile.mkdtemp(prefix="pt-ws-root-")
    os.chmod(root, 0o711)
    yield Path(root)
    shutil.rmtree(root, ignore_errors=True)


def test_single_runs_leave_nothing_on_disk_and_sessions_clean_up(workspace_root):
    tmp_path = workspace_root
    box = BwrapSandbox(workspace_root=str(tmp_path))
    box.run(py("import os\nos.makedirs('a/b')\nos.chmod('a', 0)\n"))
    box.run(py("import time; time.sleep(10)", timeout_s=0.5))
    assert os.listdir(tmp_path) == []
    session = box.session()
    assert session.run("mkdir -p locked/deeper && touch locked/deeper/f && chmod 0 locked").exit_code == 0
    [workspace] = os.listdir(tmp_path)
    work = tmp_path / workspace / "work"
    assert os.path.ismount(work) == (os.geteuid() == 0)
    assert work.stat().st_mode & 0o077 == 0  # no other host user can list or read the workspace
    box.close()  # closes the session it made
    assert os.listdir(tmp_path) == []


def bwrap_zombies() -> set[int]:
    """Pids of dead bwrap processes of ours (this process's children: other sandboxes may run beside the test) that
    nobody reaped yet."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name, fields = stat.split(" (", 1)[1].rsplit(") ", 1)
        if name == "bwrap" and fields.split()[:2] == ["Z", str(os.getpid())]:
            found.add(int(pid))
    return found


def test_runs_leave_no_zombie_behind():
    before, box = bwrap_zombies(), BwrapSandbox()
    for _ in range(3):
        assert box.run(Execution(files={}, command=["true"], runtime="bash")).ok
    assert bwrap_zombies() - before == set()  # bwrap reaps the sandbox's pid 1 itself (the program, --as-pid-1)


def test_session_workspace_is_size_and_inode_capped(workspace_root):
    if os.geteuid() != 0:
        pytest.skip("the workspace quota is a tmpfs mount, which needs root")
    box = BwrapSandbox(workspace_root=str(workspace_root), workspace_mb=4)
    with box.session() as s:
        r = s.run("head -c 10000000 /dev/zero > big; echo $?; du -k big | cut -f1")
        code, size = r.stdout.split()
        assert code != "0"
        assert int(size) <= 4096
        r = s.run("rm big; mkdir e && cd e && for i in $(seq 2000); do : > $i || break; done; ls | wc -l")
        assert int(r.stdout) < 1030, r  # 4 MB: 1024 inodes, so empty files cannot outgrow the cap


@pytest.mark.skipif(bool(cgroup.limits_unavailable_reason()), reason=cgroup.limits_unavailable_reason() or "-")
def test_one_memory_limit_for_the_whole_execution():
    code = ("import os, time\nfor _ in range(5):\n    if os.fork() == 0:\n        b = bytearray(60 << 20)\n"
            "        b[::4096] = b'x' * len(b[::4096])\n        time.sleep(2)\n        os._exit(0)\n"
            "print(sum(os.wait()[1] == 0 for _ in range(5)))\n")
    box = BwrapSandbox(workspace_mb=8, tmp_mb=8)
    assert box.aggregate_limits == "cgroup"
    r = box.run(py(code, memory_mb=128))  # each child is within its own rlimit; together they are not
    assert r.extra.get("oom_killed"), r
    assert int(r.stdout) <= 2, r
    assert BwrapSandbox(aggregate_limits=False).run(py(code, memory_mb=128)).stdout == "5\n"  # rlimits alone


def test_bash_runtime_resolves_runtimes_inside():
    r = BwrapSandbox().run(Execution(files={"t.sh": "python3 -c 'print(1)'; node -e 'console.log(2)'"},
                                     command=["bash", "t.sh"], runtime="bash"))
    assert r.stdout == "1\n2\n", r
