"""The Sandbox protocol: run one untrusted program with files, limits and a deadline; report what happened.

A backend never interprets the program's output: it reports exit code, captured (truncated) streams, whether the
deadline killed it, and whether the sandbox itself failed (``infra_error``). Verifiers decide verdicts. Results also
say where the time went: ``queue_ms`` (waiting for a scheduler slot), ``start_ms`` (the backend getting an isolated
environment ready), ``run_ms`` (the program), and what the program used by its cgroup's account: ``cpu_s`` (CPU
seconds, user + system, of all its processes) and ``memory_peak_mb`` (the most memory they held at once), None
where the backend cannot account it (``Usage``; what each backend measures: docs/sandboxes.md). Backends that keep
state for agents also offer ``session()`` (``session.py``); every concrete backend is a context manager that closes
itself.

Example:
    >>> from posttrain.sandbox import make_sandbox, Execution
    >>> box = make_sandbox("bwrap")                                  # doctest: +SKIP
    >>> r = box.run(Execution(files={"main.py": "print(6*7)"}, command=["python3", "main.py"]))  # doctest: +SKIP
    >>> r.exit_code, r.stdout                                        # doctest: +SKIP
    (0, '42\\n')
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from posttrain.sandbox.priority import CpuPriority


@dataclass
class Execution:
    """One program to run: ``files`` are written into an empty workspace, then ``command`` runs inside it.

    ``trusted_files`` (a verifier's tests) appear read-only under ``/trusted`` (``workspace.TRUSTED_DIR``): no
    process of the program's uid can change, add or remove them, on every backend."""

    files: dict[str, str]
    command: list[str]
    timeout_s: float = 10.0
    memory_mb: int = 512
    runtime: str = "python"
    max_output_bytes: int = 1 << 20
    stdin: str = ""
    tier: str = ""  # scheduling tier: "short", "long", or "" (decided from ``timeout_s`` by the scheduler)
    queue_timeout_s: float | None = None  # give up (infra error) if not started this long after submission
    trusted_files: dict[str, str] = field(default_factory=dict)  # read-only at /trusted
    # set by the scheduler on a long-tier job: the backend lets it weight the execution's cgroup (``priority.py``)
    priority: CpuPriority | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Usage:
    """What the processes of one execution used, by the account of its cgroup: CPU time (user + system) in seconds
    and the most memory charged at once, in MiB. None where it is not accounted (no cgroup, cgroup v1 without
    ``cpuacct``, v2 before Linux 5.19 for the peak, a container's cgroup the host cannot read).

    >>> Usage(cpu_s=0.25, memory_peak_mb=3.5), Usage()
    (Usage(cpu_s=0.25, memory_peak_mb=3.5), Usage(cpu_s=None, memory_peak_mb=None))
    """

    cpu_s: float | None = None
    memory_peak_mb: float | None = None


def serial_usage(usages: Iterable[Usage]) -> Usage:
    """What executions run one after another (the session steps of one tool call) used together: their CPU
    seconds summed, the largest of their peaks; None where none of them was accounted.

    >>> serial_usage([Usage(0.5, 10.0), Usage(0.25, 30.0)])
    Usage(cpu_s=0.75, memory_peak_mb=30.0)
    >>> serial_usage([])
    Usage(cpu_s=None, memory_peak_mb=None)
    """
    usages = list(usages)
    cpu = [u.cpu_s for u in usages if u.cpu_s is not None]
    peaks = [u.memory_peak_mb for u in usages if u.memory_peak_mb is not None]
    return Usage(cpu_s=sum(cpu) if cpu else None, memory_peak_mb=max(peaks) if peaks else None)


@dataclass
class ExecutionResult:
    exit_code: int | None  # None when the program was killed (deadline) or never ran (infra error)
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    infra_error: str = ""  # non-empty: the sandbox failed, not the program; never scored as a reward
    output_truncated: bool = False
    start_ms: float = 0.0  # time to get an isolated environment ready
    run_ms: float = 0.0  # wall time of the program itself
    extra: dict = field(default_factory=dict)  # backend details: attempts, tier, acquire_ms, oom_killed, ...
    queue_ms: float = 0.0  # time spent waiting for a scheduler slot before the first attempt
    cpu_s: float | None = None  # CPU seconds (user + system) of the program's processes; None: not accounted
    memory_peak_mb: float | None = None  # the most memory (MiB) they held at once; None: not accounted

    @property
    def ok(self) -> bool:
        return not self.infra_error and not self.timed_out and self.exit_code == 0


class SandboxStartError(RuntimeError):
    """The sandbox could not be created or started: an infrastructure failure, retried then reported."""


@runtime_checkable
class Sandbox(Protocol):
    name: str

    def run(self, execution: Execution) -> ExecutionResult:
        """Run one execution to completion (or its deadline); never raises for program failures."""

    def close(self) -> None:
        """Release everything this sandbox holds (containers, processes, temp dirs)."""


INODE_BYTES = 4096  # a writable tmpfs holds one inode per 4 KB page of its size, on every backend


def tmpfs_inodes(size_mb: int) -> int:
    """The inodes (files, directories, links) a writable tmpfs of ``size_mb`` may hold: empty files cost kernel
    memory (an inode and a dentry, ~1 KB each) that no size cap bounds, and that a cgroup may not charge.

    >>> tmpfs_inodes(64)
    16384
    """
    return (size_mb << 20) // INODE_BYTES


def truncate(data: bytes, limit: int) -> tuple[str, bool]:
    """Decode at most ``limit`` bytes of program output, marking the cut.

    >>> truncate(b"abcdef", 3)
    ('abc\\n[... output truncated at 3 bytes ...]', True)
    """
    if len(data) <= limit:
        return data.decode("utf-8", "replace"), False
    return data[:limit].decode("utf-8", "replace") + f"\n[... output truncated at {limit} bytes ...]", True
