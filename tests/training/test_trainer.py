"""A real DeepSpeed (ZeRO-2, bf16, CPU) update of the tiny policy: one step, weights move, save reloads exactly.

Also the algorithm seam end to end: a loss variant registered in this test only trains when ``TrainConfig`` names it.
"""

from __future__ import annotations

import json
import math
import time

import pytest
import torch

from posttrain.config import DEMO_SUITE, TrainConfig
from posttrain.envs.suite import load_suite
from posttrain.training.algorithms import get_advantage_estimator, register_policy_loss
from posttrain.training.checkpoints import POLICY_META
from posttrain.training.logprobs import token_logprobs
from posttrain.training.samples import TrainSample
from posttrain.training.trainer import PolicyTrainer

pytestmark = pytest.mark.integration

pytest.importorskip("deepspeed")


@register_policy_loss("reinforce")
def reinforce_loss(logprobs, behavior_logprobs, advantages, mask, cfg):
    """REINFORCE: ``-A log pi(token)`` per token, ``[B, L-1]``; no ratio, no clip, no stats."""
    return -advantages.unsqueeze(-1) * logprobs, {}


def _samples(policy_dir, rewards_by_group: dict[str, list[float]]) -> list[TrainSample]:
    """Completions = the references of train envs, behavior log-probs from the fp32 HF model (on-policy-ish).

    Advantages: the default estimator (GRPO) over the given rewards, as the update stage computes them.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(policy_dir)
    model = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    envs = [e for e in load_suite(DEMO_SUITE).envs if e.split == "train"]
    rewards = [r for group in rewards_by_group.values() for r in group]
    group_ids = [gid for gid, group in rewards_by_group.items() for _ in group]
    advantages = get_advantage_estimator("grpo")(rewards, group_ids, TrainConfig()).tolist()
    samples = []
    for g, (gid, group) in enumerate(rewards_by_group.items()):
        for i in range(len(group)):
            env = envs[(3 * g + i) % len(envs)]
            prompt = tok(env.prompt).input_ids
            completion = tok(env.reference, add_special_tokens=False).input_ids + [tok.eos_token_id]
            ids = torch.tensor([prompt + completion])
            with torch.no_grad():
                lp = token_logprobs(model(input_ids=ids).logits[:, :-1], ids[:, 1:])[0, len(prompt) - 1 :]
            samples.append(TrainSample(prompt, completion, lp.tolist(), advantages[len(samples)], gid))
    return samples


def _master_weights(trainer: PolicyTrainer) -> dict[str, torch.Tensor]:
    from deepspeed.utils import safe_get_full_fp32_param

    return {n: safe_get_full_fp32_param(p).detach().clone() for n, p in trainer.engine.module.named_parameters()}


@pytest.fixture(scope="module")
def trainer(tiny_policy):
    t = PolicyTrainer(tiny_policy, TrainConfig(micro_batch_size=8, learning_rate=1e-3, zero_stage=2, bf16=True))
    yield t
    t.close()


def test_one_step_changes_weights_and_reports(trainer, tiny_policy):
    samples = _samples(tiny_policy, {"g0": [1.0, 0.0, 1.0, 0.0], "flat": [1.0, 1.0, 1.0]})
    from transformers import AutoModelForCausalLM

    before = _master_weights(trainer)
    checkpoint = dict(AutoModelForCausalLM.from_pretrained(tiny_policy, dtype=torch.float32).named_parameters())
    assert all(torch.equal(w, checkpoint[n]) for n, w in before.items())  # fp32 master resumes losslessly
    start = time.perf_counter()
    stats = trainer.train_on(samples)
    print(f"\none DeepSpeed ZeRO-2 bf16 step on 4 samples: {time.perf_counter() - start:.3f} s ({stats})")
    assert stats.steps == 1
    assert stats.num_samples == 4 and stats.skipped_samples == 3
    assert stats.num_tokens == sum(len(s.completion_token_ids) for s in samples[:4])
    for value in (stats.loss, stats.grad_norm, stats.approx_kl, stats.clip_fraction):
        assert math.isfinite(value)
    assert stats.grad_norm > 0
    after = _master_weights(trainer)
    changed = [n for n in before if not torch.equal(before[n], after[n])]
    assert "model.embed_tokens.weight" in changed and len(changed) >= len(before) // 2


def test_all_equal_groups_take_no_step(trainer, tiny_policy):
    before = _master_weights(trainer)
    stats = trainer.train_on(_samples(tiny_policy, {"a": [0.0, 0.0], "b": [1.0, 1.0]}))
    assert (stats.steps, stats.num_samples, stats.skipped_samples, stats.num_tokens) == (0, 0, 4, 0)
    assert all(torch.equal(before[n], w) for n, w in _master_weights(trainer).items())


def test_save_reloads_with_same_weights_and_logits(trainer, tiny_policy, tmp_path):
    from transformers import AutoModelForCausalLM

    trainer.train_on(_samples(tiny_policy, {"g": [0.0, 1.0, 0.5, 0.0]}))
    out = trainer.save(tmp_path / "v1", metadata={"version": 1})
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert json.loads((out / POLICY_META).read_text())["version"] == 1

    master = _master_weights(trainer)
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    for name, param in reloaded.named_parameters():
        assert torch.equal(param.detach(), master[name]), name

    ids = torch.tensor([trainer.tokenizer("# Write a function add_2(x) that returns x plus 2.\n").input_ids])
    served = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).eval()  # bf16, as vLLM serves it
    trainer.engine.eval()
    with torch.no_grad():
        live = trainer.engine(input_ids=ids).logits
        again = served(input_ids=ids).logits
    assert torch.equal(live, again)  # the engine's bf16 weights are the rounded fp32 master weights


def test_a_loss_registered_in_a_test_trains_by_name(tiny_policy):
    cfg = TrainConfig(micro_batch_size=8, learning_rate=1e-3, policy_loss="reinforce",
                      loss_aggregation="seq_mean_token_mean")
    trainer = PolicyTrainer(tiny_policy, cfg)
    try:
        before = _master_weights(trainer)
        stats = trainer.train_on(_samples(tiny_policy, {"g": [1.0, 0.0, 1.0, 0.0]}))
        after = _master_weights(trainer)
    finally:
        trainer.close()
    assert (stats.steps, stats.num_samples) == (1, 4) and math.isfinite(stats.loss) and stats.grad_norm > 0
    assert math.isnan(stats.clip_fraction) and math.isnan(stats.approx_kl)  # stats this loss does not report
    assert not torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])
