"""Sandboxes: run untrusted programs with files, resource limits and a deadline, and report what happened.

Three backends share one protocol (``base.Sandbox``): ``bwrap`` (bubblewrap namespaces; no daemon, the local
default), ``bwrap-warm`` (the same isolation per execution, forked in milliseconds from warm bwrap slots:
``warm.py``) and ``docker`` (the ``docker`` subpackage: a warm pool of hardened containers, ``DockerPool``, set by
``SandboxConfig.docker``; ``DockerSandbox`` is the cold one-container-per-execution variant). All run the
``python``, ``node`` and ``bash`` runtimes, offer stateful sessions with snapshots (``box.session()``,
``session.py``) and leave nothing behind (``lifecycle.py``).
``run_many`` runs a batch through the process-wide scheduler (``scheduler.py``): global concurrency limit,
tiered slots for short and long work, per-execution deadlines and queue/start/run timings on every result.

Example:
    >>> from posttrain.sandbox import Execution, make_sandbox, run_many
    >>> box = make_sandbox("bwrap")
    >>> r = box.run(Execution(files={"main.py": "print(6 * 7)"}, command=["python3", "main.py"]))
    >>> r.ok, r.stdout
    (True, '42\\n')
    >>> [r.exit_code for r in run_many(box, [Execution(files={}, command=["bash", "-c", "exit 3"], runtime="bash")])]
    [3]
"""

from __future__ import annotations

from posttrain.config import SandboxConfig
from posttrain.sandbox.base import Execution, ExecutionResult, Sandbox, SandboxStartError, truncate
from posttrain.sandbox.runner import run_many
from posttrain.sandbox.scheduler import Scheduler, configure_from, default_scheduler
from posttrain.sandbox.session import SandboxSession, SessionError, Snapshot, StepLog
from posttrain.sandbox.uids import uid_range

BACKENDS = ("bwrap", "bwrap-warm", "docker")

__all__ = ["Execution", "ExecutionResult", "Sandbox", "SandboxSession", "SandboxStartError", "Scheduler",
           "SessionError", "Snapshot", "StepLog", "default_scheduler", "make_sandbox", "run_many", "truncate"]


def make_sandbox(config_or_backend_name: SandboxConfig | str) -> Sandbox:
    """The sandbox a config (or a bare backend name, with default settings) asks for.

    A config also sets the process-wide scheduler's limits (``global_concurrency``, ``long_slots``, ...)."""
    cfg = (SandboxConfig(backend=config_or_backend_name) if isinstance(config_or_backend_name, str)
           else config_or_backend_name)
    if cfg.backend not in BACKENDS:
        raise ValueError(f"sandbox.backend={cfg.backend!r}: unknown, expected one of {BACKENDS}")
    if not isinstance(config_or_backend_name, str):
        configure_from(default_scheduler(), cfg)
    limits = {"max_processes": cfg.max_processes, "workspace_mb": cfg.workspace_mb, "tmp_mb": cfg.tmp_mb,
              "cpus": cfg.cpus, "session_output_bytes": cfg.session_output_bytes}  # what every backend applies
    host_uids = uid_range(cfg)
    if cfg.backend == "bwrap":
        from posttrain.sandbox.bwrap import BwrapSandbox

        return BwrapSandbox(host_uids=host_uids, **limits)
    if cfg.backend == "bwrap-warm":
        from posttrain.sandbox.warm import WarmBwrapSandbox

        return WarmBwrapSandbox(slots=cfg.global_concurrency, host_uids=host_uids, **limits)
    from posttrain.sandbox.docker import DockerPool  # imports the docker SDK only when asked

    return DockerPool(cfg.docker, memory_mb=cfg.memory_mb, host_uids=host_uids, **limits)
