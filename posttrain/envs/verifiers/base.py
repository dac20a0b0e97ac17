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

import json
from dataclasses import dataclass, field
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


def harness_records(stdout: str, nonce: str) -> list[dict]:
    """The JSON records on lines that start with ``nonce``; every other line is the program's and is ignored.

    >>> harness_records('N {"a": 1}\\nX {"a": 2}\\nN [3]\\nN nope\\n', "N")
    [{'a': 1}]
    """
    prefix = nonce + " "
    records = []
    for line in stdout.splitlines():
        if line.startswith(prefix):
            try:
                record = json.loads(line[len(prefix):])
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


Problems = list[tuple[str, str]]  # (field, reason) pairs found by ``Verifier.validate``


class HostOnlyError(TypeError):
    """A sandbox function was called on a verifier that scores on the host (``needs_sandbox=False``)."""


@dataclass(frozen=True)
class Verifier:
    """One verifier kind: the functions the suite loader, admission and the reward stage call.

    - ``validate(spec)`` -> problems with the spec's verifier config (empty when valid); the suite loader turns
      each into a ``Rejection`` naming the field.
    - ``extract_solution(completion)`` -> the solution (program, edit script or answer text) from a completion.
    - ``build_execution(spec, solution, cfg, nonce)`` -> the sandbox execution; never contains expected answers.
    - ``score(spec, result, nonce)`` -> the ``Verdict``, computed on the host.
    - ``probes(spec)`` -> degenerate or cheating solutions by name (already extracted, ready for ``verify_many``);
      admission's anti-hacking check requires every one of them to fail.
    - ``mutants(spec)`` -> wrong-but-plausible variants of the reference (AST mutants, perturbed values, moved
      objects, reverted edits); admission's coverage check wants most of them killed (not passing).
    - ``needs_sandbox``: False for verifiers whose solution is data, not code (``numeric``, ``scene``); those
      provide ``score_on_host(spec, solution)`` and ``verify_many`` never starts a sandbox for them (their
      ``build_execution`` and ``score`` raise ``HostOnlyError``).
    - ``config_schema``: a JSON Schema of the ``verifier`` mapping for this kind (used by ``envs.schema``).
    """

    kind: str
    validate: Callable[[EnvSpec], Problems]
    extract_solution: Callable[[str], str]
    build_execution: Callable[[EnvSpec, str, SandboxConfig, str], Execution]
    score: Callable[[EnvSpec, ExecutionResult, str], Verdict]
    probes: Callable[[EnvSpec], dict[str, str]]
    mutants: Callable[[EnvSpec], list[str]]
    needs_sandbox: bool = True
    score_on_host: Callable[[EnvSpec, str], Verdict] | None = None
    config_schema: dict = field(default_factory=dict)


def host_only(kind: str):
    """``build_execution`` / ``score`` stand-ins for a host-only verifier: calling them is a programming error."""

    def refuse(*_args, **_kwargs):
        raise HostOnlyError(f"the {kind!r} verifier scores on the host: call score_on_host(spec, solution) "
                            "(verify_many does this) instead of building a sandbox execution")

    return refuse
