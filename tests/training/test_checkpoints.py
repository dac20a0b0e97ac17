"""Training state is carried, not rebuilt: each ZeRO stage (0-3) trains, saves its state beside the HF weights, and
an update resumed from that version continues the optimizer bitwise (Adam moments, step count, LR warmup, RNG).

An update resumed from v1 must end exactly where one trainer running both updates in one process ends.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

from posttrain.config import TrainConfig
from posttrain.training.checkpoints import STATE_META, TRAIN_STATE, load_train_state, read_state_meta
from posttrain.training.samples import TrainSample

LR, WARMUP = 1e-3, 4


def _samples(seed: int) -> list[TrainSample]:
    """Eight token sequences of varied lengths in two reward groups (every advantage nonzero)."""
    gen = torch.Generator().manual_seed(seed)
    samples = []
    for i in range(8):
        prompt = [1] + torch.randint(3, 300, (3 + i % 3,), generator=gen).tolist()
        completion = torch.randint(3, 300, (2 + i % 4,), generator=gen).tolist()
        samples.append(TrainSample(prompt, completion, [-6.0] * len(completion), (-1.0) ** i, f"g{i // 4}"))
    return samples


def _optimizer_state(trainer) -> dict:
    """Everything an optimizer run continues from, cloned: the torch optimizer's params (the fp32 master copy under
    bf16 / ZeRO) and per-param state, its LR, DeepSpeed's and the scheduler's step counts, shuffle seed, torch RNG."""
    engine = trainer.engine
    inner = getattr(engine.optimizer, "optimizer", engine.optimizer)  # the torch AdamW under any ZeRO wrapper
    params = [p for group in inner.param_groups for p in group["params"]] or \
        engine.optimizer.fp32_partitioned_groups_flat  # ZeRO-3 hands its flat fp32 groups to AdamW only to step
    return {"params": [p.detach().clone() for p in params],
            "state": [{k: v.clone() for k, v in inner.state[p].items()} for p in params],
            "lr": [group["lr"] for group in inner.param_groups],
            "global_steps": engine.global_steps, "scheduler_step": engine.lr_scheduler.last_epoch,
            "epoch_seed": trainer._epoch_seed, "rng": torch.get_rng_state()}


def _assert_same(a: dict, b: dict) -> None:
    assert len(a["params"]) == len(b["params"]) > 0
    assert all(torch.equal(x, y) for x, y in zip(a["params"], b["params"]))
    for x, y in zip(a["state"], b["state"]):
        assert x.keys() == y.keys() == {"step", "exp_avg", "exp_avg_sq"}
        assert all(torch.equal(x[k], y[k]) for k in x)
    assert {k: v for k, v in a.items() if k not in ("params", "state", "rng")} == \
        {k: v for k, v in b.items() if k not in ("params", "state", "rng")}
    assert torch.equal(a["rng"], b["rng"])


@pytest.mark.integration
@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_an_update_resumed_from_a_saved_version_continues_the_optimizer_bitwise(tiny_policy, tmp_path, zero_stage):
    from transformers import AutoModelForCausalLM

    from posttrain.training.trainer import PolicyTrainer

    cfg = TrainConfig(micro_batch_size=4, learning_rate=LR, zero_stage=zero_stage, lr_warmup_steps=WARMUP)
    continuous = PolicyTrainer(tiny_policy, cfg)  # v0 carries no state: a fresh optimizer
    try:
        assert continuous.engine.global_steps == 0
        assert continuous.engine.get_lr() == [LR / WARMUP]
        continuous.train_on(_samples(0))  # 2 micro batches: 2 optimizer steps
        saved = _optimizer_state(continuous)
        v1 = continuous.save(tmp_path / "v1", metadata={"version": 1})
        continuous.train_on(_samples(1))
        both = continuous.master_weights()
        lr_after_both = continuous.engine.get_lr()
    finally:
        continuous.close()
    exported = AutoModelForCausalLM.from_pretrained(v1, dtype=torch.float32).state_dict()
    assert saved["global_steps"] == 2
    assert saved["lr"] == [pytest.approx(3 * LR / WARMUP)]  # warmup step 3 is next

    resumed = PolicyTrainer(v1, cfg)
    try:
        restored = _optimizer_state(resumed)
        weights_v1 = resumed.master_weights()
        resumed.train_on(_samples(1))
        again = resumed.master_weights()
        lr_after_again = resumed.engine.get_lr()
    finally:
        resumed.close()
    _assert_same(saved, restored)
    assert all(torch.equal(w, exported[n]) for n, w in weights_v1.items())  # the HF export is the master copy
    assert all(torch.equal(w, both[n]) for n, w in again.items())  # save + resume == one uninterrupted trainer
    assert lr_after_again == lr_after_both == [LR]  # the warmup continued past its 4 steps instead of restarting


@pytest.mark.integration
def test_without_carry_no_state_is_written_or_read(tiny_policy, tmp_path):
    from posttrain.training.trainer import PolicyTrainer

    trainer = PolicyTrainer(tiny_policy, TrainConfig(micro_batch_size=4, carry_train_state=False))
    try:
        out = trainer.save(tmp_path / "v1")
    finally:
        trainer.close()
    assert (out / "model.safetensors").is_file()
    assert not (out / TRAIN_STATE).exists()


def _version_with_state(tmp_path, **saved) -> str:
    d = tmp_path / "v1"
    (d / TRAIN_STATE).mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"weights")
    (d / TRAIN_STATE / STATE_META).write_text(json.dumps(saved))
    return str(d)


@pytest.mark.unit
def test_state_saved_under_other_settings_or_for_other_weights_is_not_restored(tmp_path, caplog):
    from posttrain.training.checkpoints import weights_digest

    d = _version_with_state(tmp_path, zero_stage=2, learning_rate=1e-4, weights_sha256="not these weights")
    caplog.set_level(logging.INFO, logger="posttrain.training.checkpoints")
    assert load_train_state(None, d, {"zero_stage": 2, "learning_rate": 1e-3}) is None  # the engine is not touched
    assert "learning_rate: saved 0.0001, now 0.001" in caplog.text
    assert "weights_sha256: saved not these" in caplog.text
    assert weights_digest(d) != "not these weights"
    assert read_state_meta(d)["zero_stage"] == 2

    caplog.clear()
    assert load_train_state(None, tmp_path, {"zero_stage": 2}) is None
    assert "carries no training state: fresh optimizer" in caplog.text
