"""Typed configuration, one dataclass per stage, with defaults that work on a 2-core CPU machine.

Every size is a field here, never a constant in code. Flyte turns these dataclasses into typed workflow
inputs, so ``pyflyte run workflows/rl_loop.py rl_loop --cfg '{"iterations": 1}'`` overrides any field.

Every config validates when built (``__post_init__``, which Flyte's deserialization runs too): each class declares
``RULES``, field name -> rule(s), next to its fields, and a value that cannot work raises one ``ConfigError`` naming
every bad field by its path in ``LoopConfig``, so a bad workflow input fails in the first seconds.

Example:
    >>> from posttrain.config import LoopConfig, RolloutConfig
    >>> cfg = LoopConfig(iterations=1)
    >>> cfg.rollout.samples_per_env, cfg.sandbox.backend
    (8, 'bwrap-warm')
    >>> LoopConfig.smoke().iterations
    1
    >>> RolloutConfig(samples_per_env=0, top_p=1.5)
    Traceback (most recent call last):
    ...
    posttrain.config.ConfigError: rollout.samples_per_env=0: must be >= 1; rollout.top_p=1.5: must be in (0, 1]
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any, ClassVar

from posttrain.precision import ENGINE_DTYPES, PRECISIONS

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEMO_SUITE = str(Path(__file__).resolve().parent / "envs" / "suites" / "demo_python")  # on this machine
DEMO_SUITE_REF = "posttrain:envs/suites/demo_python"  # in configs: resolved where it runs (posttrain.locations)
DEMO_POLICY = "demo"  # in configs: the demo policy, built on first use at default_policy_dir()
AGENT_SUITE_REF = "posttrain:envs/suites/agent_repo"  # 96 generated repository bug-fix envs, each with an oracle
DEMO_AGENT_POLICY = "demo-agent"  # the demo agent policy (posttrain.agent.warm_start), at default_agent_policy_dir()


def default_policy_dir() -> str:
    """Where the demo policy is built and cached (``POSTTRAIN_POLICY`` overrides it)."""
    return os.environ.get("POSTTRAIN_POLICY", str(PROJECT_ROOT / ".posttrain" / "demo-policy"))


def default_agent_policy_dir() -> str:
    """Where the demo agent policy is built and cached (``POSTTRAIN_AGENT_POLICY`` overrides it)."""
    return os.environ.get("POSTTRAIN_AGENT_POLICY", str(PROJECT_ROOT / ".posttrain" / "agent-policy"))


class ConfigError(ValueError):
    """A config value that cannot work; the message lists every bad field of the config as ``path=value: problem``."""


# A rule maps (value, the whole config) to what is wrong with the value, or None when it is fine.
Rule = Callable[[Any, Any], "str | None"]


def check(ok: Callable[[Any], bool], expected: str) -> Rule:
    """The rule ``ok(value)``, reported as ``must be <expected>``."""
    return lambda value, cfg: None if ok(value) else f"must be {expected}"


def at_least(low: float) -> Rule:
    return check(lambda value: value >= low, f">= {low}")


def above(low: float) -> Rule:
    return check(lambda value: value > low, f"> {low}")


# Why some rules name their choices as ``"module:NAME"`` strings, resolved when a value is checked: this module is the
# bottom of the layering (every stage imports it; it imports only ``locations`` and ``precision``, which import
# nothing of posttrain), while the names a field may take belong to registries above it, beside their variants: the
# sandbox backends (``posttrain.sandbox``), the env spec's splits and tools (``posttrain.envs``), the KL estimators and
# the loss and advantage registries (``posttrain.training.algorithms``, which imports torch). A new variant is one new
# module registered there, never an edit here; importing those registries at the top would make config import torch
# and the sandbox package, and make every layer that imports config depend on every other. So the lookup goes up by
# name, at validation time only (building any config, its defaults included, resolves every reference).
def _lookup(ref: str):
    """What a ``"module:NAME"`` reference names (the module imported now)."""
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def _resolve(choices: tuple | str) -> tuple:
    """``choices`` itself, or the tuple a ``"module:NAME"`` reference names (imported only when a value is checked)."""
    return tuple(_lookup(choices)) if isinstance(choices, str) else choices


def one_of(choices: tuple | str) -> Rule:
    return lambda value, cfg: None if value in _resolve(choices) else f"must be one of {list(_resolve(choices))}"


def each_one_of(choices: tuple | str) -> Rule:
    def rule(values, cfg):
        unknown = [v for v in values if v not in _resolve(choices)]
        return f"unknown {unknown}; known: {list(_resolve(choices))}" if unknown else None

    return rule


def below(other: str) -> Rule:
    """Less than the field at dotted path ``other`` of the same config."""
    def rule(value, cfg):
        limit = _get(cfg, other)
        return None if value < limit else f"must be < {other} ({limit})"

    return rule


ALGORITHMS = "posttrain.training.algorithms"  # the loss, advantage and aggregation registries


def registered(lookup: str) -> Rule:
    """A name ``posttrain.training.algorithms.<lookup>`` knows (imported only when a value is checked)."""
    def rule(value, cfg):
        try:
            _lookup(f"{ALGORITHMS}:{lookup}")(value)
        except ValueError as unknown:  # "TrainConfig.<field>: unknown ...; known: [...]"
            return str(unknown).split(": ", 1)[-1]
        return None

    return rule


def folder_reference(ref: str, cfg) -> str | None:
    """A folder a task can read: a local dir, ``posttrain:<folder in the package>`` or a URI of a filesystem Flyte
    reads (``s3://...``; only its filesystem is checked here), see ``posttrain.locations``."""
    from posttrain.locations import reference_problem

    return reference_problem(ref)


def policy_reference(ref: str, cfg) -> str | None:
    """A folder reference, the demo policy (``demo``) or a registered version or alias (``models:/name@alias``)."""
    return None if ref in (DEMO_POLICY, DEMO_AGENT_POLICY) or ref.startswith("models:/") \
        else folder_reference(ref, cfg)


def _get(cfg, path: str):
    return reduce(getattr, path.split("."), cfg)


class Validated:
    """Base of the configs: building one checks its ``RULES`` and raises one ``ConfigError`` naming every bad field.

    ``PATH`` is where the config sits in ``LoopConfig`` (``"rollout."``): the prefix of its fields in messages.
    """

    PATH: ClassVar[str] = ""
    RULES: ClassVar[dict[str, Rule | tuple[Rule, ...]]] = {}

    def __post_init__(self) -> None:
        problems = []
        for name, rules in self.RULES.items():
            value = _get(self, name)
            for rule in rules if isinstance(rules, tuple) else (rules,):
                if problem := rule(value, self):
                    problems.append(f"{self.PATH}{name}={value!r}: {problem}")
        if problems:
            raise ConfigError("; ".join(problems))


@dataclass
class DockerPoolConfig(Validated):
    """The Docker backend's warm pool (``posttrain.sandbox.docker.DockerPool``): image, sizing, daemon."""

    image: str = "posttrain-sandbox:latest"  # the sandbox image (make sandbox-image builds it offline)
    size: int = 4  # containers kept started and clean, ready to take an execution
    max_size: int = 16  # containers at most (ready + busy) during a burst
    min_idle: int = 1  # containers kept once the pool has been idle for idle_s
    idle_s: float = 60.0  # no acquisition for this long: shrink to min_idle
    max_uses: int = 200  # executions one container serves before it is replaced
    parallel_starts: int = 2  # containers started at once in the background
    acquire_timeout_s: float = 60.0  # no container free this long: the execution is an infra error
    api_timeout_s: float = 60.0  # one call to the Docker daemon
    base_url: str = ""  # the daemon's socket; "" means DOCKER_HOST or the local socket

    PATH = "sandbox.docker."
    # The pool raises max_size to size, min_idle to at most size and parallel_starts to 1: those may be "too small".
    RULES = {"image": check(bool, "non-empty"), "size": at_least(0), "max_size": at_least(0), "min_idle": at_least(0),
             "idle_s": at_least(0), "max_uses": at_least(1), "parallel_starts": at_least(0),
             "acquire_timeout_s": above(0), "api_timeout_s": above(0)}


@dataclass
class SandboxConfig(Validated):
    backend: str = "bwrap-warm"  # "bwrap-warm" (warm bwrap slots), "bwrap" (one bwrap per run), "docker" (dockerd)
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
    cpus: float = 1.0  # CPU cores one execution may use (bwrap: its cgroup's quota; docker: its container's)
    session_output_bytes: int = 16384  # output kept per session step (stdout and stderr each); the rest is cut, marked
    # Each bwrap execution, session and warm slot (as root) and each Docker container runs its programs as a host uid
    # (and gid) of its own from this range, so none shares another's per-user kernel limits
    # (posttrain.sandbox.uids); no user, group or subuid range may be in it
    host_uid_first: int = 1_900_000_000
    host_uids: int = 65536  # uids in the range (from host_uid_first): sandboxes at once, at most
    # reward stage: one sandbox run per distinct (env, completion), shared by copies
    verify_duplicates_once: bool = True
    docker: DockerPoolConfig = field(default_factory=DockerPoolConfig)  # backend "docker" only

    PATH = "sandbox."
    RULES = {"backend": one_of("posttrain.sandbox:BACKENDS"), "timeout_s": above(0), "memory_mb": at_least(1),
             "max_output_bytes": at_least(1), "batch_concurrency": at_least(1), "start_retries": at_least(0),
             "global_concurrency": at_least(1), "long_slots": at_least(0), "short_timeout_s": at_least(0),
             "queue_timeout_s": at_least(0), "hang_grace_s": at_least(0), "workspace_mb": at_least(1),
             "tmp_mb": at_least(1), "max_processes": at_least(1), "cpus": above(0),
             "session_output_bytes": at_least(1), "host_uid_first": at_least(1), "host_uids": at_least(1)}


@dataclass
class RolloutConfig(Validated):
    samples_per_env: int = 8  # group size n for GRPO
    envs_per_iteration: int = 32  # envs sampled from the admitted training split each iteration
    # The demo policy solves 7% of train samples at 1.0, 33% at 0.6: most groups would fail whole at 1.0 (no signal)
    temperature: float = 0.6
    top_p: float = 1.0  # nucleus sampling of the rollout (1.0: off)
    max_new_tokens: int = 48  # tokens one completion may generate
    max_model_len: int = 256  # the engine's context: prompt + completion tokens at most
    # vLLM's compute dtype: "auto" picks bfloat16 where the hardware computes it natively (a GPU with bf16, a CPU with
    # AVX512-BF16 or AMX), else float32 (posttrain.precision: emulated bf16 costs ~5x on an AVX2-only CPU)
    dtype: str = "auto"
    # vLLM reuses the KV cache of a shared prompt prefix (the n samples of one prompt)
    enable_prefix_caching: bool = True
    # Engine processes serving the policy side by side, each on its own share of the cores, the batch split between
    # them by prompt (posttrain.rollout.engine). 0: one per core the process may use on CPU (each holds the weights and
    # its own KV cache: set 1 for a large model), 1 on GPU (more there: vLLM's own data_parallel_size).
    replicas: int = 0
    engine_start_timeout_s: float = 600.0  # an engine process not serving this long after its start: an error
    seed: int = 0  # the engine's sampling seed (replica r: seed + r); the same seed gives the same rollouts
    # DAPO dynamic sampling (posttrain.rollout.dynamic_sampling): groups whose rewards are all equal carry no GRPO
    # signal; they are dropped and refilled with fresh train envs sampled from the same policy version.
    dynamic_sampling: bool = False
    max_resample_rounds: int = 3  # refill rounds per iteration at most; each samples the groups still missing

    PATH = "rollout."
    RULES = {"samples_per_env": at_least(1), "envs_per_iteration": at_least(1), "temperature": at_least(0),
             "top_p": check(lambda p: 0 < p <= 1, "in (0, 1]"), "max_model_len": at_least(1),
             "replicas": at_least(0), "engine_start_timeout_s": above(0),
             "dtype": one_of(ENGINE_DTYPES),
             "max_new_tokens": (at_least(1), below("max_model_len")), "max_resample_rounds": at_least(0)}


@dataclass
class TrainConfig(Validated):
    # the demo's 30 iterations: 2e-4 gains faster, then stalls lower (docs/algorithms.md ablation)
    learning_rate: float = 1e-4
    clip_eps: float = 0.2  # PPO clip range, symmetric unless clip_eps_low / clip_eps_high say otherwise
    clip_eps_low: float = 0.0  # the ratio's lower bound is 1 - clip_eps_low; 0 means clip_eps
    clip_eps_high: float = 0.0  # upper bound 1 + clip_eps_high; 0 means clip_eps (DAPO clip-higher: 0.28; GSPO: 4e-4)
    micro_batch_size: int = 32  # sequences per forward/backward pass
    grad_accum_steps: int = 1  # micro batches per optimizer step (DeepSpeed gradient_accumulation_steps)
    epochs: int = 1  # passes over one iteration's scored rollouts
    # optimizer steps an epoch takes at least, as far as its samples allow: micro batches shrink below
    # micro_batch_size when few groups are learnable (PPO's mini-batches per rollout batch); 0: by micro_batch_size
    min_steps: int = 0
    nproc_per_node: int = 1  # data-parallel processes per node of the update; > 1: torch elastic (tasks.update)
    nnodes: int = 1  # nodes of the update; > 1: a Kubeflow PyTorchJob on a cluster (each node its own pod and disk)
    # DeepSpeed ZeRO stage 0-3 (3 partitions the weights too); -1 (auto): 2 on several processes, 0 on one (where
    # there is nothing to partition and the stages' bookkeeping costs ~a quarter of the demo's update)
    zero_stage: int = -1
    # "auto": bf16 (DeepSpeed bf16, fp32 master weights) where the hardware computes it natively, else fp32
    # (posttrain.precision); "bf16" or "fp32" force one. The choice is logged with each update.
    precision: str = "auto"
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory, ~1/3 more compute
    lr_warmup_steps: int = 0  # linear LR warmup over the first N optimizer steps of the run; 0: constant LR
    carry_train_state: bool = True  # save optimizer, LR schedule and RNG beside each version; the next update resumes
    max_grad_norm: float = 1.0  # global gradient-norm clip before each optimizer step (0: off)
    advantage_eps: float = 1e-6  # added to the group std before dividing
    seed: int = 0  # seeds the shuffle of samples into micro batches and torch's RNG
    # The algorithm, by registered name (posttrain.training.algorithms); the defaults are GRPO + PPO-clip.
    advantage_estimator: str = "grpo"  # "grpo" (group-normalized), "dr_grpo" (minus the group mean), "rloo"
    policy_loss: str = "ppo_clip"  # per-token loss: "ppo_clip" (per-token ratio) or "gspo" (per-sequence ratio)
    loss_aggregation: str = "token_mean"  # or "seq_mean_token_mean", "seq_mean_token_sum_norm" (Dr. GRPO)
    loss_norm_len: int = 0  # seq_mean_token_sum_norm's divisor, e.g. rollout max_new_tokens; 0: the batch's width
    # Terms around the policy loss (posttrain.training.algorithms.objective); each 0 means off.
    kl_coef: float = 0.0  # KL penalty to the frozen initial policy, per token; 0: no reference model is loaded
    kl_estimator: str = "k3"  # "k3" (exp(ref - logp) - (ref - logp) - 1, >= 0) or "k1" (logp - ref)
    entropy_coef: float = 0.0  # entropy bonus: coef * token entropy is subtracted from the per-token loss
    tis_cap: float = 0.0  # truncated IS: weight min(exp(trainer_logp - vllm_logp), tis_cap) per token (e.g. 2.0)

    PATH = "train."
    RULES = {"learning_rate": above(0), "clip_eps": above(0), "micro_batch_size": at_least(1), "epochs": at_least(1),
             "min_steps": at_least(0), "grad_accum_steps": at_least(1), "lr_warmup_steps": at_least(0),
             "nproc_per_node": at_least(1),
             "nnodes": at_least(1),
             "clip_eps_low": check(lambda eps: 0 <= eps < 1, "in [0, 1)"), "clip_eps_high": at_least(0),
             "zero_stage": one_of((-1, 0, 1, 2, 3)), "precision": one_of(PRECISIONS),
             "max_grad_norm": at_least(0), "advantage_eps": at_least(0),
             "advantage_estimator": registered("get_advantage_estimator"), "policy_loss": registered("get_policy_loss"),
             "loss_aggregation": registered("check_aggregation"), "loss_norm_len": at_least(0),
             "kl_coef": at_least(0), "kl_estimator": one_of("posttrain.training.algorithms.kl:KL_ESTIMATORS"),
             "entropy_coef": at_least(0), "tis_cap": check(lambda cap: cap == 0 or cap >= 1, "0 (off) or >= 1")}


@dataclass
class EvalConfig(Validated):
    max_new_tokens: int = 48  # tokens one eval completion may generate
    split: str = "eval"  # the suite split evaluated
    limit: int = 0  # 0 means every env of the split
    every: int = 10  # evaluate policy versions k with k % every == 0; v0 and the final version always (0: only those)
    samples: int = 8  # sampled pass@1: completions per eval env at the rollout temperature and top_p (0: greedy only)
    pass_k: list[int] = field(default_factory=lambda: [1, 4, 8])  # unbiased sampled pass@k reported for these k (<= n)

    PATH = "eval."
    RULES = {"max_new_tokens": at_least(1), "split": one_of("posttrain.envs.spec:SPLITS"), "limit": at_least(0),
             "every": at_least(0), "samples": at_least(0),
             "pass_k": check(lambda ks: bool(ks) and all(k >= 1 for k in ks), "a non-empty list of k >= 1")}


@dataclass
class DemoPolicyConfig(Validated):
    vocab_size: int = 384
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 3
    num_heads: int = 2  # head_dim = hidden_size / num_heads = 64, a size vLLM's CPU attention supports
    max_position_embeddings: int = 256
    sft_steps: int = 175  # mid-way through SFT on purpose: ~40% greedy pass@1 on eval, room for RL
    sft_batch_size: int = 16
    sft_learning_rate: float = 2e-3  # 3e-3 made pass@1 jump between ~0 and ~60% from one step count to the next
    seed: int = 0  # seeds the demo policy's initialisation and SFT batches

    PATH = "demo_policy."
    RULES = {**dict.fromkeys(["vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                              "max_position_embeddings", "sft_batch_size"], at_least(1)),
             "sft_steps": at_least(0), "sft_learning_rate": above(0)}


AGENT_TOOLS = "posttrain.envs.tools:TOOLS"  # the registry of tool names


@dataclass
class AgentConfig(Validated):
    """Agent episodes (``posttrain.agent``): tools, termination, the context budget, sampling."""

    tools: list[str] = field(default_factory=lambda: list(_resolve(AGENT_TOOLS)))  # all registered tools
    max_steps: int = 8  # model turns per episode; then finish_reason "max_steps"
    max_new_tokens: int = 192  # tokens one model turn may generate (the demo tokenizer: ~2 characters a token)
    token_budget: int = 1536  # model tokens per episode (all turns); then finish_reason "token_budget"
    deadline_s: float = 120.0  # wall-clock seconds per episode; then finish_reason "deadline"
    tool_timeout_s: float = 10.0  # one tool call's deadline in the sandbox session
    tool_concurrency: int = 4  # episodes whose tool calls run at once (the sandbox scheduler caps the total too)
    # Context budget: once an episode's context exceeds it, observations older than the last keep_recent_turns turns
    # become one-line summaries (their full text goes to state_file in the workspace). Per domain: context_budgets.
    context_budget: int = 1536
    context_budgets: dict[str, int] = field(default_factory=dict)  # domain -> budget, overrides context_budget
    keep_recent_turns: int = 2  # turns whose observations stay whole when the context is compressed
    summary_chars: int = 80  # characters of an observation's first line kept in its summary
    state_file: str = ".agent/state.md"  # workspace file where compressed observations persist
    temperature: float = 0.6  # sampling temperature of the agent's turns
    top_p: float = 1.0  # nucleus sampling of the agent's turns (1.0: off)
    seed: int = 0  # the agent engine's sampling seed
    # The agent tier of the RL loop (tasks.agent): its own groups, beside the single-turn rollout.
    envs_per_iteration: int = 8  # agent train envs rolled out per iteration
    samples_per_env: int = 4  # episodes per env (the group)
    eval_limit: int = 0  # agent eval envs evaluated greedily, first by id; 0: all
    # Reward shaping terms (posttrain.agent.rollout.shaping_terms), each logged on its own; 0 means off.
    failed_call_penalty: float = 0.0  # subtracted per failed or rejected tool call

    PATH = "agent."
    RULES = {"tools": (each_one_of(AGENT_TOOLS), check(lambda names: "submit" in names, "a list with submit")),
             "max_steps": at_least(1), "max_new_tokens": at_least(1), "token_budget": at_least(1),
             "deadline_s": above(0), "tool_timeout_s": above(0), "tool_concurrency": at_least(1),
             "context_budget": at_least(1), "context_budgets": check(lambda d: all(v >= 1 for v in d.values()),
                                                                       "a map of domain -> budget >= 1"),
             "keep_recent_turns": at_least(0), "summary_chars": at_least(1), "state_file": check(bool, "non-empty"),
             "temperature": at_least(0), "top_p": check(lambda p: 0 < p <= 1, "in (0, 1]"),
             "failed_call_penalty": at_least(0), "envs_per_iteration": at_least(1), "samples_per_env": at_least(1),
             "eval_limit": at_least(0)}


ADMISSION_CHECKS = ("consistency", "solvability", "reproducibility", "anti_hacking", "coverage", "discrimination")


@dataclass
class AdmissionConfig(Validated):
    """Which admission checks run and how strict they are (``posttrain.admission``; reason codes documented there).

    Policies are named by a string: ``reference`` (answers the reference), ``identity`` / ``noop`` (degenerate),
    ``noisy:P`` (the reference with probability P, else a mutant of it), or a policy checkpoint dir (sampled with
    vLLM). ``learnability`` runs only when ``learnability_policy`` is set, and rejects only if ``filter_learnability``.
    """

    # the admission checks that run, in order (the reason codes: docs/admission.md)
    checks: list[str] = field(default_factory=lambda: list(ADMISSION_CHECKS))
    repeats: int = 3  # runs of the reference for reproducibility (the first also decides solvability)
    mutation_threshold: float = 0.6  # minimum fraction of mutants the tests must kill
    # the most reward a degenerate probe (empty, constant, the prompt copied, self-consistent garbage) may earn
    max_probe_reward: float = 0.1
    max_mutants: int = 12  # mutants run per env (spread evenly over the verifier's list)
    # the policy that must not solve an env (discrimination): a policy name or checkpoint dir
    weak_policy: str = "identity"
    strong_policy: str = "reference"  # the policy that must solve it (discrimination)
    k: int = 4  # samples per env and policy (discrimination, learnability)
    learnability_policy: str = ""  # "" = learnability not measured
    filter_learnability: bool = False  # reject envs the learnability policy always or never solves
    batch_concurrency: int = 8  # sandbox runs of one batch in flight (short runs are latency-bound); 0: sandbox's
    min_timeout_s: float = 0.5  # a spec's limits below these cannot run a program: consistency rejects them
    min_memory_mb: int = 64  # a spec's memory limit below this cannot run a program: consistency rejects it
    temperature: float = 1.0  # sampling settings of checkpoint (vLLM) policies
    max_new_tokens: int = 64  # tokens one sampled completion of a checkpoint policy may generate
    seed: int = 0  # the sampling seed of checkpoint policies
    # Agent envs (kind "agent"): the oracle episode (solvability) and the agent probes (anti-hacking) run as scripted
    # episodes in sandbox sessions (posttrain.admission.agent_episodes).
    agent_batch: int = 0  # episodes run at once; 0: all of a check, on docker at most docker.max_size (one container
    #                       each while it runs)
    agent_deadline_s: float = 600.0  # wall seconds of one batch of episodes (then finish_reason "deadline")

    PATH = "admission."
    RULES = {"checks": each_one_of(ADMISSION_CHECKS), "repeats": at_least(1), "agent_batch": at_least(0),
             "agent_deadline_s": above(0),
             "mutation_threshold": check(lambda t: 0 <= t <= 1, "in [0, 1]"), "max_mutants": at_least(0),
             "max_probe_reward": check(lambda t: 0 <= t < 1, "in [0, 1)"),
             "k": at_least(1), "batch_concurrency": at_least(0), "min_timeout_s": at_least(0),
             "min_memory_mb": at_least(0), "temperature": at_least(0), "max_new_tokens": at_least(1)}


@dataclass
class PromotionConfig(Validated):
    """The regression gate that moves the registry's ``champion`` alias (``posttrain.tracking.registry.promote``)."""

    regression_envs: list[str] = field(default_factory=list)  # env ids a candidate must not break; []: every env
    max_regressions: int = 0  # envs of the regression set the champion passes that a candidate may fail

    PATH = "promotion."
    RULES = {"max_regressions": at_least(0)}


@dataclass
class EvaluateConfig(Validated):
    """``workflows/evaluate.py``: one policy on one suite, outside the RL loop.

    ``policy`` is a checkpoint dir, a URI Flyte can read (``s3://...``), or a registered version or alias
    (``models:/posttrain-policy@champion``, ``models:/posttrain-policy/3``). ``baseline`` names the alias whose
    latest results on the same suite (same digest) the per-env flips compare against ("" for none).
    """

    # the policy evaluated: a checkpoint dir, a URI, or a registered version or alias
    policy: str = "models:/posttrain-policy@champion"
    suite: str = DEMO_SUITE_REF  # the suite evaluated: a folder reference (local dir, posttrain:<folder>, URI)
    # the alias whose latest results on the same suite the per-env flips compare against ('' for none)
    baseline: str = "champion"
    experiment: str = "posttrain-eval"  # the MLflow experiment of evaluation runs
    eval: EvalConfig = field(default_factory=EvalConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)

    RULES = {"policy": policy_reference, "suite": folder_reference, "experiment": check(bool, "non-empty"),
             "eval.max_new_tokens": below("rollout.max_model_len")}


@dataclass
class LoopConfig(Validated):
    suite: str = DEMO_SUITE_REF  # a folder reference: local dir, posttrain:<folder>, or URI (s3://...)
    policy: str = DEMO_POLICY  # a folder reference, "demo", or a registered version (models:/posttrain-policy@champion)
    iterations: int = 30  # RL iterations: policy versions v1..vN are trained
    max_staleness: int = 0  # rollouts sample from v_{k-s} (posttrain.rollout.staleness); 0: on-policy
    experiment: str = "posttrain"  # the MLflow experiment of training runs
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    promotion: PromotionConfig = field(default_factory=PromotionConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)  # the agent tier, for suites with agent envs

    # Each part checked itself when built; these are what only the whole config (or the file system) can tell.
    RULES = {"suite": folder_reference, "iterations": at_least(0), "experiment": check(bool, "non-empty"),
             "policy": policy_reference,
             "eval.max_new_tokens": below("rollout.max_model_len"),
             "max_staleness": lambda s, cfg: "must be >= 0" if s < 0 else (
                 "rollout.dynamic_sampling refills from the version being trained: use max_staleness 0 with it"
                 if s and cfg.rollout.dynamic_sampling else None)}

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

    @classmethod
    def agent_demo(cls) -> "LoopConfig":
        """RL on agent episodes (``make demo-agent``): the demo agent policy (warm-started on oracle episodes) on the
        ``agent_repo`` suite, 12 iterations of 64 episodes, greedy agent eval of all 32 eval envs every 4 versions."""
        return cls(
            suite=AGENT_SUITE_REF, policy=DEMO_AGENT_POLICY, iterations=12,
            rollout=RolloutConfig(max_model_len=1024),
            agent=AgentConfig(envs_per_iteration=8, samples_per_env=8, temperature=0.8, max_new_tokens=128,
                              token_budget=768),
            train=TrainConfig(micro_batch_size=8, learning_rate=1e-4),
            eval=EvalConfig(every=4),
            admission=AdmissionConfig(checks=["consistency", "solvability", "anti_hacking"]),
        )
