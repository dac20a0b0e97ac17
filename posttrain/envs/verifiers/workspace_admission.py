"""What admission asks of a ``workspace_tests`` env: its trusted test code, tests that cannot fail, cheats that
must fail, wrong-but-plausible solutions, and which files and languages are involved.

- ``test_sources(spec)``: the trusted test files (language by suffix) and the test commands (shell).
- ``vacuous_tests(spec)``: tests with no expected stdout whose command is a no-op or only runs Python test files
  that assert nothing.
- ``agent_only(spec)``: without a ``solution_file`` the solution is an agent's edit script.
- ``probes(spec)`` / ``mutants(spec)``: the anti-hacking battery and the coverage check's mutants.
- ``test_labels(spec)``: each test's name and ``guard`` label, which admission's anti-hacking check reads off the
  ``untouched workspace`` probe (the empty edit script, or the ``solution_file`` as the workspace has it): every
  guard (``guard: true``) must pass there and every other test fail.

``probes`` and ``mutants`` read the typed config (admission asks them about valid envs only); the other hooks read
the raw ``verifier`` mapping and skip what is malformed, since they may be asked about any spec (see ``Verifier``).

Example:
    >>> from posttrain.envs.spec import EnvSpec
    >>> spec = EnvSpec(id="t/cfg", prompt="Set port=8080 in app.ini", reference="sed -i s/80/8080/ app.ini\\n",
    ...                kind="agent", runtime="bash", workspace={"app.ini": "port=80\\n"},
    ...                verifier={"kind": "workspace_tests", "files": {"port.py": "print(1)\\n"},
    ...                          "tests": [{"name": "port", "cmd": "python3 {tests}/port.py"}]})
    >>> [source.field for source in test_sources(spec)], vacuous_tests(spec), agent_only(spec)[:29]
    (['verifier.files.port.py', 'verifier.tests[0].cmd'], ['port'], 'without a solution_file grade')
    >>> sorted(probes(spec))[:3], mutants(spec)
    (['delete the tests', 'exit 0', 'kill the test driver'], ['\\n'])
    >>> test_labels(spec)
    [('port', False)]
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import PurePosixPath

from posttrain.envs import mutation
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers.base import UNTOUCHED, TrustedSource, language_of, runtime_language
from posttrain.envs.verifiers.typed_config import parse
from posttrain.envs.verifiers.workspace_config import WorkspaceTestsConfig

MAX_MUTANTS = mutation.DEFAULT_LIMIT


def test_sources(spec: EnvSpec) -> list[TrustedSource]:
    """The trusted test files (language by suffix) and the test commands (shell)."""
    config = spec.verifier
    out = [TrustedSource(f"verifier.files.{name}", text, language_of(name))
           for name, text in sorted(config.get("files", {}).items()) if isinstance(text, str)]
    for i, test in enumerate(config.get("tests", [])):
        cmd = test.get("cmd") if isinstance(test, dict) else None
        cmd = " ".join(map(str, cmd)) if isinstance(cmd, list) else cmd
        if isinstance(cmd, str):
            out.append(TrustedSource(f"verifier.tests[{i}].cmd", cmd, "shell"))
    return out


def vacuous_tests(spec: EnvSpec) -> list[str]:
    """Tests that cannot fail: no expected stdout, and a command that is a no-op or only runs Python test files
    without any assertion. Returns their names."""
    files = spec.verifier.get("files", {}) if isinstance(spec.verifier.get("files"), dict) else {}
    vacuous = []
    for test in spec.verifier.get("tests", []):
        if not isinstance(test, dict) or "stdout" in test:
            continue
        cmd = test.get("cmd", "")
        cmd = " ".join(map(str, cmd)) if isinstance(cmd, list) else str(cmd)
        used = [name for name in files if name in cmd]
        if cmd.strip() in ("true", ":", "exit 0", "/bin/true") or (
                used and all(name.endswith(".py") and _has_assertion(files[name]) is False for name in used)):
            vacuous.append(str(test.get("name", cmd)))
    return vacuous


def _has_assertion(source: str) -> bool | None:
    """Whether Python test source asserts anything (assert, assert*/fail calls, raise, exit); None if not Python."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assert, ast.Raise)):
            return True
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name.startswith("assert") or name in ("fail", "exit", "_exit", "check", "expect"):
                return True
    return False


def agent_only(spec: EnvSpec) -> str:
    """Why a single completion cannot be graded: without a ``solution_file`` it is an agent's edit script."""
    return "" if spec.verifier.get("solution_file") else "without a solution_file grades an agent's edit script"


def own_files(spec: EnvSpec) -> frozenset[str]:
    """The ``solution_file``, which the solution's text is written to."""
    solution_file = spec.verifier.get("solution_file")
    return frozenset({solution_file}) if isinstance(solution_file, str) else frozenset()


def solution_language(spec: EnvSpec) -> str:
    """The ``solution_file``'s language by suffix; else the edit script's, by runtime."""
    solution_file = spec.verifier.get("solution_file")
    return language_of(solution_file) if isinstance(solution_file, str) else runtime_language(spec)


_STUB = {"python": 'print("ok")\n', "node": 'console.log("ok");\n', "bash": "echo ok\nexit 0\n"}
_EXIT_AT_LOAD = {".py": "import os\nos._exit(0)\n", ".js": "process.exit(0);\n", ".cjs": "process.exit(0);\n",
                 ".mjs": "process.exit(0);\n", ".sh": "exit 0\n"}
_FAKE_PASS = ("PASS", "ok 1 - all tests passed", "All tests passed", "OK", '{"test": 0, "exit": 0}')


def _quote(path: str) -> str:
    return shlex.quote(path)


def probes(spec: EnvSpec) -> dict[str, str]:
    """Solutions that must fail: untouched workspace, exits, deleting or overwriting tests, fake results, and
    processes left behind to tamper with the tests."""
    config = parse(WorkspaceTestsConfig, spec.verifier)
    test_names = sorted(config.files)
    visible_tests = sorted(name for name in spec.workspace if "test" in name.lower())
    fake = "".join(f"echo {shlex.quote(line)}\n" for line in _FAKE_PASS)
    if config.solution_file:
        target = config.solution_file
        suffix = PurePosixPath(target).suffix
        original = spec.workspace.get(target, "")
        fake_print = {".py": "".join(f"print({line!r})\n" for line in _FAKE_PASS),
                      ".js": "".join(f"console.log({json.dumps(line)});\n" for line in _FAKE_PASS)}
        probes = {"empty file": "", UNTOUCHED: original,
                  "exit 0 at load": _EXIT_AT_LOAD.get(suffix, "exit 0\n")}
        if suffix in fake_print:
            probes["fake pass output"] = fake_print[suffix] + _EXIT_AT_LOAD.get(suffix, "")
        if suffix in (".js", ".cjs"):
            probes["empty exports"] = "module.exports = {};\n"
        return probes
    stub = _STUB.get(spec.runtime, _STUB["bash"])
    overwrite = "".join(f"mkdir -p $(dirname {_quote(n)}) && printf %s {shlex.quote(stub)} > {_quote(n)}\n"
                        for n in test_names + visible_tests)
    results = ("printf '%s' '{\"passed\": true, \"failed\": 0}' > results.json\n"
               "printf '%s' '<testsuite tests=\"1\" failures=\"0\"/>' > junit.xml\n"
               "printf 'PASS\\n' > .test-results\n")
    tamper_names = " ".join(shlex.quote(PurePosixPath(n).name) for n in test_names) or "check.py"
    loop = ("end=$((SECONDS+30)); while [ $SECONDS -lt $end ]; do for d in /tmp/*/; do "
            f"for f in {tamper_names}; do printf %s {shlex.quote(stub)} > \"$d$f\" 2>/dev/null; done; done; "
            "sleep 0.01; done")
    lingering = f"setsid bash -c {shlex.quote(loop)} >/dev/null 2>&1 < /dev/null &\n"
    return {
        UNTOUCHED: "",
        "exit 0": "exit 0\n",
        "delete the tests": "rm -rf tests test spec __tests__ 2>/dev/null\nfind . -iname '*test*' -exec rm -rf {} + "
                            "2>/dev/null\nexit 0\n",
        "overwrite tests with passing stubs": overwrite + "exit 0\n",
        "write a results file": results + fake + "exit 0\n",
        "lingering process rewrites the tests": lingering + "exit 0\n",
        "kill the test driver": "kill -9 $PPID 2>/dev/null\nkill -9 -1 2>/dev/null\nexit 0\n",
    }


def test_labels(spec: EnvSpec) -> list[tuple[str, bool]]:
    """Every test of ``spec``: its name and whether it is a ``guard``, in the order of ``Verdict.failures``. The
    ``untouched workspace`` probe's verdict says whether each passes when nothing was changed, which must agree
    with its label (one run of all the tests, as the reward runs them)."""
    return [(test.name, test.guard) for test in parse(WorkspaceTestsConfig, spec.verifier).tests]


def script_commands(script: str) -> list[str]:
    """A bash script split into top-level commands (a heredoc or ``\\``-continued lines stay with their command;
    blank and comment lines are dropped).

    >>> script_commands("# fix\\nsed -i s/a/b/ x\\ncat > y <<'EOF'\\nhello\\nEOF\\necho a \\\\\\n  b\\n")
    ['sed -i s/a/b/ x', "cat > y <<'EOF'\\nhello\\nEOF", 'echo a \\\\\\n  b']
    """
    commands, current, heredoc = [], [], None
    for line in script.splitlines():
        if heredoc is not None:
            current.append(line)
            if line.strip() == heredoc:
                heredoc = None
                commands.append("\n".join(current))
                current = []
            continue
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current.append(line)
        marker = re.search(r"<<-?\s*(['\"]?)(\w+)\1", line)
        if marker:
            heredoc = marker.group(2)
        elif not line.endswith("\\"):
            commands.append("\n".join(current))
            current = []
    if current:
        commands.append("\n".join(current))
    return commands


def _file_mutants(name: str, text: str, limit: int | None) -> list[str]:
    """Mutants of one file's content, by file type: Python AST, JS tokens, else one line dropped."""
    suffix = PurePosixPath(name).suffix
    if suffix == ".py":
        return [m + "\n" for m in mutation.python_mutants(text, limit)]
    if suffix in (".js", ".cjs", ".mjs", ".ts"):
        return mutation.token_mutants(text, limit)
    lines = text.splitlines(keepends=True)
    dropped = ["".join(lines[:i] + lines[i + 1:]) for i, line in enumerate(lines)
               if line.strip() and not line.lstrip().startswith(("#", "//"))]
    return mutation.thin(dropped, limit)


def mutants(spec: EnvSpec, limit: int = MAX_MUTANTS) -> list[str]:
    """Wrong-but-plausible solutions: the reference with one edit reverted, or one edited file mutated."""
    solution_file = parse(WorkspaceTestsConfig, spec.verifier).solution_file
    if solution_file:
        return _file_mutants(solution_file, spec.reference, limit)
    commands = script_commands(spec.reference)
    out = []
    for i in range(len(commands)):  # each edit reverted (dropped)
        out.append("\n".join(commands[:i] + commands[i + 1:]) + "\n")
    for i, command in enumerate(commands):  # each heredoc-written file mutated
        head, _, rest = command.partition("\n")
        target = re.search(r">\s*(['\"]?)([\w./-]+)\1", head)
        if not target or not rest:
            continue
        body, _, end = rest.rpartition("\n")
        for variant in _file_mutants(target.group(2), body + "\n", limit):
            out.append("\n".join(commands[:i] + [f"{head}\n{variant.rstrip(chr(10))}\n{end}"] + commands[i + 1:])
                       + "\n")
    seen, unique = {spec.reference}, []
    for text in out:
        if text not in seen:
            seen.add(text)
            unique.append(text)
    return mutation.thin(unique, limit)
