"""Lifecycle of everything a sandbox creates on the host: who owns it, how it is found again, how it is removed.

Every container and every host workspace directory is tagged with its owner: our pid, that process's start time
(so a recycled pid is not mistaken for us) and the boot id (so owners from before a reboot count as dead).
``reap_containers`` and ``reap_workspaces`` remove what dead owners left behind; the backends call them once per
process before creating anything. Objects that hold resources register with ``track`` and are closed at
interpreter exit; a caller killed outright (SIGKILL) leaves tagged leftovers that the next process reaps.

Host workspaces (bwrap sessions) are size-capped tmpfs mounts when we are root (``mount_tmpfs``), plain
directories otherwise.

Example:
    >>> labels = owner_labels()
    >>> labels["posttrain.sandbox"], labels["posttrain.owner"] == str(os.getpid())
    ('1', True)
    >>> owner_alive(labels)
    True
    >>> owner_alive({**labels, "posttrain.owner": "999999999"})
    False
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import logging
import os
import re
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

log = logging.getLogger(__name__)

LABEL = "posttrain.sandbox"  # every container of ours has LABEL=1
OWNER, OWNER_START, BOOT = "posttrain.owner", "posttrain.owner_start", "posttrain.boot"
WORKSPACE_PREFIX = "posttrain-sbx-"  # host workspace dirs: posttrain-sbx-<pid>-<start>-<random>
_WORKSPACE_NAME = re.compile(rf"^{WORKSPACE_PREFIX}(\d+)-(\d+)-")
MNT_DETACH = 2

_tracked: "weakref.WeakSet" = weakref.WeakSet()
_tracked_lock = threading.Lock()
_reaped: set[str] = set()  # keys already reaped in this process


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def process_start(pid: int) -> str:
    """The start time (clock ticks since boot) of ``pid``, or "" when it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 of stat; fields after the command name start at 3


def owner_labels() -> dict[str, str]:
    """Labels naming this process as the owner of a container."""
    pid = os.getpid()
    return {LABEL: "1", OWNER: str(pid), OWNER_START: process_start(pid), BOOT: boot_id()}


def owner_alive(labels: dict[str, str]) -> bool:
    """Whether the process named by ``labels`` (as made by ``owner_labels``) still runs."""
    if labels.get(BOOT, boot_id()) != boot_id():
        return False
    pid = labels.get(OWNER, "")
    if not pid.isdigit():
        return False
    start = process_start(int(pid))
    return bool(start) and labels.get(OWNER_START, start) == start


def track(resource) -> None:
    """Close ``resource`` (anything with ``close()``) at interpreter exit unless it was closed before."""
    with _tracked_lock:
        _tracked.add(resource)


def _close_tracked() -> None:
    with _tracked_lock:
        resources = list(_tracked)
    for resource in resources:
        try:
            resource.close()
        except Exception as exc:  # noqa: BLE001 - exiting: report and go on with the others
            log.warning("closing %r at exit failed: %s", resource, exc)


atexit.register(_close_tracked)


def once(key: str) -> bool:
    """True the first time ``key`` is seen in this process (used to reap once per daemon / temp dir)."""
    with _tracked_lock:
        if key in _reaped:
            return False
        _reaped.add(key)
        return True


def reap_containers(api) -> int:
    """Remove every posttrain container whose owner process is dead; returns how many were removed."""
    removed = 0
    for info in api.containers(all=True, filters={"label": f"{LABEL}=1"}):
        labels = info.get("Labels") or {}
        if owner_alive(labels):
            continue
        try:
            api.remove_container(info["Id"], force=True)
            removed += 1
        except Exception as exc:  # noqa: BLE001 - already gone, or the daemon refused: the next reaper retries
            log.debug("reaper could not remove container %s: %s", info["Id"][:12], exc)
    if removed:
        log.info("reaped %d sandbox containers left by dead owners", removed)
    return removed


def workspace_dir(root: str | None = None) -> Path:
    """A new host directory for one sandbox workspace, named after its owner (this process)."""
    pid = os.getpid()
    return Path(tempfile.mkdtemp(prefix=f"{WORKSPACE_PREFIX}{pid}-{process_start(pid)}-", dir=root))


def reap_workspaces(root: str | None = None) -> int:
    """Unmount and delete workspace dirs under ``root`` (default: the temp dir) whose owner is dead."""
    root_path = Path(root or tempfile.gettempdir())
    removed = 0
    try:
        entries = list(root_path.iterdir())
    except OSError:
        return 0
    for path in entries:
        match = _WORKSPACE_NAME.match(path.name)
        if not match or not path.is_dir():
            continue
        pid, start = match.groups()
        if process_start(int(pid)) == start:
            continue
        release_workspace(path)
        removed += 1
    return removed


def release_workspace(path: Path) -> None:
    """Unmount (if it is a mount) and delete a workspace directory; symlinks inside are never followed."""
    unmount(path / "work")
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        from posttrain.sandbox.workspace import remove_tree  # handles directories the program made unreadable

        remove_tree(path)


_libc = None


def _lib():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def mount_tmpfs(target: Path, size_mb: int, uid: int, gid: int) -> bool:
    """Mount a tmpfs of ``size_mb`` owned by ``uid``:``gid`` at ``target``; False when not permitted (not root)."""
    if os.geteuid() != 0:
        return False
    # only its owner may look inside; one inode per 4 KB page of the cap, so empty files cannot outgrow it
    opts = f"size={size_mb}m,nr_inodes={size_mb * 256},mode=0700,uid={uid},gid={gid}".encode()
    flags = 0x2 | 0x4  # MS_NOSUID | MS_NODEV (not MS_NOEXEC: workspace scripts must run)
    if _lib().mount(b"tmpfs", str(target).encode(), b"tmpfs", flags, opts) != 0:
        log.warning("cannot mount a tmpfs at %s: %s", target, os.strerror(ctypes.get_errno()))
        return False
    return True


def unmount(target: Path) -> None:
    """Lazily unmount ``target`` if something is mounted there."""
    if os.path.ismount(target):
        if _lib().umount2(str(target).encode(), MNT_DETACH) != 0:
            log.warning("cannot unmount %s: %s", target, os.strerror(ctypes.get_errno()))
