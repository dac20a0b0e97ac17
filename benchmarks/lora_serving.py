"""Benchmark: vLLM serving a LoRA version two ways -- its merged weights, or the base with the adapter -- on this build.

A LoRA version holds both (``posttrain.training.lora``): the merged weights ``W + scaling * B @ A`` (a plain HF
checkpoint, which the loop's live engine reloads in place each iteration) and ``adapter/`` (peft's files). vLLM can
also serve the base with the adapter applied at run time (``enable_lora``, a ``LoRARequest`` per call). This script
measures both on the installed vLLM build (CPU here, CUDA with the ``gpu`` extra):

1. trains a LoRA adapter for a few steps on the policy (``--policy`` or the random Qwen2-0.5B of
   ``one_iteration.py``) on synthetic samples with +1/-1 advantages, as the update task does, and saves v1;
2. in a process of its own for each, starts vLLM on v1's merged weights, on the base with v1's adapter, and on the
   base alone, and decodes the same prompts greedily: engine start seconds, decode tokens/s;
3. compares the two: the fraction of prompts whose greedy completions are identical, and the mean absolute
   difference of the chosen tokens' log-probs over the common prefix (merging rounds ``W + scaling * B @ A`` to the
   checkpoint's dtype once; the adapter path adds ``B @ A`` in the compute dtype at every call); and, so that the
   agreement is not that of an adapter without effect, the base alone against the merged weights
   (``base_vs_merged``).

    python benchmarks/lora_serving.py                          # random qwen2-0.5b, rank 16 (~6 min on 2 cores)
    python benchmarks/lora_serving.py --policy /models/my-qwen2 --lora-rank 8

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from one_iteration import default_policy  # noqa: E402  (benchmarks/ is this script's sys.path[0])

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
PROMPTS = [f"def {name}(a, b):\n    " for name in ("add", "sub", "mul", "div", "mod", "pow", "max2", "min2")]


def train_lora(policy: Path, rank: int, steps: int, out: Path) -> Path:
    """v1 of a LoRA run on ``policy``: ``steps`` optimizer steps on synthetic samples (+1/-1 advantages)."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import torch

    from posttrain.config import TrainConfig
    from posttrain.training.samples import TrainSample
    from posttrain.training.trainer import PolicyTrainer

    from transformers import AutoConfig

    top = min(AutoConfig.from_pretrained(policy).vocab_size, 1000)
    gen = torch.Generator().manual_seed(0)
    samples = [TrainSample([1] + torch.randint(3, top, (24,), generator=gen).tolist(),
                           torch.randint(3, top, (32,), generator=gen).tolist(), [-5.0] * 32,
                           1.0 if i % 2 == 0 else -1.0, f"g{i // 4}") for i in range(4 * steps)]
    cfg = TrainConfig(lora_rank=rank, micro_batch_size=4, learning_rate=1e-3)
    trainer = PolicyTrainer(policy, cfg, reference_dir=policy)
    try:
        trainer.train_on(samples)
        return trainer.save(out / "v1", metadata={"version": 1}, write_state=False)
    finally:
        trainer.close()


def serve(model: str, adapter: str | None, rank: int, max_tokens: int) -> dict:
    """Start vLLM on ``model`` (with ``adapter`` applied through ``enable_lora`` when given), decode ``PROMPTS``
    greedily; seconds to start, decode tokens/s, and per prompt the token ids and their log-probs."""
    from posttrain.rollout.engine_host import _prepare  # the loop's engine settings (in-process, KV cache size)

    max_rank = min(r for r in VLLM_LORA_RANKS if r >= rank)  # vLLM accepts these only
    kwargs = {"max_model_len": 512, "seed": 0,
              **({"enable_lora": True, "max_lora_rank": max_rank, "max_loras": 1} if adapter else {})}
    _prepare(kwargs, None)
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    started = time.perf_counter()
    llm = LLM(model=model, **kwargs)
    start_s = time.perf_counter() - started
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=0, ignore_eos=True)
    request = LoRARequest("v1", 1, adapter) if adapter else None
    llm.generate(PROMPTS[:1], params, lora_request=request, use_tqdm=False)  # warm-up
    decoded = time.perf_counter()
    outputs = llm.generate(PROMPTS, params, lora_request=request, use_tqdm=False)
    decode_s = time.perf_counter() - decoded
    completions = [o.outputs[0] for o in outputs]
    tokens = sum(len(c.token_ids) for c in completions)
    return {"start_s": round(start_s, 1), "decode_s": round(decode_s, 2),
            "tokens_per_s": round(tokens / decode_s, 1), "tokens": tokens,
            "completions": [{"ids": list(c.token_ids),
                             "logprobs": [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)]}
                            for c in completions]}


def agreement(a: list[dict], b: list[dict]) -> dict:
    """Identical greedy completions, and the mean |log-prob difference| of the chosen tokens over the common prefix."""
    same = sum(x["ids"] == y["ids"] for x, y in zip(a, b))
    diffs = []
    for x, y in zip(a, b):
        for tx, ty, lx, ly in zip(x["ids"], y["ids"], x["logprobs"], y["logprobs"]):
            if tx != ty:
                break
            diffs.append(abs(lx - ly))
    return {"identical_completions": f"{same}/{len(a)}",
            "mean_abs_logprob_diff": round(sum(diffs) / len(diffs), 5) if diffs else None,
            "compared_tokens": len(diffs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", help="an HF causal-LM checkpoint dir (default: a random qwen2-0.5b)")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    policy = Path(args.policy) if args.policy else default_policy()
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as child:  # its memory is back before the engines start
        v1 = child.submit(train_lora, policy, args.lora_rank, args.steps,
                          Path(tempfile.mkdtemp(prefix="bench-lora-serving-"))).result()
    served = {}
    for name, model, adapter in (("merged", str(v1), None), ("adapter", str(policy), str(v1 / "adapter")),
                                 ("base", str(policy), None)):
        with ProcessPoolExecutor(1, mp_context=spawn) as child:
            served[name] = child.submit(serve, model, adapter, args.lora_rank, args.max_tokens).result()
        print(json.dumps({name: {k: v for k, v in served[name].items() if k != "completions"}}), flush=True)
    import vllm

    result = {"benchmark": "lora_serving", "policy": str(policy), "lora_rank": args.lora_rank,
              "vllm": vllm.__version__, "prompts": len(PROMPTS), "max_tokens": args.max_tokens,
              **{name: {k: v for k, v in s.items() if k != "completions"} for name, s in served.items()},
              "agreement": agreement(served["merged"]["completions"], served["adapter"]["completions"]),
              "base_vs_merged": agreement(served["base"]["completions"], served["merged"]["completions"])}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
