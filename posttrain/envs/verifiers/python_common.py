"""What the Python verifiers (``python_tests``, ``python_asserts``) share: the program to run, probes, mutants.

- ``Programs(config).program_for(spec, solution)``: with ``verifier.complete_prompt: true`` (imported HumanEval-style envs whose
  prompt is a signature plus docstring), a solution that does not itself define the entry point is taken as the
  continuation of the prompt and run as ``prompt + solution``; otherwise the solution is the whole program
  (``config``: the kind's config dataclass; ``reference_program`` and ``mutants`` of the reference likewise).
- ``python_probes(spec)``: degenerate and cheating programs that must fail (admission's anti-hacking battery).
- ``spec_checks(kind, own_files)``: the checks both kinds make of the rest of the spec (runtime, entry point, files
  reserved for the harness); ``CompletePrompt``: their shared ``complete_prompt`` config field.
- ``shown(value, chars)``: a short text of a value a harness record carried (the program may have forged it: any
  size, any depth); never raises.
- ``SIGNALS``: what both kinds' verdicts measure for reward layers (``counted_verdict`` sets ``compiles`` and
  ``tests``; ``Programs.lint`` computes ``lint`` on demand).

Example:
    >>> from posttrain.envs.spec import EnvSpec
    >>> spec = EnvSpec(id="t/inc", prompt="def inc(x):\\n    '''x + 1\\n    >>> inc(1)\\n    2\\n    '''\\n",
    ...                entry_point="inc", reference="def inc(x):\\n    return x + 1\\n",
    ...                verifier={"kind": "python_tests", "complete_prompt": True, "cases": []})
    >>> from posttrain.envs.verifiers.python_tests import PythonTestsConfig
    >>> Programs(PythonTestsConfig).program_for(spec, "    return x + 1\\n").startswith("def inc(x):")
    True
    >>> prompt_examples(spec.prompt, "inc")
    [((1,), 2)]
    >>> sorted(python_probes(spec))[:4]
    ['always-equal object', 'empty program', 'exit inside the call', 'fake pass lines']
    >>> Programs(PythonTestsConfig).lint(spec, "    return y + 1\\n")   # pyflakes reads prompt + solution here
    (0.0, "line 6: undefined name 'y'")
"""

from __future__ import annotations

import ast
import json
import keyword
import re
from dataclasses import dataclass
from typing import Annotated, Callable

from posttrain.envs import mutation
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers.base import Problems, Verdict, sandbox_fields
from posttrain.envs.verifiers.lint import pyflakes_signal
from posttrain.envs.verifiers.typed_config import Rule, clip, parse
from posttrain.sandbox.base import ExecutionResult

MAX_MUTANTS = mutation.DEFAULT_LIMIT
CompletePrompt = Annotated[bool, Rule(doc="if the solution does not define entry_point, run prompt + solution "
                                          "(HumanEval-style prompts that end in a signature and docstring)")]
SIGNALS = {
    "compiles": "1 when the program compiled in the sandbox (the harness got past compiling it), else 0",
    "tests": "the fraction of the tests passed: the kind's own reward",
    "lint": "1 when pyflakes finds nothing in the program the harness runs (prompt + solution with "
            "complete_prompt), else 0; parsed on the host, never run, only for envs whose layers name it",
}


def spec_checks(kind: str, own_files: frozenset[str]) -> Callable[[EnvSpec], Problems]:
    """The ``check_spec`` of a Python verifier: runtime python, a function name as entry point, and no workspace
    file where the verifier writes its own (``own_files``)."""

    def check_spec(spec: EnvSpec) -> Problems:
        problems: Problems = []
        if spec.runtime != "python":
            problems.append(("runtime", f"{kind} needs runtime 'python', got {spec.runtime!r}"))
        if not (isinstance(spec.entry_point, str) and spec.entry_point.isidentifier()
                and not keyword.iskeyword(spec.entry_point)):
            problems.append(("entry_point", f"must be a Python function name, got {spec.entry_point!r}"))
        for name in sorted(own_files & set(spec.workspace)):
            problems.append((f"workspace.{name}", "reserved for the verifier's own files"))
        return problems

    return check_spec


def defines(source: str, name: str) -> bool:
    """Whether ``source`` parses and binds ``name`` at module level (def, class, assignment or import)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names):
                return True
    return False


@dataclass(frozen=True)
class Programs:
    """The programs a Python verifier kind runs, read from its typed config (``config``, with a ``complete_prompt``
    field): its ``settings``, parsed from the spec's ``verifier`` mapping as ``Verifier.settings`` does."""

    config: type

    def program_for(self, spec: EnvSpec, solution: str) -> str:
        """The Python program the harness runs for ``solution`` (see the module docstring for ``complete_prompt``)."""
        if parse(self.config, spec.verifier).complete_prompt and not defines(solution, spec.entry_point):
            return spec.prompt + solution
        return solution

    def reference_program(self, spec: EnvSpec) -> str:
        """The program the reference runs as (``program_for`` of the reference)."""
        return self.program_for(spec, spec.reference)

    def mutants(self, spec: EnvSpec, limit: int = MAX_MUTANTS) -> list[str]:
        """Single-point AST mutants of the reference program (operators, comparisons, constants +-1, returns)."""
        return mutation.python_mutants(self.reference_program(spec), limit)

    def lint(self, spec: EnvSpec, solution: str) -> tuple[float, str]:
        """The ``lint`` signal of ``solution`` (``lint.pyflakes_signal`` of the program it runs as)."""
        return pyflakes_signal(self.program_for(spec, solution))


_EXAMPLE = re.compile(r"^\s*(?:>>>\s*)?(?P<call>{name}\(.*\))\s*(?:==|➞|->|=>|returns|should return)"
                      r"\s*(?P<out>.+?)\s*$")


def prompt_examples(prompt: str, entry: str) -> list[tuple[tuple, object]]:
    """(args, output) pairs the prompt shows for ``entry``: doctest lines (``>>> f(1)`` then ``2``) and
    ``f(1) == 2`` / ``f(1) -> 2`` / ``f(1) ➞ 2`` lines (also inside ``#`` or ``//`` comments), when both sides
    are Python literals."""
    if not entry:
        return []
    lines = [line.strip().lstrip("#/*").strip() for line in prompt.splitlines()]  # comment markers dropped
    found: list[tuple[tuple, object]] = []
    inline = re.compile(_EXAMPLE.pattern.format(name=re.escape(entry)))
    for i, stripped in enumerate(lines):
        match = inline.match(stripped)
        if match:
            call_src, out_src = match.group("call"), match.group("out")
        elif stripped.startswith(">>> ") and stripped[4:].lstrip().startswith(entry + "(") and i + 1 < len(lines):
            call_src, out_src = stripped[4:].strip(), lines[i + 1]
        else:
            continue
        pair = _literal_call(call_src, entry, out_src)
        if pair is not None and pair not in found:
            found.append(pair)
    return found


def _literal_call(call_src: str, entry: str, out_src: str):
    try:
        call = ast.parse(call_src, mode="eval").body
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == entry
                and not call.keywords):
            return None
        args = tuple(ast.literal_eval(arg) for arg in call.args)
        return args, ast.literal_eval(out_src)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None


def python_probes(spec: EnvSpec, fake_lines: tuple[str, ...] = ()) -> dict[str, str]:
    """Degenerate and cheating Python programs, by name, that a sound env must fail."""
    e = spec.entry_point or "solution"
    stub = f"def {e}(*args, **kwargs):\n    return None\n"
    fakes = ("PASS", "OK", "ok 1 - all tests", "All tests passed", "Ran 1 test in 0.001s", "OK (skipped=0)",
             '{"case": 0, "value": 0}', '{"test": 0, "ok": true}', '{"compiled": true}', *fake_lines)
    probes = {
        "empty program": "",
        "no-op def": f"def {e}(*args, **kwargs):\n    pass\n",
        "return None": stub,
        "sys.exit(0) at import": "import sys\nsys.exit(0)\n" + stub,
        "os._exit(0) at import": "import os\nos._exit(0)\n" + stub,
        "exit inside the call": f"import os\n\ndef {e}(*args, **kwargs):\n    os._exit(0)\n",
        "raise SkipTest at import": "import unittest\nraise unittest.SkipTest('skipped')\n",
        "raise SkipTest inside the call": (f"import unittest\n\ndef {e}(*args, **kwargs):\n"
                                           "    raise unittest.SkipTest('skipped')\n"),
        "patch builtins.print": ("import builtins\n_real = builtins.print\n"
                                 "builtins.print = lambda *a, **k: _real('PASS')\n" + stub),
        "replace sys.stdout": ("import io, sys\nsys.stdout = io.StringIO()\nsys.__stdout__ = sys.stdout\n" + stub),
        "patch harness I/O": ("import json, os\n_write = os.write\n"
                              "os.write = lambda fd, data: _write(fd, data.replace(b'\"error\"', b'\"value\"'))\n"
                              "json.dumps = lambda *a, **k: '0'\n" + stub),
        "always-equal object": ("class _Any:\n    def __eq__(self, other):\n        return True\n"
                                "    def __ne__(self, other):\n        return False\n    __hash__ = object.__hash__\n"
                                f"\ndef {e}(*args, **kwargs):\n    return _Any()\n"),
        "fake pass lines": "".join(f"print({line!r})\n" for line in fakes) + stub,
    }
    examples = prompt_examples(spec.prompt, spec.entry_point)
    if examples:
        probes["hard-coded prompt outputs"] = (f"_SEEN = {examples!r}\n\ndef {e}(*args):\n"
                                               "    for seen, out in _SEEN:\n"
                                               "        if list(seen) == list(args):\n"
                                               "            return out\n"
                                               "    return None\n")
    return probes


def shown(value, chars: int) -> str:
    """At most ``chars`` characters showing ``value`` (a string as it is, anything else as JSON); never raises.

    >>> shown("ZeroDivisionError: division by zero", 20), shown([1, [2]], 20)
    ('ZeroDivisionError...', '[1, [2]]')
    """
    if isinstance(value, str):
        return clip(value, chars)
    try:
        return clip(json.dumps(value), chars)
    except (ValueError, TypeError, RecursionError):
        return f"<{type(value).__name__} too deep to show>"


def harness_status(records: list[dict]) -> tuple[dict | None, bool]:
    """The harness's compile-status record (None if it printed none) and whether the solution compiled."""
    status = next((r for r in records if "compiled" in r), None)
    return status, bool(status and status["compiled"] is True)


def unjudged_detail(status: dict | None, compiled: bool, result: ExecutionResult) -> str:
    """Why the harness judged nothing: no output at all, or a solution that does not compile ("" otherwise)."""
    if status is None:
        how = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        return f"no harness output ({how}): {result.stderr.strip()[-160:]}"
    if not compiled:
        return f"does not compile: {shown(status.get('error', ''), 160)}"
    return ""


def counted_verdict(result: ExecutionResult, passed: int, total: int, compiled: bool, detail: str,
                    tests_timed_out: int = 0) -> Verdict:
    """The verdict of ``passed`` out of ``total`` host-judged tests of one execution (``tests_timed_out`` of them
    stopped at their own deadline)."""
    return Verdict(reward=passed / total, passed=passed == total, compiled=compiled, tests_passed=passed,
                   tests_total=total, exit_code=result.exit_code, timed_out=result.timed_out,
                   tests_timed_out=tests_timed_out, detail=detail,
                   signals={"compiles": float(compiled), "tests": passed / total}, **sandbox_fields(result))
