"""Verifier registry and batch scoring: one module per verifier kind, looked up by a spec's ``verifier.kind``.

Example:
    >>> from posttrain.config import SandboxConfig
    >>> from posttrain.envs.suite import load_suite
    >>> from posttrain.sandbox import make_sandbox
    >>> VERIFIERS
    ('python_tests',)
    >>> get_verifier("python_tests").kind
    'python_tests'
    >>> suite = load_suite("posttrain/envs/suites/demo_python")              # doctest: +SKIP
    >>> box = make_sandbox("bwrap")                                            # doctest: +SKIP
    >>> verdicts = verify_many([(s, s.reference) for s in suite.envs[:4]], box, SandboxConfig())  # doctest: +SKIP
    >>> [v.passed for v in verdicts]                                           # doctest: +SKIP
    [True, True, True, True]
"""

from __future__ import annotations

import secrets
from typing import Sequence

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import python_tests
from posttrain.envs.verifiers.base import Verdict, Verifier
from posttrain.sandbox import run_many

_REGISTRY: dict[str, Verifier] = {v.kind: v for v in (python_tests.VERIFIER,)}
VERIFIERS: tuple[str, ...] = tuple(sorted(_REGISTRY))


class UnknownVerifierError(KeyError):
    """A spec names a verifier kind that no module implements."""

    def __str__(self) -> str:
        return f"unknown verifier kind {self.args[0]!r}; known kinds: {', '.join(VERIFIERS)}"


def get_verifier(kind: str) -> Verifier:
    """The verifier for ``kind``; raises ``UnknownVerifierError`` naming the known kinds."""
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise UnknownVerifierError(kind) from None


def new_nonce() -> str:
    """A fresh random marker for one execution's harness result lines."""
    return secrets.token_hex(16)


def verify_many(specs_and_solutions: Sequence[tuple[EnvSpec, str]], sandbox, cfg: SandboxConfig) -> list[Verdict]:
    """Run every (spec, solution program) pair in ``sandbox``, ``cfg.concurrency`` at a time, and score each.

    Solutions are programs (already passed through the verifier's ``extract_solution``). The result list is in
    input order; sandbox failures come back as verdicts with ``excluded`` set, after ``cfg.start_retries`` retries.
    """
    jobs = [(spec, get_verifier(spec.verifier_kind), new_nonce()) for spec, _ in specs_and_solutions]
    executions = [verifier.build_execution(spec, solution, cfg, nonce)
                  for (spec, verifier, nonce), (_, solution) in zip(jobs, specs_and_solutions)]
    results = run_many(sandbox, executions, concurrency=cfg.concurrency, start_retries=cfg.start_retries)
    return [verifier.score(spec, result, nonce) for (spec, verifier, nonce), result in zip(jobs, results)]
