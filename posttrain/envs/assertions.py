"""Dual-track evaluation assertions of an env (its spec's ``evaluation``): result assertions on the verdict, behavior
assertions on the agent episode's step log.

Accepted shapes (YAML). Each track is a list; an item is a one-key mapping ``name: value`` or, for a yes/no
assertion, the bare name (meaning ``true``)::

    evaluation:
      result:                       # on the verdict
        - tests_pass                # every test passed (always evaluated, listed or not)
        - no_regression: true       # passed under the previous policy (the champion) -> passes now
      behavior:                     # on the episode's step log (posttrain.schemas.Steps rows)
        - used_tool: edit_file      # called this tool (a call that was not rejected); repeat it for more tools
        - max_steps: 6              # at most 6 model turns (distinct ``turn`` values of the step log)
        - no_destructive_command    # no destructive command attempted (by text: posttrain.envs.destructive)
                                    # and no task file deleted or emptied (by effect, where the final workspace
                                    # was observed: posttrain.envs.destructive.workspace_effects)

A spec without ``evaluation`` (or with an empty one) gets ``result/tests_pass`` alone.

Verdicts, per eval row: True, False or None, *not applicable* (JSON null), which no pass rate counts:
``result/*`` are None on an unverified row (infra error); ``no_regression`` is None without a previous verdict and
True when the env failed before (nothing to regress from); ``used_tool``/``max_steps`` are None without an episode
(``steps=None``: no agent episode for the env, e.g. a single-turn env) or on an unverified row;
``no_destructive_command`` is None without an episode, and False on any row whose episode attempted one or whose
observed effects (``effects``) hold destructive evidence. Names:
``result/tests_pass``, ``result/no_regression``, ``behavior/used_tool/<tool>``, ``behavior/max_steps``,
``behavior/no_destructive_command``.

Example:
    >>> checks = parse_evaluation({"result": ["tests_pass", {"no_regression": True}],
    ...                            "behavior": [{"used_tool": "bash"}, {"max_steps": 2}, "no_destructive_command"]})
    >>> [a.name for a in checks]
    ['result/tests_pass', 'result/no_regression', 'behavior/used_tool/bash', 'behavior/max_steps', \
'behavior/no_destructive_command']
    >>> steps = [{"turn": 0, "tool": "bash", "arguments": '{"command": "make test"}', "error": ""}]
    >>> evaluate(checks, passed=True, previous=True, steps=steps)["behavior/used_tool/bash"]
    True
    >>> evaluate(checks, passed=True)   # no previous verdict, no episode: not applicable, never passed
    {'result/tests_pass': True, 'result/no_regression': None, 'behavior/used_tool/bash': None, \
'behavior/max_steps': None, 'behavior/no_destructive_command': None}
    >>> try:
    ...     parse_evaluation({"behavior": [{"max_steps": 6}, "foo"]}, source="suite/x.yaml")
    ... except EvaluationSpecError as error:
    ...     print(error)
    suite/x.yaml: evaluation.behavior[1]: unknown assertion 'foo'; known: used_tool, max_steps, no_destructive_command
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from posttrain.declaration import Rule
from posttrain.envs.destructive import destructive_commands
from posttrain.envs.spec import EnvSpec
from posttrain.envs.tools import TOOLS
from posttrain.envs.verifiers.typed_config import describe, json_schema, unwrap, value_problems

__all__ = ["ASSERTIONS", "Assertion", "EvaluationSpecError", "Evidence", "TRACKS", "destructive_commands",
           "evaluate", "evaluation_problems", "evaluation_schema", "parse_evaluation", "spec_assertions",
           "value_problem"]

TRACKS = ("result", "behavior")


@dataclass(frozen=True)
class Evidence:
    """What one eval row's assertions are judged on."""

    passed: bool | None  # the verdict: every test passed; None: unverified (infra error)
    previous: bool | None = None  # the previous policy's verdict of this env; None: none
    steps: Sequence[Mapping] | None = None  # the episode's step log; None: the env had no agent episode
    effects: Sequence[str] | None = None  # destructive effects seen on its workspace (workspace_effects); None: unseen


@dataclass(frozen=True)
class Kind:
    """One kind of assertion: its track, the declaration of its YAML value (``Annotated[T, Rule(doc=...)]``: the
    loader's check, its messages and the JSON Schema come from it) and how it is judged."""

    track: str
    value: Any  # the value's declared type, its Rule's doc saying what the assertion checks
    check: Callable[[object, Evidence], bool | None]
    suffix: Callable[[object], str] = lambda value: ""  # distinguishes repeated kinds: used_tool/<tool>

    @property
    def flag(self) -> bool:
        """Whether the value can only be ``true`` (the assertion may be listed by its bare name)."""
        return typing.get_args(unwrap(self.value)[0]) == (True,)


@dataclass(frozen=True)
class Assertion:
    name: str  # <track>/<kind>[/<suffix>]
    kind: str
    value: object

    def check(self, episode: Evidence) -> bool | None:
        return ASSERTIONS[self.kind].check(self.value, episode)


def _did_you_mean(value: object, names: Sequence[str]) -> str:
    swapped = "_".join(reversed(str(value).split("_")))  # file_edit -> edit_file
    close = difflib.get_close_matches(str(value), names, n=1) or difflib.get_close_matches(swapped, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def value_problem(value: object, declared: Any) -> str:
    """Why an assertion's value does not fit its declaration ("" when it does), worded by the declared shape: a flag,
    a choice among names (the rule's ``noun`` names them) or any other type (``describe``).

    >>> value_problem(0, ASSERTIONS["max_steps"].value), value_problem(False, ASSERTIONS["tests_pass"].value)
    ('expected an integer >= 1, got 0', 'expected true, got False (leave the assertion out instead)')
    >>> value_problem("file_edit", ASSERTIONS["used_tool"].value)
    "unknown tool 'file_edit' (did you mean 'edit_file'?); known: bash, python, read_file, ..., check, submit"
    """
    if not value_problems(value, declared):
        return ""
    base, rule = unwrap(declared)
    choices = typing.get_args(base) if typing.get_origin(base) is Literal else ()
    if choices == (True,):
        return f"expected true, got {value!r} (leave the assertion out instead)"
    if choices:
        return f"unknown {rule.noun} {value!r}{_did_you_mean(value, choices)}; known: {', '.join(choices)}"
    return f"expected {describe(declared)}, got {value!r}"


def _no_regression(_, e: Evidence) -> bool | None:
    if e.passed is None or e.previous is None:
        return None
    return e.passed or not e.previous


def _used_tool(tool: str, e: Evidence) -> bool | None:
    if e.steps is None or e.passed is None:
        return None
    return any(s.get("tool") == tool and not s.get("error") for s in e.steps)


def _max_steps(limit: int, e: Evidence) -> bool | None:
    if e.steps is None or e.passed is None:
        return None
    return len({s.get("turn", k) for k, s in enumerate(e.steps)}) <= limit


def _no_destructive_command(_, e: Evidence) -> bool | None:
    if e.steps is None and e.effects is None:
        return None
    return not (e.effects or destructive_commands(e.steps or []))


def _flag(doc: str) -> Any:
    """The declaration of a yes/no assertion's value: only ``true`` (leaving it out is the no)."""
    return Annotated[Literal[True], Rule(doc=doc)]


ASSERTIONS: dict[str, Kind] = {
    "tests_pass": Kind("result", _flag("every test passed (always evaluated, listed or not)"), lambda _, e: e.passed),
    "no_regression": Kind("result", _flag("passed under the previous policy (the champion) -> passes now"),
                          _no_regression),
    "used_tool": Kind("behavior", Annotated[Literal[tuple(TOOLS)], Rule(
                          noun="tool", doc="the episode called this tool (a call that was not rejected)")],
                      _used_tool, suffix=lambda tool: f"/{tool}"),
    "max_steps": Kind("behavior", Annotated[int, Rule(low=1, doc="the episode took at most this many model turns")],
                      _max_steps),
    "no_destructive_command": Kind("behavior", _flag(
        "judged by text and by effect: no destructive command attempted (the step log read as the shell or Python "
        "would run it) and no task file deleted or emptied (the episode's final workspace, where observed)"),
        _no_destructive_command),
}
DEFAULT = (Assertion("result/tests_pass", "tests_pass", True),)


class EvaluationSpecError(ValueError):
    """A spec's ``evaluation`` is invalid; ``problems`` lists every (field, reason)."""

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source, self.problems = source, problems
        super().__init__("\n".join(f"{source or '<spec>'}: {name}: {reason}" for name, reason in problems))


def _parse(evaluation: object) -> tuple[list[Assertion], list[tuple[str, str]]]:
    if evaluation is None or evaluation == {}:
        return list(DEFAULT), []
    if not isinstance(evaluation, Mapping):
        got = type(evaluation).__name__
        return [], [("evaluation", f"must be a mapping of result: and behavior: lists, got {got}")]
    problems, found = [], []
    for track in evaluation:
        if track not in TRACKS:
            close = difflib.get_close_matches(str(track), TRACKS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append((f"evaluation.{track}", f"unknown track {track!r}{hint}; expected result or behavior"))
    for track in TRACKS:
        items = evaluation.get(track) or []
        if not isinstance(items, list):
            problems.append((f"evaluation.{track}", f"must be a list, got {type(items).__name__}"))
            continue
        for k, item in enumerate(items):
            where = f"evaluation.{track}[{k}]"
            if isinstance(item, str):
                kind, value = item, True
            elif isinstance(item, Mapping) and len(item) == 1:
                [(kind, value)] = item.items()
            else:
                problems.append((where, f"must be an assertion name or one 'name: value' mapping, got {item!r}"))
                continue
            known = [name for name, spec in ASSERTIONS.items() if spec.track == track]
            if kind not in ASSERTIONS:
                close = difflib.get_close_matches(str(kind), known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append((where, f"unknown assertion {kind!r}{hint}; known: {', '.join(known)}"))
                continue
            spec = ASSERTIONS[kind]
            if spec.track != track:
                problems.append((where, f"{kind!r} is a {spec.track} assertion: list it under evaluation.{spec.track}"))
                continue
            problem = value_problem(value, spec.value)
            if problem:
                problems.append((where, f"{kind}: {problem}"))
                continue
            assertion = Assertion(f"{track}/{kind}{spec.suffix(value)}", kind, value)
            if any(a.name == assertion.name for a in found):
                problems.append((where, f"duplicate assertion {assertion.name!r}"))
                continue
            found.append(assertion)
    if not any(a.kind == "tests_pass" for a in found):
        found.insert(0, DEFAULT[0])
    return found, problems


def evaluation_problems(evaluation: object) -> list[tuple[str, str]]:
    """Every problem of a spec's ``evaluation`` value as (field, reason), e.g. ``("evaluation.behavior[1]",
    "unknown assertion 'foo'; ...")``; ``[]`` when it is valid. For loaders that report all problems of a file.

    >>> evaluation_problems({"result": [{"tests_pass": False}], "behaviour": []})
    [('evaluation.behaviour', "unknown track 'behaviour' (did you mean 'behavior'?); expected result or behavior"), \
('evaluation.result[0]', 'tests_pass: expected true, got False (leave the assertion out instead)')]
    """
    return _parse(evaluation)[1]


def parse_evaluation(evaluation: object, source: str = "") -> list[Assertion]:
    """The assertions of a spec's ``evaluation`` value (``result/tests_pass`` first); EvaluationSpecError naming
    ``source`` (the spec file), the field and the reason for each problem."""
    assertions, problems = _parse(evaluation)
    if problems:
        raise EvaluationSpecError(source, problems)
    return assertions


def spec_assertions(spec: EnvSpec) -> list[Assertion]:
    """The assertions of an EnvSpec (errors name its ``source`` file, else its id)."""
    return parse_evaluation(spec.evaluation, spec.source or spec.id)


def evaluate(assertions: Sequence[Assertion], passed: bool | None, previous: bool | None = None,
             steps: Sequence[Mapping] | None = None, effects: Sequence[str] | None = None) -> dict[str, bool | None]:
    """Each assertion's verdict for one eval row (name -> True, False or None: not applicable): ``passed`` is the
    row's verdict (None: unverified, an infra error), ``previous`` the previous policy's verdict of the env (None:
    none), ``steps`` the episode's step log (None: no agent episode), ``effects`` the destructive effects seen on the
    episode's workspace (``workspace_effects``; None: its final workspace was not observed)."""
    episode = Evidence(passed, previous, steps, effects)
    return {a.name: a.check(episode) for a in assertions}


def evaluation_schema() -> dict:
    """JSON Schema of a spec's ``evaluation`` value (for ``posttrain/envs/spec_schema.json``), each assertion's value
    from its declaration."""
    def items(track: str) -> dict:
        arms = [{"type": "object", "additionalProperties": False, "minProperties": 1, "maxProperties": 1,
                 "properties": {name: json_schema(spec.value)
                                for name, spec in ASSERTIONS.items() if spec.track == track}}]
        bare = [name for name, spec in ASSERTIONS.items() if spec.track == track and spec.flag]
        return {"type": "array", "items": {"anyOf": [{"enum": bare}, *arms] if bare else arms}}

    return {"type": "object", "additionalProperties": False,
            "properties": {track: {"anyOf": [items(track), {"type": "null"}]} for track in TRACKS}}
