"""One declaration per field: ``declare`` puts the default, bounds, checks and doc line on the dataclass field, and
``interval`` / ``within`` read the bounds the same way for every layer (configs, env spec, verifier configs)."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

import pytest

from posttrain.declaration import NO_RULE, Rule, declare, interval, rule_of, within

pytestmark = pytest.mark.unit


@dataclass
class Demo:
    name: str = declare(doc="required: no default")
    ratio: float = declare(0.5, low=0, high=1, open_high=True, doc="in [0, 1)")
    tags: list[str] = declare(factory=list, min_len=0, check=(lambda t: "", lambda t: "x" * ("bad" in t)))
    plain: int = 3


def test_declare_is_a_plain_dataclass_field_carrying_its_rule():
    name, ratio, tags, plain = fields(Demo)
    assert name.default is MISSING
    assert name.default_factory is MISSING
    assert Demo(name="a").ratio == 0.5
    assert Demo(name="a").tags == []
    assert Demo(name="a").tags is not Demo("b").tags
    assert rule_of(ratio) == Rule(doc="in [0, 1)", low=0, high=1, open_high=True)
    assert len(rule_of(tags).checks) == 2
    assert rule_of(plain) is NO_RULE
    assert NO_RULE.checks == ()


@pytest.mark.parametrize("rule, text, inside, outside", [
    (Rule(low=1), ">= 1", [1, 2.5], [0, 0.99]),
    (Rule(low=0, open_low=True), "> 0", [1e-9], [0, -1]),
    (Rule(low=0, open_low=True, high=1), "in (0, 1]", [1, 0.5], [0, 1.5]),
    (Rule(low=0, high=1, open_high=True), "in [0, 1)", [0, 0.99], [1]),
    (Rule(high=5), "<= 5", [5], [6]),
    (Rule(), "", [-1e9, 1e9], []),
])
def test_interval_and_within_agree(rule, text, inside, outside):
    assert interval(rule) == text
    assert all(within(v, rule) for v in inside)
    assert not any(within(v, rule) for v in outside)


def test_within_checks_lengths_and_patterns_and_never_bounds_a_bool():
    assert not within("", Rule(min_len=1))
    assert within("a", Rule(min_len=1))
    assert not within([1, 2, 3], Rule(max_len=2))
    assert within({"a": 1}, Rule(min_len=1, max_len=1))
    assert not within("a b", Rule(pattern=r"^\S+$"))
    assert within("ab", Rule(pattern=r"^\S+$"))
    assert within(True, Rule(low=5))  # a bool is no number here: its type check is the caller's
