"""The consistency check (host only, no sandbox): is the spec well-formed and does it agree with itself?

One ``consistency`` row per spec file that failed to load (its ``Rejection``s, mapped to reason codes) and one per
loaded env. The first problem found names the row's reason code (loader rejections mapped by ``rejection_code``,
then ``spec_problems``); the detail lists all of them. Every code and its meaning: ``admission.reasons``.

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

from posttrain.admission.agent_episodes import oracle_calls
from posttrain.admission.report import CheckRow
from posttrain.agent.check import check_problem
from posttrain.config import AdmissionConfig, SandboxConfig
from posttrain.envs.agent_settings import parse_settings
from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import Rejection, Suite
from posttrain.envs.verifiers import get_verifier
from posttrain.envs.verifiers.base import TrustedSource

CHECK = "consistency"
# Calls whose first literal argument is a path the program reads.
FILE_READERS = frozenset({"open", "Path", "read_csv", "read_json", "read_parquet", "read_table", "read_excel",
                          "loadtxt", "genfromtxt", "load", "fromfile", "imread", "ZipFile", "TarFile", "listdir",
                          "scandir", "walk", "exists", "isfile", "getsize"})
_SHELL_READ = re.compile(r"(?:^|[\s;|&(])(?:cat|head|tail|wc|source|sort|diff|jq|python3?|node|bash|sh)"
                         r"(?:\s+-\S+)*\s+([\w./-]+\.\w+)|(?<![<\w])<\s*([\w./-]*\.\w+)(?![\w(])", re.MULTILINE)
_JS_READ = re.compile(r"""(?:readFileSync|readFile|createReadStream|require)\(\s*['"]([^'"]+)['"]""")
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


def _present_files(spec: EnvSpec) -> set[str]:
    """Files the sandbox will hold for this env: the workspace plus the verifier's own (harness, solution...)."""
    return set(spec.workspace) | set(get_verifier(spec.verifier_kind).own_files(spec))


def _entry_point_problems(spec: EnvSpec, tests: list[TrustedSource]) -> list[tuple[str, str]]:
    entry = spec.entry_point
    word = re.compile(rf"(?<![\w.]){re.escape(entry)}\b")
    problems = []
    if not word.search(spec.prompt):
        problems.append((f"{CHECK}.entry_point_not_in_prompt", f"entry point {entry!r} is not named in the prompt"))
    if spec.runtime == "python":
        names = _top_level_names(get_verifier(spec.verifier_kind).reference_program(spec))
        if names is not None and entry not in names:
            shown = ", ".join(n for n in names if not n.startswith("_")) or "nothing"
            problems.append((f"{CHECK}.entry_point_mismatch",
                             f"the reference defines {shown} but entry_point is {entry!r}"))
    elif not word.search(spec.reference):
        problems.append((f"{CHECK}.entry_point_not_in_reference",
                         f"entry point {entry!r} is not named in the reference"))
    aliases = get_verifier(spec.verifier_kind).entry_point_names(spec)
    called = re.compile(rf"(?<![\w.])({'|'.join(map(re.escape, aliases))})\b")
    if tests and not any(called.search(text) for _, text, _ in tests):
        problems.append((f"{CHECK}.entry_point_not_in_tests",
                         f"no test uses the entry point (as {' or '.join(map(repr, aliases))}): "
                         f"{', '.join(f for f, _, _ in tests)}"))
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


def oracle_settings_problems(spec: EnvSpec) -> list[tuple[str, str]]:
    """(code, text) problems of an agent env's oracle (``oracle_calls``: without one, its reference as a ``bash``
    call) under the env's own ``agent:`` settings: a tool outside its ``tools``, more turns of work (the calls before
    ``submit``) than its ``max_steps``; and a granted ``check`` its verifier cannot serve (``agent.check``). Its
    deadline is for the oracle episode to tell (solvability).

    >>> spec = EnvSpec(id="t/x", prompt="p", reference="make", verifier={}, kind="agent",
    ...                agent={"tools": ["read_file", "submit"], "max_steps": 1},
    ...                oracle=[{"name": "read_file", "arguments": {"path": "a"}},
    ...                        {"name": "bash", "arguments": {"command": "make"}}, {"name": "submit", "arguments": {}}])
    >>> [code for code, _ in oracle_settings_problems(spec)]
    ['consistency.oracle_tool_not_allowed', 'consistency.oracle_over_max_steps']
    """
    if spec.kind != "agent" or not spec.agent:
        return []
    settings, calls = parse_settings(spec.agent), oracle_calls(spec)
    problems = []
    outside = [name for name in dict.fromkeys(call["name"] for call in calls)
               if settings.tools is not None and name not in settings.tools]
    if outside:
        problems.append((f"{CHECK}.oracle_tool_not_allowed", f"the oracle calls {outside}, outside the env's "
                                                             f"agent.tools {settings.tools}"))
    work = next((k for k, call in enumerate(calls) if call["name"] == "submit"), len(calls))
    if "check" in (settings.tools or []) and check_problem(spec):
        problems.append((f"{CHECK}.check_not_served", f"agent.tools grants check, but {check_problem(spec)}"))
    if settings.max_steps is not None and work > settings.max_steps:
        problems.append((f"{CHECK}.oracle_over_max_steps", f"the oracle works {work} turns before it submits, over "
                                                           f"the env's agent.max_steps {settings.max_steps}"))
    return problems


def spec_problems(spec: EnvSpec, sandbox_cfg: SandboxConfig, cfg: AdmissionConfig) -> list[tuple[str, str]]:
    """(code, text) problems of a loaded spec, in a fixed order; empty when consistent."""
    verifier = get_verifier(spec.verifier_kind)
    tests = verifier.test_sources(spec)
    problems = _entry_point_problems(spec, tests) if spec.entry_point else []
    agent_only = verifier.agent_only(spec)
    if spec.kind == "single_turn" and agent_only:
        problems.append((f"{CHECK}.contradictory_kind", f"kind 'single_turn' but verifier {spec.verifier_kind!r} "
                                                        f"{agent_only}"))
    present = _present_files(spec)
    sources = [TrustedSource("reference", spec.reference, verifier.solution_language(spec)), *tests]
    for where, text, language in sources:
        for path in referenced_files(text, language):
            if path not in present and not any(p.startswith(path.rstrip("/") + "/") for p in present) \
                    and path not in spec.prompt:
                problems.append((f"{CHECK}.missing_file", f"{where} reads {path!r}, which is neither in the "
                                                          "workspace nor named in the prompt"))
    for name in verifier.vacuous_tests(spec):
        problems.append((f"{CHECK}.no_asserts", f"test {name!r} has no expected stdout and its command asserts "
                                                "nothing: it passes whenever it runs"))
    return problems + oracle_settings_problems(spec) + _limit_problems(spec, sandbox_cfg, cfg)


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
