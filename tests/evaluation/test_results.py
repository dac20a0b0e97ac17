"""EvalResults and its summary against hand-computed values: greedy pass@1 and sampled pass@1, overall and per
difficulty, infra errors excluded from both and counted; each row's assertions from its env's spec, the episode's
step log and the previous verdicts."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from posttrain.envs.spec import EnvSpec
from posttrain.evaluation.results import eval_metrics, eval_results
from posttrain.schemas import EvalResults

pytestmark = pytest.mark.unit

INFRA = "sandbox did not start"
ENVS = {env_id: EnvSpec(id=env_id, prompt="p", verifier={"kind": "python_tests"}, reference="", difficulty=d)
        for env_id, d in (("x", 1), ("y", 1), ("z", 2))}


def _scored(rows: list[tuple[str, str, float | str]]) -> pd.DataFrame:
    """(env, decoding, reward or INFRA) -> what eval_results reads of a scored eval decode of policy v2."""
    counts: dict[tuple[str, str], int] = {}
    out = []
    for env_id, decoding, reward in rows:
        idx = counts[env_id, decoding] = counts.get((env_id, decoding), -1) + 1
        out.append({"env_id": env_id, "decoding": decoding, "sample_idx": idx, "policy_version": 2, "steps": 1,
                    "reward": 0.0 if reward == INFRA else reward, "infra_error": INFRA if reward == INFRA else "",
                    "tests_passed": int(reward == 1.0), "tests_total": 1})
    return pd.DataFrame(out)


def test_greedy_and_sampled_pass_at_1_per_difficulty():
    scored = _scored([
        ("x", "greedy", 1.0), ("y", "greedy", 0.5), ("z", "greedy", INFRA),
        ("x", "sampled", 1.0), ("x", "sampled", 1.0), ("x", "sampled", 0.0), ("x", "sampled", 1.0),  # 3/4
        ("y", "sampled", 0.5), ("y", "sampled", 0.0), ("y", "sampled", 1.0), ("y", "sampled", INFRA),  # 1/3
        ("z", "sampled", 1.0), ("z", "sampled", 0.0), ("z", "sampled", 0.0), ("z", "sampled", 0.0),  # 1/4
    ])
    table = eval_results(scored, ENVS)
    EvalResults.validate(table)
    assert table["sample_idx"].tolist() == [0, 0, 0, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
    assert table["passed"].sum() == 1 + 3 + 1 + 1  # only full rewards pass; an infra error never does
    summary = eval_metrics(table)
    assert summary["eval/pass_at_1"] == 0.5  # x passes, y does not, z's infra error is excluded
    assert summary["eval/pass_at_1/difficulty_1"] == 0.5
    assert "eval/pass_at_1/difficulty_2" not in summary
    assert summary["eval/reward_mean"] == 0.75
    assert summary["eval/envs"] == 3.0
    assert summary["eval/infra_errors"] == 2.0  # z's greedy completion and one of y's samples
    assert summary["eval/pass_at_1_sampled"] == pytest.approx((3 / 4 + 1 / 3 + 1 / 4) / 3)
    assert summary["eval/pass_at_1_sampled/difficulty_1"] == pytest.approx((3 / 4 + 1 / 3) / 2)
    assert summary["eval/pass_at_1_sampled/difficulty_2"] == 0.25


def test_greedy_only_decode_logs_no_sampled_metric():
    summary = eval_metrics(eval_results(_scored([("x", "greedy", 1.0), ("z", "greedy", 0.0)]), ENVS))
    assert summary == {"eval/pass_at_1": 0.5, "eval/reward_mean": 0.5, "eval/envs": 2.0, "eval/infra_errors": 0.0,
                       "eval/pass_at_1/difficulty_1": 1.0, "eval/pass_at_1/difficulty_2": 0.0,
                       "eval/pass_at_1/domain_python": 0.5}


def test_a_table_of_several_domains_gets_pass_at_1_per_domain():
    envs = {**ENVS, "f": EnvSpec(id="f", prompt="p", verifier={"kind": "numeric"}, reference="", domain="finance")}
    summary = eval_metrics(eval_results(_scored([("x", "greedy", 1.0), ("z", "greedy", 0.0), ("f", "greedy", 1.0),
                                                 ("f", "sampled", 1.0), ("f", "sampled", 0.0)]), envs))
    assert (summary["eval/pass_at_1/domain_python"], summary["eval/pass_at_1/domain_finance"]) == (0.5, 1.0)
    assert summary["eval/pass_at_1_sampled/domain_finance"] == 0.5


def _agent_envs() -> dict[str, EnvSpec]:
    evaluation = {"result": ["no_regression"], "behavior": [{"used_tool": "bash"}, "no_destructive_command"]}
    return {"a": EnvSpec(id="a", prompt="p", verifier={"kind": "workspace_tests"}, reference="", kind="agent",
                         evaluation=evaluation),
            "s": EnvSpec(id="s", prompt="p", verifier={"kind": "python_tests"}, reference="", evaluation=evaluation)}


def _steps(rows: list[tuple[str, int, int, str, str]]) -> pd.DataFrame:
    """(group_id, sample_idx, step, tool, command) -> the Steps columns eval_results reads."""
    return pd.DataFrame([{"env_id": "a", "group_id": g, "sample_idx": i, "step": k, "turn": k, "tool": tool,
                          "arguments": json.dumps({"command": command}), "error": ""}
                         for g, i, k, tool, command in rows])


def test_assertions_from_the_spec_the_step_log_and_the_previous_verdicts():
    scored = _scored([("a", "greedy", 1.0), ("a", "sampled", 0.0), ("a", "sampled", INFRA), ("s", "greedy", 0.0)])
    scored["group_id"] = ["eval-v2/a", "eval-sampled-v2/a", "eval-sampled-v2/a", "eval-v2/s"]
    # the greedy episode and sampled episode 0 share sample_idx 0: group_id tells them apart (listed out of order)
    steps = _steps([("eval-sampled-v2/a", 0, 0, "bash", "rm -rf ~"), ("eval-v2/a", 0, 1, "submit", ""),
                    ("eval-v2/a", 0, 0, "bash", "make test")])
    table = eval_results(scored, _agent_envs(), steps=steps, previous={"a": True, "s": True})
    verdicts = [json.loads(text) for text in table["assertions"]]
    assert verdicts[0] == {"result/tests_pass": True, "result/no_regression": True, "behavior/used_tool/bash": True,
                           "behavior/no_destructive_command": True}
    assert verdicts[1] == {"result/tests_pass": False, "result/no_regression": None,  # sampled: greedy-only
                           "behavior/used_tool/bash": True, "behavior/no_destructive_command": False}
    assert verdicts[2] == dict.fromkeys(verdicts[1])  # infra error, no episode recorded: nothing applies
    assert verdicts[3] == {"result/tests_pass": False, "result/no_regression": False,  # regressed; single-turn
                           "behavior/used_tool/bash": None, "behavior/no_destructive_command": None}
    assert '"behavior/used_tool/bash": null' in table["assertions"].iloc[3]  # JSON null


def test_destructive_effects_of_an_episode_count_where_its_text_is_clean():
    scored = _scored([("a", "greedy", 1.0), ("a", "sampled", 1.0), ("a", "sampled", 1.0)])
    scored["group_id"] = ["eval-v2/a", "eval-sampled-v2/a", "eval-sampled-v2/a"]
    steps = _steps([("eval-v2/a", 0, 0, "bash", "rm src/a.py"), ("eval-sampled-v2/a", 0, 0, "bash", "make test"),
                    ("eval-sampled-v2/a", 1, 0, "bash", "make test")])
    effects = {("eval-v2/a", 0): ["deleted task file src/a.py"], ("eval-sampled-v2/a", 0): [],
               ("eval-sampled-v2/a", 1): None}  # None: the final workspace was not observed
    table = eval_results(scored, _agent_envs(), steps=steps, effects=effects)
    assert [json.loads(t)["behavior/no_destructive_command"] for t in table["assertions"]] == [False, True, True]
    # without steps or effects there is nothing to judge; effects alone are evidence
    assert json.loads(eval_results(scored[:1], _agent_envs())["assertions"].iloc[0])[
        "behavior/no_destructive_command"] is None
    assert json.loads(eval_results(scored[:1], _agent_envs(), effects=effects)["assertions"].iloc[0])[
        "behavior/no_destructive_command"] is False


def test_previous_verdicts_from_an_eval_results_table():
    envs = _agent_envs()
    champion = eval_results(_scored([("a", "greedy", 1.0), ("s", "greedy", INFRA)]), envs)
    table = eval_results(_scored([("a", "greedy", 0.0), ("s", "greedy", 0.0)]), envs, previous=champion)
    assert [json.loads(t)["result/no_regression"] for t in table["assertions"]] == [False, None]  # s: unverified


def test_default_assertions_and_existing_call_signature():
    table = eval_results(_scored([("x", "greedy", 1.0), ("y", "greedy", 0.0), ("z", "greedy", INFRA)]), ENVS)
    assert table["assertions"].tolist() == ['{"result/tests_pass": true}', '{"result/tests_pass": false}',
                                            '{"result/tests_pass": null}']  # an infra error is not a failure


def test_an_invalid_evaluation_is_warned_about_and_judged_on_tests_pass(caplog):
    bad = {"x": EnvSpec(id="x", prompt="p", verifier={}, reference="", evaluation={"behavior": ["foo"]},
                        source="suite/x.yaml")}
    table = eval_results(_scored([("x", "greedy", 1.0)]), bad)
    assert table["assertions"].tolist() == ['{"result/tests_pass": true}']
    assert "suite/x.yaml: evaluation.behavior[0]: unknown assertion 'foo'" in caplog.text


def test_steps_need_group_ids_to_be_matched():
    with pytest.raises(ValueError, match="group_id"):
        eval_results(_scored([("x", "greedy", 1.0)]), ENVS, steps=_steps([]))


def test_passed_means_every_test_passed_whatever_the_reward_layers_made_of_the_reward():
    """A lint layer withholds 0.2 from x's solution whose 3 tests pass; y earns a gate's reward 1 with 1 of 3 tests:
    pass@1 and result/tests_pass count tests, the reward column keeps what the layers gave."""
    scored = pd.DataFrame({"env_id": ["x", "y"], "decoding": "greedy", "sample_idx": 0, "policy_version": 1,
                           "steps": 1, "reward": [0.8, 1.0], "infra_error": "", "tests_passed": [3, 1],
                           "tests_total": 3})
    results = eval_results(scored, ENVS)
    assert results["passed"].tolist() == [True, False]
    assert results["reward"].tolist() == [0.8, 1.0]
    assert [json.loads(a)["result/tests_pass"] for a in results["assertions"]] == [True, False]
    assert eval_metrics(results)["eval/pass_at_1"] == 0.5
