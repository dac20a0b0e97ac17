"""Aggregate limits for one sandbox execution: a cgroup per execution caps memory, processes and CPU together.

``RLIMIT_AS`` (``prlimit``) caps one process's address space; a program escapes it with several processes, memfds,
SysV shared memory or files on a tmpfs. An ``ExecutionGroup`` puts the whole process tree of one execution (bwrap,
the sandbox's init, the program and everything it starts) in one cgroup per controller, which caps:

- memory: every page charged to the group (anonymous memory of all its processes, memfd/tmpfs/shm pages and the
  kernel objects behind files and inodes it creates), with swap disabled; past the cap the kernel reclaims, then
  OOM-kills a process of the group (``oom_killed()`` says so) or the allocation fails;
- processes: ``pids.max`` counts every task (threads too), so a fork loop stops there;
- CPU: a CFS quota of ``cpus`` cores (``cpus=1.0``: at most one core's time per period, however many threads);
  its weight against sibling groups (``set_cpu_weight``) is what the scheduler lowers for a long execution while
  short ones run (``priority.py``).

A group may hold groups of its own (``nest``), each with its own limits under the group's: a warm slot keeps its
trusted zygote in one and each execution in another, so that an execution's OOM kill picks among its own
processes only. Killing or removing a group takes its nested groups with it.

Where it holds: as root on cgroup v1 (one hierarchy per controller, e.g. hybrid hosts; tested) and on cgroup v2
(unified) hosts with the ``memory``, ``pids`` and ``cpu`` controllers available (a non-root user with a delegated v2
subtree may work too; untested). Groups are made below our own current cgroup of each controller, inside a
``posttrain-<pid>-<start>-<pidns>`` parent, so a limit set on us still applies on top. On v2, controllers can be
enabled only for a group that holds no processes itself ("no internal processes"): when our cgroup holds only this
process, we first move ourselves into a ``posttrain-host`` leaf beside the parent; when it holds other processes
too, limits are unavailable (start posttrain alone in its cgroup: a container's main process or
``systemd-run --scope -p Delegate=yes``).

Where it does not (``limits_unavailable_reason()`` says why: not root, read-only or missing cgroup filesystem,
controllers not delegated): only the per-process limits remain, i.e. ``RLIMIT_AS`` per process, ``RLIMIT_NPROC``
in the sandbox, ``RLIMIT_CPU`` seconds per process, and the size caps of the tmpfs mounts; several processes or
files (inodes are not in a tmpfs size cap) can then use more memory than ``memory_mb``, and CPU time is not capped
per execution. Without swap accounting (no ``memory.memsw.*`` / ``memory.swap.max``) a host with swap lets a group
swap beyond the cap.

What a group's processes used (``Cgroup.usage``: CPU seconds, peak memory) is read before the group is removed;
a group that outlives its executions (a pooled container's, served one execution at a time) is measured per
execution by a ``UsageMeter`` (CPU time since it was made, the peak reset to the usage then).

Pages written to a tmpfs that outlives the execution (a session workspace) stay charged to the execution that wrote
them until freed; the tmpfs size cap bounds them. A group's leftovers (its owner killed outright) are removed by the
next process that uses cgroups (``reap_groups``), as ``lifecycle`` does for workspaces.

Example:
    >>> layout = parse_layout("30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\\n",
    ...                       "0::/user.slice/job.scope\\n")
    >>> layout.version, str(layout.dirs["memory"])
    (2, '/sys/fs/cgroup/user.slice/job.scope')
    >>> isinstance(limits_unavailable_reason(), str)  # "" where the limits hold
    True
    >>> import subprocess
    >>> with ExecutionGroup.create(memory_bytes=256 << 20, max_pids=64, cpus=1.0) as group:  # doctest: +SKIP
    ...     subprocess.run(group.join_command(["/bin/true"], user=(65534, 65534))).returncode
    ...     group.oom_killed(), group.usage().cpu_s < 0.1
    0
    (False, True)
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import re
import shlex
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from posttrain.sandbox import lifecycle
from posttrain.sandbox.base import Usage

log = logging.getLogger(__name__)

CONTROLLERS = ("memory", "pids", "cpu")  # required; v1 also uses "cpuacct" (cpu seconds) where it is mounted
PARENT_PREFIX = "posttrain-"  # our parent group: posttrain-<pid>-<start time>-<pid namespace>
_PARENT_NAME = re.compile(rf"^{PARENT_PREFIX}(\d+)-(\d+)-(\d+)$")
HOST_LEAF = "posttrain-host"  # v2: where this process moves itself so that its old cgroup can enable controllers
CFS_PERIOD_US = 100_000
CPU_WEIGHT_FILE = {1: "cpu.shares", 2: "cpu.weight"}  # a group's CPU weight against its siblings, by cgroup version
CPU_WEIGHT_RANGE = {1: (2, 262144), 2: (1, 10000)}  # what the kernel takes (a new group has 1024 on v1, 100 on v2)
MIB = 1 << 20
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"


# ---- detection (pure: parses the text of /proc/self/mountinfo and /proc/self/cgroup) --------------------------------
@dataclass(frozen=True)
class Layout:
    """Where our own cgroups are: ``version`` 1 or 2 (0: none usable), ``dirs``: controller -> our current cgroup
    directory in its hierarchy (on v2 every controller maps to the same directory); ``reason`` when version is 0."""

    version: int
    dirs: dict[str, Path] = field(default_factory=dict)
    reason: str = ""


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> list[tuple[str, str, str, list[str]]]:
    """The cgroup mounts in mountinfo ``text``: (fstype, mount point, root within the hierarchy, super options)."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and tail and tail[0] in ("cgroup", "cgroup2"):
            options = tail[2].split(",") if len(tail) > 2 else []
            mounts.append((tail[0], _unescape(fields[4]), _unescape(fields[3]), options))
    return mounts


def _below(mount_point: str, root: str, path: str) -> Path | None:
    """The directory of cgroup ``path`` through a mount of hierarchy subtree ``root``; None when not reachable."""
    if root == "/":
        rel = path
    elif path == root or path.startswith(root.rstrip("/") + "/"):
        rel = path[len(root.rstrip("/")):]
    else:
        return None
    return Path(mount_point) / rel.lstrip("/")


def parse_layout(mountinfo: str, cgroup: str) -> Layout:
    """Where our cgroups are, from the text of ``/proc/self/mountinfo`` and ``/proc/self/cgroup``.

    v1 is chosen when memory, pids and cpu are all v1 hierarchies (hybrid hosts keep an empty cgroup2 beside
    them); otherwise the cgroup2 mount (whether it offers the controllers is checked on the filesystem)."""
    v1_paths: dict[str, str] = {}
    v2_path = None
    for line in cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2_path = parts[2]
        for name in parts[1].split(","):
            if name:
                v1_paths[name] = parts[2]
    mounts = parse_mountinfo(mountinfo)
    dirs: dict[str, Path] = {}
    for fstype, point, root, options in mounts:
        if fstype != "cgroup":
            continue
        for name in options:
            if name in v1_paths and name not in dirs:
                found = _below(point, root, v1_paths[name])
                if found is not None:
                    dirs[name] = found
    if all(name in dirs for name in CONTROLLERS):
        return Layout(1, {name: dirs[name] for name in (*CONTROLLERS, "cpuacct") if name in dirs})
    if v2_path is not None:
        for fstype, point, root, _ in mounts:
            if fstype == "cgroup2" and (found := _below(point, root, v2_path)) is not None:
                return Layout(2, {name: found for name in CONTROLLERS})
    missing = [name for name in CONTROLLERS if name not in dirs]
    if any(fstype == "cgroup" for fstype, *_ in mounts):
        return Layout(0, reason=f"cgroup v1 without the {', '.join(missing)} controller(s) mounted, and no cgroup v2")
    return Layout(0, reason="no cgroup filesystem is mounted (cgroup v1 or v2) where our cgroup can be reached")


# ---- the host: our parent group(s), made once per process -----------------------------------------------------------
def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read(path: Path) -> str:
    with open(path) as f:
        return f.read()


def _procs(directory: Path) -> list[int]:
    try:
        return [int(pid) for pid in _read(directory / "cgroup.procs").split()]
    except OSError:
        return []


class CgroupHost:
    """The cgroup hierarchies of this process and its parent group(s) ``posttrain-<pid>-<start>-<pidns>`` in them.

    ``CgroupHost.detect()`` probes (and makes the parent groups); ``reason`` is "" when groups can be made."""

    def __init__(self, layout: Layout):
        self.version = layout.version
        self.reason = layout.reason
        self.pid = os.getpid()
        self.bases: dict[str, Path] = dict(layout.dirs)  # controller -> directory holding our parent group
        self.parents: dict[str, Path] = {}  # controller -> our parent group

    @classmethod
    def detect(cls) -> CgroupHost:
        try:
            layout = parse_layout(_read(Path("/proc/self/mountinfo")), _read(Path("/proc/self/cgroup")))
        except OSError as exc:
            layout = Layout(0, reason=f"cannot read /proc/self/mountinfo or /proc/self/cgroup: {exc}")
        host = cls(layout)
        if not host.reason:
            host.reason = host._prepare()
        return host

    def _prepare(self) -> str:
        """Make our parent group in each hierarchy; returns why not ("" when done)."""
        if self.version == 2:
            reason = self._prepare_v2()
            if reason:
                return reason
        for name in CONTROLLERS:
            if not (self.bases[name] / ("cgroup.procs")).exists():
                return f"our {name} cgroup {self.bases[name]} is not reachable in this mount namespace"
        if lifecycle.once(f"cgroups:{self.bases['memory']}"):
            reap_groups(self)
        name = f"{PARENT_PREFIX}{self.pid}-{lifecycle.process_start(self.pid)}-{_pid_namespace()}"
        try:
            for base in self.unique(self.bases):
                (base / name).mkdir(exist_ok=True)
                if self.version == 2:
                    _write(base / name / "cgroup.subtree_control", " ".join(f"+{c}" for c in CONTROLLERS))
        except OSError as exc:
            self.parents = {c: base / name for c, base in self.bases.items()}
            self.close()
            return _explain(exc, self.bases["memory"])
        self.parents = {c: base / name for c, base in self.bases.items()}
        lifecycle.track(self)
        return ""

    def _prepare_v2(self) -> str:
        """On v2: find the directory our parent goes in and enable the controllers there."""
        base = self.bases["memory"]
        if base.name == HOST_LEAF:  # we (or our parent process) moved ourselves here before
            base = base.parent
        try:
            available = _read(base / "cgroup.controllers").split()
        except OSError as exc:
            return _explain(exc, base)
        missing = [c for c in CONTROLLERS if c not in available]
        if missing:
            return (f"cgroup v2: the {', '.join(missing)} controller(s) are not available in {base} "
                    "(not delegated to our cgroup, or bound to a v1 hierarchy)")
        for attempt in range(2):
            try:
                enabled = _read(base / "cgroup.subtree_control").split()
                wanted = [c for c in CONTROLLERS if c not in enabled]
                if wanted:
                    _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
                break
            except OSError as exc:
                others = [pid for pid in _procs(base) if pid != os.getpid()]
                if exc.errno != errno.EBUSY or attempt or others:
                    if exc.errno == errno.EBUSY:
                        return (f"cgroup v2: our cgroup {base} also holds {len(others)} other process(es), and v2 "
                                "enables controllers only for a group without processes of its own; start posttrain "
                                "alone in its cgroup (a container's main process, or systemd-run --scope -p "
                                "Delegate=yes)")
                    return _explain(exc, base)
                try:  # "no internal processes": move ourselves into a leaf, then our old cgroup can delegate
                    (base / HOST_LEAF).mkdir(exist_ok=True)
                    _write(base / HOST_LEAF / "cgroup.procs", str(os.getpid()))
                except OSError as move_exc:
                    return _explain(move_exc, base)
                log.info("moved this process into %s so that cgroup v2 controllers can be enabled", base / HOST_LEAF)
        self.bases = {c: base for c in CONTROLLERS}
        return ""

    @staticmethod
    def unique(dirs: dict[str, Path]) -> list[Path]:
        return list(dict.fromkeys(dirs.values()))

    def new_dirs(self, name: str | None) -> dict[str, Path]:
        """Make the directories of a new group (one per hierarchy); controller -> directory."""
        if self.reason:
            raise OSError(errno.ENOTSUP, f"aggregate sandbox limits are unavailable: {self.reason}")
        name = name or _new_name()
        return _make_dirs({c: parent / name for c, parent in self.parents.items()})

    def close(self) -> None:
        """Kill what is left in our groups and remove them and our parent (at exit; only in the owner process)."""
        if os.getpid() != self.pid or not self.parents:
            return
        for parent in self.unique(self.parents):
            _remove_parent(parent)


_names = itertools.count()


def _new_name() -> str:
    return f"x{next(_names)}-{os.urandom(3).hex()}"


def _make_dirs(dirs: dict[str, Path]) -> dict[str, Path]:
    """Make the directories of a new group, all or none; returns ``dirs`` (controller -> directory)."""
    made = []
    try:
        for path in CgroupHost.unique(dirs):
            path.mkdir()
            made.append(path)
    except BaseException:
        for path in made:
            _rmdir(path, timeout_s=0.5)
        raise
    return dirs


def _pid_namespace() -> str:
    """Our pid namespace's inode: a parent group's owner pid is looked up only by processes in its namespace."""
    try:
        return os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:
        return "0"


def _explain(exc: OSError, where: Path) -> str:
    if exc.errno == errno.EROFS:
        return f"the cgroup filesystem at {where} is read-only (a container without cgroup delegation)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"no permission to make cgroups under {where} (not root, and no delegated cgroup): {exc.strerror}"
    return f"cannot make cgroups under {where}: {exc}"


_host: CgroupHost | None = None
_host_lock = threading.Lock()


def host() -> CgroupHost:
    """This process's ``CgroupHost``, detected once per process (a forked child detects its own)."""
    global _host
    with _host_lock:
        if _host is None or _host.pid != os.getpid():
            _host = CgroupHost.detect()
        return _host


def limits_unavailable_reason() -> str:
    """Why aggregate per-execution limits cannot be enforced on this host; "" when they can."""
    return host().reason


# ---- reading a group -------------------------------------------------------------------------------------------------
class Cgroup:
    """One cgroup, read: its processes and what they used. ``dirs``: controller -> the group's directory in that
    controller's hierarchy (on v2 every controller maps to the same one). An ``ExecutionGroup`` is one we made; a
    pooled container's (``docker/host_view.py``) is Docker's: read, and its CPU weight lowered while a long execution
    yields to short ones (``priority.py``), then set back."""

    def __init__(self, version: int, dirs: dict[str, Path]):
        self.version = version
        self.dirs = dirs

    def pids(self) -> list[int]:
        """Processes (thread group ids) in the group and the groups nested in it, in any of its hierarchies."""
        return sorted({pid for path in self._subtree() for pid in _procs(path)})

    def _subtree(self) -> list[Path]:
        return [path for top in CgroupHost.unique(self.dirs) for path in _subtree(top)]

    def cpu_weight(self) -> int | None:
        """The group's CPU weight against its sibling groups: v1 ``cpu.shares`` (a new group's: 1024), v2
        ``cpu.weight`` (100); None where unreadable (the group is gone)."""
        return _number(self.dirs["cpu"] / CPU_WEIGHT_FILE[self.version])

    def set_cpu_weight(self, weight: int) -> None:
        """Set the group's CPU weight (``cpu_weight``), clamped to what the kernel takes: when every CPU is busy,
        sibling groups get CPU time in proportion to their weights; an idle CPU goes to whoever wants it."""
        low, high = CPU_WEIGHT_RANGE[self.version]
        _write(self.dirs["cpu"] / CPU_WEIGHT_FILE[self.version], str(min(high, max(low, weight))))

    def oom_killed(self) -> bool:
        """Whether the kernel OOM-killed a process of the group because the group hit its memory cap."""
        return self.oom_kills() > 0

    def oom_kills(self) -> int:
        """How many processes of the group the kernel OOM-killed at its memory cap, so far."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        return _field(self.dirs["memory"] / name, "oom_kill") or 0

    def memory_peak_bytes(self) -> int | None:
        """The most memory the group has used (None where the kernel does not say: v2 before 5.19)."""
        return _number(self.dirs["memory"] / ("memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"))

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) used by the group's processes (None where not accounted: v1 without cpuacct)."""
        if self.version == 2:
            usec = _field(self.dirs["cpu"] / "cpu.stat", "usage_usec")
            return None if usec is None else usec / 1e6
        if "cpuacct" not in self.dirs:
            return None
        nsec = _number(self.dirs["cpuacct"] / "cpuacct.usage")
        return None if nsec is None else nsec / 1e9

    def usage(self) -> Usage:
        """What the group's processes used so far (``Usage``: CPU seconds, peak memory in MiB); read it before the
        group is removed."""
        return Usage(cpu_s=self.cpu_seconds(), memory_peak_mb=_mib(self.memory_peak_bytes()))


class UsageMeter:
    """What one execution uses in a group that outlives it (a pooled container's, serving one execution at a time).

    Made before the execution, it notes the group's CPU time and resets the group's memory peak to what the group
    holds now (v1: ``memory.max_usage_in_bytes``; v2, Linux 6.12+: ``memory.peak`` through a descriptor of its own,
    which resets it for that descriptor alone); ``usage()`` after the execution gives the CPU time since and the
    peak since. A peak that cannot be reset (not root, an older v2 kernel) is None, never an earlier execution's.
    ``close()`` (or ``with``) lets the descriptor go.
    """

    def __init__(self, group: Cgroup):
        self.group = group
        self._cpu = group.cpu_seconds()
        self._reset, self._fd = False, None  # v2: the descriptor the peak was reset through
        memory = group.dirs["memory"]
        try:
            if group.version == 1:
                _write(memory / "memory.max_usage_in_bytes", "0")
            else:
                self._fd = os.open(memory / "memory.peak", os.O_RDWR | os.O_CLOEXEC)
                os.write(self._fd, b"reset\n")
            self._reset = True
        except OSError:
            self.close()

    def usage(self) -> Usage:
        """The CPU seconds and the peak memory (MiB) of the group since the meter was made."""
        cpu = self.group.cpu_seconds()
        peak = None
        if self._reset and self.group.version == 1:
            peak = self.group.memory_peak_bytes()
        elif self._reset and self._fd is not None:  # v2: only our descriptor reads the reset peak
            try:
                peak = int(os.pread(self._fd, 64, 0).split()[0])
            except (OSError, ValueError, IndexError):
                pass
        return Usage(cpu_s=None if cpu is None or self._cpu is None else round(max(0.0, cpu - self._cpu), 9),
                     memory_peak_mb=_mib(peak))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> UsageMeter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---- one execution's group -------------------------------------------------------------------------------------------
class ExecutionGroup(Cgroup):
    """The cgroup(s) of one execution: made with its limits, joined by the execution's first process, killed and
    removed when the execution ends. Also a context manager (``remove()`` on exit)."""

    @classmethod
    def create(cls, memory_bytes: int | None, max_pids: int | None, cpus: float | None, *,
               name: str | None = None, cgroups: CgroupHost | None = None) -> ExecutionGroup:
        """A new group capping its processes together at ``memory_bytes`` (no swap), ``max_pids`` tasks and
        ``cpus`` cores of CPU time (None: no cap of that kind). Raises ``OSError`` where limits are unavailable."""
        cgroups = cgroups or host()
        return cls(cgroups.version, cgroups.new_dirs(name))._limited(memory_bytes, max_pids, cpus)

    def _limited(self, memory_bytes: int | None, max_pids: int | None, cpus: float | None) -> ExecutionGroup:
        """This new group with its limits written; removed again if one cannot be."""
        try:
            self._limit(memory_bytes, max_pids, cpus)
        except BaseException:
            self.remove()
            raise
        return self

    def _limit(self, memory_bytes: int | None, max_pids: int | None, cpus: float | None) -> None:
        cpu = self.dirs["cpu"]
        quota = None if cpus is None else max(1000, round(cpus * CFS_PERIOD_US))
        if memory_bytes is not None:
            self.set_memory(memory_bytes)
        if quota is not None and self.version == 1:
            _write(cpu / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            _write(cpu / "cpu.cfs_quota_us", str(quota))
        elif quota is not None:
            _write(cpu / "cpu.max", f"{quota} {CFS_PERIOD_US}")
        if max_pids is not None:
            _write(self.dirs["pids"] / "pids.max", str(max_pids))

    def nest(self, memory_bytes: int | None = None, max_pids: int | None = None, cpus: float | None = None, *,
             name: str | None = None) -> ExecutionGroup:
        """A new group inside this one, with limits of its own under ours (as ``create``). A warm slot
        (``warm.py``) keeps its zygote in one and gives each execution another, so that an execution's OOM kill
        picks among that execution's processes only. On v2 the controllers are enabled for our children first: a
        v2 group with such children holds no process itself, so ours must be empty (its processes in children)."""
        if self.version == 2:
            control = self.dirs["memory"] / "cgroup.subtree_control"
            if not set(CONTROLLERS) <= set(_read(control).split()):
                _write(control, " ".join(f"+{c}" for c in CONTROLLERS))
        name = name or _new_name()
        dirs = _make_dirs({c: path / name for c, path in self.dirs.items()})
        return ExecutionGroup(self.version, dirs)._limited(memory_bytes, max_pids, cpus)

    def set_memory(self, memory_bytes: int) -> None:
        """Cap the group's memory at ``memory_bytes``, swap included (no swapping past the cap); a group in use may
        get a new cap between executions (a warm slot's, ``warm.py``)."""
        mem = self.dirs["memory"]
        if self.version == 2:
            _write(mem / "memory.max", str(memory_bytes))
            if (mem / "memory.swap.max").exists():
                _write(mem / "memory.swap.max", "0")
            return
        memsw = mem / "memory.memsw.limit_in_bytes"
        if not memsw.exists():
            _write(mem / "memory.limit_in_bytes", str(memory_bytes))
            return
        # v1 keeps memory <= memory + swap at every step: raise the outer cap first, lower the inner one first
        try:
            current = int(_read(mem / "memory.limit_in_bytes"))
        except (OSError, ValueError):
            current = 0
        order = (memsw, mem / "memory.limit_in_bytes") if memory_bytes > current else \
            (mem / "memory.limit_in_bytes", memsw)
        for path in order:
            _write(path, str(memory_bytes))

    # ---- joining --------------------------------------------------------------------------------------------------
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid into to join the group (one per hierarchy)."""
        return [str(path / "cgroup.procs") for path in CgroupHost.unique(self.dirs)]

    def join(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into the group; its children made before stay where they were."""
        for path in self.procs_files():
            _write(Path(path), str(pid))

    def join_command(self, argv: list[str], user: tuple[int, int] | None = None) -> list[str]:
        """``argv`` wrapped so that its process is in the group from its first instruction: ``/bin/sh`` joins,
        then execs ``argv`` (as ``user`` = (uid, gid) through ``setpriv``, for a root caller dropping privileges).
        A failure to join exits 125 before ``argv`` runs, with a message on stderr."""
        joins = " ".join(shlex.quote(path) for path in self.procs_files())
        script = (f'for f in {joins}; do echo $$ > "$f" || {{ echo "posttrain: cannot join cgroup $f" >&2; '
                  'exit 125; }; done; exec "$@"')
        drop = [SETPRIV, f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", "--"] if user else []
        return ["/bin/sh", "-c", script, "sh", *drop, *argv]

    # ---- ending -----------------------------------------------------------------------------------------------------
    def kill(self, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process in the group (nested groups included) until it is empty; False if processes
        remain after ``timeout_s``."""
        return _kill_dir_set(self._subtree(), timeout_s)

    def remove(self, timeout_s: float = 5.0) -> bool:
        """Kill what is left and remove the group's directories, nested groups first; False (logged) if one could
        not be removed."""
        dirs = self._subtree()
        _kill_dir_set(dirs, timeout_s)
        removed = [_rmdir(path, timeout_s) for path in dirs]  # every one, even after a failure
        return all(removed)

    close = remove

    def __enter__(self) -> ExecutionGroup:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _field(path: Path, key: str) -> int | None:
    """The value of ``key`` in a flat-keyed cgroup file ("key value" lines); None when absent or unreadable."""
    try:
        for line in _read(path).splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def _number(path: Path) -> int | None:
    """The number a single-value cgroup file holds; None when absent or unreadable."""
    try:
        return int(_read(path).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _mib(size: int | None) -> float | None:
    """Bytes as MiB (None stays None).

    >>> _mib(3 << 19), _mib(None)
    (1.5, None)
    """
    return None if size is None else size / MIB


def _subtree(path: Path) -> list[Path]:
    """Cgroup directory ``path`` and every group nested in it, deepest first (the order they are removed in)."""
    try:
        children = [Path(entry.path) for entry in os.scandir(path) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        children = []
    return [*(nested for child in children for nested in _subtree(child)), path]


def _kill_dir_set(dirs: list[Path], timeout_s: float) -> bool:
    for path in dirs:  # v2 (5.14+): the kernel kills every process of the group, forks in flight included
        if (path / "cgroup.kill").exists():
            try:
                _write(path / "cgroup.kill", "1")
            except OSError:
                pass
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while True:
        pids = {pid for path in dirs for pid in _procs(path)}
        if not pids:
            return True
        for pid in pids:  # a fork between the read and the kill shows up in the next read; pids.max bounds them
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if time.monotonic() > deadline:
            log.warning("cgroup %s still holds processes %s after SIGKILL", dirs[0], sorted(pids))
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _rmdir(path: Path, timeout_s: float) -> bool:
    """Remove one cgroup directory, retrying while the kernel still counts exiting processes (EBUSY)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                log.warning("cannot remove cgroup %s: %s", path, exc)
                return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _remove_parent(parent: Path) -> None:
    """Kill and remove every group inside ``parent`` (one hierarchy), then ``parent`` itself."""
    try:
        children = [path for path in parent.iterdir() if path.is_dir()]
    except FileNotFoundError:
        return
    except OSError as exc:
        log.warning("cannot list cgroup %s: %s", parent, exc)
        return
    for child in children:
        nested = _subtree(child)
        _kill_dir_set(nested, timeout_s=2.0)
        for path in nested:
            _rmdir(path, timeout_s=2.0)
    _rmdir(parent, timeout_s=2.0)


def reap_groups(cgroups: CgroupHost | None = None) -> int:
    """Remove the parent groups (and everything in them) of posttrain processes that are dead; returns how many."""
    cgroups = cgroups or host()
    removed = 0
    for base in CgroupHost.unique(cgroups.bases):
        try:
            entries = list(base.iterdir())
        except OSError:
            continue
        for path in entries:
            match = _PARENT_NAME.match(path.name)
            if not match or not path.is_dir():
                continue
            pid, start, namespace = match.groups()
            if namespace != _pid_namespace() or lifecycle.process_start(int(pid)) == start:
                continue  # another pid namespace's (its pids mean nothing here), or alive
            _remove_parent(path)
            removed += 1
    if removed:
        log.info("reaped %d cgroups left by dead owners", removed)
    return removed
