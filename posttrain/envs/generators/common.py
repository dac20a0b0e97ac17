"""Helpers shared by the generators: check scripts and their expectations for the workspace suites (``terminal``,
``node``, ``agent_repo``, ``regression_hunt``), and copy drills for the warm-start data of the multi-domain policy.

A check script prints one JSON value per case (``python3 -I {tests}/check.py CASE``), or, for a package, one JSON
object per group of cases (``grouped_check``: one process checks many cases); the expected stdout of each is computed
here, on the host, by running the *fixed* module source (our own trusted code) on the same case
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
    >>> groups = {"kept": {"c0": "basic.double(2)", "c1": "extra.triple(1)"}}
    >>> grouped_expectations({"basic": fixed}, groups)   # no module extra: its case fails alone
    {'kept': '{"c0": 4, "c1": "NameError"}'}
    >>> "        'c1': lambda: extra.triple(1)," in grouped_check("calc", ["basic"], groups).splitlines()
    True
"""

from __future__ import annotations

import json
import random
import types
from collections.abc import Iterable, Sequence

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
    return {name: json.dumps(value, sort_keys=True) for name, value in case_values({module: fixed_source},
                                                                                     cases).items()}


def case_values(sources: dict[str, str], cases: dict[str, str]) -> dict[str, object]:
    """Each case expression's value over the modules ``sources`` (name -> our own trusted source, each bound to its
    name), as the check scripts observe it: an exception is its type name."""
    namespace = {}
    for module, source in sources.items():
        namespace[module] = types.ModuleType(module)
        exec(compile(source, f"<fixed {module}>", "exec"), namespace[module].__dict__)  # our own trusted source
    out = {}
    for name, expr in cases.items():
        try:
            out[name] = eval(expr, dict(namespace))  # noqa: S307 - trusted generator code, never model output
        except Exception as error:  # noqa: BLE001 - mirrors the check scripts
            out[name] = type(error).__name__
    return out


def grouped_check(package: str, modules: list[str], groups: dict[str, dict[str, str]], root: str = "/work") -> str:
    """A trusted check script for a package under ``root``: ``python3 -I check.py GROUP`` prints one JSON object,
    each case of ``groups[GROUP]`` (name -> expression over the ``modules`` of ``package``, each bound to its own
    name) by name with its value, or its exception's type name. A module is imported when a case first uses it, so
    one that is missing or broken fails only the cases that use it."""
    bound = "".join(f"{module} = Module({package + '.' + module!r})\n" for module in modules)
    listed = "".join(f"    {group!r}: {{\n" + "".join(f"        {name!r}: lambda: {expr},\n"
                                                      for name, expr in cases.items()) + "    },\n"
                     for group, cases in groups.items())
    return (f"import importlib\nimport json\nimport sys\n\nsys.path.append({root!r})  # appended: a workspace file can "
            "never shadow a standard module\n\n\nclass Module:\n    \"\"\"A module imported on first use.\"\"\"\n\n"
            "    def __init__(self, name):\n        self.name = name\n\n    def __getattr__(self, attribute):\n"
            "        return getattr(importlib.import_module(self.name), attribute)\n\n\n"
            f"{bound}\nGROUPS = {{\n{listed}}}\n\nvalues = {{}}\nfor name, case in GROUPS[sys.argv[1]].items():\n"
            "    try:\n        values[name] = case()\n"
            "    except Exception as error:  # the type name is the observable result\n"
            "        values[name] = type(error).__name__\nprint(json.dumps(values, sort_keys=True))\n")


def grouped_expectations(sources: dict[str, str], groups: dict[str, dict[str, str]]) -> dict[str, str]:
    """The stdout ``grouped_check`` prints for each group when the package's modules are ``sources`` (module name
    -> source, computed here)."""
    return {group: json.dumps(case_values(sources, cases), sort_keys=True) for group, cases in groups.items()}


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


def copy_drill(lines: list[str]) -> tuple[str, str]:
    """A warm-start pair that asks for ``lines`` copied as they are: every answer token a copy by content.

    >>> copy_drill(["- Cash 12.5", "- Debt 3.0"])
    ('Copy these lines:\\n- Cash 12.5\\n- Debt 3.0\\nCopy:\\n', '- Cash 12.5\\n- Debt 3.0\\n')
    """
    text = "".join(line + "\n" for line in lines)
    return "Copy these lines:\n" + text + "Copy:\n", text


def sum_drill(work: str) -> tuple[str, str]:
    """A warm-start pair that asks for the sum a worked line ``terms = result`` states, answered by that line.

    >>> sum_drill("1.20 + 1.00 = 2.20\\n")
    ('Compute: 1.20 + 1.00\\n', '1.20 + 1.00 = 2.20\\n')
    """
    return f"Compute: {work.rpartition(' = ')[0]}\n", work


def copy_drills(lines: list[str], count: int, seed: str | int, most: int = 4) -> list[tuple[str, str]]:
    """``count`` copy drills of 2 to ``most`` lines drawn from ``lines`` (``random.Random(seed)``): what teaches a
    tiny policy to continue a name with what followed it in its prompt, where a plain answer would have to look the
    name up (``benchmarks/reading_probe.py``; docs/multi-domain.md).

    >>> [len(reference.splitlines()) for _, reference in copy_drills(["a 1", "b 2", "c 3"], 3, "x")]
    [4, 2, 3]
    """
    rng = random.Random(seed)
    return [copy_drill([rng.choice(lines) for _ in range(rng.randint(2, most))]) for _ in range(count)]


SYLLABLES = tuple(consonant + vowel for consonant in "bdfgklmnprstvz" for vowel in "aeiou")
SEPARATORS = (" ", " = ", "=", "/", ": ", ", ", ".", "_", " | ", " -")


def drill_words(texts: Iterable[str], longest: int = 24) -> list[str]:
    """The distinct whitespace-separated words of ``texts`` up to ``longest`` characters, sorted: what
    ``fresh_line`` draws its known parts from.

    >>> drill_words(["def f(x): return x", "return 1"])
    ['1', 'def', 'f(x):', 'return', 'x']
    """
    return sorted({word for text in texts for word in text.split() if len(word) <= longest})


def fresh_line(rng: random.Random, words: Sequence[str]) -> str:
    """A line no data holds: 1 to 4 parts, each a word of ``words`` (a recipe's own text, in a new order), a name of
    2 to 4 random syllables (upper case a fifth of the time) or a number, joined by separators of config files, paths
    and shell lines.

    >>> rng = random.Random(0)
    >>> [fresh_line(rng, ["def", "Cash"]) for _ in range(3)]
    ['663 | verali: def', 'ZOGONU', '483']
    """
    def part() -> str:
        draw = rng.random()
        if draw < 0.45:
            return rng.choice(words)
        if draw < 0.8:
            name = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
            return name.upper() if rng.random() < 0.2 else name
        return str(rng.randrange(10 ** rng.randint(1, 5)))

    line = part()
    for _ in range(rng.randint(0, 3)):
        line += rng.choice(SEPARATORS) + part()
    return line


def fresh_copy_drill(rng: random.Random, words: Sequence[str]) -> tuple[str, str]:
    """A copy drill (``copy_drill``) of 1 to 3 ``fresh_line``s: each one new, so only copying fits it, where drills
    over a fixed pool are learnt by heart (docs/multi-domain.md, the copy phase).

    >>> fresh_copy_drill(random.Random(0), ["def", "Cash"])
    ('Copy these lines:\\ndamoza_def | def\\nMIZOGONU\\nCopy:\\n', 'damoza_def | def\\nMIZOGONU\\n')
    """
    return copy_drill([fresh_line(rng, words) for _ in range(rng.randint(1, 3))])
