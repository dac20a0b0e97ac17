"""The host-only ``scene`` verifier: parsing with reasons, each constraint type, validation, probes and mutants."""

from __future__ import annotations

import json

import pytest

from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import load_suite
from posttrain.envs.verifiers.scene import extract_solution, mutants, parse_scene, probes, score_on_host, validate

pytestmark = pytest.mark.unit

TABLE, LAMP, CHAIR = [1.0, 1.0, 0.75], [0.2, 0.2, 0.5], [0.5, 0.5, 0.9]
CONSTRAINTS = [
    {"type": "inside_bounds"}, {"type": "no_overlap"}, {"type": "supported"},
    {"type": "count", "object_type": "table", "min": 1, "max": 1},
    {"type": "count", "object_type": "lamp", "min": 1, "max": 1},
    {"type": "count", "object_type": "chair", "min": 2, "max": 2},
    {"type": "size", "object_type": "chair", "size": CHAIR},
    {"type": "on_top_of", "object_type": "lamp", "support_type": "table"},
    {"type": "max_distance", "object_type": "chair", "other_type": "table", "distance": 0.3},
    {"type": "min_distance", "object_type": "table", "other_type": "lamp", "distance": 0.0},
    {"type": "against_wall", "object_type": "table"},
]


def obj(name, kind, position, size):
    return {"name": name, "type": kind, "position": position, "size": size}


GOOD = [obj("table", "table", [0, 1, 0], TABLE), obj("lamp", "lamp", [0.4, 1.4, 0.75], LAMP),
        obj("chair_a", "chair", [1.1, 1.0, 0], CHAIR), obj("chair_b", "chair", [1.1, 1.5, 0], [0.5, 0.5, 0.9])]


def spec(constraints=CONSTRAINTS, **config) -> EnvSpec:
    return EnvSpec(id="t/room", prompt="furnish", reference=json.dumps({"objects": GOOD}),
                   verifier={"kind": "scene", "bounds": {"min": [0, 0, 0], "max": [3, 3, 2.5]},
                             "constraints": constraints, **config})


def scene(objects) -> str:
    return json.dumps({"objects": objects})


def moved(name, **changes):
    return [{**o, **changes} if o["name"] == name else o for o in GOOD]


def test_the_reference_satisfies_every_constraint():
    v = score_on_host(spec(), scene(GOOD))
    assert (v.passed, v.reward, v.tests_total, v.compiled) == (True, 1.0, len(CONSTRAINTS), True)
    assert score_on_host(spec(), json.dumps(GOOD)).passed  # a bare list of objects is accepted too


@pytest.mark.parametrize("objects,failed", [
    (moved("chair_b", position=[2.8, 1.5, 0]), ["inside_bounds", "max_distance"]),
    (moved("chair_b", position=[1.3, 1.2, 0]), ["no_overlap"]),
    (moved("lamp", position=[0.4, 1.4, 0.9]), ["supported", "on_top_of"]),
    (moved("lamp", position=[2.0, 2.4, 0]), ["on_top_of"]),
    (moved("chair_a", size=[0.4, 0.5, 0.9]), ["size(chair)"]),
    # a miscounted type takes the credit of its own constraints and of the scene-wide ones with it
    (GOOD + [obj("chair_c", "chair", [2.0, 0.0, 0], CHAIR)],
     ["count(chair)", "max_distance", "size(chair)", "inside_bounds", "no_overlap", "supported"]),
    ([{**o, "position": [o["position"][0] + 0.5, *o["position"][1:]]} for o in GOOD], ["against_wall"]),
])
def test_each_broken_constraint_is_named(objects, failed):
    v = score_on_host(spec(), scene(objects))
    assert v.tests_passed == len(CONSTRAINTS) - len(failed), v.detail
    for name in failed:
        assert name in v.detail, (name, v.detail)


def test_min_distance_and_tolerance():
    far = [{"type": "count", "object_type": "table", "min": 1}, {"type": "count", "object_type": "chair", "min": 1},
           {"type": "min_distance", "object_type": "chair", "other_type": "table", "distance": 0.5}]
    assert not score_on_host(spec(far), scene(GOOD)).passed  # chairs 0.1 m from the table
    touching = [obj("a", "box", [0, 0, 0], [1, 1, 1]), obj("b", "box", [1.0005, 0, 0], [1, 1, 1])]
    boxes = [{"type": "count", "object_type": "box", "min": 2}, {"type": "no_overlap"}]
    assert score_on_host(spec(boxes), scene(touching)).passed
    overlapping = [touching[0], obj("b", "box", [0.99, 0, 0], [1, 1, 1])]
    assert not score_on_host(spec(boxes), scene(overlapping)).passed
    assert score_on_host(spec(boxes, tolerance=0.02), scene(overlapping)).passed


@pytest.mark.parametrize("text,reason", [
    ("a room", "not JSON"),
    ('{"items": []}', "'objects' list"),
    (scene([obj("a", "box", [0, 0], [1, 1, 1])]), "objects[0]: 'position' must be three finite numbers"),
    (scene([obj("a", "box", [0, 0, 0], [1, -1, 1])]), "'size' must be three non-negative numbers"),
    (scene([obj("a", "", [0, 0, 0], [1, 1, 1])]), "'type' must be a non-empty string"),
    (scene([obj("a", "box", [0, 0, 0], [1, 1, 1]), obj("a", "box", [2, 0, 0], [1, 1, 1])]), "duplicate name 'a'"),
    (scene([obj("a", "box", [0, 0, "1"], [1, 1, 1])]), "'position' must be three finite numbers"),
    ('{"objects": [{"name": "a", "type": "box", "position": [0, 0, NaN], "size": [1, 1, 1]}]}', "finite"),
])
def test_parse_errors_fail_every_constraint_with_the_reason(text, reason):
    v = score_on_host(spec(), text)
    assert (v.passed, v.compiled, v.tests_passed, v.reward) == (False, False, 0, 0.0)
    assert v.detail.startswith("scene does not parse: ")
    assert reason in v.detail
    assert parse_scene(text)[0] == []


@pytest.mark.parametrize("constraints,config,field,reason", [
    ([], {}, "verifier.constraints", "non-empty list"),
    ([{"type": "teleport"}], {}, "verifier.constraints[0]", "known type"),
    ([{"type": "count", "object_type": "x"}], {}, "verifier.constraints[0]", "min and/or max"),
    ([{"type": "count", "object_type": "x", "min": 3, "max": 1}], {}, "verifier.constraints[0]", "min and/or max"),
    ([{"type": "size", "object_type": "x"}], {}, "verifier.constraints[0]",
     "'type', 'object_type', 'size' and optional 'rotatable'"),
    ([{"type": "on_top_of", "object_type": "lamp", "support_type": "table"}], {},
     "verifier.constraints[0].object_type", "holds vacuously"),
    ([{"type": "no_overlap"}], {"bounds": {"min": [0, 0, 0], "max": [0, 1, 1]}}, "verifier.bounds", "below max"),
    ([{"type": "no_overlap"}], {"tolerance": 5}, "verifier.tolerance", "[0, 1]"),
    ([{"type": "no_overlap"}, {"type": "count", "object_type": "x", "max": 2}], {}, "verifier.constraints",
     "the empty scene satisfies every constraint"),
])
def test_validate_names_the_field(constraints, config, field, reason):
    problems = validate(spec(constraints, **config))
    assert any(where == field and reason in why for where, why in problems), problems


def test_probes_fail_and_mutants_are_killed():
    s = spec()
    assert validate(s) == []
    found = probes(s)
    assert {"empty answer", "constant answer", "everything at the origin", "objects outside the bounds",
            "not JSON"} <= set(found)
    assert found["empty answer"] == scene([])
    assert score_on_host(s, found["empty answer"]).reward == score_on_host(s, found["constant answer"]).reward == 0
    assert not any(score_on_host(s, text).passed for text in found.values()), {
        n: score_on_host(s, t).detail for n, t in found.items() if score_on_host(s, t).passed}
    ms = mutants(s)
    assert len(ms) == 3 * len(GOOD)
    assert sum(not score_on_host(s, m).passed for m in ms) / len(ms) >= 0.9


def test_a_constraint_on_a_miscounted_type_credits_nothing():
    v = score_on_host(spec(), scene([]))
    assert (v.reward, v.tests_passed, v.compiled) == (0.0, 0, True)
    assert "on_top_of: not credited while the counts of lamp, table are wrong" in v.detail
    assert "inside_bounds: not credited while the counts of chair, lamp, table are wrong" in v.detail
    stray = score_on_host(spec(), scene([obj("x", "crate", [0, 0, 0], [1, 1, 1])]))
    assert stray.tests_passed == 0, stray.detail
    no_lamp = score_on_host(spec(), scene([o for o in GOOD if o["type"] != "lamp"]))
    # counts of table and chair, size(chair), max_distance(chair, table), against_wall(table) stay credited
    assert no_lamp.tests_passed == 5, no_lamp.detail


def test_the_empty_scene_earns_nothing_on_the_scene_suite():
    """Issue 22, finding 3: per-type and scene-wide constraints held vacuously (0.73 before, 0 now)."""
    envs = load_suite("posttrain/envs/suites/scene").envs
    assert len(envs) == 12
    rewards = [score_on_host(s, scene([])).reward for s in envs]
    assert sum(rewards) / len(rewards) <= 0.02, rewards
    assert all(score_on_host(s, extract_solution(f"Here:\n{s.reference}")).reward == 1.0 for s in envs)
