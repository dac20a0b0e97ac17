"""LoRA updates through peft under a real DeepSpeed engine: only the adapter moves, the version's merged weights are
peft's own merge, a rebuilt trainer continues the adapter and its optimizer bit for bit, and vLLM serving the merged
version scores tokens as the trainer does."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from posttrain.config import RolloutConfig, TrainConfig
from posttrain.training import lora
from posttrain.training.checkpoints import ADAPTER, TRAIN_STATE, read_lora_meta, read_state_meta, weights_digest
from posttrain.training.logprobs import token_logprobs
from posttrain.training.samples import TrainSample
from posttrain.training.trainer import PolicyTrainer

pytestmark = pytest.mark.integration

pytest.importorskip("deepspeed")
pytest.importorskip("peft")

PROMPT = "# Write a function add_2(x) that returns x plus 2.\n"
LORA = dict(micro_batch_size=4, learning_rate=1e-2, lora_rank=4)


def _samples(tokenizer) -> list[TrainSample]:
    prompt = tokenizer(PROMPT).input_ids
    completions = [tokenizer(text, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
                   for text in ("def add_2(x):\n    return x + 2\n", "def add_2(x):\n    return x - 2\n")]
    return [TrainSample(prompt, c, [-1.0] * len(c), a, "g") for c, a in zip(completions, (1.0, -1.0))]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.fixture(scope="module")
def lora_v1(tiny_policy, tmp_path_factory):
    """v1 of a LoRA run on the tiny policy (bf16 update, ZeRO-2), the frozen and adapter parameters around its step,
    and v2 as the same live trainer wrote it next."""
    root = tmp_path_factory.mktemp("lora")
    trainer = PolicyTrainer(tiny_policy, TrainConfig(**LORA, zero_stage=2, precision="bf16"),
                            reference_dir=tiny_policy)
    try:
        params = dict(trainer.engine.module.named_parameters())
        before = {name: p.detach().clone() for name, p in params.items()}
        samples = _samples(trainer.tokenizer)
        stats = trainer.train_on(samples)
        after = {name: p.detach().clone() for name, p in params.items()}
        trainer.save(root / "v1", metadata={"version": 1})
        trainer.train_on(samples)
        trainer.save(root / "v2", metadata={"version": 2})
    finally:
        trainer.close()
    return {"v1": root / "v1", "v2": root / "v2", "before": before, "after": after, "stats": stats,
            "trainable": {name for name, p in params.items() if p.requires_grad}}


def test_a_lora_step_moves_the_adapter_and_nothing_else(lora_v1):
    trainable, before, after = lora_v1["trainable"], lora_v1["before"], lora_v1["after"]
    assert lora_v1["stats"].steps == 1
    assert trainable == {name for name in before if lora.is_adapter(name)}
    frozen_moved = [name for name in before if name not in trainable and not torch.equal(before[name], after[name])]
    assert frozen_moved == []
    # peft starts B at zero: the step moves every B; A moves where B's gradient reaches it (not in the first step)
    b_moved = [name for name in trainable if ".lora_B." in name and not torch.equal(before[name], after[name])]
    assert len(b_moved) == sum(".lora_B." in name for name in trainable)


def test_the_version_holds_the_merged_weights_peft_would_merge_and_a_small_state(lora_v1, tiny_policy):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    v1 = lora_v1["v1"]
    merged, base = _weights(v1), _weights(Path(tiny_policy))
    changed = {name for name in merged if not torch.equal(merged[name], base[name])}
    adapted = {name.removeprefix("base_model.model.").replace(".lora_B.default.weight", ".weight")
               for name in lora_v1["trainable"] if ".lora_B." in name}
    assert changed == adapted  # exactly the adapted layers' weights, embeddings and norms as they were

    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_policy, dtype=torch.float32),
                                           str(v1 / ADAPTER)).merge_and_unload()
    reference = peft_model.state_dict()
    assert max((reference[name] - merged[name]).abs().max().item() for name in merged) < 1e-6

    meta = read_lora_meta(v1)
    assert meta["base_sha256"] == weights_digest(tiny_policy)
    assert meta["settings"] == {"lora_rank": 4, "lora_alpha": 8, "lora_targets": "all-linear"}
    state_bytes = sum(p.stat().st_size for p in (v1 / TRAIN_STATE).rglob("*") if p.is_file())
    weight_bytes = (v1 / "model.safetensors").stat().st_size
    assert state_bytes < weight_bytes / 2  # the adapter's optimizer, not the model's (~7x its weights)


def test_a_rebuilt_trainer_continues_the_adapter_and_its_optimizer_bit_for_bit(lora_v1, tiny_policy, tmp_path):
    cfg = TrainConfig(**LORA, zero_stage=2, precision="bf16")
    trainer = PolicyTrainer(lora_v1["v1"], cfg, reference_dir=tiny_policy)
    try:
        assert trainer.base_dir == Path(tiny_policy)
        trainer.train_on(_samples(trainer.tokenizer))
        trainer.save(tmp_path / "v2", metadata={"version": 2})
    finally:
        trainer.close()
    live, rebuilt = _weights(lora_v1["v2"]), _weights(tmp_path / "v2")
    assert all(torch.equal(live[name], rebuilt[name]) for name in live)
    assert read_state_meta(tmp_path / "v2")["optimizer_steps"] == 2


@pytest.mark.parametrize("change", ["another rank", "no base given", "full fine-tune"])
def test_an_adapter_is_continued_only_on_its_own_base_and_settings(lora_v1, tiny_policy, change, caplog):
    cfg, reference = {"another rank": (TrainConfig(**{**LORA, "lora_rank": 8}), tiny_policy),
                      "no base given": (TrainConfig(**LORA), None),
                      "full fine-tune": (TrainConfig(micro_batch_size=4), tiny_policy)}[change]
    trainer = PolicyTrainer(lora_v1["v1"], cfg, reference_dir=reference)
    try:  # built on v1's merged weights, with a fresh adapter (or none) and a fresh optimizer
        assert trainer.base_dir == lora_v1["v1"]
        assert trainer.engine.global_steps == 0
        stats = trainer.train_on(_samples(trainer.tokenizer))
        assert stats.steps == 1
        assert math.isfinite(stats.loss)
    finally:
        trainer.close()


def test_the_training_state_of_a_tied_model_leaves_every_frozen_weight_out(family_policy, tmp_path):
    """Qwen2 ties its LM head to its embeddings: the frozen head is not in the state under either name."""
    qwen2 = family_policy("qwen2")
    trainer = PolicyTrainer(qwen2, TrainConfig(**LORA, precision="bf16"), reference_dir=qwen2)
    try:
        trainer.train_on(_samples(trainer.tokenizer))
        trainer.save(tmp_path / "v1", metadata={"version": 1})
        trainable = {name for name, p in trainer.engine.module.named_parameters() if p.requires_grad}
    finally:
        trainer.close()
    [states] = (tmp_path / "v1" / TRAIN_STATE).rglob("*model_states.pt")
    module = torch.load(states, map_location="cpu", weights_only=False)["module"]
    assert set(module) == trainable


def test_lora_with_gradient_checkpointing_takes_the_same_step(tiny_policy):
    """Recomputed activations (non-reentrant checkpointing: no gradient needed at the frozen embeddings) give the
    adapters the same step: the same loss and gradient norm."""
    stats = []
    for checkpointing in (False, True):
        trainer = PolicyTrainer(tiny_policy, TrainConfig(**LORA, precision="fp32",
                                                         gradient_checkpointing=checkpointing))
        try:
            stats.append(trainer.train_on(_samples(trainer.tokenizer)))
        finally:
            trainer.close()
    assert stats[1].loss == pytest.approx(stats[0].loss, rel=1e-5)
    assert stats[1].grad_norm == pytest.approx(stats[0].grad_norm, rel=1e-4)
    assert stats[0].grad_norm > 0


def test_vllm_serving_the_merged_version_scores_tokens_as_the_lora_trainer_does(tiny_policy, tmp_path):
    """fp32 on both sides: vLLM's log-probs of its own samples from v1's merged weights are the LoRA trainer's (base
    + adapter) log-probs of the same tokens."""
    from posttrain.rollout.engine import VLLMEngine

    cfg = TrainConfig(**LORA, precision="fp32")
    trainer = PolicyTrainer(tiny_policy, cfg, reference_dir=tiny_policy)
    try:
        trainer.train_on(_samples(trainer.tokenizer))
        v1 = trainer.save(tmp_path / "v1", metadata={"version": 1})
        # an engine of its own (fp32): the process's live engine, in the suite's default dtype, stays for other tests
        with VLLMEngine(str(v1), RolloutConfig(replicas=1, dtype="float32"), version=1) as engine:
            (request,) = engine.request_outputs([PROMPT], {"n": 4, "temperature": 1.0, "max_tokens": 24,
                                                            "logprobs": 0, "seed": 0})
        model = trainer.engine.module.eval()
        for sample in request.outputs:
            ids = list(sample.token_ids)
            vllm_lp = torch.tensor([step[t].logprob for step, t in zip(sample.logprobs, ids)])
            full = torch.tensor([request.prompt_token_ids + ids])
            with torch.no_grad():
                logits = model(input_ids=full).logits[:, :-1]
            trainer_lp = token_logprobs(logits, full[:, 1:])[0, len(request.prompt_token_ids) - 1:]
            assert (vllm_lp - trainer_lp).abs().max() < 1e-3, (vllm_lp, trainer_lp)
    finally:
        trainer.close()
