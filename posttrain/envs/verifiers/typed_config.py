"""Typed verifier configs: one dataclass per verifier kind declares its ``verifier:`` mapping, and both the loader's
validation and the JSON Schema come from that one declaration.

A field's annotation gives its JSON shape: ``bool``, ``int``, ``float`` (finite, never a bool), ``str``,
``list[T]``, ``dict[str, T]``, ``Literal[...]``, ``Any`` (a JSON value), ``None``, unions, and nested config
dataclasses (mappings with exactly their fields; a union of dataclasses that share a ``Literal`` field is told
apart by it). A ``Rule`` (``posttrain.declaration``: bounds, lengths, a pattern, extra checks, the description) comes
with a field declared by ``declare(default, doc=..., low=...)`` or with a type written ``Annotated[T, Rule(...)]``
(the items of a list). A field with a default is optional (``None``: computed when absent).

- ``config_problems(Config, mapping, kind)``: (field, reason) problems, each naming the field
  (``verifier.cases[2].args``), in declaration order; empty when the mapping fits.
- ``value_problems(value, hint)``: the same for any declared value (an evaluation assertion's).
- ``json_schema(Config)``: the same declaration as a JSON Schema (draft 2020-12) fragment.
- ``markdown_table(Config)``: one row per key (type, default, meaning), for ``docs/env-spec.md``.
- ``parse(Config, mapping)``: a mapping that fits, as a ``Config`` instance (absent keys take their defaults); the
  verifiers read their config this way, so a default lives only in the declaration.

Example:
    >>> @dataclass
    ... class Demo:
    ...     kind: Literal["demo"]
    ...     cases: Annotated[list[int], Rule(min_len=1, max_len=3, noun="cases", doc="inputs")]
    ...     strict: Annotated[bool, Rule(doc="refuse near misses")] = False
    >>> for problem in config_problems(Demo, {"kind": "demo", "cases": [], "strict": "yes", "x": 1}, "demo"):
    ...     print(problem)
    ('verifier.x', 'unknown key for demo (allowed: cases, kind, strict)')
    ('verifier.cases', 'must be a list of 1..3 cases, got []')
    ('verifier.strict', "must be true or false, got 'yes'")
    >>> json_schema(Demo)["properties"]["cases"]
    {'type': 'array', 'items': {'type': 'integer'}, 'minItems': 1, 'maxItems': 3, 'description': 'inputs'}
    >>> parse(Demo, {"kind": "demo", "cases": [1, 2]})
    Demo(kind='demo', cases=[1, 2], strict=False)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass
from typing import Annotated, Any, Literal

from posttrain.declaration import NO_RULE, Rule, interval, rule_of, within
from posttrain.generated import markdown

Problems = list[tuple[str, str]]  # (field, reason) pairs


_UNION = (typing.Union, types.UnionType)


@functools.cache  # like declared_hints, _tagged: per declared type, never per value (parsing verdicts stays cheap)
def unwrap(hint) -> tuple[Any, Rule]:
    """(type, rule) of an annotation; the rules of nested ``Annotated`` aliases merge, the outer ones winning."""
    if typing.get_origin(hint) is not Annotated:
        return hint, NO_RULE
    base, *extras = typing.get_args(hint)
    merged: dict = {}
    for rule in (e for e in extras if isinstance(e, Rule)):
        merged.update({f.name: getattr(rule, f.name) for f in dataclasses.fields(Rule)
                       if getattr(rule, f.name) != f.default})
    return base, Rule(**merged)


@functools.cache
def declared_hints(cls) -> dict[str, Any]:
    """Each field's annotation, with the rule ``declare`` gave the field (if any) outermost."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: Annotated[hints[f.name], rule_of(f)] if "rule" in f.metadata else hints[f.name]
            for f in dataclasses.fields(cls)}


def _default(f: dataclasses.Field):
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else MISSING


def _keys(cls) -> tuple[list[str], list[str]]:
    """(required, optional) keys of a config dataclass, in declaration order."""
    fields = dataclasses.fields(cls)
    return ([f.name for f in fields if _default(f) is MISSING], [f.name for f in fields if _default(f) is not MISSING])


def _tag(cls) -> tuple[str, Any] | None:
    """The (key, value) of a dataclass's single-value ``Literal`` field: what tells union arms apart."""
    for name, hint in declared_hints(cls).items():
        base, _ = unwrap(hint)
        if typing.get_origin(base) is Literal and len(typing.get_args(base)) == 1:
            return name, typing.get_args(base)[0]
    return None


@functools.cache
def _tagged(union) -> tuple[str, dict[Any, Any]] | None:
    """(key, {tag: arm}) when every arm of a union is a config dataclass told apart by the same tag key."""
    arms = typing.get_args(union)
    tags = [_tag(arm) if dataclasses.is_dataclass(arm) else None for arm in arms]
    if not all(tags) or len({key for key, _ in tags}) != 1:
        return None
    return tags[0][0], {tag: arm for (_, tag), arm in zip(tags, arms)}


def _a(noun: str) -> str:
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def _quoted(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _bounds(rule: Rule) -> str:
    """The bounds a number phrase does not say already (a lower bound of 0 is "non-negative" or "positive")."""
    return "" if rule.low == 0 and rule.high is None or not interval(rule) else " " + interval(rule)


def _count(rule: Rule) -> str:
    low, high = rule.min_len, rule.max_len
    if low is not None and low == high:
        return f" of {low}"
    if high is not None:
        return f" of {low or 0}..{high}"
    return ""


def describe(hint) -> str:
    """What a value of ``hint`` must be, as a noun phrase ("a list of 1..100 cases", "true or false")."""
    base, rule = unwrap(hint)
    origin = typing.get_origin(base)
    if dataclasses.is_dataclass(base):
        required, optional = _keys(base)
        return f"a mapping with {_quoted(required)}" + (f" and optional {_quoted(optional)}" if optional else "")
    if origin in _UNION:
        tagged = _tagged(base)
        if tagged:
            return f"a mapping with a known {tagged[0]} ({', '.join(tagged[1])})"
        return " or ".join(describe(arm) for arm in typing.get_args(base))
    if origin is Literal:
        return " or ".join(repr(v) for v in typing.get_args(base))
    if base is type(None):
        return "null"
    if base is Any:
        return "a JSON value"
    if base is bool:
        return "true or false"
    if base in (int, float):
        sign = {(0, False): "non-negative ", (0, True): "positive "}.get((rule.low, rule.open_low), "")
        bare = "finite " if base is float and rule.low is None and rule.high is None else ""
        return _a(sign + bare + ("integer" if base is int else "number")) + _bounds(rule)
    if base is str:
        return _a(("non-empty " if rule.min_len == 1 else "") + (rule.noun or "string"))
    container = {list: "list", dict: "mapping"}[origin or base]
    if rule.min_len == 1 and rule.max_len is None:
        container = "non-empty " + container
    return _a(container) + _count(rule) + (f" of {rule.noun}" if rule.noun and not _count(rule) else
                                          f" {rule.noun}" if rule.noun else "")


def clip(text: str, n: int = 60) -> str:
    """``text`` cut to at most ``n`` characters, the cut marked: ``clip("abcdef", 5) == "ab..."``."""
    return text if len(text) <= n else text[:n - 3] + "..."


def _family(value) -> type:
    """The JSON kind of a YAML value, to pick the union arm a value was meant for."""
    if isinstance(value, bool):
        return bool
    if isinstance(value, (int, float)):
        return float
    return dict if isinstance(value, dict) else list if isinstance(value, list) else type(value)


def _arm_family(hint) -> type:
    base, _ = unwrap(hint)
    if dataclasses.is_dataclass(base):
        return dict
    base = typing.get_origin(base) or base
    return float if base is int else base


def _union_problems(value, hint, where: str) -> Problems:
    arms = typing.get_args(unwrap(hint)[0])
    tagged = _tagged(unwrap(hint)[0])
    if tagged:
        key, by_tag = tagged
        if not isinstance(value, dict) or value.get(key) not in by_tag:
            return [(where, f"must be {describe(hint)}")]
        return _problems(value, by_tag[value[key]], where)
    results = [_problems(value, arm, where) for arm in arms]
    if any(not problems for problems in results):
        return []
    meant = [problems for arm, problems in zip(arms, results) if _arm_family(arm) is _family(value)]
    return meant[0] if len(meant) == 1 else [(where, f"must be {describe(hint)}, got {clip(repr(value))}")]


def _record_problems(value: dict, cls, where: str, kind: str = "") -> Problems:
    """Problems of a mapping declared by ``cls``; ``kind`` marks the top-level config (problems per key)."""
    hints, (required, optional) = declared_hints(cls), _keys(cls)
    unknown = sorted(set(value) - set(hints), key=str)
    missing = [name for name in required if name not in value]
    if kind:
        allowed = ", ".join(sorted(hints))
        problems = [(f"{where}.{name}", f"unknown key for {kind} (allowed: {allowed})") for name in unknown]
        problems += [(f"{where}.{name}", f"required key is missing (must be {describe(hints[name])})")
                     for name in missing]
    elif unknown or missing:
        return [(where, f"must be {describe(cls)}; got keys {sorted(map(str, value))}")]
    else:
        problems = []
    for name in required + optional:
        if name in value:
            problems += _problems(value[name], hints[name], f"{where}.{name}")
    return problems


def _fits(value, base, rule: Rule) -> bool:
    """Whether a value has the JSON type of ``base`` and is within the rule's bounds, lengths and pattern."""
    origin = typing.get_origin(base) or base
    if origin is Literal:
        return any(type(value) is type(v) and value == v for v in typing.get_args(base))
    if base is bool or isinstance(value, bool):
        return base is bool and isinstance(value, bool)
    if base in (int, float):
        return (type(value) is int if base is int else type(value) in (int, float) and math.isfinite(value)) \
            and within(value, rule)
    return isinstance(value, origin) and within(value, rule)


def _problems(value, hint, where: str) -> Problems:
    base, rule = unwrap(hint)
    origin = typing.get_origin(base)
    if origin in _UNION:
        problems = _union_problems(value, base, where)
    elif dataclasses.is_dataclass(base):
        if not isinstance(value, dict):
            return [(where, f"must be {describe(hint)}, got {clip(repr(value))}")]
        problems = _record_problems(value, base, where)
    elif base is Any:
        problems = []
    elif base is type(None):
        problems = [] if value is None else [(where, f"must be null, got {clip(repr(value))}")]
    elif not _fits(value, base, rule):
        return [(where, f"must be {describe(hint)}, got {clip(repr(value))}")]
    elif origin is list:
        (item,) = typing.get_args(base)
        problems = [p for i, v in enumerate(value) for p in _problems(v, item, f"{where}[{i}]")]
    elif origin is dict:
        key_hint, item = typing.get_args(base)
        problems = [(where, f"key {reason}") for k in value for _, reason in _problems(k, key_hint, where)]
        problems += [p for k, v in value.items() for p in _problems(v, item, f"{where}.{k}")]
    else:
        problems = []
    if not problems:
        problems = [(where, reason) for check in rule.checks if (reason := check(value))]
    return problems


def value_problems(value, hint, where: str = "") -> Problems:
    """Problems of any value declared by ``hint`` (not only a ``verifier`` mapping), each naming ``where``.

    >>> value_problems(0, Annotated[int, Rule(low=1)], "max_steps")
    [('max_steps', 'must be an integer >= 1, got 0')]
    """
    return _problems(value, hint, where)


def config_problems(cls, config, kind: str, where: str = "verifier") -> Problems:
    """Problems of a ``verifier`` mapping declared by the config dataclass ``cls`` (see the module docstring)."""
    if not isinstance(config, dict):
        return [(where, f"must be {describe(cls)}, got {clip(repr(config))}")]
    return _record_problems(config, cls, where, kind)


def parse(hint, value):
    """A value that fits a declared type (``config_problems`` found nothing), as the declaration's Python objects.

    Config dataclasses become instances, their absent keys taking the declared defaults; a union of dataclasses
    picks its arm by the tag, any other union the first arm the value fits; lists and mappings are parsed item by
    item; every other value is returned as it is. Nothing is checked: parse only what validation accepted.

    >>> @dataclass
    ... class Arm:
    ...     tag: Literal["arm"]
    ...     reach: float = 1.0
    >>> parse(dict[str, Arm | int], {"a": {"tag": "arm"}, "b": 2})
    {'a': Arm(tag='arm', reach=1.0), 'b': 2}
    """
    base, _ = unwrap(hint)
    origin = typing.get_origin(base)
    if dataclasses.is_dataclass(base):
        hints = declared_hints(base)
        return base(**{f.name: parse(hints[f.name], value[f.name]) for f in dataclasses.fields(base)
                       if f.name in value})
    if origin in _UNION:
        tagged = _tagged(base)
        if tagged:
            return parse(tagged[1][value[tagged[0]]], value)
        return parse(next((arm for arm in typing.get_args(base) if not _problems(value, arm, "")), Any), value)
    if origin is list:
        return [parse(typing.get_args(base)[0], item) for item in value]
    if origin is dict:
        return {key: parse(typing.get_args(base)[1], item) for key, item in value.items()}
    return value


def json_schema(hint) -> dict:
    """The JSON Schema of a declared type (a config dataclass, or any annotation it uses)."""
    base, rule = unwrap(hint)
    origin = typing.get_origin(base)
    if dataclasses.is_dataclass(base):
        hints, (required, _) = declared_hints(base), _keys(base)
        properties = {}
        for f in dataclasses.fields(base):
            properties[f.name] = json_schema(hints[f.name])
            default = _default(f)
            if isinstance(default, (bool, int, float, str)):
                properties[f.name]["default"] = default
        schema = {"type": "object", "required": required, "additionalProperties": False, "properties": properties}
    elif origin in _UNION:
        schema = {"oneOf": [json_schema(arm) for arm in typing.get_args(base)]}
    elif origin is Literal:
        values = list(typing.get_args(base))
        schema = {"const": values[0]} if len(values) == 1 else {"enum": values}
    elif base is Any:
        schema = {}
    else:
        schema = {"type": {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
                           dict: "object", type(None): "null"}[origin or base]}
        schema.update(_limits(base, origin, rule))
    if rule.doc:
        schema["description"] = rule.doc
    return schema


def _limits(base, origin, rule: Rule) -> dict:
    """The bounds, lengths, pattern and item schemas of a scalar or container type."""
    out: dict = {}
    if base in (int, float):
        if rule.low is not None:
            out["exclusiveMinimum" if rule.open_low else "minimum"] = rule.low
        if rule.high is not None:
            out["exclusiveMaximum" if rule.open_high else "maximum"] = rule.high
        return out
    names = {str: ("minLength", "maxLength"), list: ("minItems", "maxItems"),
             dict: ("minProperties", "maxProperties")}.get(origin or base, ("", ""))
    if origin is list:
        out["items"] = json_schema(typing.get_args(base)[0])
    if origin is dict:
        keys = {k: v for k, v in json_schema(typing.get_args(base)[0]).items() if k not in ("type", "description")}
        out.update({"propertyNames": keys} if keys else {})
        out["additionalProperties"] = json_schema(typing.get_args(base)[1])
    for name, value in zip(names, (rule.min_len, rule.max_len)):
        if name and value is not None:
            out[name] = value
    if rule.pattern:
        out["pattern"] = rule.pattern
    return out


def _rows(cls, prefix: str, note: str = "", hints: Mapping[str, Any] | None = None) -> list[str]:
    """Table rows of a config dataclass's keys, then of the records nested in them (``cases[].args``); a record with
    a default (``limits``) is shown in place as its keys, each with its own default. ``hints``: the keys to show and
    the annotations to describe them by (default: every key, as declared)."""
    rows, nested = [], []
    hints = declared_hints(cls) if hints is None else hints
    for f in (f for f in dataclasses.fields(cls) if f.name in hints):
        default, path = _default(f), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(default):
            rows += _rows(type(default), path + ".")
            continue
        shown = "**required**" if default is MISSING else "computed" if default is None else f"`{json.dumps(default)}`"
        rule = unwrap(hints[f.name])[1]
        rows.append(f"| `{path}`{note} | {describe(hints[f.name]).replace('|', '/')} | {shown} | {markdown(rule.doc)} |")
        nested += _nested_rows(hints[f.name], path)
    return rows + nested


def _nested_rows(hint, path: str) -> list[str]:
    base, _ = unwrap(hint)
    origin = typing.get_origin(base)
    if dataclasses.is_dataclass(base):
        return _rows(base, path + ".")
    if origin is list:
        return _nested_rows(typing.get_args(base)[0], path + "[]")
    if origin is dict:
        return _nested_rows(typing.get_args(base)[1], path + ".*")
    if origin in _UNION:
        tagged = _tagged(base)
        if tagged:
            return [row for tag, arm in tagged[1].items()
                    for row in _rows(arm, path + ".", f" ({tagged[0]} `{tag}`)")]
        return [row for arm in typing.get_args(base) for row in _nested_rows(arm, path)]
    return []


def markdown_table(cls, hints: Mapping[str, Any] | None = None) -> str:
    """The keys of a config dataclass (and of the records nested in them) as a Markdown table; ``hints``: the keys to
    show and their annotations, where not every key as declared (the env spec shows its registries' choices)."""
    return "\n".join(["| key | type | default | meaning |", "|---|---|---|---|", *_rows(cls, "", hints=hints)]) + "\n"
