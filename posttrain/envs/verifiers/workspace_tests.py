"""The ``workspace_tests`` verifier: a solution changes a workspace, then trusted tests check the final workspace.

The env's ``workspace`` files are written; then the solution is applied: either a bash script run in the
workspace (agent envs; later the final workspace of an agent episode) or, with ``solution_file``, the solution
text written to that file (single-turn envs: "write ``src/slug.js``"). Only *after* the solution finished (and
every process it left behind was killed) are the trusted test files written, into a fresh private directory per
test, and each test command run. Everything happens in one sandbox execution under a small trusted driver
(``workspace_driver.py``, passed as ``python3 -I -c``, never a workspace file). The host decides: a test passes
iff it exited with the expected code within its deadline and, when the spec gives ``stdout``, printed exactly
that (trailing whitespace ignored). Expected outputs never enter the sandbox.

Spec config::

    verifier:
      kind: workspace_tests
      solution_file: src/slug.js     # optional: the solution is this file's content; else a bash edit script
      files:                         # trusted test files (relative paths), written after the solution ran
        check.py: |
          import json, sys
          sys.path.append("/work/src")   # append, never insert: stdlib modules cannot be shadowed
          from stats import median
          print(json.dumps(median([3, 1, 2])))
      tests:                         # one process each, cwd /work; {tests} is the trusted files' directory
        - {name: median_odd, cmd: "python3 -I {tests}/check.py", stdout: "2"}
        - {name: config_ok, cmd: "bash {tests}/check_config.sh", exit_code: 0}
      solution_timeout_s: 5          # optional (default: a third of the env's timeout, at most 10 s)
      test_timeout_s: 5              # optional (default: the rest of the timeout shared by the tests, >= 2 s)

Strength: a test with ``stdout`` is a value comparison decided on the host; an exit-code-only test that runs
workspace code can be passed by code that exits 0 early, so use those only for checks that run trusted code
(reading a config file). Residual risk: the solution and the tests share one sandbox; the driver kills every
process the solution left before writing the tests (and again after each test), and is non-dumpable, so only a
kernel-level escape could tamper with a test once it runs. The sandbox's pid namespace (issue 3) bounds the rest.

Example:
    >>> from posttrain.config import SandboxConfig
    >>> from posttrain.envs.spec import EnvSpec
    >>> spec = EnvSpec(id="t/cfg", prompt="Set port=8080 in app.ini", reference="sed -i s/80/8080/ app.ini\\n",
    ...                kind="agent", runtime="bash", workspace={"app.ini": "port=80\\n"},
    ...                verifier={"kind": "workspace_tests", "files": {"port.sh": "grep -c '^port=8080$' app.ini\\n"},
    ...                          "tests": [{"name": "port", "cmd": "bash {tests}/port.sh", "stdout": "1"}]})
    >>> validate(spec)
    []
    >>> ex = build_execution(spec, spec.reference, SandboxConfig(), "N")
    >>> sorted(ex.files), ex.command[:3], "8080" in ex.stdin, '"stdout"' in ex.stdin
    (['app.ini'], ['python3', '-I', '-c'], True, False)
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path, PurePosixPath

from posttrain.config import SandboxConfig
from posttrain.envs import mutation
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers.base import Problems, Verdict, Verifier, harness_records
from posttrain.sandbox.base import Execution, ExecutionResult

DRIVER = Path(__file__).with_name("workspace_driver.py").read_text(encoding="utf-8")
COMMAND = ["python3", "-I", "-c", DRIVER]
KEYS = {"kind", "solution_file", "files", "tests", "solution_timeout_s", "test_timeout_s"}
TEST_KEYS = {"name", "cmd", "stdout", "exit_code"}
MAX_TESTS = 50
MAX_MUTANTS = mutation.DEFAULT_LIMIT
MIN_TEST_TIMEOUT_S = 2.0  # a test's default deadline is a cap for hung tests, not a budget: slow hosts stay green
TEST_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
FENCE = re.compile(r"```[\w+-]*[ \t]*\n(.*?)```", re.DOTALL)


def _relative(name) -> bool:
    if not isinstance(name, str) or not name or "\0" in name:
        return False
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and str(path) not in (".", "")


def _number_in(value, low: float, high: float) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and low < value <= high


def validate(spec: EnvSpec) -> Problems:
    """Problems with a ``workspace_tests`` config, as (field, reason) pairs; empty when valid."""
    problems: Problems = []
    config = spec.verifier
    for name in sorted(set(config) - KEYS, key=str):
        problems.append((f"verifier.{name}", f"unknown key for workspace_tests (allowed: {', '.join(sorted(KEYS))})"))
    solution_file = config.get("solution_file")
    if solution_file is not None and not _relative(solution_file):
        problems.append(("verifier.solution_file", f"must be a relative path in the workspace, got {solution_file!r}"))
    for name in ("solution_timeout_s", "test_timeout_s"):
        if name in config and not _number_in(config[name], 0, 300):
            problems.append((f"verifier.{name}", f"must be a number in (0, 300], got {config[name]!r}"))
    files = config.get("files", {})
    if not isinstance(files, dict) or not all(_relative(k) and isinstance(v, str) for k, v in files.items()):
        problems.append(("verifier.files", "must map relative paths to file contents (strings)"))
    tests = config.get("tests")
    if not isinstance(tests, list) or not 1 <= len(tests) <= MAX_TESTS:
        problems.append(("verifier.tests", f"must be a list of 1..{MAX_TESTS} tests"))
        return problems
    names = set()
    for i, test in enumerate(tests):
        where = f"verifier.tests[{i}]"
        if not isinstance(test, dict) or not {"name", "cmd"} <= set(test) or set(test) - TEST_KEYS:
            problems.append((where, f"must be a mapping with 'name' and 'cmd' and optional 'stdout', 'exit_code'"))
            continue
        if not isinstance(test["name"], str) or not test["name"] or test["name"] in names:
            problems.append((f"{where}.name", "must be a unique non-empty string"))
        names.add(test.get("name"))
        try:
            argv = _argv(test["cmd"])
        except ValueError as error:
            problems.append((f"{where}.cmd", f"must be a command line or a list of strings ({error})"))
            continue
        if not argv:
            problems.append((f"{where}.cmd", "is empty"))
        if "stdout" in test and not isinstance(test["stdout"], str):
            problems.append((f"{where}.stdout", "must be a string"))
        if "exit_code" in test and not (type(test["exit_code"]) is int and 0 <= test["exit_code"] <= 255):
            problems.append((f"{where}.exit_code", "must be an integer in [0, 255]"))
    return problems


def _argv(cmd) -> list[str]:
    if isinstance(cmd, str):
        return shlex.split(cmd)
    if isinstance(cmd, list) and all(isinstance(a, str) for a in cmd):
        return list(cmd)
    raise ValueError(f"got {type(cmd).__name__}")


def extract_solution(completion: str) -> str:
    """The solution from a completion: the last fenced block if there is one, else the whole text.

    >>> extract_solution("I will fix it:\\n```bash\\nsed -i s/a/b/ f.txt\\n```\\nDone.")
    'sed -i s/a/b/ f.txt\\n'
    """
    blocks = FENCE.findall(completion)
    return blocks[-1] if blocks else completion


def timeouts(spec: EnvSpec, cfg: SandboxConfig) -> tuple[float, float, float]:
    """(whole execution, solution phase, each test) deadlines in seconds."""
    total = min(spec.limits.timeout_s, cfg.timeout_s)
    config = spec.verifier
    solution = float(config.get("solution_timeout_s", min(total / 3, 10.0)))
    share = (total - solution) / max(1, len(config["tests"]))
    test = float(config.get("test_timeout_s", min(total, max(MIN_TEST_TIMEOUT_S, share))))
    return total, solution, test


def build_execution(spec: EnvSpec, solution: str, cfg: SandboxConfig, nonce: str) -> Execution:
    """The workspace (plus the solution file, if any); the driver gets the script and tests on stdin, no answers."""
    config = spec.verifier
    total, solution_s, test_s = timeouts(spec, cfg)
    files = dict(spec.workspace)
    script = solution
    if config.get("solution_file"):
        files[config["solution_file"]] = solution
        script = None
    env = dict(TEST_ENV)
    if spec.runtime == "node":
        env["NODE_OPTIONS"] = f"--max-old-space-size={min(spec.limits.memory_mb, cfg.memory_mb)}"
    request = {"nonce": nonce, "solution": script, "solution_timeout_s": solution_s, "test_timeout_s": test_s,
               "files": dict(config.get("files", {})), "env": env,
               "tests": [{"name": t["name"], "argv": _argv(t["cmd"])} for t in config["tests"]]}
    return Execution(files=files, command=list(COMMAND), timeout_s=total,
                     memory_mb=min(spec.limits.memory_mb, cfg.memory_mb), runtime=spec.runtime,
                     max_output_bytes=cfg.max_output_bytes, stdin=json.dumps(request))


def _normalize(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _short(text: str, n: int = 60) -> str:
    text = json.dumps(text)
    return text if len(text) <= n else text[:n - 3] + "..."


def score(spec: EnvSpec, result: ExecutionResult, nonce: str) -> Verdict:
    """Each test passes iff the driver saw the expected exit code (and stdout, when the spec gives one)."""
    tests = spec.verifier["tests"]
    total = len(tests)
    if result.infra_error:
        return Verdict.infra(result, total)
    records = harness_records(result.stdout, nonce)
    syntax = next((r for r in records if r.get("phase") == "syntax"), None)
    compiled = syntax is None or syntax.get("ok") is True
    outcomes: dict[int, dict] = {}
    for record in records:
        index = record.get("test")
        if type(index) is int and 0 <= index < total:
            outcomes.setdefault(index, record)
    passed, failures = 0, []
    for index, test in enumerate(tests):
        record = outcomes.get(index)
        want_exit = test.get("exit_code", 0)
        if record is None:
            failures.append(f"{test['name']}: no result")
        elif record.get("timed_out"):
            failures.append(f"{test['name']}: timed out")
        elif record.get("exit") != want_exit:
            tail = str(record.get("stderr", "")).strip().splitlines()[-1:] or [""]
            failures.append(f"{test['name']}: exit code {record.get('exit')} (want {want_exit}) {tail[0][:100]}")
        elif "stdout" in test and _normalize(str(record.get("stdout", ""))) != _normalize(test["stdout"]):
            failures.append(f"{test['name']}: printed {_short(str(record.get('stdout', '')))}, "
                            f"expected {_short(test['stdout'])}")
        else:
            passed += 1
    if not compiled:
        detail = f"solution script does not parse: {str(syntax.get('error', ''))[:160]}"
    elif not records:
        how = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        detail = f"no driver output ({how}): {result.stderr.strip()[-160:]}"
    else:
        detail = f"{passed}/{total} tests passed" + (" (timed out)" if result.timed_out else "")
        detail += f"; {failures[0]}" if failures else ""
    return Verdict(reward=passed / total, passed=passed == total, compiled=compiled, tests_passed=passed,
                   tests_total=total, exit_code=result.exit_code, timed_out=result.timed_out, detail=detail,
                   sandbox_ms=result.start_ms + result.run_ms)


# --- probes and mutants ------------------------------------------------------------------------------------------

_STUB = {"python": 'print("ok")\n', "node": 'console.log("ok");\n', "bash": "echo ok\nexit 0\n"}
_EXIT_AT_LOAD = {".py": "import os\nos._exit(0)\n", ".js": "process.exit(0);\n", ".cjs": "process.exit(0);\n",
                 ".mjs": "process.exit(0);\n", ".sh": "exit 0\n"}
_FAKE_PASS = ("PASS", "ok 1 - all tests passed", "All tests passed", "OK", '{"test": 0, "exit": 0}')


def _quote(path: str) -> str:
    return shlex.quote(path)


def probes(spec: EnvSpec) -> dict[str, str]:
    """Solutions that must fail: untouched workspace, exits, deleting or overwriting tests, fake results, and
    processes left behind to tamper with the tests."""
    config = spec.verifier
    test_names = sorted(config.get("files", {}))
    visible_tests = sorted(name for name in spec.workspace if "test" in name.lower())
    fake = "".join(f"echo {shlex.quote(line)}\n" for line in _FAKE_PASS)
    if config.get("solution_file"):
        target = config["solution_file"]
        suffix = PurePosixPath(target).suffix
        original = spec.workspace.get(target, "")
        fake_print = {".py": "".join(f"print({line!r})\n" for line in _FAKE_PASS),
                      ".js": "".join(f"console.log({json.dumps(line)});\n" for line in _FAKE_PASS)}
        probes = {"empty file": "", "workspace file as given": original,
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
        "untouched workspace": "",
        "exit 0": "exit 0\n",
        "delete the tests": "rm -rf tests test spec __tests__ 2>/dev/null\nfind . -iname '*test*' -exec rm -rf {} + "
                            "2>/dev/null\nexit 0\n",
        "overwrite tests with passing stubs": overwrite + "exit 0\n",
        "write a results file": results + fake + "exit 0\n",
        "lingering process rewrites the tests": lingering + "exit 0\n",
        "kill the test driver": "kill -9 $PPID 2>/dev/null\nkill -9 -1 2>/dev/null\nexit 0\n",
    }


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
    config = spec.verifier
    if config.get("solution_file"):
        return _file_mutants(config["solution_file"], spec.reference, limit)
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


CONFIG_SCHEMA = {
    "type": "object",
    "required": ["kind", "tests"],
    "additionalProperties": False,
    "properties": {
        "kind": {"const": "workspace_tests"},
        "solution_file": {"type": "string", "description": "the solution is this workspace file's content"},
        "files": {"type": "object", "additionalProperties": {"type": "string"},
                  "description": "trusted test files, written after the solution ran"},
        "tests": {"type": "array", "minItems": 1, "maxItems": MAX_TESTS, "items": {
            "type": "object", "required": ["name", "cmd"], "additionalProperties": False,
            "properties": {"name": {"type": "string", "minLength": 1},
                           "cmd": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
                           "stdout": {"type": "string", "description": "expected stdout, compared on the host"},
                           "exit_code": {"type": "integer", "minimum": 0, "maximum": 255}}}},
        "solution_timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 300},
        "test_timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 300},
    },
}

VERIFIER = Verifier(kind="workspace_tests", validate=validate, extract_solution=extract_solution,
                    build_execution=build_execution, score=score, probes=probes, mutants=mutants,
                    config_schema=CONFIG_SCHEMA)
