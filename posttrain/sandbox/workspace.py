"""What every backend does the same way: check workspace file names, resolve the runtime, pack or write the files.

File names are relative POSIX paths inside the workspace; absolute paths and ``..`` are refused (a name must never
reach outside the workspace on the host). ``Execution.runtime`` names the interpreter a program needs; a command
that starts with one of its aliases (``python`` for the python runtime) is pointed at the interpreter's path.

Example:
    >>> from posttrain.sandbox.base import Execution
    >>> resolve_command(Execution(files={}, command=["python", "main.py"]))
    ['/usr/bin/python3', 'main.py']
    >>> checked_files({"src/a.py": "x = 1", "./b.txt": ""})
    [('src/a.py', 'x = 1'), ('b.txt', '')]
    >>> checked_files({"../escape.py": ""})
    Traceback (most recent call last):
    ...
    ValueError: files['../escape.py']: must be a relative path inside the workspace
"""

from __future__ import annotations

import io
import math
import os
import shutil
import stat
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from posttrain.sandbox.base import Execution

SANDBOX_UID = 10001  # the program's uid inside every sandbox (the docker image's ``sandbox`` user)
SANDBOX_GID = 10001
WORKDIR = "/work"  # where the workspace appears inside the sandbox
TRUSTED_DIR = "/trusted"  # where ``Execution.trusted_files`` appear, read-only for the program
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}  # all a program inherits


@dataclass(frozen=True)
class Runtime:
    """An interpreter a program can ask for, at the same path on a Debian host and in the sandbox image."""

    path: str
    aliases: tuple[str, ...]
    reserve_mb: int = 0  # virtual address space the interpreter reserves beyond its heap (added to RLIMIT_AS)
    env: dict[str, str] = field(default_factory=dict)  # "{node_heap_mb}" in a value is filled from the execution


RUNTIMES = {
    "python": Runtime("/usr/bin/python3", ("python", "python3")),
    # V8 reserves ~800 MB of address space (code range, pointer cage) up front; its heap is capped instead.
    "node": Runtime("/usr/bin/node", ("node", "nodejs"), reserve_mb=1024,
                    env={"NODE_OPTIONS": "--max-old-space-size={node_heap_mb}"}),
    # A script may start any interpreter, node included, so it gets node's address-space reserve too.
    "bash": Runtime("/bin/bash", ("bash",), reserve_mb=1024),
}


def runtime_of(execution: Execution) -> Runtime:
    """The ``Runtime`` an execution asks for; ``ValueError`` naming the field when it is unknown."""
    try:
        return RUNTIMES[execution.runtime]
    except KeyError:
        raise ValueError(f"runtime={execution.runtime!r}: unknown, expected one of {sorted(RUNTIMES)}") from None


def resolve_command(execution: Execution) -> list[str]:
    """The argv to run: ``command`` with a leading runtime alias replaced by the interpreter's absolute path."""
    if not execution.command:
        raise ValueError("command: empty")
    runtime = runtime_of(execution)
    head, *rest = execution.command
    return [runtime.path, *rest] if head in runtime.aliases else list(execution.command)


NODE_BASELINE_MB = 48  # node's own resident memory before a program allocates (46 MB measured in the image)


def node_heap_mb(memory_mb: int) -> int:
    """V8's old-space cap under a ``memory_mb`` limit, leaving room for node itself.

    V8 then fails first, cleanly ("heap out of memory", exit 134), instead of the program growing into the
    container's memory limit, where the kernel may thrash node's own pages for a long time before it OOM-kills.

    >>> node_heap_mb(128), node_heap_mb(512), node_heap_mb(64)
    (80, 464, 32)
    """
    return max(memory_mb // 2, memory_mb - NODE_BASELINE_MB)


def sandbox_env(execution: Execution) -> dict[str, str]:
    """The whole environment of the program: ``BASE_ENV`` plus its runtime's variables."""
    extra = runtime_of(execution).env
    return {**BASE_ENV, **{k: v.format(node_heap_mb=node_heap_mb(execution.memory_mb)) for k, v in extra.items()}}


MIN_MEMORY_MB = 16  # below this not even python3 can map its libraries: the limit itself would be the failure
MAX_ARG_BYTES = (32 << 12) - 1  # Linux MAX_ARG_STRLEN (32 pages) less the NUL: the longest one argument may be
MAX_ARGV_BYTES = 1 << 20  # all arguments together, well under ARG_MAX (a quarter of the 8 MB stack) with the env
TIERS = ("", "short", "long")


def check_execution(execution: Execution) -> None:
    """Refuse, before anything starts, an ``Execution`` no backend can run: ``ValueError`` naming every bad field.

    Both backends call this first (``SandboxBackend.run``, sessions), so the same bad input gets the same error.

    >>> check_execution(Execution({}, ["python3", "-c", "pass"], timeout_s=0, memory_mb=0, stdin="\\ud800"))
    Traceback (most recent call last):
    ...
    ValueError: timeout_s: must be a finite number > 0, got 0; memory_mb: must be an integer >= 16, got 0; \
stdin: not encodable as UTF-8 (surrogates not allowed) at index 0
    >>> check_execution(Execution({}, ["bash", "-c", "echo a\\0b", "x" * 200_000]))
    Traceback (most recent call last):
    ...
    ValueError: command[2]: contains a NUL byte, which no program argument can hold; command[3]: 200000 bytes, \
over the 131071 one program argument can hold (pass long text on stdin or in a file)
    """
    problems = []
    if not (isinstance(execution.command, list) and execution.command
            and all(isinstance(arg, str) for arg in execution.command)):
        problems.append(f"command: must be a non-empty list of strings, got {execution.command!r}")
    if not _number(execution.timeout_s) or not 0 < execution.timeout_s < math.inf:
        problems.append(f"timeout_s: must be a finite number > 0, got {execution.timeout_s!r}")
    for name, least in (("memory_mb", MIN_MEMORY_MB), ("max_output_bytes", 0)):
        value = getattr(execution, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            problems.append(f"{name}: must be an integer >= {least}, got {value!r}")
    if execution.queue_timeout_s is not None and not (_number(execution.queue_timeout_s)
                                                      and execution.queue_timeout_s >= 0):
        problems.append(f"queue_timeout_s: must be None or a number >= 0, got {execution.queue_timeout_s!r}")
    if execution.tier not in TIERS:
        problems.append(f"tier: must be one of {TIERS}, got {execution.tier!r}")
    if execution.runtime not in RUNTIMES:
        problems.append(f"runtime: unknown {execution.runtime!r}, expected one of {sorted(RUNTIMES)}")
    texts = [("stdin", execution.stdin)]
    if isinstance(execution.command, list):
        texts += [(f"command[{i}]", arg) for i, arg in enumerate(execution.command) if isinstance(arg, str)]
    for kind in ("files", "trusted_files"):
        texts += [(f"{kind}[{name!r}]", content) for name, content in getattr(execution, kind).items()
                  if isinstance(content, str)]
    problems += [problem for field_name, text in texts if (problem := _not_utf8(field_name, text))]
    if isinstance(execution.command, list) and not problems:
        problems += _argv_problems(execution.command)
    if problems:
        raise ValueError("; ".join(problems))


def _argv_problems(argv: list[str]) -> list[str]:
    """What no ``execve`` can take: a NUL inside an argument, one argument or all of them over the kernel's limits
    (the program's outcome to refuse before it starts, never a sandbox that failed to start)."""
    problems, total = [], 0
    for i, arg in enumerate(argv):
        size = len(arg.encode("utf-8"))
        total += size + 1
        if "\0" in arg:
            problems.append(f"command[{i}]: contains a NUL byte, which no program argument can hold")
        if size > MAX_ARG_BYTES:
            problems.append(f"command[{i}]: {size} bytes, over the {MAX_ARG_BYTES} one program argument can hold "
                            "(pass long text on stdin or in a file)")
    if total > MAX_ARGV_BYTES:
        problems.append(f"command: {total} bytes of arguments, over the {MAX_ARGV_BYTES} a program may get")
    return problems


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _not_utf8(field_name: str, text) -> str:
    if not isinstance(text, str):
        return f"{field_name}: must be str, got {type(text).__name__}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"{field_name}: not encodable as UTF-8 ({exc.reason}) at index {exc.start}"
    return ""


def checked_files(files: dict[str, str], field_name: str = "files") -> list[tuple[str, str]]:
    """``files`` as (normalized relative path, content) pairs; ``ValueError`` naming the first bad entry."""
    checked = []
    for name, content in files.items():
        path = PurePosixPath(name)
        parts = [p for p in path.parts if p != "."]
        if path.is_absolute() or not parts or ".." in parts or "\0" in name:
            raise ValueError(f"{field_name}[{name!r}]: must be a relative path inside the workspace")
        if not isinstance(content, str):
            raise ValueError(f"{field_name}[{name!r}]: content must be str, got {type(content).__name__}")
        checked.append(("/".join(parts), content))
    return checked


def write_tree(root: Path, files: list[tuple[str, str]]) -> None:
    """Create ``root`` (mode 0755) and write checked ``files`` under it."""
    root.mkdir(mode=0o755, exist_ok=True)
    for name, content in files:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")


def remove_tree(root: Path) -> None:
    """Delete ``root`` even when the program left directories without write or search permission."""

    def unlock_and_retry(func, path, _exc):
        parent = os.path.dirname(path)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, stat.S_IRWXU)
            shutil.rmtree(path, onerror=unlock_and_retry)
        else:
            func(path)

    shutil.rmtree(root, onerror=unlock_and_retry)


def tar_archive(files: list[tuple[str, str]], uid: int = SANDBOX_UID, gid: int = SANDBOX_GID) -> bytes:
    """An uncompressed tar of checked ``files`` (and their parent directories), owned by ``uid``:``gid``."""
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        added: set[str] = set()
        for name, content in files:
            for parent in reversed(PurePosixPath(name).parents[:-1]):
                if str(parent) not in added:
                    added.add(str(parent))
                    tar.addfile(_tarinfo(str(parent), tarfile.DIRTYPE, 0o755, uid, gid, now))
            data = content.encode("utf-8")
            info = _tarinfo(name, tarfile.REGTYPE, 0o644, uid, gid, now)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _tarinfo(name: str, kind: bytes, mode: int, uid: int, gid: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.mtime = kind, mode, uid, gid, mtime
    return info


def rlimits(execution: Execution, *, max_open_files: int, max_file_mb: int, address_space: int | None = None,
            max_processes: int | None = None) -> dict[str, tuple[int, int]]:
    """An execution's per-process limits, ``resource`` name -> (soft, hard).

    CPU seconds follow the deadline (plus one), so a CPU-bound program is stopped by the kernel even if the
    wall-clock kill were late; there are no core dumps. ``address_space`` and ``max_processes`` are for backends
    without a memory cgroup or pid cgroup (bwrap).

    >>> rlimits(Execution({}, ["x"], timeout_s=2.5), max_open_files=64, max_file_mb=1)
    {'RLIMIT_CPU': (4, 5), 'RLIMIT_FSIZE': (1048576, 1048576), 'RLIMIT_NOFILE': (64, 64), 'RLIMIT_CORE': (0, 0)}
    """
    cpu = math.ceil(execution.timeout_s) + 1
    limits = {"RLIMIT_AS": address_space, "RLIMIT_CPU": (cpu, cpu + 1), "RLIMIT_FSIZE": max_file_mb << 20,
              "RLIMIT_NOFILE": max_open_files, "RLIMIT_CORE": 0, "RLIMIT_NPROC": max_processes}
    return {name: value if isinstance(value, tuple) else (value, value) for name, value in limits.items()
            if value is not None}


def prlimit_args(prlimit: str, execution: Execution, **limits) -> list[str]:
    """``prlimit`` options that apply an execution's ``rlimits`` (same keywords) to the program it then executes.

    >>> prlimit_args("/usr/bin/prlimit", Execution({}, ["x"], timeout_s=2.5), max_open_files=64, max_file_mb=1)
    ['/usr/bin/prlimit', '--cpu=4:5', '--fsize=1048576', '--nofile=64', '--core=0']
    """
    return [prlimit, *(f"--{name.removeprefix('RLIMIT_').lower()}={soft}" + (f":{hard}" if hard != soft else "")
                       for name, (soft, hard) in rlimits(execution, **limits).items())]


def memfd(name: str, data: bytes) -> int:
    """An anonymous in-memory file holding ``data``, positioned at its start (the caller closes it)."""
    fd = os.memfd_create(name, 0)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
