"""What the concrete sandbox backends share: ``SandboxBackend.run`` checks an execution (``workspace``) before the
backend's own ``_run`` sees it, as a ``Prepared`` execution (files with normalized names, environment, argv); an
invalid one is an infra error naming the field, never a crash.

Example:
    >>> from posttrain.sandbox.base import Execution, ExecutionResult
    >>> class Echo(SandboxBackend):
    ...     def _run(self, execution, prepared, t0):
    ...         return ExecutionResult(exit_code=0, stdout=" ".join(prepared.argv))
    >>> Echo().run(Execution(files={"a.py": ""}, command=["python", "a.py"])).stdout.endswith("python3 a.py")
    True
    >>> Echo().run(Execution(files={"../a.py": ""}, command=["python3", "a.py"])).extra["invalid"]
    True
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from posttrain.sandbox.base import Execution, ExecutionResult
from posttrain.sandbox.workspace import check_execution, checked_files, resolve_command, sandbox_env


@dataclass
class Prepared:
    """An execution checked for a backend: its workspace files (names normalized), environment and argv."""

    files: list[tuple[str, str]]
    env: dict[str, str]
    argv: list[str]
    trusted_files: list[tuple[str, str]] = field(default_factory=list)


class SandboxBackend(ABC):
    """What the concrete backends share: ``run`` checks the execution first (an invalid one is an infra error
    naming the field, never a crash) and hands it to the backend's ``_run``; ``with make_sandbox(...) as box:``
    closes on exit."""

    name = "sandbox"

    def run(self, execution: Execution) -> ExecutionResult:
        """Run ``execution`` to completion or its deadline; program failures are results, never exceptions."""
        t0 = time.monotonic()
        try:
            prepared = self._prepare(execution)
        except ValueError as exc:
            refused = self._infra(f"invalid execution: {exc}", t0)
            refused.extra["invalid"] = True  # nothing started, and retrying cannot help
            return refused
        return self._run(execution, prepared, t0)

    def _prepare(self, execution: Execution) -> Prepared:
        """The checked execution; ``ValueError`` naming the field when it cannot run (overrides add checks)."""
        check_execution(execution)
        return Prepared(checked_files(execution.files), sandbox_env(execution), resolve_command(execution),
                        checked_files(execution.trusted_files, "trusted_files"))

    @abstractmethod
    def _run(self, execution: Execution, prepared: Prepared, t0: float) -> ExecutionResult:
        """Run a prepared execution (``t0``: when ``run`` began); the backend's own part of ``run``."""

    def _infra(self, message: str, t0: float) -> ExecutionResult:
        """The result of a sandbox that failed (not its program), ``t0`` being when the run began."""
        return ExecutionResult(exit_code=None, infra_error=message, start_ms=(time.monotonic() - t0) * 1000,
                               extra={"backend": self.name})

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:  # pragma: no cover - overridden
        pass
