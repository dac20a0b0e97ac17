"""Typed configuration, one dataclass per stage, with defaults that work on a 2-core CPU machine.

Every size is a field here, never a constant in code. Flyte turns these dataclasses into typed workflow
inputs, so ``pyflyte run workflows/rl_loop.py rl_loop --cfg '{"iterations": 1}'`` overrides any field.

Example:
    >>> from posttrain.config import LoopConfig
    >>> cfg = LoopConfig(iterations=1)
    >>> cfg.rollout.samples_per_env, cfg.sandbox.backend
    (8, 'bwrap')
    >>> LoopConfig.smoke().iterations
    1
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEMO_SUITE = str(Path(__file__).resolve().parent / "envs" / "suites" / "demo_python")


def default_policy_dir() -> str:
    """Where the demo policy is built and cached (``POSTTRAIN_POLICY`` overrides it)."""
    return os.environ.get("POSTTRAIN_POLICY", str(PROJECT_ROOT / ".posttrain" / "demo-policy"))


@dataclass
class SandboxConfig:
    backend: str = "bwrap"  # "bwrap" (no daemon) or "docker" (needs dockerd and the sandbox image)
    timeout_s: float = 10.0  # wall-clock limit of one execution, unless the env asks for less
    memory_mb: int = 512  # address-space / cgroup memory limit per execution
    max_output_bytes: int = 1 << 20  # stdout/stderr kept per execution; the rest is cut and flagged
    concurrency: int = 2  # executions in flight at once
    start_retries: int = 2  # retries of a sandbox that failed to *start* (infra), never of a failing program
    docker_image: str = "posttrain-sandbox:latest"


@dataclass
class RolloutConfig:
    samples_per_env: int = 8  # group size n for GRPO
    envs_per_iteration: int = 24  # envs sampled from the admitted training split each iteration
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    max_model_len: int = 256
    dtype: str = "bfloat16"
    enable_prefix_caching: bool = True
    seed: int = 0


@dataclass
class TrainConfig:
    learning_rate: float = 5e-5
    clip_eps: float = 0.2  # PPO clip range
    micro_batch_size: int = 32  # sequences per DeepSpeed step
    epochs: int = 1  # passes over one iteration's scored rollouts
    zero_stage: int = 2
    bf16: bool = True
    max_grad_norm: float = 1.0
    advantage_eps: float = 1e-6  # added to the group std before dividing
    seed: int = 0


@dataclass
class EvalConfig:
    max_new_tokens: int = 48
    split: str = "eval"
    limit: int = 0  # 0 means every env of the split


@dataclass
class DemoPolicyConfig:
    vocab_size: int = 384
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 3
    num_heads: int = 2  # head_dim = hidden_size / num_heads = 64, a size vLLM's CPU attention supports
    max_position_embeddings: int = 256
    sft_steps: int = 300
    sft_batch_size: int = 16
    sft_learning_rate: float = 3e-3
    seed: int = 0


@dataclass
class LoopConfig:
    suite: str = DEMO_SUITE
    policy: str = field(default_factory=default_policy_dir)
    iterations: int = 4
    experiment: str = "posttrain"
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    @classmethod
    def smoke(cls) -> "LoopConfig":
        """One iteration with tiny sizes: the quick end-to-end check (``make smoke``)."""
        return cls(
            iterations=1,
            rollout=RolloutConfig(samples_per_env=4, envs_per_iteration=6, max_new_tokens=40),
            train=TrainConfig(micro_batch_size=24),
            eval=EvalConfig(limit=12, max_new_tokens=40),
        )
