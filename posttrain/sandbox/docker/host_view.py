"""The host's view of a pooled container (local daemon, root): its processes, killed from outside if need be.

When the daemon runs on this machine and we are root, a container's processes are ordinary host processes and its
cgroup lists them. The pool uses that view for three things its agent cannot be asked to do:

- check after every reset that the container's cgroup holds nothing but the agent (pid 1), from outside, so a
  container is never reused with something of an earlier program alive even if the agent were fooled;
- kill the program processes from the host when the agent misses its deadline (e.g. starved of CPU by them);
- measure what each execution used (``Box.run``): CPU seconds, and the memory peak, reset before each execution
  (``cgroup.UsageMeter``), which no process in the container may do.

Processes are signalled through pidfds re-checked after opening, so a recycled pid is never signalled. Without the
view (remote daemon, not root, unknown cgroup layout) the agent's own report is all there is, and no usage.

Example:
    >>> view = HostView.attach(api, container_id)        # doctest: +SKIP
    >>> view.program_pids(), view.kill_all()             # doctest: +SKIP
    ([], True)
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from posttrain.sandbox.cgroup import Cgroup, parse_layout

log = logging.getLogger(__name__)
KILL_ROUNDS = 500


def _cgroup_of(pid: int) -> Cgroup | None:
    """The cgroup of process ``pid`` (its directories in our mounts of each hierarchy, v1 or v2), or None."""
    try:
        layout = parse_layout(Path("/proc/self/mountinfo").read_text(), Path(f"/proc/{pid}/cgroup").read_text())
    except OSError:
        return None
    return Cgroup(layout.version, layout.dirs) if layout.version else None


class HostView:
    """A local container seen from the host: its init (the agent) and its cgroup (``group``: what the container's
    processes used, ``cgroup.UsageMeter`` measures it per execution)."""

    def __init__(self, cid: str, init_pid: int, group: Cgroup):
        self.cid, self.init_pid, self.group = cid, init_pid, group
        self.procs = group.dirs["pids"] / "cgroup.procs"

    @classmethod
    def attach(cls, api, cid: str) -> "HostView | None":
        """The host view of running container ``cid``, or None when it cannot be had."""
        if os.geteuid() != 0:
            return None
        try:
            pid = int(api.inspect_container(cid)["State"]["Pid"])
        except Exception:  # noqa: BLE001 - any failure means: no host view
            return None
        group = _cgroup_of(pid) if pid > 0 else None
        procs = group.dirs["pids"] / "cgroup.procs" if group else None
        try:
            if procs is None or cid not in str(procs) or str(pid) not in procs.read_text().split():
                return None
        except OSError:
            return None
        return cls(cid, pid, group)

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in self.procs.read_text().split()]
        except (OSError, ValueError):
            return []

    def program_pids(self) -> list[int]:
        """Every process of the container but its agent."""
        return [p for p in self.pids() if p != self.init_pid]

    def kill_all(self) -> bool:
        """SIGKILL every process of the container but the agent until none is left; False if some survive."""
        for _ in range(KILL_ROUNDS):
            victims = self.program_pids()
            if not victims:
                return True
            for pid in victims:
                self._kill(pid)
            time.sleep(0.002)
        return not self.program_pids()

    def _kill(self, pid: int) -> None:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return  # already gone
        try:  # the pid is pinned now: check that it still belongs to the container
            if pid != self.init_pid and str(pid) in self.procs.read_text().split():
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)
