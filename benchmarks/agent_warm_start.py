"""Experiment: warm-start an agent policy on oracle episodes (plus the demo's single-turn pairs) and measure how many
generated repository envs it solves, greedily, on the train and eval splits (vLLM, real sandboxes, the envs' own
verifier). Nothing about the demo policy changes: the agent policy is its own directory.

    python benchmarks/agent_warm_start.py [--out .posttrain/agent-policy] [--steps 1200]

Measured here: see docs/agent.md. A build from the train split's 320 oracle turns alone once solved
0.70 of train and 0.41 of eval envs greedily, a rebuild 0.52 and 0.16 (it recalls module names instead of copying
them); ``main_agent_policy`` now adds the oracle episodes of 192 warm-up envs (0.375 of eval envs).

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from posttrain.agent.rollout import collect_episodes
from posttrain.agent.template import ChatFormat
from posttrain.agent.warm_start import AGENT_POLICY_CFG, main_agent_policy
from posttrain.config import AgentConfig, RolloutConfig, SandboxConfig, default_agent_policy_dir
from posttrain.envs.generators.agent_repo import specs
from posttrain.envs.tools import tool_specs
from posttrain.sandbox import make_sandbox
from posttrain.training.checkpoints import POLICY_META

CONTEXT = 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=default_agent_policy_dir())
    parser.add_argument("--steps", type=int, default=1200)
    args = parser.parse_args()
    from posttrain.rollout.engine import VLLMEngine

    envs = specs()
    agent_cfg = AgentConfig(temperature=0.0, max_new_tokens=128, token_budget=768)
    sandbox_cfg = SandboxConfig(backend="bwrap-warm")
    box = make_sandbox(sandbox_cfg)
    result = {}
    try:
        # steps 1-2. the agent policy: oracle episodes of the train split as turn pairs, plus the single-turn pairs,
        # through the demo recipe (what `posttrain agent-policy` builds)
        t1 = time.perf_counter()
        policy = main_agent_policy(Path(args.out), cfg=replace(AGENT_POLICY_CFG, sft_steps=args.steps),
                                   sandbox_cfg=sandbox_cfg)
        result.update(build_s=round(time.perf_counter() - t1, 1), sft_steps=args.steps,
                      agent_turns=json.loads((policy / POLICY_META).read_text())["agent_turns"])
        # step 3. greedy episodes of the warm-started policy on both splits, scored by the verifier
        with VLLMEngine(str(policy), RolloutConfig(max_model_len=CONTEXT), version=0) as engine:
            from transformers import AutoTokenizer

            fmt = ChatFormat(AutoTokenizer.from_pretrained(policy), tool_specs(agent_cfg.tools))
            for split in ("train", "eval"):
                chosen = [e for e in envs if e.split == split]
                t3 = time.perf_counter()
                scored, steps = collect_episodes(engine, fmt, chosen, 1, agent_cfg, box, sandbox_cfg, CONTEXT, 0)
                result[split] = {
                    "envs": len(chosen), "solve_rate": round(float((scored.verifier_reward == 1.0).mean()), 3),
                    "mean_reward": round(float(scored.verifier_reward.mean()), 3),
                    "valid_call_rate": round(float((steps.error == "").mean()), 3),
                    "tools": dict(Counter(steps.tool)), "finish": dict(Counter(scored.finish_reason)),
                    "wall_s": round(time.perf_counter() - t3, 1)}
                if split == "eval":
                    first = steps[steps.group_id == steps.group_id.iloc[0]]
                    result["example_steps"] = first[["turn", "tool", "arguments", "ok", "exit_code", "tokens_in",
                                                     "tokens_cached", "tokens_out", "observation_bytes"]
                                                    ].to_dict("records")
    finally:
        box.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
