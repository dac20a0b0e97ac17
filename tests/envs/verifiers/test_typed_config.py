"""One typed config per verifier: its validation and its JSON Schema both come from the declaration, agree with
each other, the docs' config tables are generated from it, and the verifiers read it parsed (defaults filled)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import pytest
import yaml

from posttrain.envs import spec_json_schema
from posttrain.declaration import declare
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import VERIFIERS, get_verifier
from posttrain.envs.verifiers.typed_config import (Rule, config_problems, describe, json_schema, markdown_table,
                                                   parse)

pytestmark = pytest.mark.unit

FIXTURES = Path("tests/fixtures/broken_suite")  # its good_* envs cover the kind no bundled suite uses


@dataclass
class Circle:
    type: Literal["circle"]
    radius: Annotated[float, Rule(low=0, open_low=True)]


@dataclass
class Square:
    type: Literal["square"]
    side: Annotated[float, Rule(low=0, open_low=True)]
    filled: bool = False


@dataclass
class Demo:
    kind: Literal["demo"]
    shapes: Annotated[list[Union[Circle, Square]], Rule(min_len=1, max_len=4, noun="shapes", doc="what to draw")]
    labels: Annotated[dict[Annotated[str, Rule(pattern=r"^[a-z]+$")], str], Rule(noun="names to text")] = \
        field(default_factory=dict)
    size: Annotated[int, Rule(low=1, high=10)] = 3
    style: Literal["flat", "shaded"] = "flat"
    note: Annotated[str | None, Rule(check=lambda s: "" if s is None or "!" not in s else "no shouting")] = None


GOOD = {"kind": "demo", "shapes": [{"type": "circle", "radius": 1}, {"type": "square", "side": 2, "filled": True}],
        "labels": {"a": "x"}, "size": 10, "style": "shaded", "note": None}
BAD = [  # (change, field, words in the reason)
    ({"shapes": []}, "verifier.shapes", "a list of 1..4 shapes"),
    ({"shapes": [{"type": "star"}]}, "verifier.shapes[0]", "a known type (circle, square)"),
    ({"shapes": [{"type": "circle"}]}, "verifier.shapes[0]", "a mapping with 'type', 'radius'; got keys ['type']"),
    ({"shapes": [{"type": "square", "side": 0}]}, "verifier.shapes[0].side", "a positive number, got 0"),
    ({"shapes": [{"type": "square", "side": 1, "filled": 1}]}, "verifier.shapes[0].filled", "true or false"),
    ({"labels": {"B": "x"}}, "verifier.labels", "key must be a string, got 'B'"),
    ({"labels": {"b": 2}}, "verifier.labels.b", "must be a string, got 2"),
    ({"size": 11}, "verifier.size", "an integer in [1, 10], got 11"),
    ({"size": True}, "verifier.size", "an integer in [1, 10], got True"),
    ({"style": "bold"}, "verifier.style", "'flat' or 'shaded'"),
    ({"note": "hi!"}, "verifier.note", "no shouting"),
    ({"extra": 1}, "verifier.extra", "unknown key for demo (allowed: kind, labels, note, shapes, size, style)"),
    ({"shapes": ...}, "verifier.shapes", "required key is missing (must be a list of 1..4 shapes)"),
]


def changed(change: dict) -> dict:
    config = copy.deepcopy(GOOD)
    for key, value in change.items():
        config.pop(key) if value is ... else config.__setitem__(key, value)
    return config


def test_a_good_config_has_no_problems_and_fits_its_schema():
    jsonschema = pytest.importorskip("jsonschema")
    assert config_problems(Demo, GOOD, "demo") == []
    jsonschema.Draft202012Validator(json_schema(Demo)).validate(GOOD)


@pytest.mark.parametrize("change,where,words", BAD, ids=[b[1] + ":" + b[2][:20] for b in BAD])
def test_each_problem_names_the_field_and_the_schema_agrees(change, where, words):
    jsonschema = pytest.importorskip("jsonschema")
    problems = config_problems(Demo, changed(change), "demo")
    assert any(field == where and words in reason for field, reason in problems), problems
    if change != {"note": "hi!"}:  # checks are code: the schema cannot say them
        assert list(jsonschema.Draft202012Validator(json_schema(Demo)).iter_errors(changed(change)))


def test_schema_carries_types_bounds_defaults_and_descriptions():
    schema = json_schema(Demo)
    assert schema["required"] == ["kind", "shapes"]
    assert schema["additionalProperties"] is False
    shapes = schema["properties"]["shapes"]
    assert (shapes["minItems"], shapes["maxItems"], shapes["description"]) == (1, 4, "what to draw")
    assert [arm["properties"]["type"] for arm in shapes["items"]["oneOf"]] == [{"const": "circle"},
                                                                              {"const": "square"}]
    assert schema["properties"]["size"] == {"type": "integer", "minimum": 1, "maximum": 10, "default": 3}
    assert schema["properties"]["labels"]["propertyNames"] == {"pattern": "^[a-z]+$"}
    assert schema["properties"]["style"] == {"enum": ["flat", "shaded"], "default": "flat"}
    assert describe(Annotated[float, Rule(low=0)]) == "a non-negative number"


def test_markdown_table_lists_nested_keys():
    table = markdown_table(Demo)
    for row in ("| `shapes` | a list of 1..4 shapes | **required** | what to draw |",
                "| `shapes[].radius` (type `circle`) | a positive number | **required** |  |",
                "| `size` | an integer in [1, 10] | `3` |  |", "| `note` |"):
        assert row in table, table


def bundled_configs(kind: str) -> list[dict]:
    """Every bundled verifier config of ``kind`` (copies: a test may not change another's)."""
    return copy.deepcopy([c for c in all_bundled_configs() if c["kind"] == kind])


@functools.cache
def all_bundled_configs() -> tuple[dict, ...]:
    """The verifier config of every bundled spec, parsed once for the module (~4 s of YAML each time otherwise)."""
    files = sorted(Path("posttrain/envs/suites").rglob("*.yaml")) + sorted(FIXTURES.glob("good_*.yaml"))
    return tuple(yaml.safe_load(f.read_text())["verifier"] for f in files)


def test_parse_fills_the_declared_defaults():
    minimal = {"kind": "demo", "shapes": [{"type": "square", "side": 2}]}
    assert parse(Demo, minimal) == Demo(kind="demo", shapes=[Square("square", 2)], labels={}, size=3, style="flat",
                                        note=None)
    first, second = parse(Demo, minimal), parse(Demo, minimal)
    assert first.labels is not second.labels  # a default factory gives each instance its own
    assert minimal == {"kind": "demo", "shapes": [{"type": "square", "side": 2}]}  # the mapping is left alone


def test_parse_builds_nested_records_and_picks_union_arms():
    demo = parse(Demo, GOOD)
    assert demo.shapes == [Circle("circle", 1), Square("square", 2, filled=True)]  # tagged by ``type``
    assert (demo.labels, demo.size, demo.style, demo.note) == ({"a": "x"}, 10, "shaded", None)
    untagged = parse(dict[str, float | Circle], {"a": 1.5, "b": {"type": "circle", "radius": 2}})
    assert untagged == {"a": 1.5, "b": Circle("circle", 2)}  # the first arm the value fits
    assert parse(Annotated[str | list[str], Rule()], ["a", "b"]) == ["a", "b"]  # no record arm: as it is
    assert parse(list[Any], [{"x": 1}]) == [{"x": 1}]


@pytest.mark.parametrize("kind", VERIFIERS)
def test_each_verifier_reads_every_bundled_config_typed(kind):
    verifier = get_verifier(kind)
    for config in bundled_configs(kind):
        settings = verifier.settings(EnvSpec(id="t/x", prompt="p", reference="", verifier=config))
        assert isinstance(settings, verifier.config)
        for f in dataclasses.fields(settings):
            got = getattr(settings, f.name)
            if f.name not in config:
                assert got == (f.default if f.default_factory is dataclasses.MISSING else f.default_factory())
            elif isinstance(config[f.name], (bool, int, float, str)):
                assert got == config[f.name]


@pytest.mark.parametrize("kind", VERIFIERS)
def test_each_verifier_validates_and_publishes_from_its_typed_config(kind):
    verifier = get_verifier(kind)
    assert verifier.config_schema == json_schema(verifier.config)
    assert verifier.config_schema["properties"]["kind"] == {"const": kind}
    spec_schema = spec_json_schema.spec_schema()["properties"]["verifier"]["oneOf"]
    assert verifier.config_schema in spec_schema
    configs = bundled_configs(kind)
    assert configs
    assert all(config_problems(verifier.config, c, kind) == [] for c in configs)


def test_docs_tables_are_generated_and_current():
    text = spec_json_schema.DOCS_FILE.read_text()
    assert sorted(spec_json_schema.documented_tables(text)) == sorted([
        spec_json_schema.FIELDS_TABLE, *VERIFIERS, spec_json_schema.REWARD_TABLE, spec_json_schema.SIGNALS_TABLE,
        spec_json_schema.AGENT_TABLE])
    assert spec_json_schema.render_docs(text) == text, "regenerate with: python -m posttrain.envs.spec_json_schema"


def test_the_fields_table_has_a_row_per_field_and_limit_with_choices_from_the_registries():
    rows = [row.split(" | ")[:3] for row in spec_json_schema.fields_table().splitlines()[2:]]
    paths = [path.strip("| `") for path, _, _ in rows]
    limits = ["limits.timeout_s", "limits.memory_mb"]
    assert paths == [path for name in spec_json_schema.FILE_FIELDS for path in (limits if name == "limits" else [name])]
    by_path = dict(zip(paths, rows))
    assert by_path["id"][2] == "**required**"
    assert by_path["limits.timeout_s"][1:] == ["a positive number in (0, 300]", "`5.0`"]
    assert by_path["split"][1] == "'train' or 'eval'"


def test_committed_schema_matches_and_regenerates(tmp_path, monkeypatch):
    monkeypatch.setattr(spec_json_schema, "DOCS_FILE", tmp_path / "absent.md")
    out = tmp_path / "schema.json"
    assert spec_json_schema.main([str(out)]) == 0
    assert out.read_text() == spec_json_schema.SCHEMA_FILE.read_text()
    assert json.loads(out.read_text())["properties"]["verifier"]["oneOf"][0]["properties"]["kind"] == {
        "const": "numeric"}


def test_checks_and_semantic_problems_still_come_with_the_typed_ones():
    bad = EnvSpec(id="t/x", prompt="p", entry_point="2f", reference="", runtime="node",
                  verifier={"kind": "python_tests", "cases": [{"args": [1], "expected": float("nan")}], "x": 1})
    problems = get_verifier("python_tests").validate(bad)
    assert [f for f, _ in problems] == ["runtime", "entry_point", "verifier.x", "verifier.cases[0]"]
    assert "plain JSON values" in problems[-1][1]
    anything: Any = {"kind": "numeric", "fields": {"a": 1, "b": 2}, "formulas": ["a = b"]}
    assert get_verifier("numeric").validate(EnvSpec(id="t", prompt="p", reference="", verifier=anything)) == [
        ("verifier.formulas[0]", "contradicts the expected values: a = b gives 2, but a is 1")]


@dataclass
class Declared:
    """Top-level keys declared with ``declare`` (as the env spec's fields are): same validation, schema and table."""

    kind: Literal["declared"]
    share: float = declare(0.5, low=0, high=1, open_high=True, doc="a share below the whole")
    names: list[str] = declare(factory=list, check=lambda n: "no duplicates" if len(set(n)) < len(n) else "",
                               doc="distinct names")


def test_a_field_declared_with_declare_is_validated_and_documented_by_its_rule():
    assert config_problems(Declared, {"kind": "declared", "share": 0.99, "names": ["a"]}, "declared") == []
    assert config_problems(Declared, {"kind": "declared", "share": 1, "names": ["a", "a"]}, "declared") == [
        ("verifier.share", "must be a non-negative number in [0, 1), got 1"), ("verifier.names", "no duplicates")]
    assert json_schema(Declared)["properties"]["share"] == {"type": "number", "minimum": 0, "exclusiveMaximum": 1,
                                                            "default": 0.5, "description": "a share below the whole"}
    assert "| `names` | a list | `[]` | distinct names |" in markdown_table(Declared)
