"""The warm bwrap backend against the shared sandbox and session cases, plus what only warm slots have: a fresh
sandbox per execution from a reused slot, privileges dropped inside the fork, slot recovery and replacement."""

from __future__ import annotations

import os
import shutil
import signal

import pytest

from posttrain.sandbox import Execution, cgroup, make_sandbox, run_many
from posttrain.sandbox.warm import WarmBwrapSandbox
from tests.sandbox.cases import (ALLOCATE_100MB, BURN_CPU, SandboxCases, SessionCases, assert_usage, py,
                                 usage_unaccounted)

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")]


@pytest.fixture(scope="module")
def sandbox():
    box = make_sandbox("bwrap-warm")
    yield box
    box.close()


@pytest.fixture(scope="module")
def broken_sandbox():
    """The slot's bwrap fails its own setup (a bind source that does not exist)."""
    box = WarmBwrapSandbox(extra_ro_binds=[("/nonexistent-posttrain-path", "/x")])
    yield box
    box.close()


class TestWarm(SandboxCases, SessionCases):
    pass


def bash(script: str, **kw) -> Execution:
    return Execution(files={}, command=["bash", "-c", script], runtime="bash", **kw)


def test_each_execution_of_a_slot_starts_fresh():
    """One slot, many executions: files, /tmp, /dev/shm, processes and SysV IPC of one are gone for the next."""
    with WarmBwrapSandbox(slots=1) as box:
        dirty = box.run(bash("echo x > /work/left; echo y > /tmp/left; echo z > /dev/shm/left; "
                             "ipcmk -M 4096 >/dev/null; (setsid sleep 60 &) ; echo done", timeout_s=5))
        assert (dirty.exit_code, dirty.stdout) == (0, "done\n"), dirty
        probe = box.run(bash("ls -A /work /tmp /dev/shm; cat /proc/[0-9]*/comm | grep -c '^sleep$'; "
                             "ipcs -m | grep -c '^0x'; echo $$", timeout_s=5))
        assert probe.stdout == "/dev/shm:\n\n/tmp:\n\n/work:\n0\n0\n1\n", probe  # the probe is pid 1


def test_privileges_are_gone_inside_the_fork():
    code = ("import os\nstatus = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines())\n"
            "print(*[status[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs',"
            " 'Seccomp')])\n"
            "print(os.getpid(), os.getuid(), open('/etc/hostname').read() if os.path.exists('/etc/hostname') else "
            "os.uname().nodename, sorted(os.listdir('/proc/self/fd')))\n"
            "import socket\nprint(socket.if_nameindex())\n"
            "for path in ['/', '/usr', '/trusted']:\n"
            "    try:\n        open(path + '/x', 'w')\n        print(path, 'WRITABLE')\n"
            "    except OSError as e:\n        print(path, e.errno)\n")
    with WarmBwrapSandbox(slots=1) as box:
        r = box.run(py(code))
    caps, ident, links, *writes = r.stdout.splitlines()
    assert caps.split() == ["0000000000000000"] * 5 + ["1", "2"], r.stdout
    assert ident == "1 10001 sandbox ['0', '1', '2', '3']", ident
    assert links == "[(1, 'lo')]", links  # a network namespace of its own: loopback only
    assert writes == ["/ 30", "/usr 30", "/trusted 30"], writes


def test_trusted_files_are_read_only_and_unlisted():
    ex = bash("cat /trusted/t/check.sh; ls /trusted 2>&1; echo hack >> /trusted/t/check.sh 2>&1; "
              "chmod 777 /trusted 2>&1; cat /trusted/t/check.sh", trusted_files={"t/check.sh": "exit 0\n"})
    with WarmBwrapSandbox(slots=1) as box:
        r = box.run(ex)
    lines = r.stdout.splitlines()
    assert lines[0] == "exit 0", r.stdout
    assert "Permission denied" in lines[1], r.stdout  # opened by name, never listed
    assert "Read-only file system" in lines[2], r
    assert "Read-only file system" in r.stderr, r  # chmod, append
    assert lines[3:] == ["exit 0"], r.stdout


def test_interpreter_runs_in_the_fork_like_python3():
    """``python3 [-I] script`` runs in the zygote's fork: argv, sys.path, exit codes and atexit as python3's."""
    code = ("import atexit, sys\natexit.register(lambda: print('atexit'))\n"
            "print(sys.argv, sys.path[0] if sys.argv[1] == 'plain' else 'isolated')\n"
            "raise SystemExit(int(sys.argv[2]))\n")
    with WarmBwrapSandbox(slots=1) as box:
        plain = box.run(Execution(files={"main.py": code}, command=["python3", "main.py", "plain", "3"]))
        isolated = box.run(Execution(files={"main.py": code}, command=["python3", "-I", "main.py", "iso", "0"]))
        crash = box.run(py("raise KeyError('k')"))
    assert (plain.exit_code, plain.stdout) == (3, "['main.py', 'plain', '3'] /work\natexit\n"), plain
    assert (isolated.exit_code, isolated.stdout) == (0, "['main.py', 'iso', '0'] isolated\natexit\n"), isolated
    assert crash.exit_code == 1
    assert "KeyError: 'k'" in crash.stderr
    assert "Traceback" in crash.stderr


def test_a_slot_serves_many_executions_and_is_replaced_after_max_uses():
    with WarmBwrapSandbox(slots=1, max_uses=3) as box:
        results = [box.run(py("print(1)")) for _ in range(7)]
        assert [r.stdout for r in results] == ["1\n"] * 7
        assert box._started == 1
        assert len(box._idle) == 1
        assert box._idle[0].uses == 1  # the third slot, used once


def test_a_killed_slot_is_an_infra_error_then_replaced():
    with WarmBwrapSandbox(slots=1) as box:
        assert box.run(py("print(1)")).ok
        [slot] = box._idle
        os.kill(slot.zygote_pid, signal.SIGKILL)
        lost = box.run(py("print(2)"))
        assert lost.exit_code is None, lost
        assert "warm bwrap" in lost.infra_error, lost
        assert box.run(py("print(3)")).stdout == "3\n"


def test_timeouts_and_memory_kills_are_program_outcomes_and_keep_the_slot():
    with WarmBwrapSandbox(slots=1) as box:
        slow = box.run(py("import time\ntime.sleep(30)", timeout_s=0.5))
        assert slow.timed_out, slow
        assert not slow.infra_error, slow
        hog = box.run(py("x = bytearray(400 << 20)", memory_mb=128))
        assert hog.exit_code != 0, hog
        assert not hog.infra_error, hog
        [slot] = box._idle
        assert slot.uses == 2
        assert box.run(py("print(4)")).stdout == "4\n"


@pytest.mark.skipif(bool(cgroup.limits_unavailable_reason()), reason="no cgroups for us on this host")
def test_the_slot_cgroup_caps_many_processes_together():
    """Several processes, each under RLIMIT_AS, together over the execution's memory: the kernel kills them."""
    code = ("import os, time\nfor _ in range(6):\n    if os.fork() == 0:\n"
            "        b = bytearray(100 << 20)\n        time.sleep(2)\n        os._exit(0)\n"
            "print(sorted(os.waitstatus_to_exitcode(os.wait()[1]) for _ in range(6)))\n")
    with WarmBwrapSandbox(slots=1) as box:
        r = box.run(py(code, memory_mb=128, timeout_s=8))
        assert r.extra.get("oom_killed"), r
        assert r.stdout.startswith("[-9"), r  # the kernel killed a hog
        assert box.run(py("print(5)")).stdout == "5\n"


@pytest.mark.skipif(bool(cgroup.limits_unavailable_reason()), reason="no cgroups for us on this host")
def test_an_oom_kill_is_the_programs_outcome_never_the_zygotes():
    """A small program (bash) fills its tmpfs mounts with pages and files, which are in no process's resident set:
    at the cap the OOM killer picks the biggest process it may, the program in its execution's own cgroup (137),
    never the zygote (bigger, and its oom_score_adj cannot be lowered without CAP_SYS_RESOURCE)."""
    fill = ("for d in /work /tmp /dev/shm; do head -c 64M /dev/zero > $d/big; i=0; "
            "while : 2>/dev/null > $d/f$i; do i=$((i+1)); done; done")
    with WarmBwrapSandbox(slots=1) as box:
        assert box.run(py("print(0)")).ok
        [slot] = box._idle
        for _ in range(3):
            r = box.run(bash(fill, memory_mb=16, timeout_s=20))
            assert (r.exit_code, r.infra_error, r.timed_out) == (137, "", False), r
            assert r.extra.get("oom_killed"), r
        assert box.run(py("print(1)")).stdout == "1\n"
        assert box._idle == [slot]
        assert slot.uses == 5


def test_a_full_execution_leaves_nothing_charged_to_the_next():
    """An execution fills its tmpfs mounts (pages and inodes) and exits; the next one, in the same slot, has a far
    smaller memory cap than what the first left charged until its mounts were gone."""
    fill = ("import os\nfor d, mb in (('/work', 60), ('/tmp', 60), ('/dev/shm', 14)):\n"
            "    with open(d + '/big', 'wb') as f:\n        f.write(b'x' * (mb << 20))\n"
            "    try:\n        for i in range(30000):\n            os.close(os.open(f'{d}/f{i}', os.O_CREAT))\n"
            "    except OSError:\n        pass\nprint('full')\n")
    with WarmBwrapSandbox(slots=1) as box:
        for _ in range(3):
            full = box.run(py(fill, memory_mb=256, timeout_s=20))
            assert (full.exit_code, full.stdout, full.infra_error) == (0, "full\n", ""), full
            small = box.run(bash("echo small", memory_mb=16))
            assert (small.exit_code, small.stdout, small.infra_error) == (0, "small\n", ""), small
        assert box._started == 1
        assert box._idle[0].uses == 6


def test_a_reused_slot_reports_each_executions_own_cpu_seconds_and_memory_peak():
    """After 100 MiB and 0.3 CPU seconds in a slot, the next execution there reports its own small figures."""
    with WarmBwrapSandbox(slots=1) as box:
        big, burn, small = (box.run(py(code)) for code in (ALLOCATE_100MB, BURN_CPU, "print(1)"))
        assert box._idle[0].uses == 3  # one slot served all three
    assert_usage(burn, big, small, usage_unaccounted())


def test_writable_mounts_cap_their_inodes():
    """One inode per 4 KB of each writable tmpfs: empty files cannot cost more kernel memory than their size."""
    with WarmBwrapSandbox(slots=1) as box:
        r = box.run(bash("stat -f -c %c /work /tmp /dev/shm"))
    assert r.stdout.split() == [str(box.workspace_mb * 256), str(box.tmp_mb * 256), "4096"], r


def test_slots_run_executions_at_once():
    """Two executions on two slots overlap: each one's sleep is running while the other's is (their own clocks, so a
    busy host that slows both still shows it; one slot after the other would not overlap)."""
    with WarmBwrapSandbox(slots=2) as box:
        results = run_many(box, [py("import time\nprint(time.time())\ntime.sleep(1)\nprint(time.time())")] * 2,
                           concurrency=2)
        (start_a, end_a), (start_b, end_b) = ([float(t) for t in r.stdout.split()] for r in results)
        assert start_a < end_b and start_b < end_a, results
        assert box._started == 2


def test_no_execution_finds_another_in_its_own_memory():
    """A program can read all of its memory (ctypes, /proc/self/mem): the zygote it was forked from never held an
    earlier execution's request, and runs with trusted files are exec'ed, not forked interpreters."""
    secret = "PT-EARLIER-RUN-" + "7" * 24
    # the needle is built at run time (no constant of the code object holds it) and its own bytes are skipped
    scan = ("import sys\nneedle = b'PT-EARLIER-RUN-' + b'7' * len('x' * 24)\n"
            "own = id(needle) + sys.getsizeof(b'') - 1\nfound = 0\n"
            "for line in open('/proc/self/maps').read().splitlines():\n"
            "    addr, perms = line.split()[:2]\n"
            "    if not perms.startswith('r') or '[vsyscall]' in line:\n        continue\n"
            "    lo, hi = (int(x, 16) for x in addr.split('-'))\n"
            "    with open('/proc/self/mem', 'rb') as mem:\n        mem.seek(lo)\n"
            "        try:\n            chunk = mem.read(hi - lo)\n        except OSError:\n            continue\n"
            "    at = chunk.find(needle)\n    while at >= 0:\n        found += lo + at != own\n"
            "        at = chunk.find(needle, at + 1)\n"
            "print(found)\n")
    with WarmBwrapSandbox(slots=1) as box:
        earlier = box.run(Execution(files={"data.txt": secret * 50}, command=["python3", "-c", "pass"],
                                    trusted_files={"t/x": secret}))
        assert earlier.exit_code == 0, earlier
        later = box.run(py(scan, timeout_s=10))
        assert later.stdout == "0\n", later
        own = box.run(py(scan.replace("print(found)", "print(found > 0)"), trusted_files={"t/x": secret}))
        assert own.stdout == "False\n", own  # its own trusted files are not in its memory either


def test_per_process_limits_are_those_of_bwrap():
    """Both bwrap backends take their rlimits from ``workspace.rlimits``: the same numbers inside."""
    code = ("import resource as r\nprint([r.getrlimit(getattr(r, n)) for n in ('RLIMIT_AS', 'RLIMIT_CPU', "
            "'RLIMIT_NOFILE', 'RLIMIT_CORE', 'RLIMIT_FSIZE')])\n")
    with WarmBwrapSandbox(slots=1) as box:
        warm = box.run(py(code, memory_mb=300, timeout_s=4))
    assert warm.stdout == make_sandbox("bwrap").run(py(code, memory_mb=300, timeout_s=4)).stdout != "", warm
    assert "(5, 6)" in warm.stdout  # CPU seconds: the deadline plus one, hard one more
