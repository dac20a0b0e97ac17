"""A real DeepSpeed (ZeRO-2, bf16, CPU) update of the tiny policy: one step, weights move, save reloads exactly.

Also the algorithm seam end to end: a loss variant registered in this test only trains when ``TrainConfig`` names it,
and the built-in family (RLOO, GSPO, KL to a frozen reference, entropy bonus, truncated IS) trains by name.
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


def _samples(policy_dir, rewards_by_group: dict[str, list[float]], estimator: str = "grpo",
             behavior_shift: float = 0.0, temperature: float = 1.0,
             labelled: float | None = None) -> list[TrainSample]:
    """Completions = the references of train envs, behavior log-probs from the fp32 HF model (on-policy-ish) at
    ``temperature`` plus ``behavior_shift`` (a sampler whose numerics disagree with the trainer's); the samples say
    they were drawn at ``labelled`` (default: ``temperature``).

    Advantages: the named estimator over the given rewards, as the update stage computes them.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(policy_dir)
    model = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    envs = [e for e in load_suite(DEMO_SUITE).envs if e.split == "train"]
    rewards = [r for group in rewards_by_group.values() for r in group]
    group_ids = [gid for gid, group in rewards_by_group.items() for _ in group]
    advantages = get_advantage_estimator(estimator)(rewards, group_ids, TrainConfig()).tolist()
    samples = []
    for g, (gid, group) in enumerate(rewards_by_group.items()):
        for i in range(len(group)):
            env = envs[(3 * g + i) % len(envs)]
            prompt = tok(env.prompt).input_ids
            completion = tok(env.reference, add_special_tokens=False).input_ids + [tok.eos_token_id]
            ids = torch.tensor([prompt + completion])
            with torch.no_grad():
                logits = model(input_ids=ids).logits[:, :-1] / temperature
                lp = token_logprobs(logits, ids[:, 1:])[0, len(prompt) - 1 :]
            behavior = (lp + behavior_shift).tolist()
            samples.append(TrainSample(prompt, completion, behavior, advantages[len(samples)], gid,
                                       temperature=temperature if labelled is None else labelled))
    return samples


@pytest.fixture(scope="module")
def trainer(tiny_policy):
    t = PolicyTrainer(tiny_policy, TrainConfig(micro_batch_size=8, learning_rate=1e-3, zero_stage=2, precision="bf16"))
    yield t
    t.close()


def test_one_step_changes_weights_and_reports(trainer, tiny_policy):
    samples = _samples(tiny_policy, {"g0": [1.0, 0.0, 1.0, 0.0], "flat": [1.0, 1.0, 1.0]})
    from transformers import AutoModelForCausalLM

    before = trainer.master_weights()
    checkpoint = dict(AutoModelForCausalLM.from_pretrained(tiny_policy, dtype=torch.float32).named_parameters())
    assert all(torch.equal(w, checkpoint[n]) for n, w in before.items())  # fp32 master resumes losslessly
    start = time.perf_counter()
    stats = trainer.train_on(samples)
    print(f"\none DeepSpeed ZeRO-2 bf16 step on 4 samples: {time.perf_counter() - start:.3f} s ({stats})")
    assert stats.steps == 1
    assert stats.num_samples == 4
    assert stats.skipped_samples == 3
    assert stats.num_tokens == sum(len(s.completion_token_ids) for s in samples[:4])
    for value in (stats.loss, stats.grad_norm, stats.approx_kl, stats.clip_fraction):
        assert math.isfinite(value)
    assert stats.grad_norm > 0
    assert stats.entropy > 0
    assert 0 < stats.behavior_kl < 1e-2  # bf16 trainer vs the fp32 "sampler": a small gap
    assert trainer.reference is None
    assert math.isnan(stats.kl)  # kl_coef 0: no reference model, no KL
    after = trainer.master_weights()
    changed = [n for n in before if not torch.equal(before[n], after[n])]
    assert "model.embed_tokens.weight" in changed
    assert len(changed) >= len(before) // 2


def test_all_equal_groups_take_no_step(trainer, tiny_policy):
    before = trainer.master_weights()
    stats = trainer.train_on(_samples(tiny_policy, {"a": [0.0, 0.0], "b": [1.0, 1.0]}))
    assert (stats.steps, stats.num_samples, stats.skipped_samples, stats.num_tokens) == (0, 0, 4, 0)
    assert all(torch.equal(before[n], w) for n, w in trainer.master_weights().items())


def test_save_reloads_with_same_weights_and_logits(trainer, tiny_policy, tmp_path):
    from transformers import AutoModelForCausalLM

    trainer.train_on(_samples(tiny_policy, {"g": [0.0, 1.0, 0.5, 0.0]}))
    out = trainer.save(tmp_path / "v1", metadata={"version": 1})
    assert (out / "model.safetensors").is_file()
    assert (out / "tokenizer.json").is_file()
    assert json.loads((out / POLICY_META).read_text())["version"] == 1

    master = trainer.master_weights()
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
        before = trainer.master_weights()
        stats = trainer.train_on(_samples(tiny_policy, {"g": [1.0, 0.0, 1.0, 0.0]}))
        after = trainer.master_weights()
    finally:
        trainer.close()
    assert (stats.steps, stats.num_samples) == (1, 4)
    assert math.isfinite(stats.loss)
    assert stats.grad_norm > 0
    assert math.isnan(stats.clip_fraction)
    assert math.isnan(stats.approx_kl)  # stats this loss does not report
    assert not torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])


def test_the_algorithm_family_trains_by_name_and_the_reference_stays_frozen(tiny_policy):
    cfg = TrainConfig(micro_batch_size=8, learning_rate=1e-3, epochs=2, advantage_estimator="rloo", policy_loss="gspo",
                      clip_eps_low=3e-4, clip_eps_high=4e-4, loss_aggregation="seq_mean_token_mean",
                      kl_coef=0.1, kl_estimator="k3", entropy_coef=0.01, tis_cap=2.0)
    trainer = PolicyTrainer(tiny_policy, cfg, reference_dir=tiny_policy)
    try:
        reference = dict(trainer.reference.named_parameters())
        frozen = {name: param.detach().clone() for name, param in reference.items()}
        before = trainer.master_weights()
        # a sampler whose numerics disagree with the trainer's (an fp32 trainer matches the fp32 HF model exactly)
        samples = _samples(tiny_policy, {"g": [1.0, 0.0, 1.0, 0.0]}, estimator="rloo", behavior_shift=-0.05)
        stats = trainer.train_on(samples)
        after = trainer.master_weights()
    finally:
        trainer.close()
    assert (stats.steps, stats.num_samples) == (2, 8)  # 2 epochs of one micro batch
    for name in ("loss", "grad_norm", "clip_fraction", "approx_kl", "entropy", "kl", "behavior_kl"):
        assert math.isfinite(getattr(stats, name)), name
    assert stats.entropy > 0
    assert stats.kl > 0
    assert stats.behavior_kl > 0  # kl: the second step has moved away
    assert not torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])
    assert all(not param.requires_grad for param in reference.values())
    precision = torch.bfloat16 if stats.bf16 else torch.float32  # the trainer's (posttrain.precision: the host's)
    assert all(param.dtype == precision for param in reference.values())
    assert all(torch.equal(param.detach(), frozen[name]) for name, param in reference.items())


@pytest.mark.parametrize("tis_cap", [0.0, 2.0])
def test_truncated_is_takes_the_ratio_against_the_trainer_not_the_sampler(tiny_policy, tis_cap):
    """vLLM's log-probs 0.5 below the trainer's: PPO's ratio is e^0.5 against them, ~1 against the trainer's own."""
    trainer = PolicyTrainer(tiny_policy, TrainConfig(micro_batch_size=8, learning_rate=1e-3, tis_cap=tis_cap))
    try:
        stats = trainer.train_on(_samples(tiny_policy, {"g": [1.0, 0.0, 1.0, 0.0]}, behavior_shift=-0.5))
    finally:
        trainer.close()
    k3 = math.exp(0.5) - 1 - 0.5
    assert stats.behavior_kl == pytest.approx(k3, rel=0.05)  # measured either way
    assert stats.approx_kl == (pytest.approx(0.0, abs=1e-3) if tis_cap else pytest.approx(k3, rel=0.05))
    assert stats.clip_fraction == 0.0 if tis_cap else stats.clip_fraction > 0  # without: A > 0 tokens clip at 1.2


def test_the_trainer_scores_each_sample_at_its_sampling_temperature(tiny_policy):
    """Samples drawn at 0.5 carry the tempered log-probs (vLLM's processed ones): the trainer divides its logits by
    the sample's temperature, so the ratio starts at 1; scored raw (a sample claiming 1.0) the same tokens would be
    far off-policy and clip."""
    trainer = PolicyTrainer(tiny_policy, TrainConfig(micro_batch_size=8, learning_rate=1e-3, precision="fp32"))
    try:
        tempered = trainer.train_on(_samples(tiny_policy, {"g": [1.0, 0.0, 1.0, 0.0]}, temperature=0.5))
    finally:
        trainer.close()
    trainer = PolicyTrainer(tiny_policy, TrainConfig(micro_batch_size=8, learning_rate=1e-3, precision="fp32"))
    try:
        raw = trainer.train_on(_samples(tiny_policy, {"g": [1.0, 0.0, 1.0, 0.0]}, temperature=0.5, labelled=1.0))
    finally:
        trainer.close()
    assert tempered.behavior_kl < 1e-6
    assert tempered.approx_kl < 1e-6
    assert tempered.clip_fraction == 0.0
    assert raw.behavior_kl > 1e-2
    assert raw.clip_fraction > 0


def test_min_steps_splits_few_learnable_samples_into_that_many_optimizer_steps(tiny_policy):
    """8 learnable samples fit one micro batch of 32 (one step); ``min_steps=4`` makes 4 steps of 2, every sample
    trained once."""
    samples = _samples(tiny_policy, {"a": [1.0, 0.0, 1.0, 0.0], "b": [0.0, 1.0, 0.0, 1.0]})
    stats = {}
    for min_steps in (0, 4):
        trainer = PolicyTrainer(tiny_policy, TrainConfig(learning_rate=1e-3, precision="fp32", min_steps=min_steps))
        try:
            stats[min_steps] = trainer.train_on(samples)
        finally:
            trainer.close()
    assert (stats[0].steps, stats[4].steps) == (1, 4)
    assert stats[0].num_tokens == stats[4].num_tokens == sum(len(s.completion_token_ids) for s in samples)


def test_an_update_that_cannot_fit_fails_before_loading_and_says_what_to_change(tiny_policy, monkeypatch):
    from posttrain import memory

    monkeypatch.setattr(memory, "available_mb", lambda: 1.0)  # a machine with 1 MB left
    with pytest.raises(memory.NotEnoughMemory, match=r"the update of .* needs ~.* GiB, 0\.0 GiB available: "
                                                     r"train\.lora_rank > 0"):
        PolicyTrainer(tiny_policy, TrainConfig(precision="fp32"))


def test_a_kl_penalty_without_a_reference_fails_before_loading():
    with pytest.raises(ValueError, match="kl_coef > 0 needs reference_dir"):
        PolicyTrainer("/no/such/policy", TrainConfig(kl_coef=0.1))




def _one_update(policy_dir, samples, **cfg) -> tuple:
    """One ``train_on`` from ``policy_dir`` (fp32 unless ``cfg`` says otherwise): its stats, whether activations
    were checkpointed, and the gradient of each optimizer step as AdamW receives it (accumulated, flat under ZeRO)."""
    trainer = PolicyTrainer(policy_dir, TrainConfig(**{"learning_rate": 1e-3, "precision": "fp32", **cfg}))
    grads = []
    trainer.engine.basic_optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: grads.append(torch.cat([p.grad.flatten() for g in opt.param_groups
                                                          for p in g["params"]])))
    try:
        return trainer.train_on(samples), trainer.engine.module.is_gradient_checkpointing, grads
    finally:
        trainer.close()


def test_accumulated_micro_batches_make_the_step_of_one_double_batch(tiny_policy):
    """2 micro batches x accumulation 2 == 1 micro batch of 8 (fp32): the token mean over all 8 sequences'
    tokens, not the mean of two micro batches' token means (their token counts differ)."""
    samples = _samples(tiny_policy, {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [1.0, 0.5], "d": [0.0, 1.0]})
    order = torch.randperm(8, generator=torch.Generator().manual_seed(TrainConfig().seed)).tolist()  # epoch 1's
    halves = [sum(len(samples[i].completion_token_ids) for i in half) for half in (order[:4], order[4:])]
    assert halves[0] != halves[1]  # so a mean of the micro batches' token means would differ
    one, _, [single] = _one_update(tiny_policy, samples, micro_batch_size=8)
    acc, _, [accumulated] = _one_update(tiny_policy, samples, micro_batch_size=4, grad_accum_steps=2)
    assert one.steps == acc.steps == 1
    assert one.num_tokens == acc.num_tokens
    assert acc.loss == pytest.approx(one.loss, rel=1e-5)
    assert acc.grad_norm == pytest.approx(one.grad_norm, rel=1e-5)
    torch.testing.assert_close(accumulated, single, rtol=1e-4, atol=1e-7)
    assert float(single.norm()) == pytest.approx(one.grad_norm, rel=1e-3)  # the hook saw the whole gradient

    uneven = samples + _samples(tiny_policy, {"e": [1.0, 0.0, 0.0, 0.0]})  # 3 micro batches: steps of 2 and 1
    assert _one_update(tiny_policy, uneven, micro_batch_size=4, grad_accum_steps=2)[0].steps == 2


def test_a_token_budget_cuts_micro_batches_by_length_and_accumulation_keeps_the_step(tiny_policy):
    """``micro_batch_tokens``: 8 sequences that fit one micro batch of 8 by count are cut by their padded tokens; with
    accumulation over all of them the optimizer step is the one of the single batch."""
    samples = _samples(tiny_policy, {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [1.0, 0.5], "d": [0.0, 1.0]})
    longest = max(len(s.prompt_token_ids) + len(s.completion_token_ids) for s in samples)
    one, _, [single] = _one_update(tiny_policy, samples, micro_batch_size=8)
    budget = 2 * longest  # at most 2 sequences a micro batch, whatever their order: 4 or more micro batches
    cut, _, grads = _one_update(tiny_policy, samples, micro_batch_size=8, micro_batch_tokens=budget,
                                grad_accum_steps=8)
    assert one.steps == cut.steps == 1
    assert one.num_tokens == cut.num_tokens
    torch.testing.assert_close(grads[0], single, rtol=1e-4, atol=1e-7)
    per_step, _, _ = _one_update(tiny_policy, samples, micro_batch_size=8, micro_batch_tokens=budget)
    assert 4 <= per_step.steps <= 8  # one optimizer step per micro batch


def test_gradient_checkpointing_recomputes_the_same_step(tiny_policy):
    samples = _samples(tiny_policy, {"a": [1.0, 0.0, 1.0, 0.0]})
    plain, off, [plain_grad] = _one_update(tiny_policy, samples, micro_batch_size=4)
    checkpointed, on, [grad] = _one_update(tiny_policy, samples, micro_batch_size=4, gradient_checkpointing=True)
    assert (off, on) == (False, True)
    assert checkpointed.steps == plain.steps == 1
    assert checkpointed.loss == pytest.approx(plain.loss, rel=1e-6)
    torch.testing.assert_close(grad, plain_grad, rtol=1e-5, atol=1e-8)


def test_masked_completion_tokens_are_not_trained(tiny_policy):
    """An agent window's observation tokens (loss mask 0) after the model's tokens change nothing: the step equals
    the step on the model tokens alone (causal attention: later tokens cannot move earlier logits), while the same
    tokens unmasked would be trained."""
    samples = _samples(tiny_policy, {"a": [1.0, 0.0, 1.0, 0.0]})
    observation = [5, 6, 7, 8, 9]
    windows = [TrainSample(s.prompt_token_ids, s.completion_token_ids + observation,
                           s.behavior_logprobs + [0.0] * len(observation), s.advantage, s.group_id,
                           loss_mask=[1] * len(s.completion_token_ids) + [0] * len(observation)) for s in samples]
    plain, _, [plain_grad] = _one_update(tiny_policy, samples, micro_batch_size=4)
    masked, _, [masked_grad] = _one_update(tiny_policy, windows, micro_batch_size=4)
    assert masked.num_tokens == plain.num_tokens == sum(len(s.completion_token_ids) for s in samples)
    assert masked.loss == pytest.approx(plain.loss, rel=1e-6)
    # equal up to fp32 reassociation: the longer windows change the matmul shapes, so the sums run in another order
    torch.testing.assert_close(masked_grad, plain_grad, rtol=1e-5, atol=1e-7)

    unmasked = [TrainSample(w.prompt_token_ids, w.completion_token_ids, w.behavior_logprobs, w.advantage, w.group_id)
                for w in windows]
    assert _one_update(tiny_policy, unmasked, micro_batch_size=4)[0].num_tokens == plain.num_tokens + 4 * 5


def test_a_checkpoint_without_a_pad_token_pads_with_its_eos(family_policy):
    """Llama 3 and Mistral tokenizers have no pad token: a batch of samples of different lengths is padded with EOS
    (masked out), and the step trains."""
    from transformers import AutoTokenizer

    policy = family_policy("llama3")
    tokenizer = AutoTokenizer.from_pretrained(policy)
    assert tokenizer.pad_token_id is None
    samples = _samples(policy, {"g0": [1.0, 0.0, 1.0, 0.0]})
    assert len({len(s.prompt_token_ids) + len(s.completion_token_ids) for s in samples}) > 1  # padding needed
    trainer = PolicyTrainer(policy, TrainConfig(micro_batch_size=8, learning_rate=1e-3, precision="fp32"))
    try:
        assert trainer.pad_id == tokenizer.eos_token_id
        stats = trainer.train_on(samples)
    finally:
        trainer.close()
    assert (stats.steps, stats.num_samples) == (1, 4)
    assert math.isfinite(stats.loss)
    assert stats.grad_norm > 0
    assert stats.behavior_kl < 1e-4  # fp32 on both sides: the padded batch scores the samples' own tokens
