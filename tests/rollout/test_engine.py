"""A checkpoint written by the DeepSpeed trainer loads in real vLLM (the live engine, in its ``auto`` dtype: bf16 where
the CPU computes it natively), samples, and scores like HF does."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.config import RolloutConfig, TrainConfig
from posttrain.training.logprobs import token_logprobs
from posttrain.training.samples import TrainSample
from posttrain.training.trainer import PolicyTrainer

pytestmark = pytest.mark.integration

pytest.importorskip("vllm")
pytest.importorskip("deepspeed")

PROMPT = "# Write a function add_2(x) that returns x plus 2.\n"


@pytest.fixture(scope="module")
def trained_checkpoint(tiny_policy, tmp_path_factory):
    """The tiny policy after one DeepSpeed update, saved the way the RL loop saves v1."""
    trainer = PolicyTrainer(tiny_policy, TrainConfig(micro_batch_size=4, learning_rate=1e-3))
    try:
        prompt = trainer.tokenizer(PROMPT).input_ids
        completions = [trainer.tokenizer(text, add_special_tokens=False).input_ids + [trainer.tokenizer.eos_token_id]
                       for text in ("def add_2(x):\n    return x + 2\n", "def add_2(x):\n    return x - 2\n")]
        trainer.train_on([TrainSample(prompt, c, [-1.0] * len(c), a, "g") for c, a in zip(completions, (1.0, -1.0))])
        return trainer.save(tmp_path_factory.mktemp("ckpt") / "v1", metadata={"version": 1})
    finally:
        trainer.close()


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_vllm_generates_with_logprobs_from_saved_checkpoint(trained_checkpoint, temperature):
    """vLLM's log-probs are of the distribution it sampled from: HF's logits divided by the temperature (what the
    trainer computes), not the raw ones."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posttrain.rollout import live

    # the process's live engine (as the loop uses it): started on the checkpoint, or swapped to it in place when an
    # earlier test left one running; either way vLLM reads the trainer's files
    engine = live.acquire(str(trained_checkpoint), RolloutConfig(replicas=1), version=1)
    (request,) = engine.request_outputs([PROMPT], {"n": 4, "temperature": temperature, "max_tokens": 24, "logprobs": 0,
                                                    "seed": 0})

    tok = AutoTokenizer.from_pretrained(trained_checkpoint)
    assert request.prompt_token_ids == tok(PROMPT).input_ids  # same BOS + BPE ids in HF and vLLM
    assert request.prompt_token_ids[0] == tok.bos_token_id
    assert len(request.outputs) == 4

    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[engine.dtype]
    hf = AutoModelForCausalLM.from_pretrained(trained_checkpoint, dtype=dtype).eval()
    for sample in request.outputs:
        ids = list(sample.token_ids)
        assert ids
        assert len(sample.logprobs) == len(ids)
        vllm_lp = torch.tensor([step[t].logprob for step, t in zip(sample.logprobs, ids)])
        assert all(math.isfinite(x) and x <= 0 for x in vllm_lp.tolist())
        full = torch.tensor([request.prompt_token_ids + ids])
        with torch.no_grad():
            logits = hf(input_ids=full).logits[:, :-1]
        start = len(request.prompt_token_ids) - 1
        hf_lp = token_logprobs(logits / temperature, full[:, 1:])[0, start:]
        # same weights and tokens, different kernels (bf16 where native): the importance ratio starts near 1
        assert (vllm_lp - hf_lp).abs().mean() < 0.1, (vllm_lp, hf_lp)
        if temperature != 1.0:  # and the raw log-probs are another distribution
            raw = token_logprobs(logits, full[:, 1:])[0, start:]
            assert (vllm_lp - raw).abs().mean() > 2 * (vllm_lp - hf_lp).abs().mean(), (vllm_lp, hf_lp, raw)
