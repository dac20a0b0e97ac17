"""Benchmark: oracle and no-op agent episodes on the whole generated ``agent_repo`` suite, in real sandbox sessions.

Every env runs one episode per policy, all episodes of a policy advancing together (one batched turn, tool calls
concurrent); the final workspaces are scored by the envs' own verifier. Reports the oracle's solve rate (target:
1.0; it is admission's solvability probe), the no-op's (target: 0.0), agent steps/s (tool calls executed per second
of episode wall time) and the wall time of each phase. The policies are scripted (no model), so this measures the
episode loop and the sandbox sessions.

    python benchmarks/agent_oracle.py                   # warm bwrap
    python benchmarks/agent_oracle.py --backend docker

The last line printed is one JSON object. ``run_suite`` is the same measurement as a function (``rollout.py`` reports
its oracle figure).
"""

from __future__ import annotations

import argparse
import json
import time

from transformers import AutoTokenizer

from posttrain.agent.envs import score_final_workspaces, task_of
from posttrain.agent.runner import run_episodes
from posttrain.agent.scripted import ScriptedPolicy, noop_policy
from posttrain.agent.template import AGENT_TEMPLATE, ChatFormat
from posttrain.config import AgentConfig, DockerPoolConfig, SandboxConfig, default_policy_dir
from posttrain.envs.generators.agent_repo import oracle, specs
from posttrain.envs.tools import tool_specs
from posttrain.rollout.prompts import own_template
from posttrain.sandbox import make_sandbox


def measure(policy, fmt, envs, box, cfg: AgentConfig) -> dict:
    sessions = [box.session(timeout_s=cfg.tool_timeout_s) for _ in envs]
    try:
        t0 = time.perf_counter()
        episodes = run_episodes(policy, fmt, [task_of(e) for e in envs], sessions, cfg, max_context=4096)
        t1 = time.perf_counter()
        verdicts = score_final_workspaces(envs, sessions, box, SandboxConfig())
        t2 = time.perf_counter()
    finally:
        for s in sessions:
            s.close()
    steps = sum(len(e.steps) for e in episodes)
    return {"envs": len(envs), "solve_rate": sum(v.passed for v in verdicts) / len(envs),
            "infra_errors": sum(bool(v.infra_error) for v in verdicts), "tool_calls": steps,
            "turns": sum(len(e.turns) for e in episodes), "episode_wall_s": round(t1 - t0, 2),
            "agent_steps_per_s": round(steps / (t1 - t0), 1), "scoring_wall_s": round(t2 - t1, 2)}


def run_suite(backend: str = "bwrap-warm", tokenizer_dir: str | None = None, noop: bool = True,
              limit: int = 0) -> dict:
    """Oracle (and, with ``noop``, no-op) episodes on every ``agent_repo`` env (the first ``limit``; 0: all) in
    sandboxes of ``backend``; the chat format uses the tokenizer in ``tokenizer_dir`` (default: the demo policy's) and
    its chat template, ``AGENT_TEMPLATE`` when it has none (the demo policy is a base model)."""
    envs = specs()[:limit or None]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir or default_policy_dir())
    fmt = ChatFormat(tokenizer, tool_specs(AgentConfig().tools), own_template(tokenizer) or AGENT_TEMPLATE)
    box = make_sandbox(SandboxConfig(backend=backend, docker=DockerPoolConfig(size=4, max_size=len(envs) + 4)))
    cfg = AgentConfig(tool_concurrency=4)
    try:
        result = {"backend": backend,
                  "oracle": measure(ScriptedPolicy(fmt, {e.prompt: oracle(e) for e in envs}), fmt, envs, box, cfg)}
        if noop:
            result["noop"] = measure(noop_policy(fmt), fmt, envs, box, cfg)
    finally:
        box.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="bwrap-warm", choices=["bwrap-warm", "bwrap", "docker"])
    parser.add_argument("--limit", type=int, default=0, help="the first N envs of the suite (0: all)")
    args = parser.parse_args()
    print(json.dumps(run_suite(args.backend, limit=args.limit)))


if __name__ == "__main__":
    main()
