"""Reward layers: the composition (gates, thresholds, weights), the loader's checks (file and field named), every
verifier's own reward written out as layers giving the same rewards (host-only suites in full here; the sandboxed
ones in ``test_reward_layers_suites.py``), an env without layers left untouched, and layers that ask for more
(lint, gates on compiling, on counts, on fields) in real bwrap sandboxes."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil

import pytest
import yaml

from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import SpecError, load_spec, load_suite
from posttrain.envs.verifiers import get_verifier, verify_many
from posttrain.envs.verifiers.reward_layers import compose, layered, layers_problems, parse_layers, signal_problems
from posttrain.envs.verifiers.workspace_tests import reward as workspace_reward
from posttrain.envs.verifiers.workspace_tests import signals as workspace_signals
from posttrain.sandbox import make_sandbox
from tests.envs.verifiers.common import CFG, assert_same_rewards

pytestmark = pytest.mark.unit

SUITES = "posttrain/envs/suites"
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


class NoSandbox:
    """For host-only verifiers: a run would be a bug."""

    name = "none"

    def run(self, execution):  # pragma: no cover - must never be called
        raise AssertionError("a host-only verifier started a sandbox")


@pytest.mark.parametrize("suite", ["finance", "scene"])
def test_host_only_rewards_are_their_signals_under_the_default_layers_on_every_env(suite):
    envs = load_suite(f"{SUITES}/{suite}").envs
    seen = assert_same_rewards(envs, NoSandbox())
    assert len(envs) == 12
    assert {0.0, 1.0} < seen, seen  # and partial credit in between: the weights are exercised


def test_workspace_rewards_are_their_signals_under_the_default_layers_for_every_outcome():
    for n in range(1, 5):
        for guards in itertools.product([False, True], repeat=n):
            if all(guards):
                continue  # a spec whose tests are all guards is invalid
            layers = parse_layers({"layers": [{"signal": "guards", "gate": True}] * any(guards) +
                                   [{"signal": "tests"}]})
            for passed in itertools.product([False, True], repeat=n):
                got, _ = compose(layers, workspace_signals(list(passed), list(guards)))
                assert got == workspace_reward(list(passed), list(guards)), (passed, guards)


def test_an_env_without_layers_keeps_its_verdict_untouched():
    spec = load_suite(f"{SUITES}/finance").envs[0]
    [verdict] = verify_many([(spec, "{}")], NoSandbox(), CFG)
    assert spec.reward == {}
    assert layered(spec, "{}", verdict, get_verifier("numeric")) is verdict
    assert "lint" not in verdict.signals


def test_gates_thresholds_and_weights():
    layers = parse_layers({"layers": [{"signal": "fields", "gate": True, "threshold": 0.5},
                                      {"signal": "formulas", "weight": 3}, {"signal": "lint"}]})
    assert compose(layers, {"fields": 0.5, "formulas": 1.0, "lint": 0.0}) == (0.75, "")
    assert compose(layers, {"fields": 0.4, "formulas": 1.0, "lint": 1.0}) == (
        0.0, "reward 0: gate fields is 0.4, below 0.5")
    assert compose(layers, {"fields": 1.0}) == (0.0, "")  # a signal the verdict lacks counts 0
    only_gates = parse_layers({"layers": [{"signal": "tests", "gate": True}]})
    assert compose(only_gates, {"tests": 1.0}) == (1.0, "")
    assert compose(only_gates, {"tests": 0.99})[0] == 0.0
    thirds = parse_layers({"layers": [{"signal": s, "weight": 0.1} for s in ("a", "b", "c")]})
    assert compose(thirds, {"a": 1.0, "b": 1.0, "c": 1.0}) == (1.0, "")  # exactly 1, never 0.9999999999999999


@pytest.mark.parametrize("reward, field, reason", [
    ({"layers": [{"signal": "fields", "gate": True, "weight": 2}]}, "reward.layers[0].weight", "a gate has no weight"),
    ({"layers": [{"signal": "fields", "threshold": 0.5}]}, "reward.layers[0].threshold", "only a gate has a threshold"),
    ({"layers": [{"signal": "fields"}, {"signal": "fields", "gate": True}]}, "reward.layers[1].signal",
     "'fields' is already layers[0]"),
    ({"layers": [{"signal": "fields", "weight": 0}]}, "reward.layers[0].weight", "must be a positive number"),
    ({"layers": [{"signal": "fields", "gate": True, "threshold": 1.5}]}, "reward.layers[0].threshold",
     "must be a positive number in (0, 1]"),
    ({"layers": []}, "reward.layers", "must be a list of 1..16 layers"),
    ({"layer": [{"signal": "fields"}]}, "reward.layer", "unknown key for reward (allowed: layers)"),
    ({"layers": [{"signal": "feilds"}]}, "reward.layers[0].signal",
     "unknown signal 'feilds' for numeric (did you mean 'fields'?); known: fields, formulas"),
    ({"layers": [{"signal": "lint"}]}, "reward.layers[0].signal", "unknown signal 'lint' for numeric"),
    ({"layers": [{"signal": "formulas"}]}, "reward.layers[0].signal",
     "numeric measures no 'formulas' for this env: it declares no formulas"),
])
def test_the_loader_rejects_bad_layers_naming_file_and_field(tmp_path, reward, field, reason):
    spec = load_suite(f"{SUITES}/finance").envs[0]
    data = {"id": spec.id, "prompt": spec.prompt, "reference": spec.reference, "domain": spec.domain,
            "verifier": {**spec.verifier, "formulas": []}, "reward": reward}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    error = caught.value
    assert (error.file, error.field) == (str(path), field)
    assert reason in error.reason, error.reason
    assert error.rejections[0].code == "invalid_reward"
    assert str(error).startswith(f"{path}: {field}: ")


@pytest.mark.parametrize("kind, config, unmeasured", [
    ("workspace_tests", {"kind": "workspace_tests", "tests": [{"name": "t", "cmd": "true"}]}, "guards"),
    ("scene", {"kind": "scene", "bounds": {"min": [0, 0, 0], "max": [2, 2, 2]},
               "constraints": [{"type": "count", "object_type": "box", "min": 1}]}, "constraints"),
])
def test_signals_a_spec_does_not_measure_are_refused(kind, config, unmeasured):
    spec = EnvSpec(id="t/x", prompt="p", reference="", verifier=config, kind="agent",
                   reward={"layers": [{"signal": unmeasured}]})
    [(field, reason)] = signal_problems(spec, get_verifier(kind))
    assert field == "reward.layers[0].signal"
    assert f"{kind} measures no {unmeasured!r} for this env" in reason


def scene_without(spec: EnvSpec, kind: str) -> str:
    """The reference scene with the last object of type ``kind`` taken away: its count is wrong."""
    objects = json.loads(spec.reference)["objects"]
    last = max(i for i, o in enumerate(objects) if o["type"] == kind)
    return json.dumps({"objects": objects[:last] + objects[last + 1:]})


def test_a_count_gate_makes_a_wrong_count_earn_nothing():
    spec = next(e for e in load_suite(f"{SUITES}/scene").envs if e.id == "scene/bedroom_double_bed")
    gated = dataclasses.replace(spec, reward={"layers": [{"signal": "counts", "gate": True},
                                                        {"signal": "constraints"}]})
    missing_lamp = scene_without(spec, "lamp")
    plain, with_gate = verify_many([(spec, missing_lamp), (gated, missing_lamp)], NoSandbox(), CFG)
    assert 0.5 < plain.reward < 1.0  # the default credits every other count and the constraints they gate
    assert plain.signals["counts"] == 0.75
    assert with_gate.reward == 0.0
    assert with_gate.detail.endswith("reward 0: gate counts is 0.75, below 1")
    assert with_gate.passed is plain.passed is False
    reference, = verify_many([(gated, spec.reference)], NoSandbox(), CFG)
    assert reference.reward == 1.0


def test_a_partial_gate_on_fields_and_formulas_weighed_as_much_as_fields():
    spec = next(e for e in load_suite(f"{SUITES}/finance").envs if e.verifier.get("formulas"))
    layers = {"layers": [{"signal": "fields", "gate": True, "threshold": 0.5}, {"signal": "fields"},
                         {"signal": "formulas"}]}
    assert layers_problems(layers) == [('reward.layers[1].signal', "'fields' is already layers[0]")]
    spec = dataclasses.replace(spec, reward={"layers": [{"signal": "fields", "gate": True, "threshold": 0.5},
                                                        {"signal": "formulas"}]})
    reference = json.loads(spec.reference)
    names = list(spec.verifier["fields"])
    half_wrong = json.dumps({**reference, **{name: -12345.0 for name in names[:(len(names) + 1) // 2]}})
    right, half = verify_many([(spec, spec.reference), (spec, half_wrong)], NoSandbox(), CFG)
    assert right.reward == 1.0
    assert half.signals["fields"] < 0.5
    assert half.reward == 0.0


@needs_bwrap
def test_lint_is_computed_only_when_asked_and_composes_with_a_compile_gate():
    base = EnvSpec(id="t/add_1", prompt="# add_1(x) returns x + 1\n", entry_point="add_1", reference="",
                   verifier={"kind": "python_tests", "cases": [{"args": [x], "expected": x + 1} for x in (0, 4)]})
    linted = dataclasses.replace(base, reward={"layers": [{"signal": "compiles", "gate": True},
                                                          {"signal": "tests", "weight": 0.9},
                                                          {"signal": "lint", "weight": 0.1}]})
    clean = "def add_1(x):\n    return x + 1\n"
    unused = "import os\n\n\ndef add_1(x):\n    return x + 1\n"
    half = "def add_1(x):\n    return 1 if x == 0 else x\n"
    broken = "def add_1(x)\n    return x + 1\n"
    pairs = [(spec, solution) for spec in (base, linted) for solution in (clean, unused, half, broken)]
    with make_sandbox(CFG) as box:
        verdicts = verify_many(pairs, box, CFG)
    plain, layered_ = verdicts[:4], verdicts[4:]
    assert [v.reward for v in plain] == [1.0, 1.0, 0.5, 0.0]
    assert not any("lint" in v.signals for v in plain)  # no layer asks: never computed
    assert [v.signals["lint"] for v in layered_] == [1.0, 0.0, 1.0, 0.0]
    assert [v.reward for v in layered_] == pytest.approx([1.0, 0.9, 0.55, 0.0])
    assert "lint: line 1: 'os' imported but unused" in layered_[1].detail
    assert layered_[3].detail.endswith("reward 0: gate compiles is 0, below 1")
    assert [v.passed for v in layered_] == [v.passed for v in plain]  # layers change rewards, never passed
