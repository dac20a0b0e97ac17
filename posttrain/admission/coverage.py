"""The coverage check: mutation testing of the reference. ``verifier.mutants(spec)`` gives wrong-but-plausible
variants (AST mutants: operators, comparisons, constants +-1, returns; perturbed values for data verifiers); the
tests must *kill* (fail) at least ``mutation_threshold`` of them.

The row's value is the mutation score, killed / total, over at most ``max_mutants`` mutants spread evenly over the
verifier's list; a surviving mutant is shown by its changed line. Reason codes: ``admission.reasons``.

Example:
    >>> ref = "def f(x):\\n    return x + 1\\n"
    >>> body = ["x - 1", "x + 1", "None"]
    >>> ms = select_mutants(ref, [f"def f(x):\\n    return {b}" for b in body], 8)
    >>> len(ms), mutation_score([True, False])
    (2, 0.5)
    >>> changed_line(ref, ms[0])
    'return x - 1'
"""

from __future__ import annotations

import ast
import difflib

from posttrain.admission.report import INFRA, CheckRow
from posttrain.envs.mutation import thin
from posttrain.envs.verifiers.base import Verdict

CHECK = "coverage"
MAX_LISTED = 5  # surviving mutants shown in the detail


def _normal(source: str) -> str:
    try:
        return ast.unparse(ast.parse(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source.strip()


def select_mutants(reference: str, mutants: list[str], limit: int) -> list[str]:
    """Distinct mutants that differ from the reference, at most ``limit`` of them, spread evenly (deterministic)."""
    original = _normal(reference)
    distinct = [m for m in dict.fromkeys(mutants) if _normal(m) != original]
    return thin(distinct, max(0, limit))


def mutation_score(killed: list[bool]) -> float:
    """killed / total (1.0 for no mutants: nothing survived)."""
    return sum(killed) / len(killed) if killed else 1.0


def changed_line(reference: str, mutant: str) -> str:
    """The first line of ``mutant`` that differs from the (normalized) reference, stripped."""
    ref_lines, mut_lines = _normal(reference).splitlines(), mutant.strip().splitlines()
    for line in difflib.ndiff(ref_lines, mut_lines):
        if line.startswith("+ "):
            return line[2:].strip()[:100]
    return mutant.strip().splitlines()[0][:100] if mutant.strip() else "<empty>"


def coverage_row(env_id: str, reference: str, mutants: list[str], verdicts: list[Verdict],
                 threshold: float) -> CheckRow:
    """Mutation score of ``mutants`` (their ``verdicts`` in order) against ``threshold``."""
    if not mutants:
        return CheckRow(env_id, CHECK, True, f"{CHECK}.not_applicable", "the verifier produced no mutants")
    infra = [v for v in verdicts if v.excluded]
    if infra:
        return CheckRow(env_id, CHECK, False, INFRA, infra[0].infra_error)
    killed = [not v.passed for v in verdicts]
    score = mutation_score(killed)
    survivors = [changed_line(reference, m) for m, k in zip(mutants, killed) if not k]
    listed = "; ".join(f"`{s}`" for s in survivors[:MAX_LISTED])
    more = f" (+{len(survivors) - MAX_LISTED} more)" if len(survivors) > MAX_LISTED else ""
    head = f"mutation score {score:.2f} ({sum(killed)}/{len(killed)} killed, threshold {threshold:g})"
    if score + 1e-9 < threshold:
        return CheckRow(env_id, CHECK, False, f"{CHECK}.mutants_survived", f"{head}; survivors: {listed}{more}", score)
    return CheckRow(env_id, CHECK, True, f"{CHECK}.ok", head + (f"; survivors: {listed}{more}" if survivors else ""),
                    score)
