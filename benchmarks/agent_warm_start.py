"""Experiment: warm-start an agent policy on oracle episodes (plus the demo's single-turn pairs) and measure how many
of its suite's envs it solves, greedily, per split and per domain (vLLM, real sandboxes, the envs' own verifiers),
under one or more context budgets. Nothing about the demo policy changes: an agent policy is its own directory.

    python benchmarks/agent_warm_start.py                                   # demo-agent: agent_repo, 1200 steps
    python benchmarks/agent_warm_start.py --recipe demo-agent-long --context-budgets 768,100000
    python benchmarks/agent_warm_start.py --recipe demo-agent-long --policy /tmp/run/policy-v12 --splits eval \\
        --context-budgets 768,100000           # a trained version, with and without compression

``--recipe`` names a demo agent policy (``posttrain agent-policy --recipe``): its suite is the one measured, and
``--policy`` measures a given checkpoint (a trained version) instead of building one. Each context budget runs the
same greedy episodes with ``agent.context_budget`` (and every domain's) set to it: a budget the episodes never reach
is the run without compression. Per budget and split: the solve rate, per domain too, the fraction of episodes the
budget compressed, finish reasons, tool calls. Measured here: docs/benchmarks.md and docs/agent.md.

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from posttrain.agent.metrics import compressed_episodes
from posttrain.agent.rollout import collect_episodes
from posttrain.agent.template import ChatFormat
from posttrain.agent.warm_start import RECIPES, main_agent_policy
from posttrain.config import DEMO_AGENT_LONG_POLICY, DEMO_AGENT_POLICIES, DEMO_AGENT_POLICY, DEMO_MULTI_POLICY, \
    LoopConfig, RolloutConfig, SandboxConfig, default_agent_policy_dir
from posttrain.envs.suite import load_suite
from posttrain.envs.tools import tool_specs
from posttrain.sandbox import make_sandbox
from posttrain.schemas import all_tests_passed
from posttrain.training.checkpoints import POLICY_META

# The episodes' agent settings: the loop preset of each recipe (its context, turn and token budgets).
PRESETS = {DEMO_AGENT_POLICY: LoopConfig.agent_demo, DEMO_AGENT_LONG_POLICY: LoopConfig.agent_long_demo,
           DEMO_MULTI_POLICY: LoopConfig.multi_domain_demo}


def measured(scored, steps, domains: dict[str, str]) -> dict:
    """Solve rate (every test passed), per domain too (``domains``: env id -> domain), and what the episodes did.
    ``scored`` has a row per context window: an episode the budget compressed has several, with one verdict."""
    scored = scored.drop_duplicates(["group_id", "sample_idx"], keep="last")
    solved, domain = all_tests_passed(scored), scored.env_id.map(domains)
    return {"envs": len(scored), "solve_rate": round(float(solved.mean()), 3),
            "per_domain": {name: round(float(solved[domain == name].mean()), 3) for name in sorted(set(domain))},
            "mean_reward": round(float(scored.verifier_reward.mean()), 3),
            "compressed_episodes": round(compressed_episodes(steps) / max(1, len(scored)), 3),
            "valid_call_rate": round(float((steps.error == "").mean()), 3),
            "tools": dict(Counter(steps.tool)), "finish": dict(Counter(scored.finish_reason))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", default=DEMO_AGENT_POLICY, choices=sorted(DEMO_AGENT_POLICIES))
    parser.add_argument("--out", help="where to build (default: the recipe's folder, .posttrain/...)")
    parser.add_argument("--steps", type=int, help="SFT steps (default: the recipe's)")
    parser.add_argument("--policy", help="measure this checkpoint instead of building the recipe's")
    parser.add_argument("--splits", default="train,eval")
    parser.add_argument("--context-budgets", default="", help="comma-separated; default: the preset's budget")
    parser.add_argument("--max-model-len", type=int, help="the engine's context (default: the preset's)")
    args = parser.parse_args()
    from posttrain.rollout.engine import VLLMEngine

    preset = PRESETS[args.recipe]()
    agent_cfg = replace(preset.agent, temperature=0.0)
    budgets = [int(b) for b in args.context_budgets.split(",") if b] or [agent_cfg.context_budget]
    envs = [e for e in load_suite(RECIPES[args.recipe].suite).envs if e.kind == "agent"]
    context = args.max_model_len or preset.rollout.max_model_len
    sandbox_cfg = SandboxConfig(backend="bwrap-warm")
    box = make_sandbox(sandbox_cfg)
    result = {"recipe": args.recipe}
    try:
        # 1. the agent policy: the recipe's oracle episodes as turn pairs, plus the single-turn pairs, through the
        #    demo recipe (what `posttrain agent-policy --recipe` builds), or the checkpoint given
        if args.policy:
            policy = Path(args.policy)
        else:
            recipe = RECIPES[args.recipe]
            if args.steps is not None:
                recipe = replace(recipe, cfg=replace(recipe.cfg, sft_steps=args.steps))
            began = time.perf_counter()
            policy = main_agent_policy(Path(args.out or default_agent_policy_dir(args.recipe)), recipe,
                                       sandbox_cfg=sandbox_cfg)
            meta = json.loads((policy / POLICY_META).read_text())
            result.update(build_s=round(time.perf_counter() - began, 1), sft_steps=recipe.cfg.sft_steps,
                          agent_turns=meta["agent_turns"], final_sft_loss=round(meta["final_sft_loss"], 4))
        result["policy"] = str(policy)
        # 2. greedy episodes on each split under each budget, scored by the verifiers
        with VLLMEngine(str(policy), RolloutConfig(max_model_len=context), version=0) as engine:
            from transformers import AutoTokenizer

            fmt = ChatFormat(AutoTokenizer.from_pretrained(policy), tool_specs(agent_cfg.tools))
            for budget in budgets:
                cfg = replace(agent_cfg, context_budget=budget, context_budgets={})
                for split in args.splits.split(","):
                    chosen = [e for e in envs if e.split == split]
                    began = time.perf_counter()
                    scored, steps = collect_episodes(engine, fmt, chosen, 1, cfg, box, sandbox_cfg, context, 0)
                    result[f"{split}@{budget}"] = {**measured(scored, steps, {e.id: e.domain for e in chosen}),
                                                   "wall_s": round(time.perf_counter() - began, 1)}
    finally:
        box.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
