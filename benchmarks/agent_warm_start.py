"""Experiment: warm-start an agent policy on oracle episodes (plus the demo's single-turn pairs) and measure how many
generated repository envs it solves, greedily, on the train and eval splits (vLLM, real sandboxes, the envs' own
verifier). Nothing about the demo policy changes: the agent policy is its own directory.

    python benchmarks/agent_warm_start.py [--out .posttrain/agent-policy] [--steps 1200]

Measured here (2-core machine shared with other jobs, load average 8-14; 320 oracle turns + 307 single-turn pairs):
300 SFT steps (4 min): the policy makes the first call right but rarely the next ones, solves 0 of 96 envs;
1200 steps (15 min): greedy solve rate 0.70 on train (45/64) and 0.41 on eval (13/32), 75% / 63% of its calls
valid.

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from posttrain.agent.rollout import collect_episodes
from posttrain.agent.template import ChatFormat
from posttrain.agent.tools import tool_specs
from posttrain.agent.warm_start import build_agent_policy, oracle_pairs
from posttrain.config import DEMO_SUITE, PROJECT_ROOT, AgentConfig, DemoPolicyConfig, RolloutConfig, SandboxConfig
from posttrain.envs.generators.agent_repo import oracle, specs
from posttrain.envs.suite import load_suite
from posttrain.sandbox import make_sandbox
from posttrain.training.demo_policy import train_tokenizer

CONTEXT = 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(PROJECT_ROOT / ".posttrain" / "agent-policy"))
    parser.add_argument("--steps", type=int, default=1200)
    args = parser.parse_args()
    from posttrain.rollout.engine import VLLMEngine

    envs = specs()
    train = [e for e in envs if e.split == "train"]
    single = [(e.prompt, e.reference) for e in load_suite(DEMO_SUITE).envs if e.split == "train"]
    agent_cfg = AgentConfig(temperature=0.0, max_new_tokens=128, token_budget=768)
    sandbox_cfg = SandboxConfig(backend="bwrap-warm")
    box = make_sandbox(sandbox_cfg)
    result = {}
    try:
        # step 1. oracle episodes on the train split, as text pairs (any tokenizer renders the same text)
        t0 = time.perf_counter()
        scratch = ChatFormat(train_tokenizer([t for p in single for t in p], 384), tool_specs(agent_cfg.tools))
        pairs = oracle_pairs(train, [oracle(e) for e in train], scratch, box, agent_cfg)
        # step 2. the agent policy: the demo recipe on both kinds of pairs
        cfg = DemoPolicyConfig(vocab_size=512, max_position_embeddings=CONTEXT, sft_steps=args.steps, sft_batch_size=8)
        t1 = time.perf_counter()
        policy = build_agent_policy(Path(args.out), cfg, single, pairs)
        t2 = time.perf_counter()
        result.update(agent_turn_pairs=len(pairs), single_turn_pairs=len(single), oracle_s=round(t1 - t0, 1),
                      build_s=round(t2 - t1, 1), sft_steps=args.steps)
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
