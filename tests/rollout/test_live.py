"""The live engine registry on real vLLM: a new policy version is swapped into the running engine in place, and the
swapped engine serves the new weights (its log-probs of a fixed continuation match a transformers forward pass of
the new checkpoint), including the LM head the demo policy ties to its input embeddings."""

from __future__ import annotations

import json

import pytest
import torch

from posttrain.config import RolloutConfig
from posttrain.envs.spec import EnvSpec
from posttrain.rollout import live
from posttrain.rollout.collect import collect
from posttrain.training.logprobs import token_logprobs

pytestmark = pytest.mark.integration

pytest.importorskip("vllm", reason="vLLM is not installed (make install with EXTRA=cpu or gpu)")

CFG = RolloutConfig(replicas=1)  # the same engine settings as test_collect: one engine serves both
PROMPT = "# Write a function add_2(x) that returns x plus 2.\n"
CONTINUATION = "def add_2(x):\n    return x + 2\n"
TOL = 0.02  # mean |vLLM - HF| per token, both bf16; measured here ~0.001 (a stale LM head: 0.15 and more)


def _perturbed(source, out, scale: float, seed: int):
    """``source`` with Gaussian noise (``scale`` x each tensor's std) on every weight, saved like the trainer does."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * param.std() * scale)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out


def _hf_logprobs(policy_dir, ids: list[int], start: int, head_from=None) -> torch.Tensor:
    """Log-probs of ``ids[start:]`` under the HF model (bf16, like vLLM); ``head_from``: LM head of another dir."""
    from transformers import AutoModelForCausalLM

    tie = {} if head_from is None else {"tie_word_embeddings": False}
    model = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.bfloat16, **tie).eval()
    if head_from is not None:
        other = AutoModelForCausalLM.from_pretrained(head_from, dtype=torch.bfloat16)
        with torch.no_grad():
            model.lm_head.weight.copy_(other.get_output_embeddings().weight)
    full = torch.tensor([ids])
    with torch.no_grad():
        return token_logprobs(model(input_ids=full).logits[:, :-1], full[:, 1:])[0, start - 1:].float()


def _vllm_logprobs(engine, ids: list[int], start: int) -> torch.Tensor:
    """The engine's log-probs of ``ids[start:]`` given ``ids[:start]`` (prompt log-probs of one request)."""
    (out,) = engine.request_outputs([{"prompt_token_ids": ids}], {"max_tokens": 1, "prompt_logprobs": 0})
    return torch.tensor([out.prompt_logprobs[i][ids[i]].logprob for i in range(start, len(ids))])


@pytest.fixture(scope="module")
def new_version(tiny_policy, tmp_path_factory):
    return _perturbed(tiny_policy, tmp_path_factory.mktemp("swap") / "v1", scale=1.0, seed=1)


def test_swapped_engine_serves_the_new_weights_including_the_tied_lm_head(tiny_policy, new_version):
    from transformers import AutoTokenizer

    assert json.loads((tiny_policy / "config.json").read_text())["tie_word_embeddings"]  # what this test is about
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_policy))
    prompt = tokenizer(PROMPT).input_ids
    ids = prompt + tokenizer(CONTINUATION, add_special_tokens=False).input_ids
    long_prompt = PROMPT * 8  # ~137 tokens: fills one prefix-cache block (128 tokens on CPU)

    engine = live.acquire(str(tiny_policy), CFG, version=0)  # started, or swapped from an earlier test's weights
    assert (_vllm_logprobs(engine, ids, len(prompt)) - _hf_logprobs(tiny_policy, ids, len(prompt))).abs().mean() < TOL
    engine.generate([long_prompt], n=1, temperature=0.0, max_tokens=8)  # cache v0's KV of the long prompt

    before = live.counters()
    swapped, start_s, swap_s = live.acquire_timed(str(new_version), CFG, version=1)
    after = live.counters()
    assert swapped is engine
    assert swapped.version == 1
    assert after["starts"] == before["starts"]
    assert after["reloads"] - before["reloads"] == 1
    assert start_s == 0.0
    assert 0.0 < swap_s < 2.0  # an in-place swap, not a restart (~20 ms measured here)

    new_vllm = _vllm_logprobs(engine, ids, len(prompt))
    new_hf = _hf_logprobs(new_version, ids, len(prompt))
    old_hf = _hf_logprobs(tiny_policy, ids, len(prompt))
    stale_head = _hf_logprobs(new_version, ids, len(prompt), head_from=tiny_policy)
    assert (new_hf - old_hf).abs().mean() > 10 * TOL  # the versions differ enough for the checks to mean something
    assert (new_vllm - new_hf).abs().mean() < TOL, (new_vllm, new_hf)
    assert (new_vllm - stale_head).abs().mean() > 5 * TOL  # the tied LM head was swapped too, not only the body

    # the prefix cache was reset: a prompt cached under v0 is scored with v1's KV
    (sample,) = engine.generate([long_prompt], n=1, temperature=0.0, max_tokens=8)[0]
    long_ids = sample.prompt_token_ids + sample.token_ids
    expected = _hf_logprobs(new_version, long_ids, len(sample.prompt_token_ids))
    assert (torch.tensor(sample.logprobs) - expected).abs().mean() < TOL

    # the same weights again: nothing to do
    assert live.acquire(str(new_version), CFG, version=1) is engine
    assert live.counters()["reloads"] == after["reloads"]


def test_seeded_sampling_reproduces_and_rows_carry_the_engine_version(tiny_policy):
    env = EnvSpec(id="demo/add_3", prompt="# Write a function add_3(x) that returns x plus 3.\n", entry_point="add_3",
                  verifier={"kind": "python_tests", "cases": []}, reference="")
    # more prompt tokens than one scheduler step takes (4096): prefills are split over steps, the case where vLLM's
    # per-request seeds crash the CPU engine
    prompts = [f"# Variant {i}.\n" + env.prompt * 4 for i in range(64)]
    engine = live.acquire(str(tiny_policy), CFG, version=4)

    def sampled(seed):
        return [[s.token_ids for s in group]
                for group in engine.generate(prompts, n=2, temperature=1.0, max_tokens=6, seed=seed)]

    first = sampled(11)
    engine.generate(prompts[:3], n=4, temperature=1.0, max_tokens=12)  # unseeded sampling in between
    assert sampled(11) == first
    assert sampled(12) != first
    assert len({tuple(ids) for group in first for ids in group}) > 1

    table, _ = collect(engine, [env], n=2, temperature=1.0, max_tokens=8, group_prefix="it5", seed=5)
    assert set(table["policy_version"]) == {4}


def test_other_engine_settings_restart_the_engine_with_the_reason_logged_then_shutdown_stops_it(tiny_policy, caplog):
    engine = live.acquire(str(tiny_policy), CFG, version=0)
    starts = live.counters()["starts"]
    with caplog.at_level("WARNING", logger=live.__name__):
        restarted = live.acquire(str(tiny_policy), RolloutConfig(replicas=1, max_model_len=192), version=0)
    assert restarted is not engine
    assert not engine.hosts
    assert live.counters()["starts"] == starts + 1
    assert "engine.max_model_len: 256 -> 192" in caplog.text

    live.shutdown_all()
    assert live.live_engine() is None
    assert not restarted.hosts
    live.shutdown_all()  # idempotent
