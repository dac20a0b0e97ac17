"""Helpers shared by the workspace-suite generators (``terminal``, ``node``): check scripts and their expectations.

A check script prints one JSON value per case (``python3 -I {tests}/check.py CASE``); the expected stdout of each
case is computed here, on the host, by running the *fixed* module source (our own trusted code) on the same case
expressions, so the spec's expectations can never drift from the reference. Running the *buggy* source the same way
says which cases the untouched workspace already passes: those are guards (``guard: true``, see
``workspace_tests``), which earn nothing; admission checks every label against the real untouched workspace.

Example:
    >>> fixed = "def double(x):\\n    return 2 * x\\n"
    >>> python_expectations("calc", fixed, {"two": "calc.double(1)", "bad": "calc.double(None)"})
    {'two': '2', 'bad': '"TypeError"'}
    >>> print(python_check("calc", {"two": "calc.double(1)"}).splitlines()[2])
    sys.path.append("/work/src")  # appended: a workspace file can never shadow a standard module
    >>> [t.get("guard", False) for t in python_tests("calc", {"two": "", "bad": ""}, {"two": "2", "bad": '"TypeError"'},
    ...                                              {"two": "3", "bad": '"TypeError"'})]
    [False, True]
"""

from __future__ import annotations

import json
import types

from posttrain.envs.spec import EnvSpec, Limits


def python_check(module: str, cases: dict[str, str], src: str = "/work/src") -> str:
    """A trusted check script: imports ``module`` from ``src`` and prints ``json.dumps`` of case ``argv[1]``
    (an exception prints its type name as a JSON string)."""
    lines = "\n".join(f"    {name!r}: lambda: {expr}," for name, expr in cases.items())
    return (f"import json\nimport sys\nsys.path.append(\"{src}\")  # appended: a workspace file can never shadow "
            f"a standard module\nimport {module}\n\nCASES = {{\n{lines}\n}}\n\ntry:\n    value = CASES[sys.argv[1]]()\n"
            "except Exception as error:  # the type name is the observable result\n"
            "    value = type(error).__name__\nprint(json.dumps(value, sort_keys=True))\n")


def python_expectations(module: str, fixed_source: str, cases: dict[str, str]) -> dict[str, str]:
    """The stdout ``python_check`` prints for each case when the module is ``fixed_source`` (computed here)."""
    namespace = types.ModuleType(module)
    exec(compile(fixed_source, f"<fixed {module}>", "exec"), namespace.__dict__)  # our own trusted source
    out = {}
    for name, expr in cases.items():
        try:
            value = eval(expr, {module: namespace})  # noqa: S307 - trusted generator code, never model output
        except Exception as error:  # noqa: BLE001 - mirrors python_check
            value = type(error).__name__
        out[name] = json.dumps(value, sort_keys=True)
    return out


def python_tests(module: str, cases: dict[str, str], expected: dict[str, str], buggy: dict[str, str]) -> list[dict]:
    """The ``tests`` list running ``check.py`` once per case; a case whose stdout on the buggy module (``buggy``,
    from ``python_expectations`` of the buggy source) is already the expected one is a guard."""
    return guarded([{"name": name, "cmd": f"python3 -I {{tests}}/check.py {name}", "stdout": expected[name]}
                    for name in cases], {name for name in cases if buggy[name] == expected[name]})


def guarded(tests: list[dict], guards: set[str]) -> list[dict]:
    """``tests`` with ``guard: true`` on those named in ``guards`` (they pass on the untouched workspace)."""
    unknown = guards - {test["name"] for test in tests}
    assert not unknown, f"guards name no test: {sorted(unknown)}"
    return [{**test, "guard": True} if test["name"] in guards else test for test in tests]


def heredoc(path: str, text: str) -> str:
    """A bash command writing ``text`` to ``path`` (quoted heredoc: no expansion)."""
    assert "\nEOF\n" not in text and text.endswith("\n")
    return f"cat > {path} <<'EOF'\n{text}EOF\n"


def workspace_spec(*, suite: str, name: str, prompt: str, workspace: dict[str, str], reference: str,
                   files: dict[str, str], tests: list[dict], runtime: str, difficulty: int, split: str,
                   tags: list[str], kind: str = "agent", solution_file: str | None = None,
                   timeout_s: float = 10.0, memory_mb: int = 256) -> EnvSpec:
    """One ``workspace_tests`` env spec."""
    verifier = {"kind": "workspace_tests"}
    if solution_file:
        verifier["solution_file"] = solution_file
    verifier.update({"files": files, "tests": tests})
    return EnvSpec(id=f"{suite}/{name}", domain=suite, difficulty=difficulty, kind=kind, runtime=runtime,
                   split=split, tags=[suite, *tags], prompt=prompt, workspace=workspace, reference=reference,
                   verifier=verifier, limits=Limits(timeout_s=timeout_s, memory_mb=memory_mb))
