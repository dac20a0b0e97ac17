"""The consistency check (host only, no sandbox): is the spec well-formed and does it agree with itself?

One ``consistency`` row per spec file that failed to load (its ``Rejection``s, mapped to reason codes) and one per
loaded env. Reason codes (the first problem found names the row; the detail lists all of them):

- from the loader: ``consistency.malformed_yaml``, ``.unreadable``, ``.missing_field``, ``.unknown_field``,
  ``.wrong_type``, ``.unknown_runtime``, ``.unknown_kind``, ``.unknown_split``, ``.unknown_verifier``,
  ``.invalid_id``, ``.empty_prompt``, ``.out_of_range``, ``.limits_too_large`` / ``.limits_too_small`` (outside the
  loader's bounds), ``.no_tests`` (no test cases), ``.runtime_mismatch`` (the verifier cannot run this runtime),
  ``.invalid_entry_point``, ``.contradictory_spec`` (e.g. expected values that break a declared formula),
  ``.no_asserts`` (a test snippet without an assert), ``.invalid_verifier`` (any other verifier-config problem),
  ``.duplicate_id``;
- on loaded envs: ``consistency.entry_point_not_in_prompt``, ``.entry_point_mismatch`` (the reference does not
  define the entry point), ``.entry_point_not_in_reference`` (non-Python runtimes), ``.entry_point_not_in_tests``
  (a verifier with test code that never mentions it), ``.contradictory_kind`` (a single-turn env graded by
  ``workspace_tests`` without a ``solution_file``, i.e. an agent's edit script), ``.missing_file`` (the reference
  or tests read a relative path that is neither in the workspace nor named in the prompt), ``.no_asserts`` (a
  ``workspace_tests`` test that cannot fail; from the loader: a ``python_asserts`` snippet without an assert),
  ``.limits_too_large`` (more time or memory than the sandbox grants: it would silently cut them),
  ``.limits_too_small`` (below ``AdmissionConfig.min_timeout_s`` / ``min_memory_mb``).

Example:
    >>> from posttrain.config import AdmissionConfig, SandboxConfig
    >>> from posttrain.envs.spec import EnvSpec
    >>> spec = EnvSpec(id="t/sub_2", prompt="# Write sub_2(x): x minus 2.\\n", entry_point="sub_2",
    ...                reference="def subtract_2(x):\\n    return x - 2\\n",
    ...                verifier={"kind": "python_tests", "cases": [{"args": [1], "expected": -1}]})
    >>> [code for code, _ in spec_problems(spec, SandboxConfig(), AdmissionConfig())]
    ['consistency.entry_point_mismatch']
    >>> referenced_files("import json\\ndata = json.load(open('table.json'))\\nopen('out.txt', 'w')\\n")
    ['table.json']
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from posttrain.admission.report import CheckRow
from posttrain.config import AdmissionConfig, SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import Rejection, Suite
from posttrain.envs.verifiers import get_verifier

CHECK = "consistency"
# Verifiers that grade a workspace after an agent episode: a single-turn env cannot be graded by them.
AGENT_VERIFIERS = frozenset({"workspace_tests"})
# Calls whose first literal argument is a path the program reads.
FILE_READERS = frozenset({"open", "Path", "read_csv", "read_json", "read_parquet", "read_table", "read_excel",
                          "loadtxt", "genfromtxt", "load", "fromfile", "imread", "ZipFile", "TarFile", "listdir",
                          "scandir", "walk", "exists", "isfile", "getsize"})
_SHELL_READ = re.compile(r"(?:^|[\s;|&(])(?:cat|head|tail|wc|source|sort|diff|jq|python3?|node|bash|sh)"
                         r"(?:\s+-\S+)*\s+([\w./-]+\.\w+)|(?<![<\w])<\s*([\w./-]*\.\w+)(?![\w(])", re.MULTILINE)
_JS_READ = re.compile(r"""(?:readFileSync|readFile|createReadStream|require)\(\s*['"]([^'"]+)['"]""")
_LANGUAGES = {".py": "python", ".sh": "shell", ".bash": "shell", ".js": "javascript", ".cjs": "javascript",
              ".mjs": "javascript"}
_RUNTIME_LANGUAGES = {"python": "python", "bash": "shell", "node": "javascript"}
_TEST_KEYS = ("test", "script", "check")  # keys whose strings are test code, for verifier kinds not known here
_NUMBER = re.compile(r"got (-?[\d.]+(?:e[+-]?\d+)?)")

_LOADER_CODES = {"malformed_yaml": "malformed_yaml", "unreadable": "unreadable", "missing_field": "missing_field",
                 "unknown_field": "unknown_field", "wrong_type": "wrong_type", "duplicate_id": "duplicate_id"}


def rejection_code(rejection: Rejection) -> str:
    """The consistency reason code of one loader ``Rejection``."""
    field, code = rejection.field, rejection.code
    if code in _LOADER_CODES:
        return f"{CHECK}.{_LOADER_CODES[code]}"
    if code == "unknown_value":
        name = "verifier" if field == "verifier.kind" else field.split(".")[0]
        return f"{CHECK}.unknown_{name}"
    if code == "out_of_range":
        if field.startswith("limits."):
            got = _NUMBER.search(rejection.reason)
            return f"{CHECK}.limits_too_large" if got and float(got.group(1)) > 0 else f"{CHECK}.limits_too_small"
        return {"id": f"{CHECK}.invalid_id", "prompt": f"{CHECK}.empty_prompt"}.get(field, f"{CHECK}.out_of_range")
    if code == "invalid_verifier":
        if field in ("verifier.cases", "verifier.tests", "verifier.asserts") and "list of 1" in rejection.reason:
            return f"{CHECK}.no_tests"
        if "no assert" in rejection.reason:
            return f"{CHECK}.no_asserts"
        if "contradict" in rejection.reason:
            return f"{CHECK}.contradictory_spec"
        return {"runtime": f"{CHECK}.runtime_mismatch",
                "entry_point": f"{CHECK}.invalid_entry_point"}.get(field, f"{CHECK}.invalid_verifier")
    return f"{CHECK}.{code}"


def _literal_path(call: ast.Call) -> str | None:
    """The path a reading call opens, when it is a string literal (writes and appends are not reads)."""
    if not call.args or not isinstance(call.args[0], ast.Constant) or not isinstance(call.args[0].value, str):
        return None
    mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax"):
        return None
    return call.args[0].value


def language_of(name: str) -> str:
    """``python`` / ``shell`` / ``javascript`` from a file name's suffix, or ``""`` (not scanned)."""
    return _LANGUAGES.get(Path(name).suffix, "")


def referenced_files(source: str, language: str = "python") -> list[str]:
    """Relative paths a program reads through literal arguments: Python calls like ``open('x')``, shell commands
    like ``cat x.txt`` / ``< x.txt``, JavaScript ``readFileSync('x')`` / ``require('./x.js')``."""
    found: list[str] = []
    if language == "python":
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                path = _literal_path(node) if name in FILE_READERS else None
                if path:
                    found.append(path)
    elif language == "shell":
        found = [a or b for a, b in _SHELL_READ.findall(source)]
    elif language == "javascript":
        found = [p for p in _JS_READ.findall(source) if p.startswith(".") or "/" in p or "." in p]
        found = [p for p in found if not (p.startswith("node:") or ("/" not in p and not p.startswith(".")
                                                                     and not Path(p).suffix))]
    clean = [p.removeprefix("./") for p in found if p and not p.startswith(("/", "~", "-")) and "://" not in p]
    return list(dict.fromkeys(p for p in clean if p not in (".", "..") and not p.startswith("../")))


def test_sources(spec: EnvSpec) -> list[tuple[str, str, str]]:
    """(field, text, language) of the trusted test code in a spec's verifier config (none for data-only tests like
    ``python_tests`` cases): ``python_asserts`` asserts and setup, ``workspace_tests`` files and commands, and for
    other kinds every string under a ``*test*`` / ``*script*`` / ``*check*`` key (language unknown)."""
    config = spec.verifier
    if spec.verifier_kind == "python_tests":
        return []
    if spec.verifier_kind == "python_asserts":
        out = [(f"verifier.asserts[{i}]", a, "python") for i, a in enumerate(config.get("asserts", []))
               if isinstance(a, str)]
        return out + ([("verifier.setup", config["setup"], "python")] if isinstance(config.get("setup"), str) else [])
    if spec.verifier_kind == "workspace_tests":
        out = [(f"verifier.files.{name}", text, language_of(name))
               for name, text in sorted(config.get("files", {}).items()) if isinstance(text, str)]
        for i, test in enumerate(config.get("tests", [])):
            cmd = test.get("cmd") if isinstance(test, dict) else None
            cmd = " ".join(map(str, cmd)) if isinstance(cmd, list) else cmd
            if isinstance(cmd, str):
                out.append((f"verifier.tests[{i}].cmd", cmd, "shell"))
        return out
    return [(where, text, "") for where, text in _keyed_strings(config, "verifier")]


def _keyed_strings(config: dict, prefix: str) -> list[tuple[str, str]]:
    out = []
    for key, value in config.items():
        where = f"{prefix}.{key}"
        if isinstance(value, dict):
            out += _keyed_strings(value, where)
        elif any(word in str(key).lower() for word in _TEST_KEYS):
            values = value if isinstance(value, list) else [value]
            out += [(where if len(values) == 1 else f"{where}[{i}]", v) for i, v in enumerate(values)
                    if isinstance(v, str) and v.strip()]
    return out


def vacuous_tests(spec: EnvSpec) -> list[str]:
    """``workspace_tests`` tests that cannot fail: no expected stdout, and a command that is a no-op or only runs
    Python test files without any assertion. Returns their names."""
    if spec.verifier_kind != "workspace_tests":
        return []
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


def _top_level_names(source: str) -> list[str] | None:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name.split(".")[0]) for a in node.names]
    return names


def _present_files(spec: EnvSpec, sandbox_cfg: SandboxConfig) -> set[str]:
    """Files the sandbox will hold for this env: the workspace plus the verifier's own (harness, solution...)."""
    files = set(spec.workspace)
    if isinstance(spec.verifier.get("solution_file"), str):
        files.add(spec.verifier["solution_file"])
    try:
        files |= set(get_verifier(spec.verifier_kind).build_execution(spec, spec.reference, sandbox_cfg, "0").files)
    except Exception:  # host-only verifiers refuse to build executions; a broken spec is reported elsewhere
        pass
    return files


def _entry_point_problems(spec: EnvSpec, tests: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    entry = spec.entry_point
    word = re.compile(rf"(?<![\w.]){re.escape(entry)}\b")
    problems = []
    if not word.search(spec.prompt):
        problems.append((f"{CHECK}.entry_point_not_in_prompt", f"entry point {entry!r} is not named in the prompt"))
    if spec.runtime == "python":
        source = spec.prompt + spec.reference if spec.verifier.get("complete_prompt") else spec.reference
        names = _top_level_names(source)
        if names is not None and entry not in names:
            shown = ", ".join(n for n in names if not n.startswith("_")) or "nothing"
            problems.append((f"{CHECK}.entry_point_mismatch",
                             f"the reference defines {shown} but entry_point is {entry!r}"))
    elif not word.search(spec.reference):
        problems.append((f"{CHECK}.entry_point_not_in_reference",
                         f"entry point {entry!r} is not named in the reference"))
    if tests and not any(word.search(text) for _, text, _ in tests):
        problems.append((f"{CHECK}.entry_point_not_in_tests",
                         f"entry point {entry!r} is not used by the tests ({', '.join(f for f, _, _ in tests)})"))
    return problems


def _limit_problems(spec: EnvSpec, sandbox_cfg: SandboxConfig, cfg: AdmissionConfig) -> list[tuple[str, str]]:
    limits, problems = spec.limits, []
    if limits.timeout_s > sandbox_cfg.timeout_s:
        problems.append((f"{CHECK}.limits_too_large", f"limits.timeout_s {limits.timeout_s:g} s exceeds the "
                                                      f"sandbox's {sandbox_cfg.timeout_s:g} s"))
    if limits.memory_mb > sandbox_cfg.memory_mb:
        problems.append((f"{CHECK}.limits_too_large", f"limits.memory_mb {limits.memory_mb} exceeds the "
                                                      f"sandbox's {sandbox_cfg.memory_mb} MB"))
    if limits.timeout_s < cfg.min_timeout_s:
        problems.append((f"{CHECK}.limits_too_small", f"limits.timeout_s {limits.timeout_s:g} s is below "
                                                      f"{cfg.min_timeout_s:g} s"))
    if limits.memory_mb < cfg.min_memory_mb:
        problems.append((f"{CHECK}.limits_too_small", f"limits.memory_mb {limits.memory_mb} is below "
                                                      f"{cfg.min_memory_mb} MB"))
    return problems


def spec_problems(spec: EnvSpec, sandbox_cfg: SandboxConfig, cfg: AdmissionConfig) -> list[tuple[str, str]]:
    """(code, text) problems of a loaded spec, in a fixed order; empty when consistent."""
    tests = test_sources(spec)
    problems = _entry_point_problems(spec, tests) if spec.entry_point else []
    if spec.kind == "single_turn" and spec.verifier_kind in AGENT_VERIFIERS \
            and not spec.verifier.get("solution_file"):
        problems.append((f"{CHECK}.contradictory_kind", f"kind 'single_turn' but verifier {spec.verifier_kind!r} "
                                                        "without a solution_file grades an agent's edit script"))
    present = _present_files(spec, sandbox_cfg)
    sources = tests
    if getattr(get_verifier(spec.verifier_kind), "needs_sandbox", True):  # a program, not an answer
        solution_file = spec.verifier.get("solution_file")
        language = (language_of(solution_file) if isinstance(solution_file, str)
                    else _RUNTIME_LANGUAGES.get(spec.runtime, ""))
        sources = [("reference", spec.reference, language)] + tests
    for where, text, language in sources:
        for path in referenced_files(text, language):
            if path not in present and not any(p.startswith(path.rstrip("/") + "/") for p in present) \
                    and path not in spec.prompt:
                problems.append((f"{CHECK}.missing_file", f"{where} reads {path!r}, which is neither in the "
                                                          "workspace nor named in the prompt"))
    for name in vacuous_tests(spec):
        problems.append((f"{CHECK}.no_asserts", f"test {name!r} has no expected stdout and its command asserts "
                                                "nothing: it passes whenever it runs"))
    return problems + _limit_problems(spec, sandbox_cfg, cfg)


def _row(env_id: str, problems: list[tuple[str, str]], ok_text: str) -> CheckRow:
    if not problems:
        return CheckRow(env_id, CHECK, True, f"{CHECK}.ok", ok_text)
    text = "; ".join(dict.fromkeys(text for _, text in problems))
    return CheckRow(env_id, CHECK, False, problems[0][0], text, float(len(problems)))


def consistency_rows(suite: Suite, sandbox_cfg: SandboxConfig, cfg: AdmissionConfig) -> list[CheckRow]:
    """One row per loaded env (its own problems plus any duplicate-id rejection) and per file that did not load."""
    by_key: dict[str, list[tuple[str, str]]] = {}
    for rejection in suite.rejections:
        by_key.setdefault(rejection.env_id or rejection.file, []).append((rejection_code(rejection), str(rejection)))
    rows = []
    loaded = {spec.id for spec in suite.envs}
    for spec in suite.envs:
        own = [(code, f"{spec.source}: {text}") for code, text in spec_problems(spec, sandbox_cfg, cfg)]
        problems = own + by_key.get(spec.id, [])
        rows.append(_row(spec.id, problems, "schema valid; entry point, files and limits agree"))
    rows += [_row(key, problems, "") for key, problems in by_key.items() if key not in loaded]
    return rows
