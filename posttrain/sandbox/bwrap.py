"""The bubblewrap backend: one fresh set of namespaces per execution; no daemon, tens of milliseconds of overhead.

Each execution gets a fresh host temp dir (its files written there), bound read-write at ``/work``. Everything else
is the host's ``/usr`` read-only (plus the ``/bin``, ``/lib``... links or dirs as this host has them), a new
``/proc``, a minimal ``/dev``, a private ``/tmp`` and three generated files in ``/etc`` (passwd, group, hosts):
nothing else of the host's ``/etc``, no ``/home``, ``/root`` or project files. All namespaces are new (user, pid,
net with only its own loopback, ipc, uts, cgroup). As host root, bwrap itself runs as an unprivileged host uid
(``host_uid``), so even an escape lands on ``nobody``.

Limits are set inside the sandbox by ``prlimit`` (so ``RLIMIT_NPROC`` counts only this sandbox's processes):
address space from ``memory_mb``, CPU seconds from the timeout, processes, file size, open files, no core dumps.
The wall-clock deadline kills bwrap's process group; its init (``--die-with-parent``) and so the whole pid namespace
die with it.

Whether the program started is read from bwrap's ``--json-status-fd``: bwrap reports ``exit-code`` only once its
setup finished and the payload ran, so a bwrap failure (missing bind source, no user namespaces) is an
``infra_error``, and no program can fake one by printing "bwrap: ...". (The status fd is visible inside; writing
to it can only claim that the program started, which it then did.)

Example:
    >>> from posttrain.sandbox.bwrap import BwrapSandbox
    >>> from posttrain.sandbox.base import Execution
    >>> box = BwrapSandbox()
    >>> r = box.run(Execution(files={"main.py": "print(6 * 7)"}, command=["python3", "main.py"]))
    >>> r.exit_code, r.stdout, r.infra_error
    (0, '42\\n', '')
"""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

from posttrain.sandbox.base import Execution, ExecutionResult
from posttrain.sandbox.capture import CappedBuffer, feed, pump_fd
from posttrain.sandbox.workspace import (SANDBOX_GID, SANDBOX_UID, WORKDIR, checked_files, chown_tree,
                                         remove_tree, resolve_command, runtime_of, sandbox_env, write_tree)

log = logging.getLogger(__name__)

ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # a link into /usr, or a dir, or absent
STATUS_CAP = 1 << 16  # bwrap writes < 1 KB of status; only a running program can write more
ETC_FILES = {
    "passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}:sandbox:{workdir}:/usr/sbin/nologin\n"
              "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": "root:x:0:\nsandbox:x:{gid}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n",
}
DRAIN_GRACE_S = 5.0  # how long to wait for output pipes to close once the sandbox is gone


class BwrapSandbox:
    """Runs executions under ``bwrap``; thread-safe, one process tree per ``run`` call."""

    name = "bwrap"

    def __init__(self, *, bwrap: str = "/usr/bin/bwrap", prlimit: str = "/usr/bin/prlimit",
                 host_uid: int = 65534, host_gid: int = 65534, max_processes: int = 64,
                 max_open_files: int = 256, max_file_mb: int = 64,
                 extra_ro_binds: Sequence[tuple[str, str]] = (), workspace_root: str | None = None):
        """``host_uid``/``host_gid``: who bwrap runs as when we are root (ignored otherwise).
        ``extra_ro_binds``: (host path, sandbox path) pairs bound read-only, e.g. a Python prefix outside /usr.
        ``workspace_root``: where per-execution temp dirs are made (default: the system temp dir); as root it
        must be searchable by ``host_uid``."""
        self.bwrap, self.prlimit = bwrap, prlimit
        self.host_uid, self.host_gid = host_uid, host_gid
        self.max_processes, self.max_open_files, self.max_file_mb = max_processes, max_open_files, max_file_mb
        self.extra_ro_binds = list(extra_ro_binds)
        self.workspace_root = workspace_root
        self._live: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def run(self, execution: Execution) -> ExecutionResult:
        """Run ``execution`` to completion or its deadline; program failures are results, never exceptions."""
        t0 = time.monotonic()
        try:
            runtime = runtime_of(execution)
            argv = resolve_command(execution)
            files = checked_files(execution.files)
        except ValueError as exc:
            return self._infra(f"invalid execution: {exc}", t0)
        if not os.access(runtime.path, os.X_OK):
            return self._infra(f"runtime {execution.runtime!r}: {runtime.path} is not installed on this host", t0)
        try:
            scratch = Path(tempfile.mkdtemp(prefix="posttrain-sbx-", dir=self.workspace_root))
        except OSError as exc:
            return self._infra(f"cannot make a workspace: {exc}", t0)
        try:
            _write_etc(scratch)
            write_tree(scratch / "work", files)
            if owner := self._owner():
                chown_tree(scratch, *owner)  # bwrap runs as ``owner``; inside, the program's uid maps onto it
            address_space = (execution.memory_mb + runtime.reserve_mb) << 20
            return self._spawn(execution, scratch, sandbox_env(execution), address_space, argv, t0)
        except OSError as exc:
            return self._infra(f"bwrap sandbox failed to start: {exc}", t0)
        finally:
            try:
                remove_tree(scratch)
            except OSError as exc:
                log.warning("could not remove sandbox workspace %s: %s", scratch, exc)

    def close(self) -> None:
        """Kill every sandbox still running (from other threads); later ``run`` calls still work."""
        with self._lock:
            live = list(self._live)
        for proc in live:
            _kill_group(proc)

    def _infra(self, message: str, t0: float) -> ExecutionResult:
        return ExecutionResult(exit_code=None, infra_error=message, start_ms=_ms_since(t0),
                               extra={"backend": self.name})

    def _owner(self) -> tuple[int, int] | None:
        return (self.host_uid, self.host_gid) if os.geteuid() == 0 else None

    def _command(self, scratch: Path, env: dict[str, str], address_space: int, execution: Execution,
                 argv: list[str], status_fd: int) -> list[str]:
        cpu = math.ceil(execution.timeout_s) + 1
        cmd = [self.bwrap, "--json-status-fd", str(status_fd), "--unshare-all", "--unshare-user", "--unshare-cgroup",
               "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--hostname", "sandbox",
               "--new-session", "--die-with-parent", "--clearenv"]
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
        for name in ETC_FILES:
            cmd += ["--ro-bind", str(scratch / name), f"/etc/{name}"]
        cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
                "--bind", str(scratch / "work"), WORKDIR, "--chdir", WORKDIR, "--",
                self.prlimit, f"--as={address_space}", f"--cpu={cpu}:{cpu + 1}", f"--nproc={self.max_processes}",
                f"--fsize={self.max_file_mb << 20}", f"--nofile={self.max_open_files}", "--core=0", "--", *argv]
        return cmd

    def _spawn(self, execution: Execution, scratch: Path, env: dict[str, str], address_space: int,
               argv: list[str], t0: float) -> ExecutionResult:
        """Start bwrap, feed stdin, capture (capped) stdout, stderr and bwrap's status, enforce the deadline."""
        (out_r, out_w), (err_r, err_w), (status_r, status_w) = os.pipe(), os.pipe(), os.pipe()
        cmd = self._command(scratch, env, address_space, execution, argv, status_w)
        owner = self._owner()
        drop = {"user": owner[0], "group": owner[1], "extra_groups": []} if owner else {}
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out_w, stderr=err_w, pass_fds=(status_w,),
                                    start_new_session=True, cwd="/", **drop)
        except OSError:
            for fd in (out_r, err_r, status_r):
                os.close(fd)
            raise
        finally:
            for fd in (out_w, err_w, status_w):
                os.close(fd)
        with self._lock:
            self._live.add(proc)
        t_start = time.monotonic()
        out, err = CappedBuffer(execution.max_output_bytes), CappedBuffer(execution.max_output_bytes)
        status = CappedBuffer(STATUS_CAP)
        pumps = [pump_fd(out_r, out), pump_fd(err_r, err), pump_fd(status_r, status)]
        feed(proc.stdin.write, proc.stdin.close, execution.stdin.encode("utf-8"))
        timed_out = False
        try:
            proc.wait(timeout=execution.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            proc.wait()
        finally:
            with self._lock:
                self._live.discard(proc)
        run_ms = _ms_since(t_start)
        for pump in pumps:
            pump.join(DRAIN_GRACE_S)
        stdout, out_cut = out.result()
        stderr, err_cut = err.result()
        result = ExecutionResult(exit_code=None if timed_out else proc.returncode, stdout=stdout, stderr=stderr,
                                 timed_out=timed_out, output_truncated=out_cut or err_cut,
                                 start_ms=(t_start - t0) * 1000, run_ms=run_ms, extra={"backend": self.name})
        started = b'"exit-code"' in status.getvalue() or status.total > STATUS_CAP
        if not timed_out and not started:
            result.exit_code = None
            result.infra_error = f"bwrap setup failed (exit {proc.returncode}): {stderr.strip()[-2000:]}"
        return result


def _write_etc(scratch: Path) -> None:
    """The only /etc the program sees: who it is (``sandbox``, like in the docker image) and where localhost is."""
    for name, text in ETC_FILES.items():
        (scratch / name).write_text(text.format(uid=SANDBOX_UID, gid=SANDBOX_GID, workdir=WORKDIR))
        os.chmod(scratch / name, 0o644)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL bwrap's process group; the sandbox's init dies with bwrap, and the pid namespace with its init."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _ms_since(t: float) -> float:
    return (time.monotonic() - t) * 1000
