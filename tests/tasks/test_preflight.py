"""A local run that cannot fit its update beside its engines fails before it starts, saying what to change."""

from __future__ import annotations

import pytest
from flytekit.types.directory import FlyteDirectory

from posttrain import memory
from posttrain.config import LoopConfig, TrainConfig
from tasks.preflight import check_memory, run_memory_mb


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
