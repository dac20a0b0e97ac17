"""One declaration per field: its type (the annotation), its default, its bounds and its doc line, in one place.

A ``Rule`` says what a type alone cannot: bounds, lengths, a pattern, extra checks, and the doc line. It is attached
to a dataclass field by ``declare`` (the field's metadata: plain dataclasses stay plain, as Flyte serializes the
configs) or to a type nested in an annotation by ``Annotated[T, Rule(...)]`` (the items of a verifier config's
lists). Validation, the JSON Schema and the docs tables are all generated from it: ``posttrain.config`` (the configs'
checks), ``posttrain.config_docs`` (docs/configuration.md), ``posttrain.envs.verifiers.typed_config`` (the env spec,
its verifier configs and their schema and tables).

Example:
    >>> from dataclasses import dataclass, fields
    >>> @dataclass
    ... class Demo:
    ...     top_p: float = declare(1.0, low=0, open_low=True, high=1, doc="nucleus sampling (1.0: off)")
    >>> rule = rule_of(fields(Demo)[0])
    >>> rule.doc, interval(rule), within(1.5, rule), within(0.5, rule)
    ('nucleus sampling (1.0: off)', 'in (0, 1]', False, True)
    >>> interval(Rule(low=0, high=1, open_high=True)), interval(Rule(low=1)), interval(Rule(low=0, open_low=True))
    ('in [0, 1)', '>= 1', '> 0')
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import MISSING
from typing import Any

Check = Callable[[Any], str]  # a value -> why it cannot work ("" when it can)


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a type alone cannot say about a value: bounds, lengths, a pattern, extra checks, a description."""

    doc: str = ""  # the doc line (the docs tables, JSON Schema ``description``)
    low: float | None = None  # numbers: minimum (exclusive with ``open_low``)
    high: float | None = None  # numbers: maximum (exclusive with ``open_high``)
    open_low: bool = False
    open_high: bool = False
    min_len: int | None = None  # strings, lists, mappings: length bounds
    max_len: int | None = None
    noun: str = ""  # lists and mappings: what the items are ("cases"); strings: what the string is
    pattern: str = ""  # strings: a regular expression they must contain a match of (anchor it)
    check: Check | tuple[Check, ...] | None = None  # each runs once the shape and bounds fit; every problem counts

    @property
    def checks(self) -> tuple[Check, ...]:
        return () if self.check is None else self.check if isinstance(self.check, tuple) else (self.check,)


NO_RULE = Rule()


def declare(default: Any = MISSING, *, factory: Any = MISSING, doc: str = "", **rule: Any) -> Any:
    """A dataclass field declared once: its default (or ``factory``), its doc line and its ``Rule``."""
    return dataclasses.field(default=default, default_factory=factory, metadata={"rule": Rule(doc=doc, **rule)})


def rule_of(field: dataclasses.Field) -> Rule:
    """The rule ``declare`` gave a field (an empty one for a field declared without it)."""
    return field.metadata.get("rule", NO_RULE)


def interval(rule: Rule) -> str:
    """A rule's numeric bounds as text: ``in (0, 1]``, ``>= 1``, ``< 1``; "" without bounds."""
    low, high = rule.low, rule.high
    if low is not None and high is not None:
        return f"in {'(' if rule.open_low else '['}{low:g}, {high:g}{')' if rule.open_high else ']'}"
    if low is not None:
        return f"{'>' if rule.open_low else '>='} {low:g}"
    return f"{'<' if rule.open_high else '<='} {high:g}" if high is not None else ""


def within(value: Any, rule: Rule) -> bool:
    """Whether a value of the right type is within the rule's bounds, lengths and pattern."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return not ((rule.low is not None and (value <= rule.low if rule.open_low else value < rule.low))
                    or (rule.high is not None and (value >= rule.high if rule.open_high else value > rule.high)))
    if hasattr(value, "__len__") and ((rule.min_len is not None and len(value) < rule.min_len)
                                      or (rule.max_len is not None and len(value) > rule.max_len)):
        return False
    return not (rule.pattern and isinstance(value, str) and not re.search(rule.pattern, value))
