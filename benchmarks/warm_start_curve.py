"""Experiment: how far into a demo agent policy's warm start each domain's skill appears. RL needs a warm start
that reads its envs but leaves room: a build that converges solves every env it can copy the answer of (the
multi-domain policy's first fully converged build: code 103 of 103 eval envs greedily, finance 30 of 48, every one
its formula-free envs, scenes 26 of 48, the templates that need no addition), and its RL run then gained nothing.
This builds the recipe once, writing snapshots of the model at the steps asked, and scores each snapshot (and the
final policy) greedily, per domain, on the eval split of its suite (``--split train``: the train split):

- single-turn suites: pass@1 of the greedy completion of the raw prompt (Hugging Face ``generate``, the env's own
  verifier in a sandbox, as the loop verifies);
- the agent suite: the fraction of the oracle episodes' turns whose call the policy writes exactly, given the
  oracle's context up to that turn (teacher-forced: a turn-level view of what the episodes need), and per tool
  argument how often the policy's call gives the oracle's value (``agent_arguments_exact``);
- ``copy_unseen``: the fraction of 40 copy drills over fresh lines (``fresh_copy_drill``: words of the scored
  prompts in new orders, random syllable names, numbers) copied exactly: whether the policy copies what it never saw,
  what the terminal envs' paths and lines need and a pool learnt by heart cannot give (docs/multi-domain.md).

    python benchmarks/warm_start_curve.py --snapshots 1000,1500,2000,2500          # demo-multi, its 3000 steps
    python benchmarks/warm_start_curve.py --policy .posttrain/multi-policy           # score one built policy

A build takes the recipe's time (demo-multi: 27-40 min on one core here, beside other work); scoring ~3 min a
snapshot. The last line
printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # reading_probe.py, when run from elsewhere

from reading_probe import completions  # noqa: E402

from posttrain.agent.parser import ToolCall, parse_calls  # noqa: E402
from posttrain.agent.template import AGENT_TEMPLATE, ChatFormat  # noqa: E402
from posttrain.agent.warm_start import RECIPES, main_agent_policy, oracle_pairs  # noqa: E402
from posttrain.config import DEMO_MULTI_POLICY, MULTI_DOMAIN_SUITE_REF, SandboxConfig  # noqa: E402
from posttrain.envs.generators.common import drill_words, fresh_copy_drill  # noqa: E402
from posttrain.envs.suite import load_suite  # noqa: E402
from posttrain.envs.tools import TOOLS, tool_specs  # noqa: E402
from posttrain.envs.verifiers import get_verifier, verify_many  # noqa: E402
from posttrain.locations import local_copy  # noqa: E402
from posttrain.sandbox import make_sandbox  # noqa: E402


def single_turn_scores(policy: str, envs: list) -> dict[str, float]:
    """Per domain: the fraction of ``envs`` (single-turn) the policy's greedy completion passes, verified in a
    sandbox as the loop verifies."""
    texts = completions(policy, [env.prompt for env in envs], max_new_tokens=192)
    solutions = [get_verifier(env.verifier["kind"]).extract_solution(text) for env, text in zip(envs, texts)]
    cfg = SandboxConfig()
    box = make_sandbox(cfg)
    try:
        verdicts = verify_many(list(zip(envs, solutions)), box, cfg)
    finally:
        box.close()
    passed: dict[str, list[bool]] = {}
    for env, verdict in zip(envs, verdicts):
        passed.setdefault(env.domain, []).append(verdict.passed)
    return {domain: round(sum(flags) / len(flags), 3) for domain, flags in sorted(passed.items())}


def turn_pairs_of(policy: str, envs: list, recipe) -> list[tuple[str, str]]:
    """The oracle episodes' (context, call) pairs of ``envs``, in ``policy``'s tokenizer and template."""
    from transformers import AutoTokenizer

    fmt = ChatFormat(AutoTokenizer.from_pretrained(policy), tool_specs(recipe.agent.tools), AGENT_TEMPLATE)
    box = make_sandbox(SandboxConfig())
    try:
        return oracle_pairs(envs, [env.oracle for env in envs], fmt, box, recipe.agent)
    finally:
        box.close()


def exact_turns(policy: str, pairs: list[tuple[str, str]]) -> tuple[float, dict[str, str]]:
    """The fraction of ``pairs`` whose call the policy's greedy completion of the context is, exactly, and per
    ``tool.argument`` of the oracle's calls how often the completion's call of that tool gives it exactly ("6/54"):
    which strings the policy writes right (a path to read, a line to search for) and which it garbles."""
    texts = completions(policy, [context for context, _ in pairs], max_new_tokens=128)
    allowed = {name: tool.arguments for name, tool in TOOLS.items()}
    right: dict[str, list[bool]] = {}
    for text, (_, call) in zip(texts, pairs):
        written = {found.name: found.arguments for found in parse_calls(text, allowed) if isinstance(found, ToolCall)}
        for wanted in parse_calls(call, allowed):
            for argument, value in wanted.arguments.items():
                right.setdefault(f"{wanted.name}.{argument}", []).append(
                    written.get(wanted.name, {}).get(argument) == value)
    exact = round(sum(text.strip() == call.strip() for text, (_, call) in zip(texts, pairs)) / len(pairs), 3)
    return exact, {key: f"{sum(flags)}/{len(flags)}" for key, flags in sorted(right.items())}


def copy_unseen(policy: str, words: list[str], count: int = 40) -> float:
    """The fraction of ``count`` fresh copy drills over ``words`` (seeded alike for every policy) the policy's greedy
    completion copies exactly."""
    rng = random.Random("copy-unseen")
    drills = [fresh_copy_drill(rng, words) for _ in range(count)]
    texts = completions(policy, [prompt for prompt, _ in drills], max_new_tokens=96)
    return round(sum(text.strip() == answer.strip() for text, (_, answer) in zip(texts, drills)) / count, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", default=DEMO_MULTI_POLICY, choices=sorted(RECIPES))
    parser.add_argument("--snapshots", default="", help="comma-separated SFT steps to snapshot and score")
    parser.add_argument("--policy", help="score this built policy instead of building the recipe's")
    parser.add_argument("--suite", default=MULTI_DOMAIN_SUITE_REF, help="whose envs are scored")
    parser.add_argument("--split", default="eval", choices=("eval", "train"),
                        help="which split: train shows what the warm start learnt by heart of RL's train envs")
    parser.add_argument("--out", help="where to build (default: a fresh folder under /tmp)")
    args = parser.parse_args()
    recipe = RECIPES[args.recipe]
    steps = [int(step) for step in args.snapshots.split(",") if step]
    if args.policy:
        policies = {"given": args.policy}
    else:
        out = Path(args.out or tempfile.mkdtemp(prefix="warm-start-curve-")) / "policy"
        main_agent_policy(out, recipe, snapshots=steps)
        policies = {**{str(step): f"{out}-step{step}" for step in steps}, str(recipe.cfg.sft_steps): str(out)}
    scored = [env for env in load_suite(local_copy(args.suite)).envs if env.split == args.split]
    single = [env for env in scored if env.kind == "single_turn"]
    agent = [env for env in scored if env.kind == "agent" and env.oracle]
    pairs = turn_pairs_of(next(iter(policies.values())), agent, recipe) if agent else []
    words = drill_words(env.prompt for env in scored)
    report = {}
    for step, policy in policies.items():
        report[step] = single_turn_scores(policy, single) if single else {}
        if pairs:
            report[step]["agent_turns_exact"], report[step]["agent_arguments_exact"] = exact_turns(policy, pairs)
        report[step]["copy_unseen"] = copy_unseen(policy, words)
        print(f"{step:>6}: {report[step]}", flush=True)
    print(json.dumps({"recipe": args.recipe, "suite": args.suite, "split": args.split, "envs": len(scored),
                      "scores": report}))


if __name__ == "__main__":
    main()
