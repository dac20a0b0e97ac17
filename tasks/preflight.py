"""Flyte task: before a local run starts, check that its update fits in memory beside the live vLLM engines.

A local ``pyflyte run`` keeps its engines alive through every stage, so the first update, minutes into the run
(after admission and the first rollout), must fit beside them. ``check_memory`` adds the update's floor (weights,
gradients, optimizer state: ``posttrain.memory.update_memory_mb``) to each engine's (weights and KV cache:
``engine_memory_mb``) and fails at once, naming the need and what to change, when the machine (or the container it
runs in) has less left. Activations and runtimes come on top, so passing is necessary, not sufficient; the update
checks again when it loads. On a cluster every stage is a pod of its own and the update's pod checks itself; on
GPUs the models live in GPU memory: no check here.

Example (a 0.5B checkpoint in bf16, two CPU engines with 1 GiB of KV cache each; GiB):
    >>> round(run_memory_mb(494_032_768, lora=False, bf16=True, engines=2, engine_bf16=True, kv_cache_gib=1) / 1024, 1)
    13.0
    >>> round(run_memory_mb(494_032_768, lora=True, bf16=True, engines=2, engine_bf16=True, kv_cache_gib=1) / 1024, 1)
    8.4
"""

from __future__ import annotations

import logging
import os

from flytekit import FlyteContextManager, task

from posttrain import memory, precision
from posttrain.config import LoopConfig
from posttrain.training.checkpoints import stored_parameters
from tasks.policy import PolicyDir
from tasks.resources import stage

log = logging.getLogger(__name__)


@task(**stage("policy"))
def check_memory(policy: PolicyDir, cfg: LoopConfig) -> None:
    """Raise ``NotEnoughMemory`` before a local CPU run starts when its update cannot fit beside its engines."""
    if not FlyteContextManager.current_context().execution_state.is_local_execution():
        return
    import torch

    if torch.cuda.is_available():
        return
    from posttrain.rollout.engine import replica_cpus

    policy_dir = policy.download()
    parameters = stored_parameters(policy_dir)
    engines = len(replica_cpus(cfg.rollout.replicas))
    bf16 = precision.here(cfg.train.precision).precision == "bf16"
    kv_cache_gib = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))  # what the engine sets when unset
    need = run_memory_mb(parameters, bool(cfg.train.lora_rank), bf16, engines,
                         precision.engine_dtype(cfg.rollout.dtype) == "bfloat16", kv_cache_gib)
    kind = f"LoRA rank {cfg.train.lora_rank}" if cfg.train.lora_rank else "full fine-tune"
    available = memory.available_mb()
    memory.check_fits(
        need, available,
        f"this run ({cfg.policy}: {parameters / 1e6:.0f}M parameters; the update, {kind}, "
        f"{'bf16' if bf16 else 'fp32'}, beside {engines} vLLM engine(s) with {kv_cache_gib:g} GiB of KV cache each, "
        "which stay alive through it; before activations)",
        "train.lora_rank > 0 keeps only the frozen weights and a small adapter's optimizer; rollout.replicas 1 runs "
        "one engine; or free memory, or a machine with more")
    log.info("memory check: the run needs at least %.1f GiB, %.1f GiB available", need / 1024, available / 1024)


def run_memory_mb(parameters: int, lora: bool, bf16: bool, engines: int, engine_bf16: bool,
                  kv_cache_gib: float) -> float:
    """MB a local run holds at least while it updates: the update's floor (``lora``: only the frozen weights, no
    optimizer state counted; ``bf16``: the update's precision) plus ``engines`` engines' (``engine_bf16``: theirs)."""
    return (memory.update_memory_mb(parameters, 0 if lora else parameters, bf16)
            + engines * memory.engine_memory_mb(parameters, engine_bf16, kv_cache_gib))
