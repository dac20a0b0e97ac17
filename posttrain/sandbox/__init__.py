"""Sandboxes: run untrusted programs with files, resource limits and a deadline, and report what happened.

Two backends share one protocol (``base.Sandbox``): ``bwrap`` (bubblewrap namespaces; no daemon, the local
default) and ``docker`` (a throwaway container per execution of the sandbox image). ``run_many`` runs a batch.

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

BACKENDS = ("bwrap", "docker")

__all__ = ["Execution", "ExecutionResult", "Sandbox", "SandboxStartError", "make_sandbox", "run_many", "truncate"]


def make_sandbox(config_or_backend_name: SandboxConfig | str) -> Sandbox:
    """The sandbox a config (or a bare backend name, with default settings) asks for."""
    cfg = (SandboxConfig(backend=config_or_backend_name) if isinstance(config_or_backend_name, str)
           else config_or_backend_name)
    if cfg.backend == "bwrap":
        from posttrain.sandbox.bwrap import BwrapSandbox

        return BwrapSandbox()
    if cfg.backend == "docker":
        from posttrain.sandbox.docker_backend import DockerSandbox  # imports the docker SDK only when asked

        return DockerSandbox(cfg.docker_image)
    raise ValueError(f"sandbox.backend={cfg.backend!r}: unknown, expected one of {BACKENDS}")
