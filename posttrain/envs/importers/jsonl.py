"""Import HumanEval- or MBPP-style JSONL problems into a suite folder of env spec YAML files.

One JSON object per line. Recognised fields:

- HumanEval style: ``task_id``, ``prompt`` (signature + docstring), ``canonical_solution`` (the body that
  continues the prompt), ``test`` (a module defining ``check(candidate)``), ``entry_point``.
- MBPP style: ``task_id``, ``text`` (or ``prompt``) describing the task, ``code`` (a whole program),
  ``test_list`` (``assert`` statements), optional ``test_setup_code``, ``challenge_test_list``, ``entry_point``
  (else taken from the function the first assert calls).

Tests become a verifier whose verdict the host decides. Every ``assert f(args) == expected`` whose arguments and
expected value are JSON-exact literals (no tuples or sets, finite floats) is converted by AST into a
``python_tests`` value case; when *every* test converts, the env uses ``python_tests`` (the strongest check:
return values are compared on the host). Otherwise the env keeps its tests as ``python_asserts`` (each assert run
in its own child process, pass/fail reported by the trusted parent): weaker, because the code under test runs in
the same process as the assert (see ``verifiers/python_asserts.py``). Asserts that never call the function under
test (``assert True``) are dropped. HumanEval envs set ``complete_prompt: true``: a completion that only continues
the prompt is run as ``prompt + completion``.

Example:
    >>> record = {"task_id": "Toy/0", "entry_point": "inc", "prompt": "def inc(x):\\n    '''x + 1'''\\n",
    ...           "canonical_solution": "    return x + 1\\n",
    ...           "test": "def check(candidate):\\n    assert candidate(1) == 2\\n    assert candidate(-1) == 0\\n"}
    >>> spec = record_to_spec(record, prefix="toy", split="train")
    >>> spec.id, spec.verifier["kind"], spec.verifier["cases"]
    ('toy/toy_0', 'python_tests', [{'args': [1], 'expected': 2}, {'args': [-1], 'expected': 0}])
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from posttrain.envs.generators import render
from posttrain.envs.spec import EnvSpec, Limits
from posttrain.envs.verifiers import get_verifier

HEADER = "# Imported by `posttrain import-jsonl` from {source}, line {line}.\n"


class ImportProblem(ValueError):
    """A JSONL record that cannot become an env (the reason names the field)."""


@dataclass
class ImportResult:
    written: list[Path] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)  # verifier kind -> envs
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)


def json_exact(value) -> bool:
    """Whether ``value`` survives a JSON round trip unchanged (so the harness can pass or compare it).

    >>> json_exact([1, "a", None, {"k": 2.5}]), json_exact((1, 2)), json_exact(float("nan")), json_exact({1: 2})
    (True, False, False, False)
    """
    if value is None or type(value) in (bool, int, str):
        return True
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is list:
        return all(json_exact(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and json_exact(v) for k, v in value.items())
    return False


def as_case(statement: ast.stmt, names: set[str]) -> dict | None:
    """``assert f(literal, ...) == literal`` (either side) as ``{"args", "expected"}``; None if it is anything else."""
    if not (isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Compare)
            and len(statement.test.ops) == 1 and isinstance(statement.test.ops[0], ast.Eq)):
        return None
    left, right = statement.test.left, statement.test.comparators[0]
    for call, other in ((left, right), (right, left)):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in names
                and not call.keywords and not any(isinstance(a, ast.Starred) for a in call.args)):
            try:
                args = [ast.literal_eval(a) for a in call.args]
                expected = ast.literal_eval(other)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
            if json_exact(args) and json_exact(expected):
                return {"args": args, "expected": expected}
    return None


def _calls(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _has_assert(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Assert) for n in ast.walk(node))


def split_tests(source: str, statements: list[ast.stmt], names: set[str]) -> list[tuple[str, ast.stmt]]:
    """Each statement containing an assert that calls one of ``names`` as a test: (code, statement); statements
    without asserts before it (helper assignments) are prepended to its code."""
    tests, prelude = [], []
    for statement in statements:
        code = ast.get_source_segment(source, statement) or ast.unparse(statement)
        if not _has_assert(statement):
            prelude.append(code)
        elif _calls(statement, names):
            tests.append(("\n".join([*prelude, code]), statement))
    return tests


def _dedent_block(source: str, statements: list[ast.stmt]) -> list[str]:
    import textwrap

    return [textwrap.dedent(ast.get_source_segment(source, s, padded=True) or ast.unparse(s)) for s in statements]


def humaneval_tests(test_source: str, entry: str) -> tuple[str, list[str], list[dict | None]]:
    """(setup, test snippets, value cases) of a HumanEval ``test`` module."""
    try:
        module = ast.parse(test_source)
    except SyntaxError as error:
        raise ImportProblem(f"test: does not parse ({error.msg}, line {error.lineno})") from None
    check = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None or not check.args.args:
        raise ImportProblem("test: no `def check(candidate)` function")
    param = check.args.args[0].arg
    setup_nodes = [n for n in module.body if n is not check and not (
        isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "METADATA" for t in n.targets))]
    setup = "\n".join(ast.get_source_segment(test_source, n) or ast.unparse(n) for n in setup_nodes)
    body = "\n".join(_dedent_block(test_source, check.body))
    body_tree = ast.parse(body)
    names = {param, entry}
    tests = split_tests(body, body_tree.body, names)
    snippets = [code if param == "candidate" else f"{param} = candidate\n{code}" for code, _ in tests]
    return setup, snippets, [as_case(statement, names) for _, statement in tests]


def mbpp_entry(record: dict) -> str:
    """The function under test of an MBPP record: ``entry_point`` or the function its first assert calls."""
    if isinstance(record.get("entry_point"), str) and record["entry_point"]:
        return record["entry_point"]
    try:
        defined = {n.name for n in ast.walk(ast.parse(record["code"])) if isinstance(n, ast.FunctionDef)}
        first = ast.parse(record["test_list"][0])
    except (SyntaxError, IndexError, TypeError) as error:
        raise ImportProblem(f"code/test_list: cannot find the function under test ({error})") from None
    for node in ast.walk(first):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in defined:
            return node.func.id
    raise ImportProblem("test_list[0]: calls no function that `code` defines")


def _slug(task_id) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "_", str(task_id).lower()).strip("_") or "task"


def _require(record: dict, *names: str) -> None:
    for name in names:
        if name not in record:
            raise ImportProblem(f"{name}: required field is missing")


def record_to_spec(record: dict, *, prefix: str, split: str, timeout_s: float = 5.0, memory_mb: int = 256) -> EnvSpec:
    """One JSONL record as an env spec; ``ImportProblem`` naming the field when it cannot be."""
    if not isinstance(record, dict):
        raise ImportProblem("line is not a JSON object")
    _require(record, "task_id")
    if "canonical_solution" in record or "test" in record:  # HumanEval style
        _require(record, "prompt", "canonical_solution", "test", "entry_point")
        entry, prompt = record["entry_point"], record["prompt"]
        reference = prompt + record["canonical_solution"]
        setup, snippets, cases = humaneval_tests(record["test"], entry)
        style, complete = "humaneval", True
    else:  # MBPP style
        _require(record, "code", "test_list")
        text = record.get("text", record.get("prompt"))
        if not isinstance(text, str):
            raise ImportProblem("text: required field is missing (or `prompt`)")
        tests = list(record["test_list"]) + list(record.get("challenge_test_list") or [])
        if not tests or not all(isinstance(t, str) for t in tests):
            raise ImportProblem("test_list: must be a non-empty list of assert statements")
        entry = mbpp_entry(record)
        prompt = f'"""\n{text.strip()}\nYour code should pass tests like this one:\n{tests[0].strip()}\n"""\n'
        reference, setup, complete, style = record["code"], record.get("test_setup_code") or "", False, "mbpp"
        snippets, cases = [], []
        for i, test in enumerate(tests):
            try:
                statements = ast.parse(test).body
            except SyntaxError as error:
                raise ImportProblem(f"test_list[{i}]: does not parse ({error.msg})") from None
            if _has_assert(ast.Module(body=statements, type_ignores=[])) and _calls(
                    ast.Module(body=statements, type_ignores=[]), {entry}):
                snippets.append(test.strip())
                cases.append(as_case(statements[0], {entry}) if len(statements) == 1 else None)
    if not snippets:
        raise ImportProblem("test: no assert calls the function under test")
    if not isinstance(reference, str) or not isinstance(prompt, str) or not prompt.strip():
        raise ImportProblem("prompt/solution: must be non-empty strings")
    if all(case is not None for case in cases):  # literal value cases need no setup code
        verifier = {"kind": "python_tests", "cases": cases}
    else:
        verifier = {"kind": "python_asserts", "asserts": snippets}
        if setup.strip():
            verifier["setup"] = setup.strip() + "\n"
    if complete:
        verifier["complete_prompt"] = True
    spec = EnvSpec(id=f"{prefix}/{_slug(record['task_id'])}", prompt=prompt, verifier=verifier, reference=reference,
                   entry_point=entry, domain="python", difficulty=1, kind="single_turn", runtime="python",
                   split=split, tags=["imported", style], limits=Limits(timeout_s=timeout_s, memory_mb=memory_mb))
    problems = get_verifier(spec.verifier_kind).validate(spec)
    if problems:
        raise ImportProblem("; ".join(f"{where}: {why}" for where, why in problems))
    return spec


def import_jsonl(path: str | Path, out: str | Path, *, prefix: str | None = None, split: str = "train",
                 timeout_s: float = 5.0, memory_mb: int = 256, overwrite: bool = False) -> ImportResult:
    """Write one spec YAML per good line of ``path`` into ``out``; bad lines are skipped with their reason."""
    source, root = Path(path), Path(out)
    prefix = prefix or _slug(root.name)
    root.mkdir(parents=True, exist_ok=True)
    result, seen = ImportResult(), set()
    for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            result.skipped.append((number, f"not JSON: {error}"))
            continue
        try:
            spec = record_to_spec(record, prefix=prefix, split=split, timeout_s=timeout_s, memory_mb=memory_mb)
        except ImportProblem as error:
            result.skipped.append((number, str(error)))
            continue
        target = root / (spec.id.split("/", 1)[1] + ".yaml")
        if spec.id in seen or (target.exists() and not overwrite):
            result.skipped.append((number, f"task_id: {spec.id!r} already exists (use --overwrite to replace)"))
            continue
        seen.add(spec.id)
        target.write_text(render(spec, HEADER.format(source=source.name, line=number)), encoding="utf-8")
        result.written.append(target)
        result.kinds[spec.verifier_kind] = result.kinds.get(spec.verifier_kind, 0) + 1
    return result


def add_arguments(parser) -> None:
    """The ``import-jsonl`` subcommand's arguments, for ``posttrain.cli``."""
    parser.add_argument("file", help="JSONL file of HumanEval- or MBPP-style problems")
    parser.add_argument("out", help="suite folder to write the env specs into")
    parser.add_argument("--prefix", default=None, help="id prefix (default: the folder name)")
    parser.add_argument("--split", default="train", choices=["train", "eval"])
    parser.add_argument("--timeout-s", type=float, default=5.0)
    parser.add_argument("--memory-mb", type=int, default=256)
    parser.add_argument("--overwrite", action="store_true", help="replace spec files that already exist")


def import_jsonl_command(args) -> int:
    """``posttrain import-jsonl FILE OUT``: import, print one line per skipped record and a summary.

    ``args`` is an ``argparse.Namespace`` with ``file`` and ``out`` (and optionally ``prefix``, ``split``,
    ``timeout_s``, ``memory_mb``, ``overwrite``, as ``add_arguments`` defines). Returns 0 when at least one env was
    written, 1 otherwise.
    """
    if not Path(args.file).is_file():
        print(f"import-jsonl: {args.file}: no such file", file=sys.stderr)
        return 1
    result = import_jsonl(args.file, args.out, prefix=getattr(args, "prefix", None),
                          split=getattr(args, "split", "train"), timeout_s=getattr(args, "timeout_s", 5.0),
                          memory_mb=getattr(args, "memory_mb", 256), overwrite=getattr(args, "overwrite", False))
    for number, reason in result.skipped:
        print(f"SKIPPED {args.file}:{number}: {reason}")
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(result.kinds.items())) or "none"
    print(f"imported {len(result.written)} envs into {args.out} ({kinds}); skipped {len(result.skipped)} lines")
    return 0 if result.written else 1


if __name__ == "__main__":
    import argparse

    _parser = argparse.ArgumentParser(prog="python -m posttrain.envs.importers.jsonl")
    add_arguments(_parser)
    sys.exit(import_jsonl_command(_parser.parse_args()))
