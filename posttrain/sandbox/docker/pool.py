"""The warm Docker pool: pre-started hardened containers, one execution at a time each, reset between uses.

Settings come as one ``DockerPoolConfig`` (``SandboxConfig.docker``); the limits every backend applies
(``memory_mb``, ``max_processes``, ``workspace_mb``, ...) as keywords, as for bwrap. Containers are started ahead of
demand (``size`` of them) with the hardening of ``container.host_config`` (no network, read-only root, tmpfs
workspace, default seccomp, limits). Their pid 1 is the agent (``posttrain/trusted/container_agent.py``: root with
``container.AGENT_CAPS`` only; every program runs as the unprivileged sandbox user, which cannot reach it),
attached to us through the container's stdio (``agent_client``): an execution takes an idle container
(``acquire``: a list pop, microseconds), sends the agent one request (workspace tar, trusted files' tar, argv,
limits, stdin) and reads the program's output and exit back (``box.Box.run``); no ``docker exec``, no runc start
per program. A container is provably as it started before it serves again, or it is discarded: after every use
``Box.reset`` has the agent kill every other process, empty ``/work``, ``/tmp``, ``/dev/shm``, ``/trusted``, POSIX
queues and SysV IPC, and compare everything a program inherits from it (rlimits, nice, affinity, scheduling, I/O
priority, ...) with what it recorded at start; when the daemon is local the host then checks the container's cgroup
holds nothing but the agent (``host_view``). A failed reset, a container that served ``max_uses`` executions, or
one whose run says ``discard`` (its agent failed after the program started, missed its deadline, or could not kill
what the program left: the program's outcome, never an infra error) is removed and replaced. Memory limits follow
each execution (``docker update`` when one asks for a different ``memory_mb`` than the container has).

Sizing: the pool keeps ``size`` containers (busy + ready) while in use, grows up to ``max_size`` when more
executions wait, and after ``idle_s`` without an acquisition shrinks to ``min_idle``; refills happen in background
threads. ``close()`` waits for those threads and removes every container of the pool (found by label, so even one
created while closing). A pool is closed at interpreter exit if its owner forgot; if its owner is killed, the
agents see their channel close and exit, and the containers remove themselves (``auto_remove``); anything left is
reaped by the next process (``lifecycle``).

Sessions: ``session()`` takes one container for a multi-step agent (``session.DockerSession``).

Example:
    >>> from posttrain.config import DockerPoolConfig, SandboxConfig
    >>> from posttrain.sandbox.base import Execution
    >>> with DockerPool(DockerPoolConfig(size=2)) as pool:                                   # doctest: +SKIP
    ...     pool.wait_ready(2)
    ...     r = pool.run(Execution(files={"main.py": "print(6 * 7)"}, command=["python3", "main.py"]))
    >>> r.stdout, r.extra["acquire_ms"] < 10                                                # doctest: +SKIP
    ('42\\n', True)
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
import weakref
from collections import deque
from dataclasses import replace

import docker

from posttrain.config import DockerPoolConfig
from posttrain.sandbox import lifecycle
from posttrain.sandbox.backend import Prepared, SandboxBackend
from posttrain.sandbox.base import Execution, ExecutionResult, SandboxStartError
from posttrain.sandbox.docker.agent_client import AgentChannel, agent_command
from posttrain.sandbox.docker.box import Box
from posttrain.sandbox.docker.container import (AGENT_CAPS, DOCKER_ERRORS, ROOT, UID_LABEL, Closing, archives,
                                                host_config, lease_uid, make_client, remove_container)
from posttrain.sandbox.docker.host_view import HostView
from posttrain.sandbox.docker.session import DockerSession
from posttrain.sandbox.uids import UidLease, UidPool
from posttrain.sandbox.workspace import WORKDIR

log = logging.getLogger(__name__)
_pool_ids = itertools.count(1)


class DockerPool(SandboxBackend):
    """A ``Sandbox`` backed by warm containers; thread-safe."""

    name = "docker"

    def __init__(self, config: DockerPoolConfig | None = None, *, memory_mb: int = 512, max_processes: int = 64,
                 max_open_files: int = 256, max_file_mb: int = 64, workspace_mb: int = 64, tmp_mb: int = 64,
                 cpus: float = 1.0, session_output_bytes: int = 16384, host_checks: bool = True,
                 host_uids: range | None = None):
        """Constructing never blocks, and fails only on a ``host_uids`` range that holds a user of this host:
        containers start in the background (``wait_ready``). ``host_checks``: also check and kill from the host
        when the daemon is local (``host_view``). ``host_uids``: the host uids the containers' programs run as, one
        per container (``container.lease_uid``); None: ``SandboxConfig``'s default range."""
        cfg = config or DockerPoolConfig()
        size = max(0, cfg.size)
        self.config = replace(cfg, size=size, max_size=max(1, cfg.max_size, size), min_idle=min(cfg.min_idle, size),
                              parallel_starts=max(1, cfg.parallel_starts))
        self.memory_mb, self.max_processes, self.cpus = memory_mb, max_processes, cpus
        self.max_open_files, self.max_file_mb = max_open_files, max_file_mb
        self.workspace_mb, self.tmp_mb = workspace_mb, tmp_mb
        self.session_output_bytes = session_output_bytes
        self.host_checks = host_checks
        self._uids = UidPool(host_uids)
        self.pool_id = f"{uuid.uuid4().hex[:12]}-{next(_pool_ids)}"
        self.stats = {"created": 0, "removed": 0, "resets": 0, "reset_failures": 0, "acquired": 0, "waited": 0,
                      "create_failures": 0}
        self.last_error = ""
        self._cond = threading.Condition()
        self._client: docker.APIClient | None = None
        self._idle: deque[Box] = deque()
        self._boxes: dict[str, Box] = {}  # every live container of the pool (idle, busy, resetting)
        self._starting = 0  # containers being created
        self._resetting = 0  # containers being reset
        self._waiters = 0
        self._closing = False
        self._sessions: weakref.WeakSet = weakref.WeakSet()  # open DockerSessions, closed with the pool
        self._last_acquire = time.monotonic()
        self._backoff_until = 0.0
        self._threads = Closing()
        self._threads.start(self._maintain, name=f"docker-pool-{self.pool_id}")
        lifecycle.track(self)

    # ---- Sandbox protocol ---------------------------------------------------------------------------------------
    def _run(self, execution: Execution, prepared: Prepared, t0: float) -> ExecutionResult:
        """Run ``execution`` in a warm container; never raises for program failures."""
        archive, trusted = archives(prepared)
        try:
            box = self.acquire()
        except SandboxStartError as exc:
            return self._infra(str(exc), t0)
        acquire_ms = (time.monotonic() - t0) * 1000
        healthy = False
        try:
            raw = box.run(execution, prepared.argv, prepared.env, archive, execution.stdin.encode("utf-8"), t0,
                          trusted=trusted)
            raw.extra.update(acquire_ms=round(acquire_ms, 3))
            healthy = not raw.extra["discard"]
            return raw.result()
        except (SandboxStartError, OSError, *DOCKER_ERRORS) as exc:
            return self._infra(f"docker pool run failed: {type(exc).__name__}: {exc}", t0)
        finally:
            self.release(box, healthy=healthy)

    def session(self, *, runtime: str = "bash", timeout_s: float = 30.0, memory_mb: int | None = None,
                output_bytes: int | None = None) -> DockerSession:
        """A stateful session holding one container until ``close()`` (see ``posttrain.sandbox.session``)."""
        session = DockerSession(self.acquire(), self.release, workspace_mb=self.workspace_mb, runtime=runtime,
                                timeout_s=timeout_s, memory_mb=memory_mb or self.memory_mb,
                                output_bytes=output_bytes or self.session_output_bytes)
        self._sessions.add(session)
        return session

    def close(self) -> None:
        """Close open sessions, stop refilling, wait for background work, remove every container; idempotent."""
        for session in list(self._sessions):
            session.close()
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._threads.close(timeout_s=self.config.api_timeout_s)
        with self._cond:
            boxes, self._boxes = list(self._boxes.values()), {}
            self._idle.clear()
            client, self._client = self._client, None
        if client is None:
            return
        for box in boxes:
            box.channel.close()
            self._remove(client, box.cid, box.lease)
        try:  # anything created by a thread that outlived the join (which holds its uid), found by the pool's label
            for info in client.containers(all=True, filters={"label": f"posttrain.pool={self.pool_id}"}):
                self._remove(client, info["Id"], None)
        except DOCKER_ERRORS:
            pass
        client.close()

    # ---- acquiring and giving back ------------------------------------------------------------------------------
    def wait_ready(self, count: int | None = None, timeout_s: float = 120.0) -> bool:
        """Block until ``count`` (default ``size``) containers are ready; False on timeout or repeated failures."""
        want = self.config.size if count is None else count
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self._idle) < want:
                left = deadline - time.monotonic()
                if left <= 0 or self._closing:
                    return False
                self._cond.wait(min(left, 0.5))
            return True

    def acquire(self) -> Box:
        """A clean, started container for one execution (or session); ``SandboxStartError`` if none can be had."""
        deadline = time.monotonic() + self.config.acquire_timeout_s
        with self._cond:
            self._waiters += 1
            self._last_acquire = time.monotonic()
            waited = False
            try:
                while True:
                    if self._closing:
                        raise SandboxStartError("the docker pool is closed")
                    if self._idle:
                        box = self._idle.pop()  # most recently used: the oldest idle ones age out first
                        self.stats["acquired"] += 1
                        self.stats["waited"] += waited
                        return box
                    failing = self.last_error and time.monotonic() < self._backoff_until
                    if failing and not self._boxes and not self._starting:
                        raise SandboxStartError(f"no sandbox container can be started: {self.last_error}")
                    if self._supply() < self._waiters and len(self._boxes) + self._starting < self.config.max_size:
                        self._start_one()
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise SandboxStartError(
                            f"no sandbox container became free within {self.config.acquire_timeout_s} s")
                    waited = True
                    self._cond.wait(min(left, 1.0))
            finally:
                self._waiters -= 1

    def release(self, box: Box, healthy: bool = True) -> None:
        """Give a container back: it is reset in the background (or removed when unhealthy or worn out)."""
        box.uses += 1
        if healthy and box.uses < self.config.max_uses:
            with self._cond:
                self._resetting += 1
            if self._threads.start(self._reset, box, name="docker-pool-reset") is not None:
                return
            with self._cond:
                self._resetting -= 1
        self._discard(box)

    # ---- internals ------------------------------------------------------------------------------------------------
    def _api(self) -> docker.APIClient:
        with self._cond:
            client = self._client
        if client is None:
            client = make_client(self.config.base_url, self.config.api_timeout_s,
                                 pool_size=self.config.max_size * 3 + 8)
            with self._cond:
                if self._client is None:
                    self._client = client
                client = self._client
        return client

    def _supply(self) -> int:
        """Containers that will be ready soon without a new start: idle, starting, being reset."""
        return len(self._idle) + self._starting + self._resetting

    def _start_one(self) -> None:
        """Start one container in the background (caller holds the lock)."""
        self._starting += 1
        if self._threads.start(self._create, name="docker-pool-start") is None:
            self._starting -= 1

    def _create(self) -> None:
        cid, lease = None, None
        try:
            api = self._api()
            lease = lease_uid(api, self._uids)  # the container's own, until it is gone
            hardened = host_config(api, uid=lease.uid, memory_mb=self.memory_mb, cpus=self.cpus,
                                   max_processes=self.max_processes, max_open_files=self.max_open_files,
                                   max_file_mb=self.max_file_mb, workspace_mb=self.workspace_mb, tmp_mb=self.tmp_mb,
                                   init=False, auto_remove=True, caps=AGENT_CAPS)
            labels = {**lifecycle.owner_labels(), "posttrain.kind": "pool", "posttrain.pool": self.pool_id,
                      UID_LABEL: str(lease.uid)}
            cid = api.create_container(self.config.image, agent_command(lease.uid), user=ROOT, working_dir=WORKDIR,
                                       hostname="sandbox", host_config=hardened, labels=labels, stdin_open=True,
                                       environment={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})["Id"]
            channel = AgentChannel.attach(api, cid)  # before start: the agent's hello must not be missed
            try:
                api.start(cid)
                channel.hello()
            except BaseException:
                channel.close()
                raise
            view = HostView.attach(api, cid) if self.host_checks else None
        except (SandboxStartError, OSError, *DOCKER_ERRORS) as exc:
            with self._cond:
                self._starting -= 1
                self.stats["create_failures"] += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                self._backoff_until = time.monotonic() + min(30.0, 2.0 ** min(self.stats["create_failures"], 5))
                self._cond.notify_all()
            if cid is not None:
                self._remove(self._client, cid, lease)
            elif lease is not None:
                lease.release()
            log.warning("docker pool: cannot start a container: %s", exc)
            return
        rlimits = {"fsize": [self.max_file_mb << 20] * 2, "nofile": [self.max_open_files] * 2, "core": [0, 0]}
        box = Box(cid=cid, api=api, channel=channel, memory_mb=self.memory_mb, rlimits=rlimits, lease=lease,
                  view=view, idle_since=time.monotonic())
        with self._cond:
            self._starting -= 1
            if self._closing:
                closing = True
            else:
                closing = False
                self.stats["created"] += 1
                self.last_error = ""
                self._boxes[cid] = box
                self._idle.appendleft(box)
                self._cond.notify_all()
        if closing:
            channel.close()
            self._remove(self._client, cid, lease)

    def _reset(self, box: Box) -> None:
        """Kill everything of the sandbox user in ``box`` and wipe it; back to idle, or removed if that fails."""
        ok = box.reset(full=True)
        with self._cond:
            self._resetting -= 1
            self.stats["resets"] += 1
            self.stats["reset_failures"] += not ok
            if ok and not self._closing and box.cid in self._boxes:
                box.idle_since = time.monotonic()
                self._idle.append(box)
                self._cond.notify_all()
                return
        self._discard(box)

    def _discard(self, box: Box) -> None:
        box.channel.close()
        with self._cond:
            self._boxes.pop(box.cid, None)
            try:
                self._idle.remove(box)
            except ValueError:
                pass
            self._cond.notify_all()
        if self._threads.start(self._remove, self._client, box.cid, box.lease, name="docker-pool-remove") is None:
            self._remove(self._client, box.cid, box.lease)

    def _remove(self, client, cid: str, lease: UidLease | None) -> None:
        """Remove a container, then give its uid back. If it may not be gone (the daemon is unreachable: the next
        reaper removes it by its labels), its uid stays leased while this process lives."""
        if client is None or not remove_container(client, cid):
            log.warning("docker pool: container %s may still run; its uid stays leased", cid[:12])
            return
        with self._cond:
            self.stats["removed"] += 1
        if lease is not None:
            lease.release()

    def _maintain(self) -> None:
        """Background: keep ``size`` containers while in use, shrink to ``min_idle`` when idle, refill."""
        while True:
            to_remove: list[Box] = []
            with self._cond:
                if self._closing:
                    return
                now = time.monotonic()
                idle_pool = now - self._last_acquire > self.config.idle_s
                target = self.config.min_idle if idle_pool else self.config.size
                total = len(self._boxes) + self._starting
                if total < target and now >= self._backoff_until and self._starting < self.config.parallel_starts:
                    self._start_one()
                    continue
                while len(self._idle) > 0 and len(self._boxes) > target and \
                        now - self._idle[0].idle_since > (self.config.idle_s if idle_pool else 5.0):
                    box = self._idle.popleft()
                    self._boxes.pop(box.cid, None)
                    to_remove.append(box)
                if not to_remove:
                    self._cond.wait(0.5)
            for box in to_remove:
                box.channel.close()
                self._remove(self._client, box.cid, box.lease)
