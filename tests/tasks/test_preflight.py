"""A local run that cannot fit its update beside its engines fails before it starts, saying what to change."""

from __future__ import annotations

import pytest
from flytekit.types.directory import FlyteDirectory

from posttrain import memory
from posttrain.config import LoopConfig, RolloutConfig, TrainConfig
from tasks.preflight import check_gpu_memory, check_memory, gpu_room_mb, run_memory_mb


@pytest.mark.unit
def test_the_run_needs_the_update_floor_plus_each_engines_weights_and_kv_cache():
    update = memory.update_memory_mb(1_000_000_000, 1_000_000_000, bf16=True)
    one = run_memory_mb(1_000_000_000, lora=False, bf16=True, engines=1, engine_bf16=True, kv_cache_gib=1)
    two = run_memory_mb(1_000_000_000, lora=False, bf16=True, engines=2, engine_bf16=True, kv_cache_gib=1)
    engine = 2e9 / 2**20 + 1024  # bf16 weights + 1 GiB of KV cache
    assert one == pytest.approx(update + engine)
    assert two == pytest.approx(update + 2 * engine)
    assert run_memory_mb(10**9, lora=False, bf16=True, engines=1, engine_bf16=False, kv_cache_gib=1) == \
        pytest.approx(update + 4e9 / 2**20 + 1024)
    lora = run_memory_mb(10**9, lora=True, bf16=True, engines=1, engine_bf16=True, kv_cache_gib=1)
    assert lora == pytest.approx(memory.update_memory_mb(10**9, 0, bf16=True) + engine)  # no optimizer state counted


@pytest.mark.integration
def test_a_run_that_cannot_fit_fails_at_its_start_naming_what_it_needs(tiny_policy, monkeypatch):
    cfg = LoopConfig(policy=str(tiny_policy))
    check_memory(policy=FlyteDirectory(str(tiny_policy)), cfg=cfg)  # a tiny model fits anywhere
    monkeypatch.setattr(memory, "available_mb", lambda: 100.0)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    with pytest.raises(Exception, match=r"this run \(.*: 1M parameters; the update, full fine-tune, .* beside \d "
                                        r"vLLM engine\(s\) with 1 GiB of KV cache each.*needs ~\d+\.\d GiB, 0\.1 GiB "
                                        r"available: train.lora_rank > 0") as raised:
        check_memory(policy=FlyteDirectory(str(tiny_policy)), cfg=cfg)
    assert isinstance(raised.value, memory.NotEnoughMemory) or "NotEnoughMemory" in repr(raised.value)
    lora = LoopConfig(policy=str(tiny_policy), train=TrainConfig(lora_rank=4))
    with pytest.raises(Exception, match=r"the update, LoRA rank 4"):
        check_memory(policy=FlyteDirectory(str(tiny_policy)), cfg=lora)


@pytest.mark.unit
def test_on_a_gpu_the_update_must_fit_in_what_the_engines_shares_leave():
    gpu_mb = 80 * 1024
    assert gpu_room_mb(gpu_mb, engines=1, share=0.4) == pytest.approx(0.6 * gpu_mb)
    assert gpu_room_mb(gpu_mb, engines=3, share=0.4) == 0.0
    one_b = 1_000_000_000  # a bf16 full fine-tune's floor: ~18.6 GiB
    check_gpu_memory(LoopConfig(), one_b, engines=1, bf16=True, total_mb=gpu_mb)  # 48 GiB left: fits
    greedy = LoopConfig(rollout=RolloutConfig(gpu_memory_utilization=0.9))
    with pytest.raises(memory.NotEnoughMemory, match=r"1000M parameters, full fine-tune\) on a GPU of 80 GiB where 1 "
                                                     r"vLLM engine\(s\) take 0.9 of it.*needs ~18.6 GiB, 8.0 GiB "
                                                     r"available: a lower rollout.gpu_memory_utilization"):
        check_gpu_memory(greedy, one_b, engines=1, bf16=True, total_mb=gpu_mb)
    lora = LoopConfig(rollout=RolloutConfig(gpu_memory_utilization=0.85), train=TrainConfig(lora_rank=16))
    check_gpu_memory(lora, one_b, engines=1, bf16=True, total_mb=gpu_mb)  # no optimizer state of the base: ~9.3 GiB
