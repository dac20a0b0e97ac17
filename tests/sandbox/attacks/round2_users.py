"""Per-user kernel limits between concurrent executions (issue 22, finding 15). Registered in ``ATTACKS`` like the
attacks of ``attack_programs.py``; each runs on every backend of the suite.

The kernel counts some resources per user (its ``ucounts``): inotify instances (``fs.inotify.max_user_instances``,
128 here) and POSIX message-queue bytes (``RLIMIT_MSGQUEUE``, 800 KB) among them. A sandbox's user namespace is
counted at every level up to the host's, as the uid that created it: when every sandbox ran as one host uid
(65534), one execution that took every inotify instance, or filled the queue bytes, made ``inotify_init`` or
``mq_open`` fail with ``EMFILE`` in every concurrent sandbox (and in every host process of that uid). As root each
bwrap execution and each warm slot now runs as a host uid of its own (``uids.UidPool``), and so does each Docker
container (``docker.container.lease_uid``).

- ``inotify_instances_are_not_shared``: before, the bystander was refused (``EMFILE``) on every backend;
- ``message_queue_bytes_are_not_shared``: likewise for ``mq_open``;
- ``a_lock_on_a_read_only_system_file_is_not_seen_by_another_execution``: ``flock`` needs read access only, so
  distinct uids do not close this channel: bwrap and warm slots bind the host's ``/usr``, whose inodes every
  sandbox (and the host) shares, an expected failure there; Docker's image files are inodes of each container's own
  overlay mount, and it holds.

Docker runs containers in the host's user namespace (dockerd without userns-remap), where the programs' uid is the
host's: when every container's programs ran as uid 10001, the bystander was refused 40 times of 40 there too.
"""

from __future__ import annotations

import pytest

from posttrain.sandbox import Execution, run_many
from tests.sandbox.attacks.attack_programs import HEADER, attack

HOLD_S = 6.0  # how long the attacker holds what it took: the bystander probes meanwhile
# Takes a per-user resource (``take()``: a new fd, or None once refused) until the kernel refuses, in children that
# each stop at their own fd limit or at the per-user one, and holds it all. Prints what it took and whether the
# per-user limit (not a per-process one) is what stopped it.
HOARD = HEADER + '''import ctypes, resource, time
libc = ctypes.CDLL(None, use_errno=True)
nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
{take}
total, user_limit, pipe_r, pipe_w = 0, False, *os.pipe()
for _ in range(40):
    if os.fork() == 0:
        count = 0
        while take() is not None:
            count += 1
        os.write(pipe_w, b"%d %d\\n" % (count, ctypes.get_errno()))
        time.sleep({hold})
        os._exit(0)
    count, error = map(int, os.read(pipe_r, 64).split())
    total += count
    if count < nofile - 16:  # refused before this child ran out of fds: the per-user limit
        user_limit = error
        break
print("took", total, "user limit", user_limit, flush=True)
time.sleep({hold})
'''
# Probes the same resource every 0.1 s while the attacker holds it (giving each back at once): refused how often.
PROBE = '''import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
{take}
time.sleep(1.0)
tries, refused, end = 0, [], time.monotonic() + {probe}
while time.monotonic() < end:
    tries += 1
    fd = take()
    if fd is None:
        refused.append(ctypes.get_errno())
    else:
        os.close(fd)
    time.sleep(0.1)
print("tries", tries, "refused", len(refused), sorted(set(refused)), flush=True)
'''
INOTIFY = '''def take():
    fd = libc.inotify_init()
    return fd if fd >= 0 else None
'''
# The attacker's queues take ~80 KB of the user's 800 KB each (10 messages of 8 KB), then ever smaller ones fill the
# rest; the probe's takes a few hundred bytes (one message of 64 bytes), more than the smallest the attacker left.
MQUEUE = '''class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
serial = [0]
def take(sizes={sizes}):
    for maxmsg, msgsize in sizes:
        serial[0] += 1
        name = b"/q-%d-%d" % (os.getpid(), serial[0])
        fd = libc.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(Attr(0, maxmsg, msgsize, 0)))
        if fd >= 0:
            libc.mq_unlink(name)  # the queue lives on while its fd is open
            return fd
    return None
'''


def _hoard_and_probe(box, host, take_attacker: str, take_probe: str, what: str) -> None:
    attacker = host.execution(HOARD.format(take=take_attacker, hold=HOLD_S), timeout_s=HOLD_S + 10)
    bystander = Execution(files={"probe.py": PROBE.format(take=take_probe, probe=HOLD_S - 2)},
                          command=["python3", "probe.py"], timeout_s=HOLD_S + 10)
    hoarder, probe = run_many(box, [attacker, bystander], concurrency=2)
    assert hoarder.exit_code == 0, hoarder
    assert not hoarder.infra_error, hoarder
    assert probe.exit_code == 0, probe
    assert not probe.infra_error, probe
    assert " user limit 24" in hoarder.stdout, hoarder  # EMFILE: the attacker did exhaust its user's share
    tries, refused = int(probe.stdout.split()[1]), int(probe.stdout.split()[3])
    assert tries > 10, probe
    assert refused == 0, (what, hoarder.stdout, probe.stdout)  # a concurrent execution keeps its own share


@attack("inotify_instances_are_not_shared", "isolation")
def inotify_instances_are_not_shared(box, host):
    _hoard_and_probe(box, host, INOTIFY, INOTIFY, "inotify instances")


@attack("message_queue_bytes_are_not_shared", "isolation")
def message_queue_bytes_are_not_shared(box, host):
    _hoard_and_probe(box, host, MQUEUE.format(sizes=[(10, 8192), (1, 8192), (1, 512), (1, 64), (1, 1)]),
                     MQUEUE.format(sizes=[(1, 64)]),
                     "POSIX message-queue bytes")


# Holds an exclusive flock on a read-only file of the system (read access is all flock needs) for HOLD_S seconds.
LOCK = HEADER + '''import fcntl, time
handle = open("/usr/bin/python3", "rb")
fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked", flush=True)
time.sleep({hold})
'''
# Tries the same lock every 0.1 s while the other holds it (letting go at once): found it taken how often.
TRY_LOCK = '''import fcntl, time
time.sleep(1.0)
tries, taken, end = 0, 0, time.monotonic() + {probe}
while time.monotonic() < end:
    tries += 1
    with open("/usr/bin/python3", "rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            taken += 1
    time.sleep(0.1)
print("tries", tries, "taken", taken, flush=True)
'''


@attack("a_lock_on_a_read_only_system_file_is_not_seen_by_another_execution", "isolation")
def lock_on_a_read_only_system_file(box, host):
    holder = host.execution(LOCK.format(hold=HOLD_S), timeout_s=HOLD_S + 10)
    bystander = Execution(files={"try.py": TRY_LOCK.format(probe=HOLD_S - 2)}, command=["python3", "try.py"],
                          timeout_s=HOLD_S + 10)
    held, probe = run_many(box, [holder, bystander], concurrency=2)
    assert held.stdout == "locked\n", (held, probe)
    assert probe.exit_code == 0, (held, probe)
    tries, taken = int(probe.stdout.split()[1]), int(probe.stdout.split()[3])
    assert tries > 10, probe
    if taken and box.name.startswith("bwrap"):
        pytest.xfail("bwrap binds the host's /usr: every sandbox locks the same inodes (a covert channel that "
                     f"distinct uids cannot close; docs/sandboxes.md): {probe.stdout.strip()}")
    assert taken == 0, probe.stdout  # docker: the image's files are inodes of each container's own overlay mount
