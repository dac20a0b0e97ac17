"""The anti-hacking check: every probe must fail, every degenerate answer earn at most ``max_probe_reward``, an infra
error is nobody's fault; and real admission rejects envs whose reward credits degenerate answers."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import yaml

from posttrain.admission import admit, report_text
from posttrain.admission.anti_hacking import DEGENERATE_PROBES, anti_hacking_row, label_outcomes, probe_battery
from posttrain.config import AdmissionConfig, ConfigError, SandboxConfig
from posttrain.envs.generators.common import python_check, python_expectations, python_tests
from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import load_suite
from posttrain.envs.verifiers import get_verifier, verify_many
from posttrain.envs.verifiers.base import UNTOUCHED
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
    assert both.code == "anti_hacking.probe_passed:return None"
    assert "constant answer (reward 0.25" in both.text
    untouched = anti_hacking_row("e", {"empty answer": PART, "exit 0": FAIL})  # no verifier kind is exempt
    assert (untouched.passed, untouched.code) == (False, "anti_hacking.probe_rewarded:empty answer")
    with pytest.raises(ConfigError, match="max_probe_reward"):
        AdmissionConfig(max_probe_reward=1.0)


@pytest.mark.unit
def test_a_test_label_the_untouched_workspace_contradicts_rejects_the_env():
    """Issue 22: a guard must pass on the untouched workspace and every other test fail there."""
    ok = anti_hacking_row("e", {"empty answer": FAIL}, labels={"kept": (True, ""), "fixed": (False, "fixed: boom")})
    assert ok.passed
    assert ok.text.endswith("; all 2 test labels hold")
    row = anti_hacking_row("e", {"empty answer": FAIL},
                           labels={"kept": (True, "kept: exit code 1 (want 0) Boom"), "fixed": (False, ""),
                                   "other": (False, "other: no result")})
    assert (row.passed, row.code, row.value) == (False, "anti_hacking.mislabelled:kept", pytest.approx(0.5))
    assert row.text.endswith("2/3 test labels disagree with the untouched workspace: kept (guard, fails there: kept: "
                             "exit code 1 (want 0) Boom), fixed (not a guard, passes there: doing nothing earns it)")
    cheat = anti_hacking_row("e", {"exit 0": PASS}, labels={"kept": (True, "kept: boom")})
    assert cheat.code == "anti_hacking.probe_passed:exit 0"  # a cheat that passes is named first


@pytest.mark.unit
def test_labels_are_read_off_the_untouched_workspace_verdict_test_by_test():
    tests = [{"name": "fixed", "cmd": "python3 -I {tests}/c.py 1", "stdout": "2"},
             {"name": "kept", "cmd": "python3 -I {tests}/c.py 0", "stdout": "1", "guard": True}]
    agent = EnvSpec(id="t/w", prompt="p", reference="true\n", kind="agent", workspace={"a.py": "x = 1\n"},
                    verifier={"kind": "workspace_tests", "tests": tests})
    verifier = get_verifier("workspace_tests")
    assert verifier.test_labels(agent) == [("fixed", False), ("kept", True)]
    untouched = replace(FAIL, tests_total=2, failures=("fixed: stdout '1' (want '2')", ""))
    assert label_outcomes(agent, verifier, {UNTOUCHED: untouched}) == {"fixed": (False, "fixed: stdout '1' (want '2')"),
                                                                      "kept": (True, "")}
    assert label_outcomes(agent, verifier, {UNTOUCHED: INFRA}) == {}  # the probe's infra error is reported instead
    single = replace(agent, kind="single_turn", verifier={**agent.verifier, "solution_file": "a.py"})
    assert verifier.probes(single)[UNTOUCHED] == "x = 1\n"  # the solution file as the workspace has it
    assert label_outcomes(SPECS["python_tests"], get_verifier("python_tests"), {}) == {}  # a kind without labels
    with pytest.raises(ValueError, match="reports 1 tests, the spec labels 2"):
        label_outcomes(agent, verifier, {UNTOUCHED: replace(untouched, failures=("",))})


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
    assert rows.drop("anti_hacking")["passed"].all(), report_text(result.report)  # sound in every other respect
    assert rows.loc["anti_hacking", "code"] == f"anti_hacking.probe_rewarded:{probe}", report_text(result.report)
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
        assert len(result.admitted) == 12, report_text(result.report)
        rows = result.details[result.details["check"] == "anti_hacking"]
        assert (rows["code"] == "anti_hacking.ok").all()


WORKSPACE_SUITES = ("terminal", "node", "agent_repo")
@pytest.mark.integration
@needs_bwrap
def test_doing_nothing_earns_at_most_max_probe_reward_on_every_bundled_workspace_env():
    """Issue 22: the degenerate answers (and the untouched workspace) of every bundled terminal, node and agent_repo
    env earn at most ``max_probe_reward``, and every test label holds on the untouched workspace (before the guard
    labels, doing nothing earned up to 0.57 on 48 of the 114 envs)."""
    envs = [spec for suite in WORKSPACE_SUITES for spec in load_suite(f"posttrain/envs/suites/{suite}").envs]
    assert len(envs) == 114
    verifier = get_verifier("workspace_tests")
    probes = {spec.id: {name: text for name, text in probe_battery(spec, verifier).items()
                        if name in DEGENERATE_PROBES or name == UNTOUCHED} for spec in envs}
    pairs = [(spec, text) for spec in envs for text in probes[spec.id].values()]
    cfg = SandboxConfig(backend="bwrap-warm", batch_concurrency=8)
    with make_sandbox(cfg) as box:
        verdicts = iter(verify_many(pairs, box, cfg))
    got = {spec.id: {name: next(verdicts) for name in probes[spec.id]} for spec in envs}
    labels = {spec.id: label_outcomes(spec, verifier, got[spec.id]) for spec in envs}
    rows = [anti_hacking_row(spec.id, got[spec.id], labels=labels[spec.id]) for spec in envs]
    assert [row.detail for row in rows if not row.passed] == []
    assert max(v.reward for by_name in got.values() for v in by_name.values()) <= AdmissionConfig().max_probe_reward
    assert sum(guard for by_test in labels.values() for guard, _ in by_test.values()) >= 48  # doing nothing passed


CALC_CASES = {"add": "calc.add(2, 3)", "zero_b": "calc.add(3, 0)", "negatives": "calc.add(-1, -1)"}


def calc_env(guards: set[str]) -> dict:
    """A single-turn env whose untouched ``src/calc.py`` (``a - b``) already gets ``zero_b`` right."""
    expected = python_expectations("calc", "def add(a, b):\n    return a + b\n", CALC_CASES)
    tests = [{**test, "guard": True} if test["name"] in guards else test
             for test in python_tests("calc", CALC_CASES, expected, dict.fromkeys(CALC_CASES))]
    return {"id": "labels/calc", "prompt": "Fix add(a, b) in src/calc.py: it must return a + b. Answer with the file.",
            "workspace": {"src/calc.py": "def add(a, b):\n    return a - b\n"}, "runtime": "python",
            "reference": "def add(a, b):\n    return a + b\n",
            "verifier": {"kind": "workspace_tests", "solution_file": "src/calc.py",
                         "files": {"check.py": python_check("calc", CALC_CASES)}, "tests": tests}}


@pytest.mark.integration
@needs_bwrap
@pytest.mark.parametrize("guards,code", [({"zero_b"}, "anti_hacking.ok"), (set(), "anti_hacking.mislabelled:zero_b"),
                                         ({"zero_b", "add"}, "anti_hacking.mislabelled:add")],
                         ids=["labelled", "unlabelled_pass", "failing_guard"])
def test_admission_checks_the_guard_labels_against_the_untouched_workspace(tmp_path, guards, code):
    (tmp_path / "env.yaml").write_text(yaml.safe_dump(calc_env(guards)))
    cfg = SandboxConfig(backend="bwrap")
    with make_sandbox(cfg) as box:
        result = admit(tmp_path, box, cfg, AdmissionConfig(checks=["consistency", "solvability", "anti_hacking"]))
    rows = result.details.set_index("check")
    assert rows.loc["anti_hacking", "code"] == code, report_text(result.report)
    assert rows.drop("anti_hacking")["passed"].all(), report_text(result.report)
    assert bool(result.admitted) == (code == "anti_hacking.ok")
