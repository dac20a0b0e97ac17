"""Host uids for sandboxes: as root, each running bwrap execution, session and warm slot, and each Docker container
(``docker/container.py``, root or not), runs as a host uid (and the gid of the same number) that no other one holds
at the same time.

Why: the kernel counts some resources per user, as the uid that created a sandbox's user namespace at the host's
level (its ``ucounts``): inotify instances and watches (``fs.inotify.max_user_*``), POSIX message-queue bytes
(``RLIMIT_MSGQUEUE``), pending signals, ``SHM_LOCK``ed memory. Sandboxes sharing one host uid share those limits:
one that takes every inotify instance makes ``inotify_init`` fail in every other. With a uid each, a program can
exhaust only its own share.

The range: ``sandbox.host_uid_first`` and ``sandbox.host_uids`` (by default 65,536 uids from 1,900,000,000: systemd
leaves 1879048192-2147352575 unassigned, above the subordinate ranges ``useradd`` hands out and below 2^31). No
user, group, ``/etc/subuid`` or ``/etc/subgid`` entry may fall in it (checked once per process: such a user could
signal a sandbox's processes); only the part of it our user namespace maps is used (``/proc/self/uid_map``). Where
it maps none of it (a pod with its own user namespace maps 0-65535), every sandbox runs as ``SHARED_UID`` (65534),
as before, and shares those limits with the others (logged once): set the range to free uids the namespace maps.

Leases hold across threads and processes: a lease is an exclusive ``flock`` on ``<lock_dir>/<uid>`` (root's,
mode 0700, by default ``/run/posttrain-sandbox-uids``; ``user_lock_dir()`` for processes that are not root),
released when the lease is, or by the kernel when its holder dies; every process that starts sandboxes on one kernel
must share the lock directory (containers with separate ``/run`` directories on one host need disjoint ranges
instead). A uid is leased from before its sandbox starts until every process of it is gone (its pid namespace or
cgroup emptied).

Example:
    >>> import tempfile
    >>> pool = UidPool(range(1_900_000_000, 1_900_000_002), lock_dir=tempfile.mkdtemp())
    >>> a, b = pool.lease(), pool.lease()
    >>> (a.uid, a.gid), b.uid
    ((1900000000, 1900000000), 1900000001)
    >>> pool.lease()  # a third at once: the range is exhausted
    Traceback (most recent call last):
    ...
    BlockingIOError: [Errno 11] all 2 host uids from 1900000000 are leased
    >>> a.release()
    >>> with pool.lease() as again:  # the first is free again
    ...     again.uid
    1900000000
    >>> b.release()
"""

from __future__ import annotations

import errno
import fcntl
import functools
import grp
import os
import pwd
import stat
import logging
import threading
from pathlib import Path

from posttrain.config import SandboxConfig

log = logging.getLogger(__name__)

LOCK_DIR = "/run/posttrain-sandbox-uids"
SHARED_UID = 65534  # nobody: every sandbox's uid where the range is not mapped


class UidLease:
    """One host uid, and the gid of the same number, held until ``release()`` (a context manager too)."""

    def __init__(self, uid: int, fd: int):
        self.uid = self.gid = uid
        self._fd, self._lock = fd, threading.Lock()

    def release(self) -> None:
        """Give the uid back (closing the locked file); a second call does nothing."""
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> UidLease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class UidPool:
    """Leases the uids of ``uids`` that our user namespace maps (its uids and gids), one holder at a time each."""

    def __init__(self, uids: range | None = None, lock_dir: str | None = None):
        """``uids``: default ``uid_range()``; ``lock_dir``: default ``user_lock_dir()``."""
        uids = uid_range() if uids is None else uids
        lock_dir = lock_dir or user_lock_dir()
        check_unassigned(uids)
        self.uids = mapped(uids)
        self.lock_dir = Path(lock_dir)
        self._dir_ready = False
        if not self.uids:
            log.warning("sandbox host uids %d-%d: not mapped in our user namespace; every sandbox runs as uid %d "
                        "and shares its per-user kernel limits", uids.start, uids.stop - 1, SHARED_UID)

    def lease(self) -> UidLease:
        """The lowest uid of the range nobody holds (``SHARED_UID``, never exclusive, where none is mapped);
        ``BlockingIOError`` when every one is held, ``OSError`` when the lock directory is not ours alone."""
        if not self.uids:
            return UidLease(SHARED_UID, -1)
        self._ensure_dir()
        for uid in self.uids:
            fd = os.open(self.lock_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            return UidLease(uid, fd)
        raise BlockingIOError(errno.EAGAIN, f"all {len(self.uids)} host uids from {self.uids.start} are leased")

    def _ensure_dir(self) -> None:
        if self._dir_ready:
            return
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(self.lock_dir)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise PermissionError(errno.EPERM, f"{self.lock_dir}: the uid lock directory must be a directory of "
                                               f"ours that no one else may write to")
        self._dir_ready = True


def uid_range(cfg: SandboxConfig | None = None) -> range:
    """The host uids a config gives its sandboxes (``host_uid_first``, ``host_uids``; default: ``SandboxConfig()``'s).

    >>> uid_range(SandboxConfig(host_uid_first=2_000_000_000, host_uids=8))
    range(2000000000, 2000000008)
    """
    cfg = cfg or SandboxConfig()
    return range(cfg.host_uid_first, cfg.host_uid_first + cfg.host_uids)


def user_lock_dir() -> str:
    """``LOCK_DIR`` as root; otherwise a directory of this user's own (under ``$XDG_RUNTIME_DIR``, else
    ``~/.cache``), whose leases hold between this user's processes only.

    >>> user_lock_dir() == LOCK_DIR or user_lock_dir().endswith("/posttrain-sandbox-uids")
    True
    """
    if os.geteuid() == 0:
        return LOCK_DIR
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "posttrain-sandbox-uids")


def mapped(uids: range) -> range:
    """The longest run of ``uids`` (from its start) that our user namespace maps, as uids and as gids; the whole
    range in the host's namespace."""
    end = uids.start
    while end < uids.stop:
        run = min(_mapped_run("uid_map", end), _mapped_run("gid_map", end))
        if run <= 0:
            break
        end = min(uids.stop, end + run)
    return range(uids.start, end)


def _mapped_run(kind: str, first: int) -> int:
    """How many ids from ``first`` on one line of ``/proc/self/<kind>`` maps (0: ``first`` is not mapped)."""
    for line in Path(f"/proc/self/{kind}").read_text().splitlines():
        inside, _, count = map(int, line.split())
        if inside <= first < inside + count:
            return inside + count - first
    return 0


@functools.cache
def check_unassigned(uids: range) -> None:
    """``ValueError`` naming the first user, group or subordinate range of this host inside ``uids``."""
    taken = [f"user {u.pw_name} ({u.pw_uid})" for u in pwd.getpwall() if u.pw_uid in uids]
    taken += [f"group {g.gr_name} ({g.gr_gid})" for g in grp.getgrall() if g.gr_gid in uids]
    for path in ("/etc/subuid", "/etc/subgid"):
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            name, _, rest = line.partition(":")
            start, _, count = rest.partition(":")
            if start.isdigit() and count.isdigit() and int(start) < uids.stop and uids.start < int(start) + int(count):
                taken.append(f"{path} range of {name} ({start}+{count})")
    if taken:
        raise ValueError(f"sandbox.host_uid_first/host_uids: {uids.start}-{uids.stop - 1} holds {taken[0]}; "
                         "sandboxes need host uids nothing else uses")
