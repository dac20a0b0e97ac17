"""Stateful sandbox sessions for multi-step agents: one workspace kept between steps, snapshots, a step log.

A session owns one workspace (``/work`` inside the sandbox). Each ``run`` is a fresh program in that workspace
with the session's limits and a deadline; processes never outlive their step, and ``/tmp`` is fresh per step:
only ``/work`` carries state. ``write_file``/``read_file`` work *inside* the sandbox (a symlink the program
planted resolves in the sandbox's namespace, never on the host; ``write_file`` refuses to write through anything but a
regular file, so a FIFO planted at a path never blocks the caller); ``snapshot()`` captures the workspace as a tar
taken inside the sandbox (sparse files stay sparse; what the program made unreadable to itself is given back its
owner's ``u+rwX`` first, so ordinary ``chmod``s never fail it) and ``restore(snapshot)`` puts that content back.
An operation that fails raises ``SessionError``, whose ``infra_error`` says whether the sandbox failed the step
(non-empty: infrastructure) or the operation itself was refused or failed (a path or argument no program can take,
a missing file, a workspace over its size): the caller's outcome. Every operation is one ``StepLog`` entry
(command, exit code, duration, bytes of output, truncated and timed-out flags, CPU seconds and peak memory) in
``log``; output is cut to ``output_bytes`` per stream with ``base.truncate``'s marker. Steps go through the
process-wide scheduler, so sessions share its concurrency limit with batches (long steps take long slots, and yield
the CPU to short work: ``priority.py``).

Backends subclass ``SandboxSession`` and implement ``_exec`` (run argv in the workspace, return a ``RawRun``) and
``_release``. Get one from a backend: ``make_sandbox("bwrap").session()`` or ``make_sandbox("docker").session()``.

Example:
    >>> from posttrain.sandbox import make_sandbox
    >>> with make_sandbox("bwrap").session(timeout_s=10) as s:
    ...     s.write_file("notes.txt", "v1")
    ...     snap = s.snapshot()
    ...     r = s.run("echo v2 > notes.txt && cat notes.txt")
    ...     s.restore(snap)
    ...     (r.stdout, s.read_file("notes.txt"), [step.kind for step in s.log])
    ('v2\\n', 'v1', ['write', 'snapshot', 'run', 'restore', 'read'])
"""

from __future__ import annotations

import itertools
import logging
import shlex
import threading
import time
from dataclasses import dataclass, replace
from typing import Sequence

from posttrain.sandbox.base import Execution, ExecutionResult, SandboxStartError, Usage
from posttrain.sandbox.capture import CappedBuffer, RawRun
from posttrain.sandbox.workspace import WORKDIR, check_execution, checked_files

log = logging.getLogger(__name__)

TAR, SH = "/usr/bin/tar", "/bin/sh"
# Empty the workspace (also what the program made unwritable or hidden), then unpack the snapshot from stdin.
RESTORE = (f"chmod -R u+rwX {WORKDIR} 2>/dev/null; "
           f"rm -rf {WORKDIR}/* {WORKDIR}/.[!.]* {WORKDIR}/..?* && {TAR} -x -C {WORKDIR} -f -")
# Create or replace a regular file; never write through a FIFO, device, socket or directory (a FIFO would block).
WRITE = ('if [ -e "$1" ] && [ ! -f "$1" ]; then echo "$1: exists and is not a regular file" >&2; exit 1; fi; '
         'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"')
# Everything the program made unreadable is readable again by its owner, then the workspace as a sparse-aware tar.
SNAPSHOT = f"chmod -R u+rwX {WORKDIR} 2>/dev/null; exec {TAR} -c --sparse -C {WORKDIR} ."
PATH_MAX = 4095  # bytes of a path a program can open (Linux PATH_MAX, less its NUL)
_ids = itertools.count(1)


class SessionError(RuntimeError):
    """A session operation (run, write, read, snapshot, restore) failed; ``result`` says how.

    ``infra_error``: non-empty when the sandbox failed (the step could not start, the session is closed); "" when
    the operation was refused before it started or ran and failed: the caller's outcome, never infrastructure."""

    def __init__(self, message: str, result: ExecutionResult | None = None, infra_error: str | None = None):
        super().__init__(message)
        self.result = result
        self.infra_error = (result.infra_error if result is not None else "") if infra_error is None else infra_error


@dataclass
class StepLog:
    """One logged session operation."""

    index: int
    kind: str  # run | write | read | snapshot | restore
    command: str
    exit_code: int | None
    duration_ms: float
    stdout_bytes: int  # bytes the program wrote, before truncation
    stderr_bytes: int
    truncated: bool
    timed_out: bool = False
    infra_error: str = ""
    cpu_s: float | None = None  # the step's CPU seconds and peak memory (``ExecutionResult``); None: not accounted
    memory_peak_mb: float | None = None

    @property
    def usage(self) -> Usage:
        return Usage(self.cpu_s, self.memory_peak_mb)


@dataclass(frozen=True)
class Snapshot:
    """The whole workspace at one moment: a tar made inside the sandbox."""

    id: int
    data: bytes
    step: int  # how many steps the session had logged when it was taken

    @property
    def size(self) -> int:
        return len(self.data)


class SandboxSession:
    """A workspace that lives across steps. Subclasses implement ``_exec`` and ``_release``."""

    backend = "session"

    def __init__(self, *, runtime: str = "bash", timeout_s: float = 30.0, memory_mb: int = 512,
                 output_bytes: int = 16384, workspace_mb: int = 64, scheduler=None):
        self.runtime, self.timeout_s, self.memory_mb = runtime, timeout_s, memory_mb
        self.output_bytes, self.workspace_bytes = output_bytes, workspace_mb << 20
        self.log: list[StepLog] = []
        self.closed = False
        self._scheduler = scheduler
        self._lock = threading.Lock()  # one step at a time
        self._state_lock = threading.Lock()  # guards ``closed``; never held while a step runs

    # ---- what agents call -------------------------------------------------------------------------------------
    def run(self, command: str | Sequence[str], *, stdin: str = "", timeout_s: float | None = None,
            runtime: str | None = None) -> ExecutionResult:
        """Run ``command`` (a string goes to ``bash -c``) in the workspace; output cut to ``output_bytes``."""
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        execution = Execution(files={}, command=argv, timeout_s=timeout_s or self.timeout_s,
                              memory_mb=self.memory_mb, runtime=runtime or ("bash" if isinstance(command, str)
                                                                            else self.runtime),
                              max_output_bytes=self.output_bytes, stdin=stdin)
        try:
            check_execution(execution)  # refused before the step starts, like a single run
        except ValueError as exc:
            raise SessionError(f"run(): {exc}") from None
        return self._step("run", execution, stdin.encode("utf-8")).result()

    def write_file(self, path: str, content: str | bytes) -> None:
        """Create or replace ``path`` (relative to the workspace) with ``content``; parents are created."""
        name = self._path(path)
        try:
            data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        except UnicodeEncodeError as exc:
            raise SessionError(f"write_file({path!r}): content not encodable as UTF-8 ({exc.reason})") from None
        raw = self._step("write", self._execution([SH, "-c", WRITE, "write", name], 1024), data, label=name)
        self._check(raw, f"write_file({path!r})")

    def read_file(self, path: str, max_bytes: int | None = None) -> str:
        """The text of ``path`` (relative to the workspace), cut at ``max_bytes`` (default: the output budget)."""
        name = self._path(path)
        limit = max_bytes or self.output_bytes
        raw = self._step("read", self._execution(["/bin/cat", "--", name], limit), b"", label=name)
        self._check(raw, f"read_file({path!r})")
        return raw.stdout.result()[0]

    def snapshot(self) -> Snapshot:
        """Capture the workspace; ``restore`` brings exactly this content back."""
        raw = self._step("snapshot", self._execution([SH, "-c", SNAPSHOT], self.workspace_bytes * 2), b"")
        self._check(raw, "snapshot()")
        if raw.stdout.total > raw.stdout.limit:
            raise SessionError(f"snapshot(): workspace archive over {raw.stdout.limit} bytes")
        return Snapshot(id=next(_ids), data=raw.stdout.getvalue(), step=len(self.log))

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the workspace with ``snapshot``'s content (files the later steps made are gone)."""
        raw = self._step("restore", self._execution([SH, "-c", RESTORE], 4096), snapshot.data,
                         label=f"snapshot {snapshot.id}")
        self._check(raw, f"restore(snapshot {snapshot.id})")

    def close(self) -> None:
        """Give the workspace back (its content is destroyed); a step still running is killed; idempotent."""
        with self._state_lock:
            if self.closed:
                return
            self.closed = True
        self._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- backend hooks ----------------------------------------------------------------------------------------
    def _exec(self, execution: Execution, stdin: bytes, trusted: bool) -> RawRun:  # pragma: no cover - abstract
        """Run ``execution`` in the workspace with ``stdin``; ``trusted``: one of our own tools, not the agent's."""
        raise NotImplementedError

    def _release(self) -> None:  # pragma: no cover - abstract
        """Kill a step still running, destroy the workspace, give back what the session holds."""
        raise NotImplementedError

    # ---- internals --------------------------------------------------------------------------------------------
    def _execution(self, argv: list[str], output_bytes: int) -> Execution:
        return Execution(files={}, command=argv, timeout_s=self.timeout_s, memory_mb=self.memory_mb,
                         runtime="bash", max_output_bytes=output_bytes)

    @staticmethod
    def _path(path: str) -> str:
        """``path`` normalized; ``SessionError`` (not infra) for a name no program could open in the workspace."""
        try:
            [(name, _)] = checked_files({path: ""})
        except ValueError as exc:
            raise SessionError(str(exc)) from None
        try:
            size = len(name.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise SessionError(f"path {path!r}: not UTF-8 text ({exc.reason} at index {exc.start})") from None
        if size > PATH_MAX:
            raise SessionError(f"path {path[:40]!r}...: {size} bytes, over the {PATH_MAX} a path may have")
        return name

    def _step(self, kind: str, execution: Execution, stdin: bytes, label: str = "") -> RawRun:
        with self._lock:
            if self.closed:
                raise SessionError("the session is closed", infra_error="the session is closed")
            t0 = time.monotonic()
            if self._scheduler is not None:
                raw = self._scheduler.call(lambda priority: self._guarded(replace(execution, priority=priority),
                                                                          stdin, kind != "run"),
                                           timeout_s=execution.timeout_s, tier=execution.tier, infra=_infra_run)
            else:
                raw = self._guarded(execution, stdin, kind != "run")
            entry = StepLog(index=len(self.log), kind=kind,
                            command=shlex.join(execution.command) if kind == "run" else (label or kind),
                            exit_code=None if raw.timed_out or raw.infra_error else raw.exit_code,
                            duration_ms=(time.monotonic() - t0) * 1000,
                            stdout_bytes=raw.stdout.total, stderr_bytes=raw.stderr.total,
                            truncated=raw.stdout.total > raw.stdout.limit or raw.stderr.total > raw.stderr.limit,
                            timed_out=raw.timed_out, infra_error=raw.infra_error, cpu_s=raw.usage.cpu_s,
                            memory_peak_mb=raw.usage.memory_peak_mb)
            self.log.append(entry)
            log.debug("session %s step %d: %s", self.backend, entry.index, entry)
            return raw

    def _guarded(self, execution: Execution, stdin: bytes, trusted: bool) -> RawRun:
        try:
            return self._exec(execution, stdin, trusted)
        except (SandboxStartError, OSError) as exc:
            return _infra_run(f"{self.backend} session step failed: {type(exc).__name__}: {exc}")

    @staticmethod
    def _check(raw: RawRun, what: str) -> None:
        if raw.infra_error or raw.timed_out or raw.exit_code != 0:
            result = raw.result()
            why = result.infra_error or ("timed out" if result.timed_out else
                                         f"exit {result.exit_code}: {result.stderr.strip()[-300:]}")
            raise SessionError(f"{what} failed: {why}", result)


def _infra_run(message: str) -> RawRun:
    return RawRun(exit_code=None, stdout=CappedBuffer(0), stderr=CappedBuffer(0), infra_error=message)
