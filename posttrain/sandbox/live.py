"""The process's live sandbox: one backend kept between tasks when every task runs in this process.

A local ``pyflyte run`` (a test, a benchmark) scores every iteration's rollout and every evaluated version's
completions in one process. Made and closed by each of those tasks, the backend would start its warm slots again
every time (``bwrap-warm``: a bwrap sandbox and a Python zygote per slot, ~0.1 s each, and their cgroups; ``docker``:
its pool's containers) and stop them at the task's end. ``acquire`` keeps one backend for the process instead, made
from one ``SandboxConfig``: the next task with equal settings reuses it, one with other settings closes it and makes
its own. What isolates one execution from another is unchanged: a warm slot forks a fresh sandbox for each one and is
replaced after its ``max_uses``, whichever task they came from. ``shutdown`` closes the live backend: the workflow's
end or failure (``tasks.rollout.release_engines``), a task pod's end (``tasks.rollout.engine_lifetime``), the
interpreter's exit.

Example:
    >>> from posttrain.config import SandboxConfig
    >>> box = acquire(SandboxConfig())
    >>> acquire(SandboxConfig()) is box, acquire(SandboxConfig(timeout_s=5)) is box
    (True, False)
    >>> shutdown()
"""

from __future__ import annotations

import atexit
import copy
import threading

from posttrain.config import SandboxConfig
from posttrain.sandbox import Sandbox, make_sandbox
from posttrain.sandbox.scheduler import configure_from, default_scheduler

_lock = threading.Lock()
_live: Sandbox | None = None
_live_cfg: SandboxConfig | None = None  # a copy of the settings it was made from
_exit_hook = False


def acquire(cfg: SandboxConfig) -> Sandbox:
    """The live backend when it was made from settings equal to ``cfg``, else a new one (the old one closed)."""
    global _live, _live_cfg, _exit_hook
    with _lock:
        if _live is not None and _live_cfg == cfg:
            configure_from(default_scheduler(), cfg)  # the process-wide limits: another backend may have set its own
            return _live
        _close_live()
        _live, _live_cfg = make_sandbox(cfg), copy.deepcopy(cfg)
        if not _exit_hook:
            atexit.register(shutdown)
            _exit_hook = True
        return _live


def shutdown() -> None:
    """Close the live backend, if any (idempotent); the next ``acquire`` makes a new one."""
    with _lock:
        _close_live()


def live_sandbox() -> Sandbox | None:
    """The process's live backend, or None."""
    return _live


def _close_live() -> None:
    global _live, _live_cfg
    box, _live, _live_cfg = _live, None, None
    if box is not None:
        box.close()
