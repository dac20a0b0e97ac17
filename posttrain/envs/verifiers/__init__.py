"""Verifier registry and batch scoring: one module per verifier kind, looked up by a spec's ``verifier.kind``.

Kinds: ``python_tests`` (return values compared on the host), ``python_asserts`` (assert-style tests, one child
process each), ``workspace_tests`` (a solution edits a workspace, then trusted tests run against it), and the
host-only ``numeric`` (extracted values and formulas) and ``scene`` (geometric constraints), which never start a
sandbox: their answers are data, not code. ``verify_many`` gives each verdict the reward of its env's reward layers,
when the env declares any (``reward_layers``).

Example:
    >>> from posttrain.config import SandboxConfig
    >>> from posttrain.envs.suite import load_suite
    >>> from posttrain.sandbox import make_sandbox
    >>> VERIFIERS
    ('numeric', 'python_asserts', 'python_tests', 'scene', 'workspace_tests')
    >>> get_verifier("python_tests").kind
    'python_tests'
    >>> suite = load_suite("posttrain/envs/suites/demo_python")              # doctest: +SKIP
    >>> box = make_sandbox("bwrap")                                            # doctest: +SKIP
    >>> verdicts = verify_many([(s, s.reference) for s in suite.envs[:4]], box, SandboxConfig())  # doctest: +SKIP
    >>> [v.passed for v in verdicts]                                           # doctest: +SKIP
    [True, True, True, True]
"""

from __future__ import annotations

import logging
import secrets
from typing import Sequence

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import numeric, python_asserts, python_tests, scene, workspace_tests
from posttrain.envs.verifiers.base import Verdict, Verifier
from posttrain.envs.verifiers.reward_layers import layered
from posttrain.sandbox import run_many

log = logging.getLogger(__name__)

_REGISTRY: dict[str, Verifier] = {v.kind: v for v in (python_tests.VERIFIER, python_asserts.VERIFIER,
                                                     workspace_tests.VERIFIER, numeric.VERIFIER, scene.VERIFIER)}
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
    """Run every (spec, solution) pair in ``sandbox``, ``cfg.batch_concurrency`` at a time, and score each.

    Solutions are already passed through the verifier's ``extract_solution``. Host-only verifiers
    (``needs_sandbox=False``) are scored directly with ``score_on_host`` and start no sandbox. The result list is
    in input order; sandbox failures come back as verdicts with ``excluded`` set, after ``cfg.start_retries``
    retries. One pair's failure is that pair's alone: a verifier that raises scoring one result (its bug; output it
    cannot parse is already the solution's failure) gives that pair an excluded verdict naming the error, and the
    others keep theirs. An env with reward layers (``spec.reward``) gets its verdicts' rewards composed from their
    signals (``reward_layers.layered``), the on-demand signals its layers name computed here.
    """
    verdicts: list[Verdict | None] = [None] * len(specs_and_solutions)
    jobs = []  # (input index, spec, verifier, nonce, execution) of the sandboxed pairs
    for index, (spec, solution) in enumerate(specs_and_solutions):
        verifier = get_verifier(spec.verifier_kind)
        if not verifier.needs_sandbox:
            verdicts[index] = _score_on_host(verifier, spec, solution)
            continue
        nonce = new_nonce()
        jobs.append((index, spec, verifier, nonce, verifier.build_execution(spec, solution, cfg, nonce)))
    results = run_many(sandbox, [job[4] for job in jobs], concurrency=cfg.batch_concurrency,
                       start_retries=cfg.start_retries)
    for (index, spec, verifier, nonce, _), result in zip(jobs, results):
        try:
            verdicts[index] = verifier.score(spec, result, nonce)
        except Exception as error:  # noqa: BLE001 - our bug, not the solution's: flag it, never fail the batch
            log.exception("%s verifier raised scoring %s", verifier.kind, spec.id)
            verdicts[index] = _raised(verifier, error)
    return [_layered(spec, solution, verdict) for (spec, solution), verdict in zip(specs_and_solutions, verdicts)]


def _score_on_host(verifier: Verifier, spec: EnvSpec, solution: str) -> Verdict:
    """``score_on_host``, with a verifier bug reported as an excluded verdict instead of failing the whole batch."""
    try:
        return verifier.score_on_host(spec, solution)
    except Exception as error:  # noqa: BLE001 - our bug, not the solution's: flag it, never score it 0
        return _raised(verifier, error)


def _layered(spec: EnvSpec, solution: str, verdict: Verdict) -> Verdict:
    """``reward_layers.layered``, with an on-demand signal that raises (our bug) reported as an excluded verdict."""
    verifier = get_verifier(spec.verifier_kind)
    try:
        return layered(spec, solution, verdict, verifier)
    except Exception as error:  # noqa: BLE001 - our bug, not the solution's: flag it, never score it 0
        log.exception("reward layers of %s raised", spec.id)
        return _raised(verifier, error)


def _raised(verifier: Verifier, error: Exception) -> Verdict:
    """The excluded verdict of a pair its verifier raised on."""
    message = f"{verifier.kind} verifier raised {type(error).__name__}: {str(error)[:300]}"
    return Verdict(reward=0.0, passed=False, compiled=False, tests_passed=0, tests_total=0,
                   infra_error=message, detail=f"infra: {message}")
