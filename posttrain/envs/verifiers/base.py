"""What every verifier kind provides, and the ``Verdict`` it returns for one scored execution.

A verifier turns (env spec, candidate solution) into a sandbox ``Execution`` and turns the ``ExecutionResult``
back into a ``Verdict``. The verdict is always decided on the host from values the trusted harness reported,
never from what the untrusted program claims; ``nonce`` ties the harness's result lines to one execution.

Example:
    >>> v = Verdict(reward=0.0, passed=False, compiled=False, tests_passed=0, tests_total=0,
    ...             infra_error="sandbox did not start", detail="infra: sandbox did not start")
    >>> v.excluded          # infra failures are flagged and left out of rewards, never counted as a 0
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.sandbox.base import Execution, ExecutionResult


@dataclass
class Verdict:
    """The host's judgement of one solution of one env."""

    reward: float  # fraction of cases passed, in [0, 1]; 0.0 when ``excluded``
    passed: bool  # every case passed
    compiled: bool  # the solution parsed (the harness got past compiling it)
    tests_passed: int
    tests_total: int
    exit_code: int | None = None
    timed_out: bool = False
    infra_error: str = ""  # non-empty: the sandbox failed, not the solution; see ``excluded``
    detail: str = ""  # short human-readable reason
    sandbox_ms: float = 0.0  # sandbox start plus run time

    @property
    def excluded(self) -> bool:
        """True for infra failures: callers drop these from rewards and metrics instead of scoring them 0."""
        return bool(self.infra_error)

    @classmethod
    def infra(cls, result: ExecutionResult, tests_total: int) -> "Verdict":
        """The verdict for an execution the sandbox itself failed to carry out."""
        return cls(reward=0.0, passed=False, compiled=False, tests_passed=0, tests_total=tests_total,
                   exit_code=result.exit_code, timed_out=result.timed_out, infra_error=result.infra_error,
                   detail=f"infra: {result.infra_error}", sandbox_ms=result.start_ms + result.run_ms)


Problems = list[tuple[str, str]]  # (field, reason) pairs found by ``Verifier.validate``


@dataclass(frozen=True)
class Verifier:
    """One verifier kind: the functions the suite loader, admission and the reward stage call.

    - ``validate(spec)`` -> problems with the spec's verifier config (empty when valid); the suite loader turns
      each into a ``Rejection`` naming the field.
    - ``extract_solution(completion)`` -> the program to run, from a model completion.
    - ``build_execution(spec, solution, cfg, nonce)`` -> the sandbox execution; never contains expected answers.
    - ``score(spec, result, nonce)`` -> the ``Verdict``, computed on the host.
    """

    kind: str
    validate: Callable[[EnvSpec], Problems]
    extract_solution: Callable[[str], str]
    build_execution: Callable[[EnvSpec, str, SandboxConfig, str], Execution]
    score: Callable[[EnvSpec, ExecutionResult, str], Verdict]
