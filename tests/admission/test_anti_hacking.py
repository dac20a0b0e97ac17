"""The anti-hacking check: every probe must fail, every degenerate answer earn at most ``max_probe_reward``, an infra
error is nobody's fault; and real admission rejects envs whose reward credits degenerate answers."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import yaml

from posttrain.admission import admit, summarize
from posttrain.admission.anti_hacking import DEGENERATE_PROBES, UNBOUNDED, anti_hacking_row, probe_battery
from posttrain.config import AdmissionConfig, ConfigError, SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import get_verifier
from posttrain.sandbox import make_sandbox
from tests.admission.common import FAIL, INFRA, PART, PASS, spec

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: these tests run real sandboxes")
SOME = replace(FAIL, reward=0.25, tests_passed=1)  # one case of four


@pytest.mark.unit
def test_anti_hacking_needs_every_probe_to_fail():
    assert anti_hacking_row("e", {"a": FAIL, "b": PART}).code == "anti_hacking.ok"
    cheat = anti_hacking_row("e", {"empty program": FAIL, "always-equal object": PASS, "no-op def": PASS})
    assert (cheat.passed, cheat.code, cheat.value) == (False, "anti_hacking.probe_passed:always-equal object",
                                                       pytest.approx(1 / 3))
    assert "always-equal object (4/4), no-op def (4/4)" in cheat.text
    assert anti_hacking_row("e", {}).code == "anti_hacking.not_applicable"
    assert anti_hacking_row("e", {"a": FAIL, "b": INFRA}).code == "infra"


@pytest.mark.unit
def test_degenerate_answers_may_earn_at_most_max_probe_reward():
    """Issue 22, finding 5: a degenerate answer that earns a share of the reward rejects the env, naming the probe;
    a near miss (a probe that is no degenerate answer) may earn partial credit as before."""
    assert anti_hacking_row("e", {"objects outside the bounds": PART, "empty answer": FAIL}).passed
    row = anti_hacking_row("e", {"empty answer": FAIL, "self-consistent garbage": SOME, "copy of the prompt": PART})
    assert (row.passed, row.code, row.value) == (False, "anti_hacking.probe_rewarded:self-consistent garbage",
                                                 pytest.approx(1 / 3))
    assert "2/3 probes earn more than 0.1: self-consistent garbage (reward 0.25, 1/4), copy of the prompt" in row.text
    assert anti_hacking_row("e", {"self-consistent garbage": SOME}, max_reward=0.25).passed  # the bound is a setting
    both = anti_hacking_row("e", {"constant answer": SOME, "return None": PASS})
    assert both.code == "anti_hacking.probe_passed:return None" and "constant answer (reward 0.25" in both.text
    gap = anti_hacking_row("e", {"empty answer": PART, "exit 0": FAIL}, unbounded="it credits untouched files")
    assert gap.passed and gap.text.endswith("; not bounded (it credits untouched files): probes earn more than 0.1: "
                                            "empty answer (reward 0.75, 3/4)")
    assert UNBOUNDED == {"workspace_tests": UNBOUNDED["workspace_tests"]}  # the one listed gap; see its reason
    with pytest.raises(ConfigError, match="max_probe_reward"):
        AdmissionConfig(max_probe_reward=1.0)


SPECS = {
    "python_tests": spec(),
    "python_asserts": spec(verifier={"kind": "python_asserts", "asserts": ["assert add_1(1) == 2"]}),
    "workspace_tests": EnvSpec(id="t/fix", prompt="Make a.py set x to 2.", reference="echo 'x = 2' > a.py\n",
                               workspace={"a.py": "x = 1\n"}, runtime="bash",
                               verifier={"kind": "workspace_tests",
                                         "tests": [{"name": "x", "cmd": "python3 -c 'import a; assert a.x == 2'"}]}),
    "numeric": EnvSpec(id="t/m", prompt="Revenue 200, profit 50.", reference='{"revenue": 200, "profit": 50}',
                       verifier={"kind": "numeric", "fields": {"revenue": 200, "profit": 50, "margin": 0.25},
                                 "formulas": ["margin = profit / revenue"]}),
    "scene": EnvSpec(id="t/s", prompt="One box.", reference='{"objects": []}',
                     verifier={"kind": "scene", "bounds": {"min": [0, 0, 0], "max": [2, 2, 2]},
                               "constraints": [{"type": "count", "object_type": "box", "min": 1, "max": 1}]}),
}


@pytest.mark.unit
@pytest.mark.parametrize("kind", sorted(SPECS))
def test_every_verifier_kind_gets_the_degenerate_probes(kind):
    s = SPECS[kind]
    verifier = get_verifier(kind)
    assert verifier.validate(s) == [], verifier.validate(s)
    battery = probe_battery(s, verifier)
    assert set(verifier.probes(s)) <= set(battery)
    assert {"empty answer", "constant answer", "copy of the prompt"} <= set(battery)
    assert battery["copy of the prompt"] == verifier.extract_solution(s.prompt)
    if kind == "numeric":  # only a verifier that knows its format can make garbage that satisfies it
        assert json.loads(battery["self-consistent garbage"]) == {"revenue": 7, "profit": 7, "margin": 1}
    if kind == "scene":  # the verifier's own empty answer, in its format, replaces the generic one
        assert battery["empty answer"] == '{"objects": []}'
    assert set(battery) & set(DEGENERATE_PROBES) == set(DEGENERATE_PROBES) - (
        set() if kind == "numeric" else {"self-consistent garbage"})


LEAKY = {  # the prompt's example answer carries the true revenue: copying the prompt earns 1 check of 4
    "id": "leaky/margin", "domain": "finance",
    "prompt": "Acme's 2025 report: revenue was 1,520.4 million and net income 182.3 million.\n"
              'Answer with a JSON object like {"revenue": 1520.4, "net_income": 0.0, "net_margin": 0.0}, '
              "with the right values (net margin = net income / revenue).\n",
    "reference": '{"revenue": 1520.4, "net_income": 182.3, "net_margin": 0.1199}',
    "verifier": {"kind": "numeric", "fields": {"revenue": 1520.4, "net_income": 182.3, "net_margin": 0.1199},
                 "formulas": ["net_margin = net_income / revenue"]},
}
NONE_CASES = {  # half the cases expect None: the prompt's own stub (its docstring body returns None) earns half
    "id": "lazy/first_negative", "entry_point": "first_negative",
    "prompt": 'def first_negative(xs):\n    """The first negative number of xs, or None if there is none."""\n',
    "reference": "def first_negative(xs):\n    for x in xs:\n        if x < 0:\n            return x\n"
                 "    return None\n",
    "verifier": {"kind": "python_tests", "complete_prompt": True,
                 "cases": [{"args": [xs], "expected": want} for xs, want in
                           [([1, 2], None), ([5], None), ([], None), ([2, -5, -1], -5), ([-3], -3), ([0, -2], -2)]]},
}


@pytest.mark.integration
@needs_bwrap
@pytest.mark.parametrize("env,probe", [(LEAKY, "copy of the prompt"), (NONE_CASES, "empty answer")],
                         ids=["numeric_prompt_leaks_a_value", "python_stub_earns_half"])
def test_admission_rejects_an_env_that_credits_a_degenerate_answer(tmp_path, env, probe):
    (tmp_path / "env.yaml").write_text(yaml.safe_dump(env))
    cfg = SandboxConfig(backend="bwrap")
    with make_sandbox(cfg) as box:
        result = admit(tmp_path, box, cfg, AdmissionConfig())
    rows = result.details.set_index("check")
    assert rows.drop("anti_hacking")["passed"].all(), summarize(result.report)  # sound in every other respect
    assert rows.loc["anti_hacking", "code"] == f"anti_hacking.probe_rewarded:{probe}", summarize(result.report)
    assert result.admitted == []
    with make_sandbox(cfg) as box:  # a looser bound admits it
        assert admit(tmp_path, box, cfg, AdmissionConfig(max_probe_reward=0.5)).admitted


@pytest.mark.integration
@needs_bwrap
def test_the_bundled_host_suites_are_admitted_and_their_degenerate_answers_earn_nothing():
    cfg = SandboxConfig(backend="bwrap")  # host-only verifiers: no sandbox starts
    for suite in ("finance", "scene"):
        with make_sandbox(cfg) as box:
            result = admit(f"posttrain/envs/suites/{suite}", box, cfg, AdmissionConfig())
        assert len(result.admitted) == 12, summarize(result.report)
        rows = result.details[result.details["check"] == "anti_hacking"]
        assert (rows["code"] == "anti_hacking.ok").all()
