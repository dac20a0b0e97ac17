"""The ``scene_layouts`` generator: 208 short layouts, stratified into train and eval by difficulty and template;
every reference satisfies its constraints, a layout moved off its wall, floated or overlapping does not, a train
answer copied fails every eval env, the warm-up envs repeat no suite env's types and sizes, and a worked reference
(warm-start data) quotes the prompt's size lines, then passes as the reference does (admission of the whole suite:
test_generators.py)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from posttrain.envs.generators.scene_layouts import EVAL_SLOTS, PER_TEMPLATE, TEMPLATES, sizes, specs, \
    sum_drills, warm_start_pairs, warm_up_specs, worked_reference
from posttrain.envs.suite import load_suite
from posttrain.envs.verifiers.scene import extract_solution, score_on_host

SUITE = "posttrain/envs/suites/scene_layouts"
ENVS = specs()


def _objects(spec) -> list[dict]:
    return json.loads(spec.reference)["objects"]


def _layout(objects: list[dict]) -> str:
    return json.dumps({"objects": objects})


@pytest.mark.unit
def test_counts_and_a_split_stratified_by_difficulty_and_template():
    assert len(ENVS) == len(TEMPLATES) * PER_TEMPLATE == 208
    splits = Counter(e.split for e in ENVS)
    assert splits["train"] >= 150 and splits["eval"] >= 40
    by_difficulty = Counter((e.difficulty, e.split) for e in ENVS)
    assert {d for d, _ in by_difficulty} == {1, 2, 3}
    assert all(by_difficulty[d, "train"] and by_difficulty[d, "eval"] for d in (1, 2, 3))
    by_template = Counter((e.tags[1], e.split) for e in ENVS)
    assert all(by_template[t.build.__name__, "eval"] == len(EVAL_SLOTS) for t in TEMPLATES)
    assert len({e.id for e in ENVS}) == len(ENVS)
    for env in ENVS:
        assert env.id.startswith("scene_layouts/") and env.tags[0] == "scene_layouts"
        assert (env.domain, env.kind, env.runtime, env.verifier_kind) == ("scene", "single_turn", "python", "scene")
    train = {(e.tags[1], tuple(_types(e))) for e in ENVS if e.split == "train"}
    assert all((e.tags[1], tuple(_types(e))) in train for e in ENVS if e.split == "eval")  # combinations seen


def _types(spec) -> list[str]:
    return [c["object_type"] for c in spec.verifier["constraints"] if c["type"] == "count"]


@pytest.mark.unit
def test_deterministic_and_the_committed_suite_loads_to_the_generated_specs():
    assert [e.to_json() for e in specs()] == [e.to_json() for e in ENVS]
    suite = load_suite(SUITE)
    assert suite.rejections == []
    loaded = {e.id: e for e in suite.envs}
    regenerate = f"regenerate: python -m posttrain.envs.generators.scene_layouts {SUITE}"
    assert loaded.keys() == {e.id for e in ENVS}, regenerate
    for want in ENVS:
        got = loaded[want.id]
        want.source = got.source
        assert got == want, regenerate


@pytest.mark.unit
def test_prompts_and_references_are_short_and_name_every_requirement():
    for env in ENVS:
        assert len(env.prompt) <= 650 and len(env.reference) <= 260, env.id
        objects = _objects(env)
        assert len(objects) == {1: 2, 2: 2, 3: 3}[env.difficulty], env.id
        numbers = [v for o in objects for v in o["position"] + o["size"]]
        assert all(round(v, 2) == v for v in numbers), env.id
        for constraint in env.verifier["constraints"]:
            if constraint["type"] == "size":
                assert f"- {constraint['object_type']} {json.dumps(constraint['size'], separators=(',', ':'))}\n" \
                       in env.prompt, env.id
        rules = [c for c in env.verifier["constraints"] if c["type"] not in (
            "inside_bounds", "no_overlap", "supported", "count", "size")]
        lines = env.prompt.split("Place exactly ")[1].splitlines()[1:-2]  # one line per rule, then the scene-wide one
        assert len(lines) == len(rules), env.id


@pytest.mark.unit
def test_every_reference_scores_one():
    for env in ENVS:
        verdict = score_on_host(env, env.reference)
        assert verdict.passed and verdict.reward == 1.0, (env.id, verdict.detail)


def _moved(objects: list[dict], i: int, position: list[float]) -> str:
    return _layout([{**o, "position": position} if k == i else o for k, o in enumerate(objects)])


@pytest.mark.unit
def test_a_layout_off_its_wall_floated_overlapping_or_short_of_an_object_scores_below_one():
    for env in ENVS:
        objects = _objects(env)
        off_wall = _layout([{**o, "position": [o["position"][0] + 0.05, o["position"][1] + 0.05,
                                               o["position"][2]]} for o in objects])
        x, y, z = objects[-1]["position"]
        broken = {"against_wall": off_wall, "supported": _moved(objects, len(objects) - 1, [x, y, z + 0.1]),
                  "no_overlap": _moved(objects, 1, objects[0]["position"]), "count": _layout(objects[:-1])}
        for failing, layout in broken.items():
            verdict = score_on_host(env, layout)
            assert verdict.reward < 1 and failing in verdict.detail, (env.id, failing, verdict.detail)


@pytest.mark.unit
def test_a_train_answer_copied_fails_every_eval_env():
    train = [e for e in ENVS if e.split == "train"]
    evals = [e for e in ENVS if e.split == "eval"]
    assert not {e.prompt for e in evals} & {e.prompt for e in train}
    assert not [(e.id, t.id) for e in evals for t in train if score_on_host(e, t.reference).passed]


@pytest.mark.unit
def test_warm_up_envs_repeat_no_suite_envs_types_and_sizes_and_their_references_hold():
    warm_up = warm_up_specs()
    assert len(warm_up) == 8 * 125 and {env.split for env in warm_up} == {"train"}
    assert all(env.id.startswith("scene_layouts/warm_up_") for env in warm_up)
    key = lambda env: tuple((kind, *size) for kind, size in sizes(env).items())  # noqa: E731
    assert not {key(env) for env in warm_up} & {key(env) for env in ENVS}
    assert len({key(env) for env in warm_up}) == len(warm_up)
    for env in warm_up:
        assert score_on_host(env, env.reference).passed, env.id



@pytest.mark.unit
def test_a_worked_reference_quotes_each_types_size_line_then_passes_and_warm_start_pairs_hold_no_eval_env():
    for env in ENVS:
        *quotes, layout = [line for line in worked_reference(env).splitlines() if " = " not in line]
        assert [f"- {quote}" for quote in quotes] == [line for line in env.prompt.splitlines()
                                                     if line.startswith("- ") and "[" in line]
        assert score_on_host(env, extract_solution(worked_reference(env))).passed, env.id
        assert sorted(map(str, json.loads(layout)["objects"])) != sorted(map(str, _objects(env)))  # size first
    pairs = warm_start_pairs(per_template=2, drills=50, sums=0)
    prompts = [prompt for prompt, _ in pairs]
    assert {e.prompt for e in ENVS if e.split == "train"} <= set(prompts)
    assert not {e.prompt for e in ENVS if e.split == "eval"} & set(prompts)
    size_lines = {f"- {kind} {json.dumps(size, separators=(',', ':'))}" for env in ENVS + warm_up_specs(2)
                  for kind, size in sizes(env).items()}
    assert all(answer in prompt and set(answer.splitlines()) <= size_lines for prompt, answer in pairs[-50:])


@pytest.mark.unit
def test_every_coordinate_made_of_a_sum_is_worked_before_the_layout_and_sum_drills_carry_alike():
    worked = {}
    for env in ENVS:
        lines = worked_reference(env).splitlines()
        positions = {o["name"]: o["position"] for o in json.loads(lines[-1])["objects"]}
        for line in lines:
            if " = " in line:
                target, terms, total = line.split(" = ")
                name, axis = target.split()
                values = [float(v) for v in terms.split(" + ")]
                assert len(values) >= 2 and f"{sum(values):.2f}" == total, line
                assert positions[name]["xyz".index(axis)] == float(total), (env.id, line)
                assert all(len(v) == 4 for v in (*terms.split(" + "), total)), line  # d.dd: the digits line up
                worked[env.tags[1]] = worked.get(env.tags[1], 0) + 1
    assert worked == {"apart": 26, "far": 26, "stack": 26}  # the templates that add; the others copy
    drills = sum_drills(200)
    assert len(set(drills)) > 150
    for prompt, answer in drills:
        terms, total = answer.rstrip("\n").split(" = ")
        assert prompt == f"Compute: {terms}\n" and f"{sum(map(float, terms.split(' + '))):.2f}" == total
    assert sum(float(answer.split(" = ")[1]) >= 1 > float(answer.split(" + ")[0]) for _, answer in drills) > 20
