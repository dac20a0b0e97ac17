"""Docker sessions: one pooled container held for a multi-step agent (see ``posttrain.sandbox.session``).

Every step is one request to the container's agent (``box.Box.run``); after a step of the agent's own commands the
container is cleaned except for its workspace (``Box.reset(full=False)``: every other process killed, ``/tmp``,
``/dev/shm`` and IPC emptied), so nothing of a step outlives it and only ``/work`` carries state, as with bwrap.
A step's result is its program's outcome even when the cleanup after it fails; the container then refuses every
later step (an infra error: nothing ran). ``close()`` gives the container back (``give_back``, the pool's
``release``), which resets it fully or replaces it if a step left it unhealthy.

Example:
    >>> from posttrain.sandbox.docker import DockerPool
    >>> with DockerPool() as pool, pool.session(timeout_s=10) as s:      # doctest: +SKIP
    ...     s.write_file("a.txt", "x")
    ...     s.run("cat a.txt").stdout
    'x'
"""

from __future__ import annotations

import time
from typing import Callable

from posttrain.sandbox import lifecycle
from posttrain.sandbox.base import Execution, SandboxStartError
from posttrain.sandbox.capture import RawRun
from posttrain.sandbox.docker.box import Box
from posttrain.sandbox.scheduler import default_scheduler
from posttrain.sandbox.session import SandboxSession
from posttrain.sandbox.workspace import resolve_command, sandbox_env


class DockerSession(SandboxSession):
    """A session holding one pooled container; each step is one agent request, then everything it left running is
    killed and ``/tmp`` emptied (the workspace stays)."""

    backend = "docker"

    def __init__(self, box: Box, give_back: Callable[..., None], *, workspace_mb: int, **kw):
        """``box``: the container, acquired for this session; ``give_back(box, healthy=...)`` when it closes."""
        super().__init__(workspace_mb=workspace_mb, scheduler=default_scheduler(), **kw)
        self.box, self._give_back = box, give_back
        self._healthy = True
        lifecycle.track(self)

    def _exec(self, execution: Execution, stdin: bytes, trusted: bool = False) -> RawRun:
        if not self._healthy:
            raise SandboxStartError("the session's container could not be cleaned after an earlier step")
        try:
            raw = self.box.run(execution, resolve_command(execution), sandbox_env(execution), b"", stdin,
                               time.monotonic())
        except BaseException:
            self._healthy = False
            raise
        if raw.extra["discard"]:
            self._healthy = False
        elif not trusted:  # our own tools (cat, tar) leave nothing behind; the agent's commands may
            self._healthy = self.box.reset(full=False)
        return raw

    def _release(self) -> None:
        busy = self._lock.locked()  # a step is running: the container goes, and the step with it
        self._give_back(self.box, healthy=self._healthy and not busy)
