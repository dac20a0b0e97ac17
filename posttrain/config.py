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
class DockerPoolConfig:
    """The Docker backend's warm pool (``posttrain.sandbox.docker.DockerPool``): image, sizing, daemon."""

    image: str = "posttrain-sandbox:latest"
    size: int = 4  # containers kept started and clean, ready to take an execution
    max_size: int = 16  # containers at most (ready + busy) during a burst
    min_idle: int = 1  # containers kept once the pool has been idle for idle_s
    idle_s: float = 60.0  # no acquisition for this long: shrink to min_idle
    max_uses: int = 200  # executions one container serves before it is replaced
    cpus: float = 1.0  # CPU quota of one container
    parallel_starts: int = 2  # containers started at once in the background
    acquire_timeout_s: float = 60.0  # no container free this long: the execution is an infra error
    api_timeout_s: float = 60.0  # one call to the Docker daemon
    base_url: str = ""  # the daemon's socket; "" means DOCKER_HOST or the local socket


@dataclass
class SandboxConfig:
    backend: str = "bwrap"  # "bwrap" (no daemon) or "docker" (needs dockerd and the sandbox image)
    timeout_s: float = 10.0  # wall-clock limit of one execution, unless the env asks for less
    memory_mb: int = 512  # address-space / cgroup memory limit per execution
    max_output_bytes: int = 1 << 20  # stdout/stderr kept per execution; the rest is cut and flagged
    batch_concurrency: int = 2  # executions of one batch (``run_many`` call) in flight at once
    start_retries: int = 2  # retries of a sandbox that failed to *start* (infra), never of a failing program
    # Scheduling (posttrain.sandbox.scheduler): one process-wide scheduler sits in front of every backend.
    global_concurrency: int = 16  # in flight at once over all batches and sessions of this process
    long_slots: int = 0  # slots long executions may hold; 0 means half of global_concurrency (at least 1)
    short_timeout_s: float = 30.0  # deadline at most this: a "short" execution, never queued behind long ones
    queue_timeout_s: float = 0.0  # not started this long after submission: an infra error; 0 means no limit
    hang_grace_s: float = 120.0  # a backend still silent this long past a deadline is reported hung (infra)
    # Limits every backend applies besides timeout_s and memory_mb.
    workspace_mb: int = 64  # size cap of the writable workspace (/work) of one execution or session
    tmp_mb: int = 64  # size cap of the private /tmp
    max_processes: int = 64  # processes (and threads) one execution may have
    session_output_bytes: int = 16384  # output kept per session step (stdout and stderr each); the rest is cut, marked
    docker: DockerPoolConfig = field(default_factory=DockerPoolConfig)  # backend "docker" only


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
    learning_rate: float = 1e-4  # 4-iteration sweep on the demo policy: 1e-3 collapses, 5e-5 moves greedy eval little
    clip_eps: float = 0.2  # PPO clip range
    micro_batch_size: int = 32  # sequences per DeepSpeed step
    epochs: int = 1  # passes over one iteration's scored rollouts
    zero_stage: int = 2
    bf16: bool = True
    max_grad_norm: float = 1.0
    advantage_eps: float = 1e-6  # added to the group std before dividing
    seed: int = 0
    # The algorithm, by registered name (posttrain.training.algorithms); the defaults are GRPO + PPO-clip.
    advantage_estimator: str = "grpo"  # advantages per sample: "grpo" (reward normalized within its group)
    policy_loss: str = "ppo_clip"  # per-token loss: "ppo_clip" (clip range clip_eps)
    loss_aggregation: str = "token_mean"  # or "seq_mean_token_mean", "seq_mean_token_sum_norm" (Dr. GRPO)
    loss_norm_len: int = 0  # seq_mean_token_sum_norm's divisor, e.g. rollout max_new_tokens; 0: the batch's width


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
    sft_steps: int = 110  # mid-way through SFT on purpose: ~50% greedy pass@1 on eval, room for RL
    sft_batch_size: int = 16
    sft_learning_rate: float = 3e-3
    seed: int = 0


ADMISSION_CHECKS = ("consistency", "solvability", "reproducibility", "anti_hacking", "coverage", "discrimination")


@dataclass
class AdmissionConfig:
    """Which admission checks run and how strict they are (``posttrain.admission``; reason codes documented there).

    Policies are named by a string: ``reference`` (answers the reference), ``identity`` / ``noop`` (degenerate),
    ``noisy:P`` (the reference with probability P, else a mutant of it), or a policy checkpoint dir (sampled with
    vLLM). ``learnability`` runs only when ``learnability_policy`` is set, and rejects only if ``filter_learnability``.
    """

    checks: list[str] = field(default_factory=lambda: list(ADMISSION_CHECKS))
    repeats: int = 3  # runs of the reference for reproducibility (the first also decides solvability)
    mutation_threshold: float = 0.6  # minimum fraction of mutants the tests must kill
    max_mutants: int = 12  # mutants run per env (spread evenly over the verifier's list)
    weak_policy: str = "identity"
    strong_policy: str = "reference"
    k: int = 4  # samples per env and policy (discrimination, learnability)
    learnability_policy: str = ""  # "" = learnability not measured
    filter_learnability: bool = False  # reject envs the learnability policy always or never solves
    batch_concurrency: int = 8  # sandbox runs of one batch in flight (short runs are latency-bound); 0: sandbox's
    min_timeout_s: float = 0.5  # a spec's limits below these cannot run a program: consistency rejects them
    min_memory_mb: int = 64
    temperature: float = 1.0  # sampling settings of checkpoint (vLLM) policies
    max_new_tokens: int = 64
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
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)

    @classmethod
    def smoke(cls) -> "LoopConfig":
        """One iteration with tiny sizes: the quick end-to-end check (``make smoke``)."""
        return cls(
            iterations=1,
            rollout=RolloutConfig(samples_per_env=4, envs_per_iteration=6, max_new_tokens=40),
            train=TrainConfig(micro_batch_size=24),
            eval=EvalConfig(limit=12, max_new_tokens=40),
            admission=AdmissionConfig(checks=["consistency", "solvability", "anti_hacking"]),
        )
