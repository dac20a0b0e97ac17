"""The agent tier's Flyte task, run locally as the loop runs it: a tiny untrained policy on the live vLLM engine, a
few ``agent_repo`` envs in warm-bwrap sessions. The policy fails the tasks; what is checked is the shape of what
comes out: the rollout's groups and their token rows (the loss mask on model tokens only), the greedy eval rows,
the step logs, the stats; then that an identical second call is served from Flyte's cache, and that a suite without
agent envs starts no engine; and what registers on a cluster (cached, the sandbox pod template).

The tiny policy's 256 positions cannot hold an agent episode (the prompt alone is ~510 tokens), so the engine serves
a copy of it with ``max_position_embeddings`` raised (same weights; RoPE extends), as ``tests/agent/
test_exact_tokens.py`` does.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from posttrain.agent.episode import FINISH_REASONS
from posttrain.agent.tier import rollout_envs
from posttrain.config import DEMO_SUITE, AgentConfig, RolloutConfig, SandboxConfig
from posttrain.envs.generators.agent_repo import specs
from posttrain.envs.suite import load_suite
from posttrain.envs.table import envs_to_table
from posttrain.schemas import AgentScored, EvalResults, Steps, decode_floats, decode_ints
from tests import with_positions

CONTEXT = 1024
AGENT_ENVS = [e for e in specs() if e.split == "train"][:3] + [e for e in specs() if e.split == "eval"][:2]
SINGLE_TURN = load_suite(DEMO_SUITE).envs[:2]
CFG = AgentConfig(max_steps=2, max_new_tokens=24, temperature=1.0, chat_template="agent")  # the policy: a base model


@pytest.fixture(scope="module")
def agent_view(tiny_policy, tmp_path_factory):
    """The tiny policy with room for an episode: its files copied, ``max_position_embeddings`` = CONTEXT."""
    return with_positions(tiny_policy, tmp_path_factory.mktemp("agent_view") / "policy", CONTEXT)


def runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """``(bit, start, end)`` of each run of equal bits."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((mask[start], start, i))
            start = i
    return out


@pytest.mark.integration
def test_agent_sample_rolls_out_and_evaluates_on_the_live_engine_and_caches(agent_view, flyte_cache, monkeypatch):
    pytest.importorskip("vllm")
    from flytekit.types.directory import FlyteDirectory
    from transformers import AutoTokenizer

    import tasks.agent
    from tasks.agent import agent_sample

    inputs = {"policy": FlyteDirectory(str(agent_view)), "envs": envs_to_table([*SINGLE_TURN, *AGENT_ENVS]),
              "cfg": dataclasses.replace(CFG, envs_per_iteration=2, samples_per_env=2),
              "sandbox": SandboxConfig(), "rollout_cfg": RolloutConfig(replicas=1, max_model_len=CONTEXT),
              "policy_version": 2, "rollout": True, "evaluate": True}
    out = agent_sample(**inputs)
    scored, steps, results, eval_steps = out.scored, out.steps, out.eval_results, out.eval_steps
    for table, schema in ((scored, AgentScored), (steps, Steps), (results, EvalResults), (eval_steps, Steps)):
        schema.validate(table)

    # the rollout of iteration 3 (v2 + 1): 2 picked agent train envs x 2 episodes, every row from v2
    specs_by_id = {e.id: e for e in [*SINGLE_TURN, *AGENT_ENVS]}
    picked = sorted(e.id for e in rollout_envs(specs_by_id, 2, CFG.seed, 3))
    episodes = scored.drop_duplicates(["group_id", "sample_idx"])
    assert sorted(set(scored.env_id)) == picked
    assert set(scored.group_id) == {f"it3/{i}" for i in picked}
    assert sorted(episodes.groupby("group_id").sample_idx.apply(sorted).tolist()) == [[0, 1], [0, 1]]
    assert (scored.policy_version == 2).all()
    assert (steps.policy_version == 2).all()
    assert set(scored.finish_reason) <= set(FINISH_REASONS)
    assert (scored.infra_error == "").all()
    assert set(steps.group_id) <= set(scored.group_id)
    assert (scored.verifier_reward < 1.0).all()  # untrained

    # the loss mask marks the model's tokens only: model runs carry their behavior logprobs, the masked runs between
    # them are the template's closing + tool turn + next generation prompt, with logprob 0.0
    tokenizer = AutoTokenizer.from_pretrained(agent_view)
    for row in scored.itertuples():
        ids, mask, logprobs = (decode_ints(row.completion_token_ids), decode_ints(row.loss_mask),
                               decode_floats(row.behavior_logprobs))
        assert sum(mask) == row.tokens
        assert mask[0] == 1
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if not m)
        assert all(lp <= 0.0 for lp in logprobs)
        assert any(lp < 0.0 for lp in logprobs)
        model_runs = [r for r in runs(mask) if r[0] == 1]
        assert len(model_runs) == row.steps  # one per model turn (no compression in this short context)
        for bit, start, end in runs(mask):
            text = tokenizer.decode(ids[start:end], skip_special_tokens=False)
            if bit:
                assert "<|im_start|>tool" not in text
            else:
                assert "\n<|im_start|>tool\n" in text
                assert text.endswith("<|im_start|>assistant\n")

    # the greedy eval: one row per agent eval env (single-turn envs are the other tier's)
    evals = sorted(e.id for e in AGENT_ENVS if e.split == "eval")
    assert results.env_id.tolist() == evals
    assert (results.decoding == "greedy").all()
    assert (results.policy_version == 2).all()
    assert (results.sample_idx == 0).all()
    assert (results.steps >= 1).all()
    assert (results.steps <= CFG.max_steps).all()
    assert not results.passed.any()
    assert all("result/tests_pass" in json.loads(a) for a in results.assertions)
    assert set(eval_steps.group_id) == {f"eval-v2/{i}" for i in evals}

    # the metrics: episodes, turns, calls, finish reasons, tokens, timings, the prefix cache
    metrics, eval_metrics = out.metrics, out.eval_metrics
    assert metrics["agent/episodes"] == 4
    assert eval_metrics["agent_eval/episodes"] == 2
    assert metrics["agent/steps_mean"] * 4 == len(steps.drop_duplicates(["group_id", "sample_idx", "turn"])) >= 4
    assert sum(metrics[f"agent/finish/{r}"] for r in FINISH_REASONS) == pytest.approx(1.0)
    assert metrics["agent/tokens"] == int(scored.tokens.sum()) > 0
    assert metrics["agent/solve_rate"] == 0.0
    assert metrics["agent/engine_start_s"] + metrics["agent/engine_swap_s"] >= 0
    assert metrics["agent/wall_s"] >= metrics["agent/seconds"] > metrics["agent/generate_s"] > 0
    assert metrics["agent/prefix_cache_hit"] > 0  # the eval's episodes cached the stable prefix
    assert out.times == {"time/agent_s": metrics["agent/wall_s"]}  # the agent stage of v_k's iteration window
    print(f"agent_sample: rollout {metrics}\neval {eval_metrics}")

    # an identical call is served from Flyte's cache: nothing runs
    def must_not_run(*args, **kwargs):
        raise AssertionError("agent_sample ran again instead of coming from the cache")

    for name in ("rollout_agent", "evaluate_agent", "live"):
        monkeypatch.setattr(tasks.agent, name, must_not_run)
    again = agent_sample(**inputs)
    assert again.scored.equals(scored)
    assert again.eval_results.equals(results)
    assert again.steps.equals(steps)
    assert again.metrics == metrics


@pytest.mark.integration
def test_a_suite_without_agent_envs_starts_no_engine(tiny_policy, flyte_cache):
    from flytekit.types.directory import FlyteDirectory

    from posttrain.rollout import live
    from tasks.agent import agent_sample

    before = live.counters()
    out = agent_sample(policy=FlyteDirectory(str(tiny_policy)), envs=envs_to_table(SINGLE_TURN), cfg=CFG,
                       sandbox=SandboxConfig(), rollout_cfg=RolloutConfig(replicas=1), policy_version=0, rollout=True,
                       evaluate=True)
    assert len(out.scored) == len(out.steps) == len(out.eval_results) == len(out.eval_steps) == 0
    assert out.eval_snapshots.empty
    assert (out.metrics, out.eval_metrics) == ({"agent/episodes": 0.0}, {"agent_eval/episodes": 0.0})
    assert list(out.times) == ["time/agent_s"] and out.times["time/agent_s"] < 1.0  # no engine, no episode
    assert live.counters() == before


@pytest.mark.unit
def test_the_registered_task_is_cached_and_runs_its_sandboxes_in_the_bwrap_pod():
    from collections import OrderedDict

    from flytekit.configuration import Image, ImageConfig, SerializationSettings
    from flytekit.tools.translator import get_serializable

    from tasks.agent import agent_sample
    from tasks.resources import CACHE_VERSION, stage

    settings = SerializationSettings(image_config=ImageConfig(default_image=Image(name="default", fqn="x", tag="y")))
    template = get_serializable(OrderedDict(), settings, agent_sample).template
    assert template.metadata.discoverable
    assert template.metadata.discovery_version == CACHE_VERSION
    spec = template.k8s_pod.pod_spec  # the model's pod spec: a dict
    (container,) = spec["containers"]
    assert spec["hostUsers"] is False
    assert container["securityContext"]["seccompProfile"] == {"type": "Unconfined"}
    assert container["resources"]["requests"]["cpu"] == stage("rollout")["requests"].cpu
