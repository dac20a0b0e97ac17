"""The warm bwrap backend: bubblewrap slots whose zygote forks one fresh sandbox per execution, in milliseconds.

A plain ``bwrap`` run pays, for every execution, a bwrap start, a cgroup to make and join, and an interpreter start
(~30-40 ms here). A warm slot pays them once: it is one long-lived bwrap sandbox, in one cgroup of its own, whose
pid 1 is the trusted zygote (``posttrain/trusted/zygote.py``), a Python with the usual modules imported. For each
execution the zygote forks, and the fork builds what a plain bwrap run has, new: mount, pid, net (loopback only),
ipc and uts namespaces, capped tmpfs ``/work`` (the files), ``/tmp`` and ``/dev/shm``, a read-only ``/trusted``,
its own ``/proc``; the program is the pid 1 of its pid namespace, with no capability, no_new_privs, the shared
seccomp filter and the per-process rlimits, and ``python3 [-I] script.py`` runs in the forked interpreter itself.
When it ends its namespaces and tmpfs mounts are gone (the slot replies only then), so no execution sees another's
files or processes; a slot runs one execution at a time.

Cgroups (where the host has them, ``cgroup.py``): the slot's group caps its tasks; inside it, bwrap, the zygote and
the executor sit in a ``zygote`` group of their own, and each execution gets a fresh group beside it, joined by
the program before it runs anything, that caps its memory (as a plain ``bwrap`` run's: ``memory_mb`` plus its
tmpfs mounts), tasks and CPU. So an OOM kill during a run picks among the execution's own processes, never the
zygote (whose ``oom_score_adj`` cannot be lowered without CAP_SYS_RESOURCE), and is the program's outcome (exit
137, ``extra["oom_killed"]``); and no execution inherits a cap, or memory still charged, from the one before. The
zygote's group caps no memory: it runs trusted code only, and the files it writes for a run are bounded by the
workspace size (which is all the program could rewrite there without a charge of its own). A long execution's CPU
weight is lowered on the slot's group while short ones run (``priority.py``): weights count among sibling groups,
and the slots' groups are the siblings; the slot gets its own weight back before it serves again.
What an execution used (``cpu_s``, ``memory_peak_mb``) is its own group's, read before the group is removed (a
reused slot's next execution starts from zero): the CPU time and the memory the program charged from the moment it
joined. Not in it: the pages it shares with the zygote until it writes them (copy on write), the files the executor
wrote into its workspace before it started, and the executor's own work.

What differs from ``bwrap``: the program's interpreter is the zygote's fork (``sys.flags`` are those of
``python3 -I``; the modules the zygote imported are already in ``sys.modules``); ``/proc/1/cmdline`` of an
in-process program is the zygote's. Sessions are plain ``bwrap`` sessions (``BwrapSandbox.session``).

The deadline is kept inside the slot by the trusted fork that waits for the program (out of the program's reach:
another pid namespace); if a slot stays silent ``HOST_GRACE_S`` past it, the host kills the slot (an infra
error) and starts another. Slots start on demand up to ``slots`` (one long-lived thread starts them all, since
``--die-with-parent`` follows the thread that started bwrap), are replaced after ``max_uses`` executions, and are
stopped by ``close()``. As root, each slot runs as a host uid of its own (``uids.py``), leased from its start until
it is gone: the slot's executions (one at a time) share it, concurrent ones in other slots never do.

Example:
    >>> from posttrain.sandbox.warm import WarmBwrapSandbox
    >>> from posttrain.sandbox.base import Execution
    >>> with WarmBwrapSandbox(slots=1) as box:
    ...     r = box.run(Execution(files={"main.py": "print(6 * 7)"}, command=["python3", "main.py"]))
    >>> r.exit_code, r.stdout, r.infra_error
    (0, '42\\n', '')
"""

from __future__ import annotations

import json
import logging
import os
import queue
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future

from posttrain import trusted
from posttrain.sandbox import cgroup
from posttrain.sandbox.backend import Prepared
from posttrain.sandbox.base import Execution, ExecutionResult, SandboxStartError, tmpfs_inodes
from posttrain.sandbox.bwrap import CHILD_PID, BwrapSandbox, _kill_group, _ms_since, runtime_missing
from posttrain.sandbox.capture import CappedBuffer, RawRun, pump_pipes
from posttrain.sandbox.priority import weighted
from posttrain.sandbox.uids import UidLease
from posttrain.sandbox.workspace import BASE_ENV, RUNTIMES, TRUSTED_DIR, WORKDIR, memfd, rlimits, runtime_of

log = logging.getLogger(__name__)

ZYGOTE = trusted.source("zygote")
ZYGOTE_CAPS = ("CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SETPCAP")  # in the slot's own user namespace only
START_TIMEOUT_S = 20.0
HOST_GRACE_S = 2.0  # a slot silent this long past an execution's deadline is killed
TRUSTED_MB = 16  # the read-only /trusted tmpfs of a run with trusted files
# Run first, as us: where we may (CAP_SYS_RESOURCE), the zygote is not the pick of a host-wide OOM kill either.
# Elsewhere the write fails and the slot starts anyway.
PROTECT = 'echo -1000 > /proc/self/oom_score_adj 2>/dev/null; exec "$@"'


class WarmBwrapSandbox(BwrapSandbox):
    """``bwrap`` isolation per execution from warm slots; thread-safe, at most ``slots`` executions at once."""

    name = "bwrap-warm"

    def __init__(self, *, slots: int = 4, max_uses: int = 1000, **bwrap_options):
        """``slots``: slots (and so executions in flight) at most, started on demand; ``max_uses``: executions a
        slot serves before it is replaced; ``bwrap_options``: as ``BwrapSandbox`` (limits, binds, cgroups)."""
        super().__init__(**bwrap_options)
        if slots < 1:
            raise ValueError(f"slots={slots}: must be at least 1")
        self.max_slots, self.max_uses = slots, max_uses
        self._idle: list[Slot] = []
        self._started = 0  # slots alive or starting
        self._slots_cond = threading.Condition()
        self._spawner: _Spawner | None = None

    def _run(self, execution: Execution, prepared: Prepared, t0: float) -> ExecutionResult:
        if missing := runtime_missing(execution):
            return self._infra(missing, t0)
        try:
            slot = self._acquire()
        except (OSError, SandboxStartError) as exc:
            return self._infra(f"warm bwrap slot failed to start: {exc}", t0)
        healthy = False
        try:
            with weighted(execution.priority, slot.group):  # the slot's: weights count among the slots' groups
                raw = slot.run(execution, prepared, t0)
            healthy = slot.healthy()
        finally:
            self._release(slot, healthy)
        return raw.result()

    def _acquire(self) -> Slot:
        with self._slots_cond:
            while not self._idle and self._started >= self.max_slots:
                self._slots_cond.wait()
            if self._idle:
                return self._idle.pop()
            self._started += 1
            if self._spawner is None:
                self._spawner = _Spawner()
            spawner = self._spawner
        try:
            return spawner.call(lambda: Slot.start(self))
        except BaseException:
            with self._slots_cond:
                self._started -= 1
                self._slots_cond.notify()
            raise

    def _release(self, slot: Slot, healthy: bool) -> None:
        keep = healthy and slot.uses < self.max_uses
        if not keep:
            slot.close()
        with self._slots_cond:
            if keep:
                self._idle.append(slot)
            else:
                self._started -= 1
            self._slots_cond.notify()

    def close(self) -> None:
        """Stop the idle slots (busy ones stop when their execution returns) and sessions; later runs still work."""
        with self._slots_cond:
            idle, self._idle = self._idle, []
            self._started -= len(idle)
            spawner, self._spawner = (self._spawner, None) if self._started == 0 else (None, self._spawner)
            self._slots_cond.notify_all()
        for slot in idle:
            slot.close()
        if spawner is not None:
            spawner.stop()
        super().close()

    # ---- what a slot needs from its sandbox -------------------------------------------------------------------
    def zygote_command(self, status_fd: int, socket_fd: int, fds: list[int]) -> list[str]:
        """bwrap running the zygote (its source on stdin) as pid 1 of a slot, with the socket at ``socket_fd``."""
        caps = [arg for cap in ZYGOTE_CAPS for arg in ("--cap-add", cap)]
        return [*self.root_args(dict(BASE_ENV), status_fd, fds), "--dir", WORKDIR, "--dir", TRUSTED_DIR,
                "--remount-ro", "/dev", "--remount-ro", "/", *caps, "--chdir", "/", "--",
                RUNTIMES["python"].path, "-I", "-", str(socket_fd)]

    def request(self, execution: Execution, prepared: Prepared) -> dict:
        """What the zygote needs to build and run one execution (sent as JSON in a memfd)."""
        limits = rlimits(execution, max_open_files=self.max_open_files, max_file_mb=self.max_file_mb,
                         address_space=(execution.memory_mb + runtime_of(execution).reserve_mb) << 20,
                         max_processes=self.max_processes + 2)  # + the zygote and the executor, same uid
        mounts = {**self.writable_mounts(), TRUSTED_DIR: TRUSTED_MB}  # path -> [bytes, inodes]
        return {"files": prepared.files, "trusted_files": prepared.trusted_files, "argv": prepared.argv,
                "env": prepared.env, "python": RUNTIMES["python"].path, "timeout_s": execution.timeout_s,
                "rlimits": limits, "mounts": {path: [mb << 20, tmpfs_inodes(mb)] for path, mb in mounts.items()}}


class Slot:
    """One warm sandbox: bwrap + zygote in their own cgroup, serving one execution at a time."""

    def __init__(self, box: WarmBwrapSandbox, proc: subprocess.Popen, sock: socket.socket,
                 group: cgroup.ExecutionGroup | None, zygote_pid: int, lease: UidLease | None = None):
        self.box, self.proc, self.sock, self.group, self.lease = box, proc, sock, group, lease
        self.zygote_pid = zygote_pid  # the host pid of the slot's pid 1
        self.uses = 0
        self.broken = ""

    @classmethod
    def start(cls, box: WarmBwrapSandbox) -> Slot:
        """Start bwrap and the zygote, hand it the seccomp filter, wait until it is ready; ``SandboxStartError``."""
        group = zygote_group = None
        lease = box.lease_uid()  # an OSError: the caller's infra error
        if box.aggregate_limits == "cgroup":
            # each execution's tasks + bwrap, the zygote and the executor, which are in the zygote's group; the
            # executions' groups (memory, tasks, CPU) are made for each one (``run``)
            try:
                group = cgroup.ExecutionGroup.create(None, box.max_processes + 3, None)
                zygote_group = group.nest(name="zygote")
            except OSError:
                if group:
                    group.remove()
                if lease:
                    lease.release()
                raise
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        status_r, status_w = os.pipe()
        fds: list[int] = []
        log_file = tempfile.TemporaryFile()
        proc = None
        try:
            cmd = box.zygote_command(status_w, theirs.fileno(), fds)
            owner = (lease.uid, lease.gid) if lease else None
            drop = {"user": owner[0], "group": owner[1], "extra_groups": []} if owner and not group else {}
            if zygote_group:
                cmd = zygote_group.join_command(cmd, user=owner)
            cmd = ["/bin/sh", "-c", PROTECT, "sh", *cmd]
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log_file, env={},
                                    pass_fds=(status_w, theirs.fileno(), *fds), start_new_session=True, cwd="/",
                                    **drop)
            os.close(status_w)
            status_w = -1
            theirs.close()
            proc.stdin.write(ZYGOTE.encode())
            proc.stdin.close()
            zygote_pid = _child_pid(status_r, proc)
            config = memfd("zygote-config", json.dumps({"seccomp_hex": (box._seccomp or b"").hex()}).encode())
            try:
                socket.send_fds(ours, [b"config"], [config])
            finally:
                os.close(config)
            ours.settimeout(START_TIMEOUT_S)
            reply = ours.recv(4096)
            if reply != b'{"ready": true}':
                raise SandboxStartError(f"zygote did not start: {reply[:200]!r}; {_tail(log_file)}")
            ours.settimeout(None)
            return cls(box, proc, ours, group, zygote_pid, lease)
        except (OSError, SandboxStartError) as exc:
            ours.close()
            if proc is not None:
                _kill(proc)
            if group:
                group.remove()
            if lease:
                lease.release()
            if isinstance(exc, SandboxStartError):
                raise
            raise SandboxStartError(f"{exc}; {_tail(log_file)}") from exc
        finally:
            for fd in (status_r, status_w, *fds):
                if fd >= 0:
                    os.close(fd)
            if not theirs._closed:
                theirs.close()
            log_file.close()

    def run(self, execution: Execution, prepared: Prepared, t0: float) -> RawRun:
        """One execution in this slot: its request and stdio to the zygote, its output and verdict back."""
        self.uses += 1
        out, err = CappedBuffer(execution.max_output_bytes), CappedBuffer(execution.max_output_bytes)
        extra = {"backend": self.box.name}
        try:
            run_group = self.group.nest(self.box.memory_cap(execution), self.box.max_processes, self.box.cpus) \
                if self.group else None
        except OSError as exc:
            return RawRun(None, out, err, infra_error=f"cannot make the execution's cgroup: {exc}",
                          start_ms=_ms_since(t0), extra=extra)
        try:
            raw = self._run(execution, prepared, t0, run_group, out, err, extra)
            if run_group:
                raw.usage = run_group.usage()  # the execution's own: its group is new, and empty by now
            return raw
        finally:
            if run_group:
                run_group.remove()  # empty by now: the program's pid namespace is gone with the executor

    def _run(self, execution: Execution, prepared: Prepared, t0: float, run_group: cgroup.ExecutionGroup | None,
             out: CappedBuffer, err: CappedBuffer, extra: dict) -> RawRun:
        (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
        request, joins = -1, []
        try:
            # the program joins its group through these (opened here, as us: the slot cannot open them itself)
            for path in run_group.procs_files() if run_group else []:
                joins.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
            request = memfd("request", json.dumps(self.box.request(execution, prepared)).encode())
            socket.send_fds(self.sock, [b"run"], [request, in_r, out_w, err_w, *joins])
        except OSError as exc:
            for fd in (in_w, out_r, err_r):
                os.close(fd)
            self.broken = f"cannot hand the execution to the slot: {exc}"
            return RawRun(None, out, err, infra_error=f"warm bwrap slot failed: {self.broken}",
                          start_ms=_ms_since(t0), extra=extra)
        finally:
            for fd in (request, in_r, out_w, err_w, *joins):
                if fd >= 0:
                    os.close(fd)
        t_start = time.monotonic()
        deadline = t_start + execution.timeout_s + HOST_GRACE_S
        hung = pump_pipes([(out_r, out), (err_r, err)], in_w, execution.stdin.encode("utf-8"), lambda: deadline,
                          self.kill)
        reply = self._reply(deadline)
        raw = RawRun(None, out, err, start_ms=(t_start - t0) * 1000, run_ms=_ms_since(t_start), extra=extra)
        if hung or reply is None:
            self.broken = self.broken or f"the slot stayed silent {HOST_GRACE_S:.0f} s past the deadline"
            raw.infra_error = f"warm bwrap slot failed: {self.broken}"
        elif reply.get("setup_error"):
            raw.infra_error = f"warm bwrap sandbox setup failed: {reply['setup_error'][-2000:]}"
        else:
            raw.exit_code, raw.timed_out = reply["exit_code"], bool(reply["timed_out"])
        if run_group and run_group.oom_killed():
            raw.extra["oom_killed"] = True
        return raw

    def _reply(self, deadline: float) -> dict | None:
        """The executor's JSON verdict, or None (the slot is broken) if none comes by ``deadline`` or what comes is
        no verdict: the parse is bounded (one 64 KiB message) and caught, nesting too deep included."""
        try:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            reply = json.loads(data) if data else None
        except (OSError, ValueError, RecursionError) as exc:
            self.broken = f"no verdict from the slot: {type(exc).__name__}: {exc}"
            return None
        finally:
            try:
                self.sock.settimeout(None)
            except OSError:
                pass
        if reply is not None and not _is_verdict(reply):
            self.broken = f"no verdict from the slot: {data[:200]!r}"
            return None
        return reply

    def healthy(self) -> bool:
        return not self.broken and self.proc.poll() is None

    def kill(self) -> None:
        """Kill the whole slot (its pid 1, so every process in it), e.g. when it hangs past a deadline."""
        self.broken = self.broken or "killed"
        try:
            os.kill(self.zygote_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.group:
            self.group.kill(timeout_s=2.0)

    def close(self) -> None:
        """Stop the slot: the zygote exits when its socket closes; whatever is left is killed, the cgroup removed,
        and then the slot's host uid given back."""
        self.sock.close()
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.kill()
            _kill(self.proc)
        if self.group:
            self.group.remove()
        if self.lease:
            self.lease.release()


class _Spawner:
    """One long-lived thread that starts every slot: bwrap's ``--die-with-parent`` fires when the *thread* that
    started it ends, and the scheduler's threads end with their job."""

    def __init__(self):
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="bwrap-warm-spawner", daemon=True)
        self._thread.start()

    def call(self, fn):
        future: Future = Future()
        self._jobs.put((fn, future))
        return future.result()

    def stop(self) -> None:
        self._jobs.put(None)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future = job
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                future.set_exception(exc)


def _is_verdict(reply: object) -> bool:
    """Whether ``reply`` is a verdict the executor writes (``trusted/zygote.py``): a setup error, or an exit code
    (None when it timed out) and whether it timed out."""
    if not isinstance(reply, dict):
        return False
    if reply.get("setup_error"):
        return isinstance(reply["setup_error"], str)
    code = reply.get("exit_code")
    return isinstance(reply.get("timed_out"), bool) and (code is None or type(code) is int)


def _child_pid(status_r: int, proc: subprocess.Popen) -> int:
    """The host pid of the sandbox's pid 1, from bwrap's JSON status (written once its setup is done)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    data = b""
    while (match := CHILD_PID.search(data)) is None:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SandboxStartError(f"bwrap did not start the zygote (exit {proc.poll()})")
        if select.select([status_r], [], [], 0.1)[0]:
            chunk = os.read(status_r, 4096)
            if not chunk:
                raise SandboxStartError(f"bwrap setup failed (exit {proc.wait(timeout=5)})")
            data += chunk
    return int(match.group(1))


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the slot's bwrap process group and wait for it (a bounded wait: logged if it outlives it)."""
    _kill_group(proc)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        log.warning("bwrap %d survives SIGKILL", proc.pid)


def _tail(log_file) -> str:
    try:
        log_file.seek(0)
        return log_file.read()[-2000:].decode("utf-8", "replace").strip()
    except (OSError, ValueError):
        return ""
