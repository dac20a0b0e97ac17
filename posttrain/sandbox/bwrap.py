"""The bubblewrap backend: one fresh set of namespaces per execution; no daemon, a few milliseconds of overhead.

What a program sees: the host's ``/usr`` read-only (plus the ``/bin``, ``/lib``... links or dirs as this host has
them), a new ``/proc``, a minimal read-only ``/dev`` with a small private ``/dev/shm``, a private size-capped
``/tmp``, and three generated files in ``/etc`` (passwd, group, hosts): nothing else of the host's ``/etc``, no
``/home``, ``/root`` or project files. The root itself is read-only. The workspace ``/work`` is a size-capped tmpfs
filled from in-memory files (``--file``), so a single execution leaves nothing on the host disk.
Every namespace is new (user, pid, net with only its own loopback, ipc, uts, cgroup), nested user namespaces are
disabled, the seccomp allow-list both backends share (``seccomp.py``) closes the rest of the kernel, the
environment is cleared, ``--new-session`` detaches the controlling terminal (no ``TIOCSTI``), and
``--die-with-parent`` ties the sandbox to us. As host root, bwrap itself runs as an unprivileged host uid of the
execution's own (``uids.py``: leased from ``host_uids`` while it runs, one per session and warm slot for their
lives), so even an escape lands on nobody, and no concurrent sandbox shares its per-user kernel limits (inotify
instances, message-queue bytes, ...). Not as root, bwrap runs as us, and every sandbox shares our uid's limits.

Limits: each execution gets its own cgroup (``cgroup.py``, where the host allows: root, cgroup v1 or v2) that caps
the whole process tree together: memory (``memory_mb`` plus the sizes of the tmpfs mounts, whose pages and inodes
are charged to it; no swap; past it the kernel OOM-kills, reported as ``extra["oom_killed"]``), tasks, and CPU time
(``cpus`` cores); a long execution's CPU weight drops in it while short ones run (``priority.py``). What the
execution used (CPU seconds, peak memory: ``ExecutionResult.cpu_s``, ``memory_peak_mb``) is read from it before it
is removed, and counts bwrap's own process and the files written to its tmpfs mounts too. Inside the sandbox
``prlimit`` sets per-process limits on top (so ``RLIMIT_NPROC`` counts only this sandbox's processes): address space
from ``memory_mb``, CPU seconds from the timeout, processes, file size, open files, no core dumps. Where cgroups are
unavailable only these per-process limits hold (logged once).
The writable tmpfs mounts (``/work``, ``/tmp``, ``/dev/shm``) cap their inodes as well as their size, one per 4 KB
of it (``tmpfs_inodes``): empty files cost kernel memory (an inode and a dentry, ~1 KB each) that no size cap
counts and a cgroup charges only in part (527,347 of them once took +525 MB of slab through a 256 MB execution).
bwrap's ``--tmpfs`` takes no ``nr_inodes``, so as root each execution's are mounted on the host (``HostMounts``)
and bound in; elsewhere bwrap makes them, capped in size only.
The program itself is the sandbox's pid 1 (``--as-pid-1``): no bwrap init sits above it, so nothing the program
could take over is above or beside a trusted harness, and bwrap reaps it (no zombie is left for the host's pid 1).
The wall-clock deadline SIGKILLs the sandbox's pid 1 (bwrap's child), so the whole namespace, orphans included,
dies with it and bwrap exits; if bwrap lingers, its process group is killed too and pid 1 follows through
``--die-with-parent``. The same holds when a program exits early: its background processes die with the namespace.
``Execution.trusted_files`` are created under ``/trusted`` on the root, which is remounted read-only; ``/trusted``
itself is mode 0111, so its entries can be opened by name but not listed.

Whether the program started is read from bwrap's ``--json-status-fd``: bwrap reports ``exit-code`` only once its
setup finished and the payload ran, so a bwrap failure (missing bind source, no user namespaces) is an
``infra_error``, and no program can fake one by printing "bwrap: ...". The deadline (``timeout_s``) counts from the
program's start, not from bwrap's: the sandbox's first process writes one byte on a pipe of ours, closes it and only
then executes the program (``announce_start``), so a setup slowed by a loaded host (mounts wait on each other, and
on a container engine's) is never charged to the program. A setup that takes ``SETUP_LIMIT_S`` is an ``infra_error``.

Sessions (``session()``) keep their workspace in a host directory bound at ``/work`` instead (mode 0700): a
size- and inode-capped tmpfs mount when we are root, removed on ``close()``; leftovers of a killed owner are
reaped by the next process.

Example:
    >>> from posttrain.sandbox.bwrap import BwrapSandbox
    >>> from posttrain.sandbox.base import Execution
    >>> box = BwrapSandbox()
    >>> r = box.run(Execution(files={"main.py": "print(6 * 7)"}, command=["python3", "main.py"]))
    >>> r.exit_code, r.stdout, r.infra_error
    (0, '42\\n', '')
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import PurePosixPath
from typing import Sequence

from posttrain.sandbox import cgroup, lifecycle, seccomp
from posttrain.sandbox.backend import Prepared, SandboxBackend
from posttrain.sandbox.base import Execution, ExecutionResult, Usage, tmpfs_inodes
from posttrain.sandbox.capture import CappedBuffer, RawRun, pump_pipes
from posttrain.sandbox.session import SandboxSession
from posttrain.sandbox.uids import UidLease, UidPool
from posttrain.sandbox.workspace import (SANDBOX_GID, SANDBOX_UID, TRUSTED_DIR, WORKDIR, memfd, prlimit_args,
                                         resolve_command, runtime_of, sandbox_env)

log = logging.getLogger(__name__)

ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # a link into /usr, or a dir, or absent
STATUS_CAP = 1 << 16  # bwrap writes < 1 KB of status; only a running program can write more
CHILD_PID = re.compile(rb'"child-pid"\s*:\s*(\d+)')  # the sandbox's init, as a host pid
ETC_FILES = {
    "passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}:sandbox:{workdir}:/usr/sbin/nologin\n"
              "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": "root:x:0:\nsandbox:x:{gid}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n",
}
ETC_DATA = {name: text.format(uid=SANDBOX_UID, gid=SANDBOX_GID, workdir=WORKDIR).encode()
            for name, text in ETC_FILES.items()}
MS_NOSUID, MS_NODEV = 2, 4
_libc = ctypes.CDLL(None, use_errno=True)
DRAIN_GRACE_S = 5.0  # how long to wait for output pipes to close once the sandbox is gone
SETUP_LIMIT_S = 60.0  # bwrap's own setup, before the program starts (~30 ms when idle)
SHM_MB = 16


def _supports(bwrap: str, option: str) -> bool:
    try:
        return option in subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False


class BwrapSandbox(SandboxBackend):
    """Runs executions under ``bwrap``; thread-safe, one process tree per ``run`` call."""

    name = "bwrap"

    def __init__(self, *, bwrap: str = "/usr/bin/bwrap", prlimit: str = "/usr/bin/prlimit",
                 host_uids: range | None = None, max_processes: int = 64,
                 max_open_files: int = 256, max_file_mb: int = 64, workspace_mb: int = 64, tmp_mb: int = 64,
                 extra_ro_binds: Sequence[tuple[str, str]] = (), workspace_root: str | None = None,
                 use_seccomp: bool = True, session_output_bytes: int = 16384, cpus: float = 1.0,
                 aggregate_limits: bool = True):
        """``host_uids``: the host uids (and gids) bwrap runs as when we are root, one per sandbox at a time
        (``uids.py``; ignored otherwise); None: ``SandboxConfig``'s default range.
        ``extra_ro_binds``: (host path, sandbox path) pairs bound read-only, e.g. a Python prefix outside /usr.
        ``workspace_root``: where session workspaces are made (default: the system temp dir); as root, every
        directory above it must be searchable by every uid of ``host_uids`` (the workspace itself is made so).
        ``cpus``, ``aggregate_limits``: each execution gets a cgroup capping its memory, tasks and CPU time
        together (``cgroup.py``) where the host allows; elsewhere only the per-process rlimits hold."""
        self.bwrap, self.prlimit = bwrap, prlimit
        self._uids = UidPool(host_uids) if os.geteuid() == 0 else None
        self.max_processes, self.max_open_files, self.max_file_mb = max_processes, max_open_files, max_file_mb
        self.workspace_mb, self.tmp_mb = workspace_mb, tmp_mb
        self.extra_ro_binds = list(extra_ro_binds)
        self.workspace_root = workspace_root
        self.session_output_bytes = session_output_bytes
        self._seccomp = seccomp.program() if use_seccomp else None
        self.cpus = cpus
        self.aggregate_limits = "" if not aggregate_limits else cgroup.limits_unavailable_reason() or "cgroup"
        if aggregate_limits and self.aggregate_limits != "cgroup":
            log.warning("bwrap: no aggregate memory/pids/CPU limit per execution, only per-process rlimits: %s",
                        self.aggregate_limits)
        self._disable_userns = _supports(bwrap, "--disable-userns")
        self._host_mounts = os.geteuid() == 0  # the writable mounts made on the host, inodes capped (HostMounts)
        self._live: dict[subprocess.Popen, CappedBuffer] = {}  # running bwrap -> its status stream
        self._sessions: set[BwrapSession] = set()
        self._held_mounts: set[HostMounts] = set()  # made, not yet released: close() releases what a run left
        self._lock = threading.Lock()
        self._closes = 0  # close() calls so far: a run that started before one and registered after it is killed
        lifecycle.track(self)  # at interpreter exit: kill what still runs, release the mounts its runs hold

    def _prepare(self, execution: Execution) -> Prepared:
        prepared = super()._prepare(execution)
        size = sum(len(content.encode("utf-8")) for _, content in prepared.files)
        if size > self.workspace_mb << 20:
            raise ValueError(f"files: {size} bytes do not fit the {self.workspace_mb} MB workspace")
        return prepared

    def _run(self, execution: Execution, prepared: Prepared, t0: float) -> ExecutionResult:
        """The workspace as a capped tmpfs filled from memfds, then ``spawn``."""
        fds: list[int] = []
        try:
            layout = _tree_args(WORKDIR, prepared.files, fds, "0755", "0644")
            if prepared.trusted_files:  # on the root, which is remounted read-only once the layout is done
                layout += ["--perms", "0111", "--dir", TRUSTED_DIR,
                           *_tree_args(TRUSTED_DIR, prepared.trusted_files, fds, "0555", "0444")]
            return self.spawn(execution, layout, fds, t0, workspace=True).result()
        except OSError as exc:
            return self._infra(f"bwrap sandbox failed to start: {exc}", t0)
        finally:
            for fd in fds:
                os.close(fd)

    def session(self, *, runtime: str = "bash", timeout_s: float = 30.0, memory_mb: int = 512,
                output_bytes: int | None = None) -> "BwrapSession":
        """A stateful session whose workspace lives in a host directory (see ``session.SandboxSession``)."""
        return BwrapSession(self, runtime=runtime, timeout_s=timeout_s, memory_mb=memory_mb,
                            output_bytes=output_bytes or self.session_output_bytes)

    def close(self) -> None:
        """Kill every sandbox still running (from other threads) and close open sessions; later runs still work."""
        with self._lock:
            self._closes += 1
            live, sessions = list(self._live.items()), list(self._sessions)
        for session in sessions:
            session.close()
        for proc, status in live:
            _kill_sandbox(proc, status)
        with self._lock:  # a run's thread releases its mounts when it returns, unless the interpreter exits first
            held = list(self._held_mounts)
        for mounts in held:
            mounts.release()

    # ---- internals shared with sessions -----------------------------------------------------------------------
    def lease_uid(self) -> UidLease | None:
        """The host uid one sandbox (a run, a session, a warm slot) runs as, its own until released (``uids.py``);
        None when we are not root: bwrap then runs as us."""
        return self._uids.lease() if self._uids else None

    def writable_mounts(self) -> dict[str, int]:
        """The writable tmpfs mounts of an execution: sandbox path -> size in MB (inodes: ``tmpfs_inodes``)."""
        return {WORKDIR: self.workspace_mb, "/tmp": self.tmp_mb, "/dev/shm": SHM_MB}

    def memory_cap(self, execution: Execution) -> int:
        """The memory cap of an execution's cgroup, in bytes: ``memory_mb`` plus the sizes of its writable tmpfs
        mounts (its disk, whose pages count as memory)."""
        return (execution.memory_mb + sum(self.writable_mounts().values())) << 20

    def _command(self, execution: Execution, layout: list[str], status_fd: int, started_fd: int, fds: list[int],
                 mounts: HostMounts | None = None) -> list[str]:
        runtime = runtime_of(execution)
        cmd = [*self.root_args(sandbox_env(execution), status_fd, fds, mounts), *layout, "--remount-ro", "/dev",
               "--remount-ro", "/"]
        if self._seccomp is not None:
            fds.append(memfd("seccomp", self._seccomp))
            cmd += ["--seccomp", str(fds[-1])]
        address_space = (execution.memory_mb + runtime.reserve_mb) << 20
        cmd += ["--chdir", WORKDIR, "--", *announce_start(started_fd),
                *prlimit_args(self.prlimit, execution, max_open_files=self.max_open_files,
                              max_file_mb=self.max_file_mb, address_space=address_space,
                              max_processes=self.max_processes),
                "--", *resolve_command(execution)]
        return cmd

    def root_args(self, env: dict[str, str], status_fd: int, fds: list[int],
                  mounts: HostMounts | None = None) -> list[str]:
        """bwrap's flags and the sandbox's root up to the workspace: new namespaces, ``env`` only, the host's
        ``/usr``, generated ``/etc`` files (memfds appended to ``fds``), ``/proc``, ``/dev``, private ``/tmp`` and
        ``/dev/shm`` (``mounts``', else bwrap's own tmpfs)."""
        cmd = [self.bwrap, "--json-status-fd", str(status_fd), "--unshare-all", "--unshare-user", "--unshare-cgroup",
               "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--hostname", "sandbox",
               "--new-session", "--die-with-parent", "--as-pid-1", "--clearenv"]
        if self._disable_userns:
            cmd.append("--disable-userns")
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        cmd += ["--ro-bind", "/usr", "/usr"]
        for path in ROOT_LINKS:
            if os.path.islink(path):
                cmd += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                cmd += ["--ro-bind", path, path]
        for source, dest in self.extra_ro_binds:
            cmd += ["--ro-bind", source, dest]
        cmd += ["--dir", "/etc"]
        for name, data in ETC_DATA.items():
            fds.append(memfd(name, data))
            cmd += ["--perms", "0644", "--ro-bind-data", str(fds[-1]), f"/etc/{name}"]
        cmd += ["--proc", "/proc", "--dev", "/dev"]
        if mounts:
            return cmd + mounts.bind_args(["/dev/shm", "/tmp"])
        return cmd + ["--size", str(SHM_MB << 20), "--tmpfs", "/dev/shm",
                      "--size", str(self.tmp_mb << 20), "--perms", "1777", "--tmpfs", "/tmp"]

    def spawn(self, execution: Execution, layout: list[str], fds: list[int], t0: float,
              stdin: bytes | None = None, track: set | None = None, workspace: bool = False,
              lease: UidLease | None = None) -> RawRun:
        """Start bwrap, feed stdin, capture (capped) stdout, stderr and bwrap's status, enforce the deadline.
        ``workspace``: mount a fresh tmpfs at ``/work`` before ``layout`` (else ``layout`` puts something there).
        ``lease``: the host uid to run as (a session's); by default one is leased for this run alone."""
        if missing := runtime_missing(execution):
            return RawRun(exit_code=None, stdout=CappedBuffer(0), stderr=CappedBuffer(0), start_ms=_ms_since(t0),
                          infra_error=missing, extra={"backend": self.name})
        fds = list(fds)
        own_fds: list[int] = []
        try:
            own_lease = None if lease else self.lease_uid()
        except OSError as exc:
            return RawRun(exit_code=None, stdout=CappedBuffer(0), stderr=CappedBuffer(0), start_ms=_ms_since(t0),
                          infra_error=f"no host uid for the execution: {exc}", extra={"backend": self.name})
        lease = lease or own_lease
        owner = (lease.uid, lease.gid) if lease else None
        try:
            group = self._group(execution)
        except OSError as exc:
            if own_lease:
                own_lease.release()
            return RawRun(exit_code=None, stdout=CappedBuffer(0), stderr=CappedBuffer(0), start_ms=_ms_since(t0),
                          infra_error=f"cannot make the execution's cgroup: {exc}", extra={"backend": self.name})
        try:
            mounts = self._mounts([WORKDIR, "/tmp", "/dev/shm"] if workspace else ["/tmp", "/dev/shm"], owner)
        except OSError as exc:
            if group:
                self._drop_group(execution, group)
            if own_lease:
                own_lease.release()
            return RawRun(exit_code=None, stdout=CappedBuffer(0), stderr=CappedBuffer(0), start_ms=_ms_since(t0),
                          infra_error=f"cannot make the execution's tmpfs mounts: {exc}",
                          extra={"backend": self.name})
        if workspace:
            layout = [*(mounts.bind_args([WORKDIR]) if mounts else
                        ["--size", str(self.workspace_mb << 20), "--perms", "0755", "--tmpfs", WORKDIR]), *layout]
        (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
        (status_r, status_w), (started_r, started_w) = os.pipe(), os.pipe()
        with self._lock:
            closes = self._closes
        try:
            cmd = self._command(execution, layout, status_w, started_w, own_fds, mounts)
            drop = {"user": owner[0], "group": owner[1], "extra_groups": []} if owner and not group else {}
            if group:  # bwrap and all it starts are in the group from the first instruction; setpriv drops root
                cmd = group.join_command(cmd, user=owner)
            # env={}: bwrap's own processes must not carry our environment; the program's comes from --setenv
            # after --clearenv.
            proc = subprocess.Popen(cmd, stdin=in_r, stdout=out_w, stderr=err_w, env={},
                                    pass_fds=(status_w, started_w, *fds, *own_fds), start_new_session=True, cwd="/",
                                    **drop)
        except BaseException:
            for fd in (in_w, out_r, err_r, status_r, started_r):
                os.close(fd)
            if group:
                self._drop_group(execution, group)
            if mounts:
                mounts.release()
            if own_lease:
                own_lease.release()
            raise
        finally:
            for fd in (in_r, out_w, err_w, status_w, started_w, *own_fds):
                os.close(fd)
        t_spawned = time.monotonic()
        out, err = CappedBuffer(execution.max_output_bytes), CappedBuffer(execution.max_output_bytes)
        status, started = CappedBuffer(STATUS_CAP), CappedBuffer(1)
        with self._lock:
            self._live[proc] = status
            if track is not None:
                track.add(proc)
            closed_meanwhile = self._closes != closes
        if closed_meanwhile:  # close() ran while bwrap started, before it was in _live: it missed this one
            _kill_sandbox(proc, status, wait=False)
        data = execution.stdin.encode("utf-8") if stdin is None else stdin
        timed_out = False
        try:  # one thread does it all: feed stdin, read the three pipes to EOF (they close when the sandbox is gone)
            timed_out = pump_pipes([(out_r, out), (err_r, err), (status_r, status), (started_r, started)], in_w, data,
                                   lambda: (started.first_byte_at + execution.timeout_s if started.total
                                            else t_spawned + SETUP_LIMIT_S),
                                   lambda: _kill_sandbox(proc, status, wait=False), DRAIN_GRACE_S)
            try:
                proc.wait(timeout=DRAIN_GRACE_S)
            except subprocess.TimeoutExpired:
                pass  # killed below
        finally:
            if proc.returncode is None:  # an exception in this thread, or bwrap outlived its pipes
                _kill_sandbox(proc, status)
            with self._lock:
                self._live.pop(proc, None)
                if track is not None:
                    track.discard(proc)
            oom_killed = group is not None and group.oom_killed()
            usage = group.usage() if group else Usage()  # bwrap has exited, and its sandbox with it
            if group:
                self._drop_group(execution, group)
            if mounts:
                mounts.release()
            if own_lease:  # bwrap has exited, and the cgroup (where there is one) is empty
                own_lease.release()
        t_program = started.first_byte_at or time.monotonic()
        raw = RawRun(exit_code=proc.returncode, stdout=out, stderr=err, timed_out=timed_out,
                     start_ms=(t_program - t0) * 1000, run_ms=_ms_since(t_program), extra={"backend": self.name},
                     usage=usage)
        if oom_killed:
            raw.extra["oom_killed"] = True
        if timed_out and not started.total:
            raw.timed_out, raw.exit_code = False, None
            raw.infra_error = f"bwrap setup did not finish in {SETUP_LIMIT_S:g} s; the program never started"
        elif not timed_out and not (b'"exit-code"' in status.getvalue() or status.total > STATUS_CAP):
            if oom_killed:  # the kernel killed bwrap itself for the program's memory: the program's outcome
                raw.exit_code = 128 + signal.SIGKILL
            else:
                raw.infra_error = f"bwrap setup failed (exit {proc.returncode}): {err.result()[0].strip()[-2000:]}"
        return raw

    def _group(self, execution: Execution) -> cgroup.ExecutionGroup | None:
        """The execution's cgroup, or None where the host has none for us; its memory cap is ``memory_cap``;
        bwrap's own process outside the sandbox is one more task. A long execution's CPU priority weights it from
        now on (``priority.py``) until ``_drop_group``."""
        if self.aggregate_limits != "cgroup":
            return None
        group = cgroup.ExecutionGroup.create(self.memory_cap(execution), self.max_processes + 1, self.cpus)
        if execution.priority is not None:
            execution.priority.attach(group)
        return group

    @staticmethod
    def _drop_group(execution: Execution, group: cgroup.ExecutionGroup) -> None:
        """Remove the execution's cgroup (made by ``_group``), out of its CPU priority's hands first."""
        if execution.priority is not None:
            execution.priority.detach(group)
        group.remove()

    def _mounts(self, paths: list[str], owner: tuple[int, int] | None) -> HostMounts | None:
        """The execution's writable mounts at ``paths``, made on the host (owned by ``owner``) with their inodes
        capped; None where we cannot mount (not root, or the host refuses: then bwrap makes them, size-capped only;
        logged once)."""
        if not self._host_mounts or owner is None:
            return None
        try:
            return HostMounts(self, paths, owner)
        except PermissionError as exc:
            self._host_mounts = False
            log.warning("bwrap: cannot mount tmpfs on the host (%s); the sandbox's writable mounts cap their size, "
                        "not their inodes", exc)
            return None


class HostMounts:
    """The writable tmpfs mounts of one execution, made on the host (as root) so that they cap their inodes too.

    A directory of ours (``lifecycle.workspace_dir``: named after us, reaped with the session workspaces when we
    died) holds a small root-owned tmpfs ``work`` with one tmpfs per sandbox path in it, owned by bwrap's user
    (``owner``, the execution's host uid and gid), capped at its size and ``tmpfs_inodes`` of it; bwrap binds each
    at its path. ``release()`` detaches them all at once (a lazy unmount of ``work``) and removes the directory."""

    NAMES = {WORKDIR: ("work", 0o755), "/tmp": ("tmp", 0o1777), "/dev/shm": ("shm", 0o1777)}

    def __init__(self, box: BwrapSandbox, paths: list[str], owner: tuple[int, int]):
        if lifecycle.once(f"workspaces:{box.workspace_root}"):
            lifecycle.reap_workspaces(box.workspace_root)
        self.box, self.released, self._releasing = box, False, threading.Lock()
        self.root = lifecycle.workspace_dir(box.workspace_root)
        self.base = self.root / "work"
        with box._lock:
            box._held_mounts.add(self)
        try:
            self.base.mkdir(mode=0o711)
            _mount_tmpfs(self.base, 64 << 10, 16, 0o711, 0, 0)
            sizes = box.writable_mounts()
            for path in paths:
                name, mode = self.NAMES[path]
                (self.base / name).mkdir()
                _mount_tmpfs(self.base / name, sizes[path] << 20, tmpfs_inodes(sizes[path]), mode, *owner)
            os.chmod(self.root, 0o711)  # bwrap (as the owner) must reach the mounts, nothing more
        except BaseException:
            self.release()
            raise

    def bind_args(self, paths: list[str]) -> list[str]:
        """bwrap options that bind the mounts of ``paths`` at those paths."""
        return [arg for path in paths for arg in ("--bind", str(self.base / self.NAMES[path][0]), path)]

    def release(self) -> None:
        """Detach the mounts and remove the directory. Once: a second call (the run's own and ``close()``'s at exit)
        waits for the first to finish, so that the interpreter does not exit in the middle of it."""
        with self._releasing:
            if self.released:
                return
            lifecycle.release_workspace(self.root)
            self.released = True
        with self.box._lock:
            self.box._held_mounts.discard(self)


def _mount_tmpfs(target: PurePosixPath, size_bytes: int, inodes: int, mode: int, uid: int, gid: int) -> None:
    options = f"size={size_bytes},nr_inodes={inodes},mode={mode:o},uid={uid},gid={gid}".encode()
    if _libc.mount(b"tmpfs", str(target).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount tmpfs at {target}: {os.strerror(errno)}")


class BwrapSession(SandboxSession):
    """A bwrap session: the workspace is a host directory (tmpfs when root) bound at ``/work`` in every step; every
    step runs as the session's own host uid (leased for its life)."""

    backend = "bwrap"

    def __init__(self, box: BwrapSandbox, **kw):
        from posttrain.sandbox.scheduler import default_scheduler

        super().__init__(workspace_mb=box.workspace_mb, scheduler=default_scheduler(), **kw)
        self.box = box
        self._running: set[subprocess.Popen] = set()
        if lifecycle.once(f"workspaces:{box.workspace_root}"):
            lifecycle.reap_workspaces(box.workspace_root)
        self.lease = box.lease_uid()
        try:
            self.root = lifecycle.workspace_dir(box.workspace_root)
        except BaseException:
            if self.lease:
                self.lease.release()
            raise
        self.work = self.root / "work"
        try:
            self.work.mkdir(mode=0o700)  # no other host user may read the workspace
            owner = (self.lease.uid, self.lease.gid) if self.lease else None
            self.quota = owner is not None and lifecycle.mount_tmpfs(self.work, box.workspace_mb, *owner)
            if owner and not self.quota:
                os.chown(self.work, *owner)
            if owner:
                os.chmod(self.root, 0o711)  # bwrap (as the session's uid) must reach the workspace, nothing more
        except BaseException:
            lifecycle.release_workspace(self.root)
            if self.lease:
                self.lease.release()
            raise
        with box._lock:
            box._sessions.add(self)
        lifecycle.track(self)

    def _exec(self, execution: Execution, stdin: bytes, trusted: bool = False) -> RawRun:
        os.chmod(self.work, 0o700)  # a step may have locked /work (chmod 000): bwrap must chdir into it again
        return self.box.spawn(execution, ["--bind", str(self.work), WORKDIR], [], time.monotonic(), stdin=stdin,
                              track=self._running, lease=self.lease)

    def _release(self) -> None:
        with self.box._lock:
            self.box._sessions.discard(self)
            running = [(proc, self.box._live.get(proc, CappedBuffer(0))) for proc in self._running]
        for proc, status in running:
            _kill_sandbox(proc, status)
        lifecycle.release_workspace(self.root)
        if self.lease:
            self.lease.release()


def announce_start(fd: int) -> list[str]:
    """The sandbox's first process: write one byte on ``fd`` (a pipe to us), close it, execute the rest of the command
    with the environment it was given (bash's ``exec`` exports ``SHLVL``, hence ``env -u``; dash, which would not,
    takes no fd above 9).

    >>> announce_start(19)
    ['/bin/bash', '-c', 'printf . >&19 && exec 19>&- && exec /usr/bin/env -u SHLVL "$@"', 'start']
    """
    return ["/bin/bash", "-c", f'printf . >&{fd} && exec {fd}>&- && exec /usr/bin/env -u SHLVL "$@"', "start"]


def _tree_args(root: str, files: list[tuple[str, str]], fds: list[int], dir_perms: str, file_perms: str) -> list[str]:
    """bwrap options that create ``files`` (checked names) under ``root`` from memfds (appended to ``fds``)."""
    args: list[str] = []
    made: set[str] = set()
    for name, content in files:
        for parent in reversed(PurePosixPath(name).parents[:-1]):
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", dir_perms, "--dir", f"{root}/{parent}"]
        fds.append(memfd("file", content.encode("utf-8")))
        args += ["--perms", file_perms, "--file", str(fds[-1]), f"{root}/{name}"]
    return args


def runtime_missing(execution: Execution) -> str:
    """Why the execution's interpreter cannot run on this host (its binds come from the host's /usr); "" if it can."""
    runtime = runtime_of(execution)
    if os.access(runtime.path, os.X_OK):
        return ""
    return f"runtime {execution.runtime!r}: {runtime.path} is not installed on this host"


def _kill_sandbox(proc: subprocess.Popen, status: CappedBuffer, wait: bool = True) -> None:
    """Kill the sandbox's init first (its pid namespace, and so every process in it, dies with it) and let bwrap
    reap it and exit; only if bwrap lingers, kill bwrap's process group too. Killing bwrap first would orphan its
    init to the host's pid 1 for reaping. ``wait=False``: signal only (the caller drains the pipes, then waits)."""
    match = CHILD_PID.search(status.getvalue())
    if match:
        try:
            os.kill(int(match.group(1)), signal.SIGKILL)
            if not wait:
                return
            proc.wait(timeout=2.0)
            return
        except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
            pass
    _kill_group(proc)
    if wait:
        proc.wait()


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL bwrap's process group; the sandbox's init dies with bwrap, and the pid namespace with its init."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _ms_since(t: float) -> float:
    return (time.monotonic() - t) * 1000

