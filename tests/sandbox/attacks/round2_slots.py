"""Warm slots and tmpfs inodes (issue 22, findings 11, 12 and 14): a program that fills the sandbox's tmpfs mounts
with empty files (no pages, only inodes and dentries: kernel memory), or leaves them full for the next execution.
Registered in ``ATTACKS`` like the attacks of ``attack_programs.py``; whatever happens is the program's outcome (its
exit status, OOM-kill included), never an infra error, and the backend's next executions still run.

- ``empty_files_fill_the_tmpfs_mounts``: before, a warm slot's OOM killer picked the zygote ("slot stayed silent",
  excluded, the slot destroyed) and plain bwrap let 527,347 empty files (+525 MB of slab) through a 256 MB
  execution (here, as root on cgroup v1, plain bwrap was OOM-killed at ~400 MB of charged slab instead). The
  mounts now cap their inodes (``nr_inodes``; Docker's too, whose mounts had no cap), and a warm execution has a
  cgroup of its own.
- ``a_small_program_fills_every_mount_at_a_small_memory_cap``: tmpfs pages and inodes are in no resident set,
  so at the slot's cap the OOM killer picked the zygote (biggest) over a small bash program.
- ``a_full_tmpfs_does_not_fail_the_next_smaller_execution``: before, a warm slot replied while the first
  execution's full mounts were still charged to it, and the next one's lower memory cap failed (``EBUSY``).
"""

from __future__ import annotations

import os

from posttrain.sandbox import Execution
from tests.sandbox.attacks.attack_programs import HEADER, attack

# Empty files on every writable mount until the mount (or the memory) refuses: kernel memory only.
EMPTY_FILES = HEADER + '''import time
count, refused, end = 0, [], time.monotonic() + 15
for mount in ("/tmp", "/dev/shm", "/work"):
    try:
        while time.monotonic() < end:
            os.close(os.open("%s/f%d" % (mount, count), os.O_CREAT | os.O_WRONLY, 0o644))
            count += 1
    except OSError as error:
        refused.append("%s:%s" % (mount, error.errno))
print("files", count, *refused, flush=True)
'''
# One inode per 4 KB of each writable mount's size: /work 64 MB, /tmp 64 MB, /dev/shm 16 MB (and root dirs).
INODE_BOUND = (64 + 64 + 16) * 256 + 64


def inodes_capped(box) -> bool:
    """Whether the backend's writable mounts cap their inodes: warm slots and Docker always, plain bwrap as root."""
    return box.name in ("bwrap-warm", "docker") or (box.name == "bwrap" and os.geteuid() == 0)


def files_made(r) -> int:
    return int(r.stdout.split()[1]) if r.stdout.startswith("files") else 0


def exec_python(host, code: str, **kw) -> Execution:
    """``code`` run by an exec'ed ``python3 -c`` (a small process: in a warm slot, not the zygote's fork)."""
    return Execution(files={"main.py": code}, command=["python3", "-c", "exec(open('main.py').read())",
                                                      *host.argv()], **kw)


@attack("empty_files_fill_the_tmpfs_mounts", "resources")
def empty_files_fill_the_tmpfs_mounts(box, host):
    for execution in (host.execution(EMPTY_FILES, memory_mb=256, timeout_s=20),
                      exec_python(host, EMPTY_FILES, memory_mb=256, timeout_s=20)):
        r = box.run(execution)
        assert not r.infra_error, r
        assert not r.timed_out, r
        if inodes_capped(box):  # refused by the mounts' inode caps (ENOSPC), long before the memory cap
            assert r.exit_code == 0, r
            assert files_made(r) <= INODE_BOUND, r
            assert r.stdout.count(":28") == 3, r
        else:  # plain bwrap not as root: killed for its memory (137), or refused
            assert r.exit_code in (0, 137), r
        assert box.run(host.execution("print('next')")).stdout == "next\n"  # the same slot serves the next one


# Every writable mount filled with pages, then with empty files, by a small program (bash, a few MB resident) with
# little memory of its own: at the cap the OOM killer picks the biggest process it may, which must be one of the
# execution's (in a warm slot it picked the zygote).
FILL_ALL = ("for d in /work /tmp /dev/shm; do head -c 64M /dev/zero > $d/big 2>/dev/null; i=0; "
            "while : 2>/dev/null > $d/f$i; do i=$((i+1)); [ $i -ge 200000 ] && break; done; echo $d $i; done")


@attack("a_small_program_fills_every_mount_at_a_small_memory_cap", "resources")
def a_small_program_fills_every_mount_at_a_small_memory_cap(box, host):
    for memory_mb in (16, 64):
        r = box.run(Execution(files={}, command=["bash", "-c", FILL_ALL, *host.argv()], runtime="bash",
                              memory_mb=memory_mb, timeout_s=20))
        assert not r.infra_error, r
        assert not r.timed_out, r  # killed (137) or refused (ENOSPC): its own outcome
        assert box.run(host.execution("print('next')")).stdout == "next\n"


# Fills /work, /tmp and /dev/shm (pages and inodes) and exits at once, leaving them full.
FULL = HEADER + '''block = b"x" * (1 << 20)
for mount, mb in (("/work", 60), ("/tmp", 60), ("/dev/shm", 14)):
    try:
        with open(mount + "/big", "wb") as handle:
            for _ in range(mb):
                handle.write(block)
    except OSError:
        pass
    count = 0
    try:
        while count < 200000:
            os.close(os.open("%s/f%d" % (mount, count), os.O_CREAT | os.O_WRONLY, 0o644))
            count += 1
    except OSError:
        pass
print("full", flush=True)
'''


@attack("a_full_tmpfs_does_not_fail_the_next_smaller_execution", "lifecycle")
def a_full_tmpfs_does_not_fail_the_next_smaller_execution(box, host):
    for _ in range(3):
        full = box.run(host.execution(FULL, memory_mb=256, timeout_s=20))
        assert not full.infra_error, full
        assert not full.timed_out, full
        small = box.run(host.execution("print('small')", memory_mb=32, timeout_s=5))
        assert (small.exit_code, small.stdout, small.infra_error) == (0, "small\n", ""), small
