"""One pooled container: run a program in it through its agent, reset it, seen from the host when it can be.

A ``Box`` is what the pool hands out (``pool.DockerPool.acquire``) and what a session holds (``session.py``). It
runs one program at a time (``run``: the memory limit follows the execution, the OOM count is read before and
after, and with the host's view what the run used: the container's CPU seconds and memory peak over the run, the
agent's part included; a long execution's CPU weight lowered on the container's cgroup while short ones run,
``priority.py``) and is cleaned by ``reset``: the agent kills every other process, empties ``/tmp``,
``/dev/shm``, IPC, ``/trusted`` (and ``/work`` when ``full``) and checks it is as it started (no process, nothing a
program inherits changed), then, with the host's view of the container (``host_view.py``), the host checks from
outside that only the agent is left. The pool decides what happens to a box that fails its reset or whose run says
``discard``.

Example:
    >>> box = pool.acquire()                                             # doctest: +SKIP
    >>> raw = box.run(execution, argv, env, archive, b"", time.monotonic())  # doctest: +SKIP
    >>> box.reset(full=True)                                             # doctest: +SKIP
    True
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import docker

from posttrain.sandbox.base import Execution
from posttrain.sandbox.capture import RawRun
from posttrain.sandbox.cgroup import UsageMeter
from posttrain.sandbox.docker.agent_client import AgentChannel, AgentClosed, agent_reset, agent_run
from posttrain.sandbox.docker.container import oom_kills
from posttrain.sandbox.docker.host_view import HostView
from posttrain.sandbox.priority import weighted
from posttrain.sandbox.uids import UidLease

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Box:
    """One pooled container: its agent's channel, its limits, the host's view of it (None when remote or not root)."""

    cid: str
    api: docker.APIClient  # the pool's client
    channel: AgentChannel
    memory_mb: int  # the container's memory limit now (``run`` changes it to the execution's)
    rlimits: dict  # the agent applies these to every program: {"fsize": [soft, hard], "nofile": ..., "core": ...}
    lease: UidLease  # the host uid its programs run as (``container.lease_uid``), held until the container is gone
    view: HostView | None = None
    uses: int = 0
    idle_since: float = 0.0
    requests: int = 0

    def next_id(self) -> int:
        self.requests += 1
        return self.requests

    def run(self, execution: Execution, argv: list[str], env: dict[str, str], archive: bytes, stdin: bytes,
            t0: float, trusted: bytes = b"") -> RawRun:
        """One program through the agent (``AgentClosed`` when the container fails before the program started;
        after that, a result whose ``extra["discard"]`` says whether the container may serve again)."""
        if self.memory_mb != execution.memory_mb:
            self.api.update_container(self.cid, mem_limit=f"{execution.memory_mb}m",
                                      memswap_limit=f"{execution.memory_mb}m")
            self.memory_mb = execution.memory_mb
        before = oom_kills(self.cid)
        cpu = math.ceil(execution.timeout_s) + 1
        limits = {"cpu": [cpu, cpu + 1], **self.rlimits}
        meter = UsageMeter(self.view.group) if self.view else None  # the container's, from here on
        try:
            with weighted(execution.priority, self.view.group if self.view else None):
                raw = agent_run(self.channel, self.next_id(), execution, argv, env, archive, trusted, stdin, limits,
                                t0, on_overdue=self.view.kill_all if self.view else None)
            if meter:
                raw.usage = meter.usage()
        finally:
            if meter:
                meter.close()
        after = oom_kills(self.cid)
        raw.extra.update(container=self.cid[:12],
                         oom_killed=bool(before is not None and after is not None and after > before))
        return raw

    def reset(self, full: bool) -> bool:
        """Have the agent kill every other process and empty ``/tmp``, ``/dev/shm``, IPC (and ``/work`` when
        ``full``); with the host's view, check from outside that only the agent is left. False: not clean."""
        try:
            ok, detail = agent_reset(self.channel, self.next_id(), keep_work=not full)
        except AgentClosed as exc:
            ok, detail = False, str(exc)
        if ok and self.view is not None and self.view.program_pids():
            ok, detail = False, f"processes survive the reset: {self.view.program_pids()}"
        if not ok:
            log.warning("docker pool: reset of %s failed: %s", self.cid[:12], detail)
        return ok
