"""Flyte task: before a local run starts, check that its update fits in memory beside the live vLLM engines.

A local ``pyflyte run`` keeps its engines alive through every stage, so the first update, minutes into the run
(after admission and the first rollout), must fit beside them. ``check_memory`` adds the update's floor (weights,
gradients, optimizer state: ``posttrain.memory.update_memory_mb``) to each engine's (weights and KV cache:
``engine_memory_mb``) and fails at once, naming the need and what to change, when the machine (or the container it
runs in) has less left. Activations and runtimes come on top, so passing is necessary, not sufficient; the update
checks again when it loads. On a cluster every stage is a pod of its own and the update's pod checks itself.
On a GPU the engines and the update share the GPU's memory instead: each engine takes
``rollout.gpu_memory_utilization`` of it at start, and the update's floor must fit in what they leave (``gpu_room_mb``).

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

    from posttrain.rollout.engine import replica_cpus

    policy_dir = policy.download()
    parameters = stored_parameters(policy_dir)
    engines = len(replica_cpus(cfg.rollout.replicas))
    bf16 = precision.here(cfg.train.precision).precision == "bf16"
    if torch.cuda.is_available():
        check_gpu_memory(cfg, parameters, engines, bf16, torch.cuda.get_device_properties(0).total_memory / 2**20)
        return
    kv_cache_gib = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))  # what the engine sets when unset
    need = run_memory_mb(parameters, bool(cfg.train.lora_rank), bf16, engines,
                         precision.engine_dtype(cfg.rollout.dtype) == "bfloat16", kv_cache_gib)
    kind = memory.update_kind(cfg.train.lora_rank)
    available = memory.available_mb()
    memory.check_fits(
        need, available,
        f"this run ({cfg.policy}: {parameters / 1e6:.0f}M parameters; the update, {kind}, "
        f"{'bf16' if bf16 else 'fp32'}, beside {engines} vLLM engine(s) with {kv_cache_gib:g} GiB of KV cache each, "
        "which stay alive through it; before activations)",
        "train.lora_rank > 0 keeps only the frozen weights and a small adapter's optimizer; rollout.replicas 1 runs "
        "one engine; or free memory, or a machine with more")
    log.info("memory check: the run needs at least %.1f GiB, %.1f GiB available", need / 1024, available / 1024)


def check_gpu_memory(cfg: LoopConfig, parameters: int, engines: int, bf16: bool, total_mb: float) -> None:
    """Raise ``NotEnoughMemory`` when the update's floor does not fit in the GPU memory its engines leave."""
    share = cfg.rollout.gpu_memory_utilization
    trainable = 0 if cfg.train.lora_rank else parameters
    need, room = memory.update_memory_mb(parameters, trainable, bf16), gpu_room_mb(total_mb, engines, share)
    memory.check_fits(
        need, room,
        f"the update of {cfg.policy} ({parameters / 1e6:.0f}M parameters, "
        f"{memory.update_kind(cfg.train.lora_rank)}) on a GPU of "
        f"{total_mb / 1024:.0f} GiB where {engines} vLLM engine(s) take {share:g} of it each "
        "(rollout.gpu_memory_utilization; before activations)",
        "a lower rollout.gpu_memory_utilization leaves the update more (the engine needs its weights and some KV "
        "cache); train.lora_rank > 0 trains a small adapter; or a GPU with more memory")
    log.info("GPU memory check: the update needs at least %.1f GiB, its engines leave %.1f GiB", need / 1024,
             room / 1024)


def gpu_room_mb(total_mb: float, engines: int, share: float) -> float:
    """MB of a GPU of ``total_mb`` left to the update when ``engines`` engines each took ``share`` of it.

    >>> gpu_room_mb(81_920, engines=1, share=0.4), gpu_room_mb(81_920, engines=3, share=0.4)
    (49152.0, 0.0)
    """
    return total_mb * max(0.0, 1.0 - engines * share)


def run_memory_mb(parameters: int, lora: bool, bf16: bool, engines: int, engine_bf16: bool,
                  kv_cache_gib: float) -> float:
    """MB a local run holds at least while it updates: the update's floor (``lora``: only the frozen weights, no
    optimizer state counted; ``bf16``: the update's precision) plus ``engines`` engines' (``engine_bf16``: theirs)."""
    return (memory.update_memory_mb(parameters, 0 if lora else parameters, bf16)
            + engines * memory.engine_memory_mb(parameters, engine_bf16, kv_cache_gib))
