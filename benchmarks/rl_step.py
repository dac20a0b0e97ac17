"""Benchmark: wall time of one RL step (rollout + reward + update), posttrain vs TRL's ``GRPOTrainer``, side by side.

Same model, same prompts (the first ``--envs`` train envs of the demo suite, all of them every step), same reward
function (posttrain's verifiers in sandboxes of the default backend, called by both), same group size and completion
length, same learning rate, no KL term. Each side runs in its own process (vLLM, DeepSpeed and accelerate each set
up torch.distributed their own way) for ``--steps`` steps; a step's time is taken around all of it, and the report
gives the median of the steps after the first (warm).

- posttrain: the library's loop pieces with a live vLLM engine (started once, before the first step): ``collect``
  (vLLM), ``reward.score`` (sandboxes; copies of one completion verified once), the update on the process's live
  DeepSpeed trainer (``training.live``, as the update task runs locally; it skips groups whose rewards are all
  equal), ``save`` (HF weights + the full training state) and an in-place weight reload of the engine.
- TRL: ``GRPOTrainer`` with its default generation (transformers ``generate``); with ``--trl-vllm`` also its vLLM
  colocate mode, reported when it runs here.

``--model``: ``medium`` (default; 25M parameters, the demo-policy recipe at width 512 and depth 8, built once and
cached: ~6 minutes the first time) or ``demo`` (the loop's 0.7M-parameter demo policy). At the demo size both steps
are mostly the shared reward function (~0.35 s of ~0.7 s), so the ratio measures fixed costs; at the medium size
generation and the update dominate, as they do for real models. ``--policy DIR`` takes any HF causal-LM dir instead.

TRL is a benchmark-only dependency (``pip install -e ".[bench]"``), never imported by the library.
Target: posttrain's step <= 0.5x TRL's.

    python benchmarks/rl_step.py                      # medium model, 8 envs x 8 samples, 3 steps each side
    python benchmarks/rl_step.py --model demo --envs 4 --steps 2

The last line printed is one JSON object: per side the step times (and posttrain's per-part split), the ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GROUP, MAX_TOKENS, TEMPERATURE, LEARNING_RATE = 8, 48, 1.0, 1e-4


def demo_envs(count: int | None = None) -> list:
    """The demo suite's train envs in suite order: the first ``count``, or all of them."""
    from posttrain.config import DEMO_SUITE
    from posttrain.envs.suite import load_suite

    return [env for env in load_suite(DEMO_SUITE).envs if env.split == "train"][:count]


def policy_dir(model: str) -> str:
    """The policy of ``--model``, built once by the project's demo-policy recipe (tokenizer, Llama, SFT on the demo
    train split) and cached: ``demo`` is the loop's demo policy (0.7M parameters, where ``make demo`` keeps it),
    ``medium`` the same recipe at width 512 and depth 8 (25M parameters, in ``~/.cache/posttrain``)."""
    from posttrain.config import DemoPolicyConfig, default_policy_dir
    from posttrain.training.demo_policy import main_demo_policy

    if model == "demo":
        return str(main_demo_policy(default_policy_dir()))
    medium = DemoPolicyConfig(hidden_size=512, intermediate_size=1536, num_layers=8, num_heads=8)
    return str(main_demo_policy(Path.home() / ".cache" / "posttrain" / "bench-policy-medium", medium))


def rewards_of(envs_by_id: dict, env_ids: list[str], completions: list[str], box, cfg) -> list[float]:
    """The reward stage's function for TRL: extract the solution, verify it in a sandbox of ``box``; with
    ``cfg.verify_duplicates_once`` copies of one completion for one env are verified once, as ``reward.score`` does."""
    from posttrain.envs.verifiers import get_verifier, verify_many
    from posttrain.reward import first_copies

    keys = list(zip(env_ids, completions))
    first = first_copies(keys) if cfg.verify_duplicates_once else list(range(len(keys)))
    distinct = sorted(set(first))
    pairs = [(envs_by_id[keys[i][0]], get_verifier(envs_by_id[keys[i][0]].verifier_kind).extract_solution(keys[i][1]))
             for i in distinct]
    by_row = dict(zip(distinct, verify_many(pairs, box, cfg)))
    return [float(by_row[i].reward) for i in first]


def run_posttrain(policy: str, envs_count: int, steps: int) -> dict:
    """One process: a live engine, then ``steps`` RL steps through the library's pieces."""
    from posttrain.config import RolloutConfig, SandboxConfig, TrainConfig
    from posttrain.reward import score, trainable_rows
    from posttrain.rollout.collect import collect
    from posttrain.rollout.engine import VLLMEngine
    from posttrain.sandbox import make_sandbox
    from posttrain.training.samples import train_samples, with_advantages
    from posttrain.training import live as live_trainer

    envs = demo_envs(envs_count)
    envs_by_id = {env.id: env for env in envs}
    rollout_cfg = RolloutConfig(samples_per_env=GROUP, max_new_tokens=MAX_TOKENS, temperature=TEMPERATURE)
    train_cfg, sandbox_cfg = TrainConfig(learning_rate=LEARNING_RATE), SandboxConfig()
    work = Path(tempfile.mkdtemp(prefix="rl-step-"))
    times, parts = [], []
    started = time.perf_counter()
    with VLLMEngine(policy, rollout_cfg, seed=0) as engine, make_sandbox(sandbox_cfg) as box:
        engine_start_s = time.perf_counter() - started
        for step in range(1, steps + 1):
            t0 = time.perf_counter()
            trajectories, _ = collect(engine, envs, n=GROUP, temperature=TEMPERATURE, max_tokens=MAX_TOKENS,
                                      policy_version=step - 1, group_prefix=f"s{step}")
            t1 = time.perf_counter()
            scored = score(trajectories, envs_by_id, box, sandbox_cfg)
            t2 = time.perf_counter()
            trainer = live_trainer.acquire(policy, train_cfg)
            t_init = time.perf_counter()
            stats = trainer.train_on(train_samples(trainable_rows(with_advantages(scored, train_cfg))))
            t_train = time.perf_counter()
            policy = str(trainer.save(work / f"v{step}"))
            t_save = time.perf_counter()
            engine.reload(policy)
            t3 = time.perf_counter()
            times.append(t3 - t0)
            parts.append({"rollout_s": t1 - t0, "reward_s": t2 - t1, "trainer_start_s": t_init - t2,
                          "train_s": t_train - t_init, "save_s": t_save - t_train, "reload_s": t3 - t_save,
                          "reward_mean": float(scored["reward"].mean()), "trained_samples": stats.num_samples})
        live_trainer.shutdown()
    return {"engine_start_s": round(engine_start_s, 2), "step_s": [round(t, 3) for t in times], "parts": parts}


def trl_trainer(policy: str, envs: list, box, sandbox_cfg, callbacks=(), repeats: int = 1, **settings):
    """TRL's ``GRPOTrainer`` on ``policy`` (CPU, fp32, no KL term, nothing saved or reported), prompted with ``envs``
    (each ``repeats`` times a pass) and rewarded by ``rewards_of`` in ``box``; ``settings`` set or override
    ``GRPOConfig`` fields (group, completion length and learning rate default to this benchmark's)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    envs_by_id = {env.id: env for env in envs}

    def reward(prompts, completions, env_id, **_):
        return rewards_of(envs_by_id, list(env_id), list(completions), box, sandbox_cfg)

    dataset = Dataset.from_list([{"prompt": env.prompt, "env_id": env.id} for env in envs] * repeats)
    args = GRPOConfig(**{"output_dir": tempfile.mkdtemp(prefix="trl-"), "num_generations": GROUP,
                         "max_completion_length": MAX_TOKENS, "learning_rate": LEARNING_RATE, "beta": 0.0,
                         "report_to": [], "save_strategy": "no", "use_cpu": True, "bf16": False,
                         "dataloader_num_workers": 0, "seed": 0, **settings})
    return GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(policy), reward_funcs=reward, args=args,
                       train_dataset=dataset, processing_class=AutoTokenizer.from_pretrained(policy),
                       callbacks=list(callbacks))


def run_trl(policy: str, envs_count: int, steps: int, use_vllm: bool) -> dict:
    """One process: TRL's GRPOTrainer on the same model, prompts and reward (one sandbox backend kept open, as
    posttrain's side keeps its own; every copy of a completion verified), timed per optimizer step."""
    from transformers import TrainerCallback

    from posttrain.config import SandboxConfig
    from posttrain.sandbox import make_sandbox

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self._t0 = [], 0.0

        def on_step_begin(self, *args, **kwargs):
            self._t0 = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            self.times.append(time.perf_counter() - self._t0)

    timer = StepTimer()
    envs = demo_envs(envs_count)
    sandbox_cfg = SandboxConfig(verify_duplicates_once=False)
    with make_sandbox(sandbox_cfg) as box:
        trainer = trl_trainer(policy, envs, box, sandbox_cfg, callbacks=[timer], repeats=steps,
                              per_device_train_batch_size=len(envs) * GROUP, temperature=TEMPERATURE,
                              max_steps=steps, logging_steps=1, use_vllm=use_vllm, vllm_mode="colocate")
        trainer.train()
    return {"step_s": [round(t, 3) for t in timer.times]}


def child(command: list[str]) -> dict:
    """Run ``command`` (a benchmark's hidden side) in a child process: the JSON object of its last stdout line, or
    the error it ended with."""
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-1500:]}"}
    return json.loads(lines[-1])


def side(name: str, policy: str, envs: int, steps: int) -> dict:
    """Run one side in a child process; its result, or the error it ended with."""
    return child([sys.executable, __file__, "--side", name, "--policy", policy, "--envs", str(envs),
                  "--steps", str(steps)])


def parameter_count(policy: str) -> int:
    """Parameters of the HF checkpoint in ``policy`` (from its safetensors headers; no weights are loaded)."""
    from safetensors import safe_open

    total = 0
    for path in Path(policy).glob("*.safetensors"):
        with safe_open(str(path), framework="pt") as weights:
            total += sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    return total


def warm_median(step_s: list[float]) -> float | None:
    warm = step_s[1:] or step_s
    return round(statistics.median(warm), 3) if warm else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--trl-vllm", action="store_true", help="also TRL's vLLM colocate mode")
    parser.add_argument("--model", choices=["medium", "demo"], default="medium",
                        help="which policy both sides train (see policy_dir)")
    parser.add_argument("--policy", help="an HF causal-LM dir with a tokenizer, instead of --model")
    parser.add_argument("--side", choices=["posttrain", "trl", "trl-vllm"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        runners = {"posttrain": lambda: run_posttrain(args.policy, args.envs, args.steps),
                   "trl": lambda: run_trl(args.policy, args.envs, args.steps, use_vllm=False),
                   "trl-vllm": lambda: run_trl(args.policy, args.envs, args.steps, use_vllm=True)}
        print(json.dumps(runners[args.side]()))
        return
    policy = str(Path(args.policy).resolve()) if args.policy else policy_dir(args.model)
    names = ["posttrain", "trl"] + (["trl-vllm"] if args.trl_vllm else [])
    results = {name: side(name, policy, args.envs, args.steps) for name in names}
    for result in results.values():
        if "step_s" in result:
            result["step_s_warm_median"] = warm_median(result["step_s"])
    ours, theirs = results["posttrain"].get("step_s_warm_median"), results["trl"].get("step_s_warm_median")
    ratio = round(ours / theirs, 3) if ours and theirs else None
    print(json.dumps({"benchmark": "rl_step", "model": args.policy or args.model,
                      "parameters": parameter_count(policy), "envs": args.envs, "group": GROUP,
                      "max_new_tokens": MAX_TOKENS,
                      "steps": args.steps, "cpus": os.cpu_count(), "sides": results,
                      "posttrain_vs_trl": ratio, "target_met": ratio is not None and ratio <= 0.5}))


if __name__ == "__main__":
    main()
