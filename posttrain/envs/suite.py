"""Load a suite (a folder of env spec YAML files), validating every field and never stopping at a bad file.

Each problem becomes a ``Rejection`` naming the file and the field; good files still load. A single file can be
loaded strictly with ``load_spec``, which raises ``SpecError`` instead.

Example:
    >>> from posttrain.config import DEMO_SUITE
    >>> suite = load_suite(DEMO_SUITE)
    >>> len(suite.envs) >= 60, suite.rejections
    (True, [])
    >>> suite.envs[0].id.startswith("demo/"), len(suite_digest(DEMO_SUITE))
    (True, 64)
"""

from __future__ import annotations

import difflib
import hashlib
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

import yaml

from posttrain.declaration import interval, rule_of, within
from posttrain.envs.agent_settings import settings_problems
from posttrain.envs.assertions import evaluation_problems
from posttrain.envs.spec import CHOICES, EnvSpec, Limits
from posttrain.envs.tools import TOOLS
from posttrain.envs.verifiers import VERIFIERS, get_verifier
from posttrain.envs.verifiers.reward_layers import layers_problems, signal_problems

DOCUMENT = "<document>"  # the field named when the file as a whole is the problem

# Spec fields a YAML file may set (``source`` is filled in by the loader), with their required Python types.
_HINTS = {name: hint for name, hint in typing.get_type_hints(EnvSpec).items() if name != "source"}
REQUIRED = tuple(f.name for f in fields(EnvSpec) if f.default is MISSING and f.default_factory is MISSING)
_TYPE_NAMES = {str: "string", int: "integer", float: "number", dict: "mapping", Limits: "mapping",
               dict[str, str]: "mapping of strings to strings", list[str]: "list of strings",
               list[dict]: "list of mappings"}


@dataclass
class Rejection:
    """One problem with one spec file: which file, which field, why, and a stable ``code`` for tooling."""

    file: str
    field: str
    reason: str
    code: str  # unreadable | malformed_yaml | missing_field | unknown_field | wrong_type | unknown_value
    #          | out_of_range | invalid_verifier | invalid_oracle | invalid_evaluation | invalid_reward | invalid_agent
    #          | duplicate_id
    env_id: str = ""  # the spec's id when the file got far enough to have one

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.reason}"


class SpecError(ValueError):
    """A spec file is invalid; ``file``/``field``/``reason`` describe the first problem, ``rejections`` all."""

    def __init__(self, rejections: list[Rejection]):
        first = rejections[0]
        self.file, self.field, self.reason, self.rejections = first.file, first.field, first.reason, rejections
        more = f" (and {len(rejections) - 1} more problems)" if len(rejections) > 1 else ""
        super().__init__(f"{first}{more}")


@dataclass
class Suite:
    path: str
    envs: list[EnvSpec] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)

    def split(self, name: str) -> list[EnvSpec]:
        """The envs of one split (``train`` or ``eval``)."""
        return [env for env in self.envs if env.split == name]


def _has_type(value, hint) -> bool:
    """Whether a YAML value fits a spec field's annotation (bools are never numbers)."""
    if hint is Limits:
        hint = dict
    origin = typing.get_origin(hint) or hint
    if origin in (typing.Union, types.UnionType):
        return any(_has_type(value, arm) for arm in typing.get_args(hint))
    if isinstance(value, bool):
        return origin is bool
    if origin is float:
        return isinstance(value, (int, float))
    if not isinstance(value, origin):
        return False
    args = typing.get_args(hint)
    if origin is list and args:
        return all(isinstance(item, args[0]) for item in value)
    if origin is dict and args:
        return all(isinstance(k, args[0]) and isinstance(v, args[1]) for k, v in value.items())
    return True


def _out_of_bounds(where: str, value, rule) -> list[tuple[str, str, str]]:
    """The (field, reason, code) problem of a number outside its declared bounds (a value of another type has none)."""
    return [] if within(value, rule) else [(where, f"must be {interval(rule)}, got {value!r}", "out_of_range")]


def _check_limits(limits: dict) -> list[tuple[str, str, str]]:
    """(field, reason, code) problems of a ``limits`` mapping."""
    problems = []
    known = {f.name: (typing.get_type_hints(Limits)[f.name], rule_of(f)) for f in fields(Limits)}
    for name in sorted(set(limits) - set(known), key=str):
        problems.append((f"limits.{name}", f"unknown limit (known: {', '.join(known)})", "unknown_field"))
    for name, (hint, rule) in known.items():
        value = limits.get(name, 1)
        if not _has_type(value, hint):
            problems.append((f"limits.{name}", f"must be a positive {_TYPE_NAMES[hint]}, got {value!r}", "wrong_type"))
        else:
            problems += _out_of_bounds(f"limits.{name}", value, rule)
    return problems


def _check_fields(data: dict) -> list[tuple[str, str, str]]:
    """(field, reason, code) problems of a parsed spec mapping, before the verifier's own checks."""
    problems = []
    for key in sorted(set(data) - set(_HINTS), key=str):
        near = difflib.get_close_matches(str(key), list(_HINTS), n=1)
        problems.append((str(key), "unknown field" + (f" (did you mean {near[0]!r}?)" if near else ""),
                         "unknown_field"))
    for name in REQUIRED:
        if name not in data:
            problems.append((name, "required field is missing", "missing_field"))
    for name, hint in _HINTS.items():
        if name in data and not _has_type(data[name], hint):
            got = type(data[name]).__name__
            if isinstance(data[name], list) and typing.get_origin(hint) is list:  # name its first wrong item
                item = next(i for i, v in enumerate(data[name]) if not _has_type(v, typing.get_args(hint)[0]))
                got += f" whose item {item} is a {type(data[name][item]).__name__}"
            problems.append((name, f"must be a {_TYPE_NAMES.get(hint, hint)}, got {got}", "wrong_type"))
    if problems:
        return problems
    if not data["id"].strip() or any(c.isspace() for c in data["id"]):
        problems.append(("id", f"must be non-empty without whitespace, got {data['id']!r}", "out_of_range"))
    if not data["prompt"].strip():
        problems.append(("prompt", "must not be empty", "out_of_range"))
    for name, choices in CHOICES.items():
        if name in data and data[name] not in choices:
            problems.append((name, f"unknown {name} {data[name]!r} (known: {', '.join(choices)})", "unknown_value"))
    kind = data["verifier"].get("kind")
    if kind not in VERIFIERS:
        problems.append(("verifier.kind", f"unknown verifier kind {kind!r} (known: {', '.join(VERIFIERS)})",
                         "unknown_value"))
    for f in fields(EnvSpec):
        problems += _out_of_bounds(f.name, data[f.name], rule_of(f)) if f.name in data and interval(rule_of(f)) else []
    return problems + _check_limits(data.get("limits", {})) + _check_oracle(data) + _check_evaluation(data) + \
        [(field, reason, "invalid_reward") for field, reason in layers_problems(data.get("reward", {}))] + \
        _check_agent(data)


def _check_evaluation(data: dict) -> list[tuple[str, str, str]]:
    """The ``evaluation`` assertions (``posttrain.envs.assertions``): known tracks, names and values."""
    if "evaluation" not in data:
        return []
    return [(field, reason, "invalid_evaluation") for field, reason in evaluation_problems(data["evaluation"])]


def _check_agent(data: dict) -> list[tuple[str, str, str]]:
    """The ``agent`` settings (``posttrain.envs.agent_settings``): agent envs only; known keys, registered tools
    (submit among them), budgets within ``AgentConfig``'s bounds."""
    agent = data.get("agent", {})
    if agent and data.get("kind", "single_turn") != "agent":
        return [("agent", f"only agent envs have agent settings (kind is {data.get('kind', 'single_turn')!r})",
                 "invalid_agent")]
    return [(field, reason, "invalid_agent") for field, reason in settings_problems(agent)]


def _check_oracle(data: dict) -> list[tuple[str, str, str]]:
    """(field, reason, code) problems of an ``oracle``: agent envs only; each item ``{name, arguments}`` with a
    registered tool's name and exactly its (string) arguments."""
    oracle = data.get("oracle", [])
    if oracle and data.get("kind", "single_turn") != "agent":
        return [("oracle", f"only agent envs have an oracle (kind is {data.get('kind', 'single_turn')!r})",
                 "invalid_oracle")]
    problems = []
    for i, call in enumerate(oracle):
        where = f"oracle[{i}]"
        extra = sorted(set(call) - {"name", "arguments"}, key=str)
        missing = [key for key in ("name", "arguments") if key not in call]
        if extra or missing:
            parts = [f"missing {missing}" if missing else "", f"unexpected {extra}" if extra else ""]
            problems.append((where, "a tool call is {name: <tool>, arguments: {...}}: " +
                             "; ".join(p for p in parts if p), "invalid_oracle"))
            continue
        name, arguments = call["name"], call["arguments"]
        if name not in TOOLS:
            problems.append((f"{where}.name", f"unknown tool {name!r} (known: {', '.join(TOOLS)})", "invalid_oracle"))
            continue
        expected = TOOLS[name].arguments
        if not isinstance(arguments, dict):
            got = type(arguments).__name__
            problems.append((f"{where}.arguments", f"must be a mapping of {list(expected)}, got {got}",
                             "invalid_oracle"))
            continue
        wrong = [key for key in expected if key in arguments and not isinstance(arguments[key], str)]
        missing = [key for key in expected if key not in arguments]
        extra = sorted(str(key) for key in arguments if key not in expected)
        if wrong or missing or extra:
            parts = [f"missing {missing}" if missing else "", f"unexpected {extra}" if extra else "",
                     f"not strings {wrong}" if wrong else ""]
            problems.append((f"{where}.arguments", f"{name}: " + "; ".join(p for p in parts if p) +
                             f" (expected {list(expected)})", "invalid_oracle"))
    return problems


def _load_file(path: Path) -> tuple[EnvSpec | None, list[Rejection]]:
    """Parse and validate one spec file: the spec if it is valid, else every problem found."""
    file = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        return None, [Rejection(file, DOCUMENT, f"unreadable: {error}", "unreadable")]
    except yaml.YAMLError as error:
        reason = " ".join(str(error).split())
        return None, [Rejection(file, DOCUMENT, f"malformed YAML: {reason}", "malformed_yaml")]
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        return None, [Rejection(file, DOCUMENT, f"must be a mapping of spec fields, got {got}", "malformed_yaml")]
    env_id = data["id"] if isinstance(data.get("id"), str) else ""
    problems = _check_fields(data)
    if problems:
        return None, [Rejection(file, name, reason, code, env_id) for name, reason, code in problems]
    spec = EnvSpec(**{**data, "limits": Limits(**data.get("limits", {})), "source": file})
    verifier = get_verifier(spec.verifier_kind)
    problems = verifier.validate(spec)
    if problems:
        return None, [Rejection(file, name, reason, "invalid_verifier", env_id) for name, reason in problems]
    problems = signal_problems(spec, verifier)  # the layers name signals this env's verifier measures
    if problems:
        return None, [Rejection(file, name, reason, "invalid_reward", env_id) for name, reason in problems]
    return spec, []


def load_spec(path: str | Path) -> EnvSpec:
    """Load one spec file; raises ``SpecError`` (with ``file`` and ``field``) if it is invalid."""
    spec, rejections = _load_file(Path(path))
    if rejections:
        raise SpecError(rejections)
    return spec


INCLUDE = "include.txt"  # in a suite folder: more suite folders whose specs join it, one reference per line


def suite_files(path: str | Path) -> list[tuple[str, Path]]:
    """Every ``*.yaml`` / ``*.yml`` file of a suite folder, each with its name in the suite: the folder's own files
    (named by their relative path, sorted), then those of the folders its ``include.txt`` names, in its order (named
    ``<the line>/<relative path>``). An include line is a folder reference (``posttrain:envs/suites/finance``, an
    absolute path, a URI: ``posttrain.locations.local_copy``) or a path relative to the including folder; blank lines
    and ``#`` comments are skipped; a folder reached twice is read once. A composite suite is a folder with an
    ``include.txt`` and no specs of its own: ``posttrain/envs/suites/agent_long`` holds the regression hunts and the
    finance correction envs.

    >>> from posttrain.locations import local_copy
    >>> names = [name for name, _ in suite_files(local_copy("posttrain:envs/suites/agent_long"))]
    >>> len(names), names[0], names[-1]
    (108, '../regression_hunt/dictkit_count_by_h12_far.yaml', '../finance_agent/quillfeather_segments.yaml')
    """
    return _suite_files(Path(path), "", set())


def _suite_files(root: Path, prefix: str, seen: set[Path]) -> list[tuple[str, Path]]:
    if not root.is_dir():
        raise FileNotFoundError(f"suite folder not found: {root}")
    seen.add(root.resolve())
    files = sorted(((prefix + p.relative_to(root).as_posix(), p) for p in root.rglob("*")
                    if p.suffix in (".yaml", ".yml") and p.is_file()), key=lambda named: named[0])
    include = root / INCLUDE
    if not include.is_file():
        return files
    from posttrain.locations import PACKAGE, is_remote, local_copy

    for number, line in enumerate(include.read_text().splitlines(), 1):
        ref = line.split("#", 1)[0].strip()
        if not ref:
            continue
        folder = Path(local_copy(ref)) if ref.startswith(PACKAGE) or is_remote(ref) else root / ref
        if not folder.is_dir():
            raise FileNotFoundError(f"{include}: line {number}: suite folder not found: {ref}")
        if folder.resolve() not in seen:
            files += _suite_files(folder, f"{prefix}{ref.rstrip('/')}/", seen)
    return files


def spec_files(path: str | Path) -> list[Path]:
    """Every spec file of a suite folder, its includes' too, in ``suite_files``' order."""
    return [file for _, file in suite_files(path)]


def suite_digest(path: str | Path) -> str:
    """A content hash of every spec file of a suite (names and bytes; included folders' too): changes whenever any
    spec does."""
    digest = hashlib.sha256()
    for name, file in suite_files(path):
        for part in (name.encode(), file.read_bytes()):
            digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def load_suite(path: str | Path) -> Suite:
    """Load every spec under ``path``; bad files and duplicate ids become ``Suite.rejections``."""
    suite = Suite(path=str(path))
    first_file: dict[str, str] = {}
    for file in spec_files(path):
        spec, rejections = _load_file(file)
        suite.rejections.extend(rejections)
        if spec is None:
            continue
        if spec.id in first_file:
            suite.rejections.append(Rejection(str(file), "id", f"duplicate id {spec.id!r}, first defined in "
                                              f"{first_file[spec.id]}", "duplicate_id", spec.id))
            continue
        first_file[spec.id] = str(file)
        suite.envs.append(spec)
    return suite
