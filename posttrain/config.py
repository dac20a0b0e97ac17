"""Typed configuration, one dataclass per stage, with defaults that work on a 2-core CPU machine.

Every size is a field here, never a constant in code. Flyte turns these dataclasses into typed workflow
inputs, so ``pyflyte run workflows/rl_loop.py rl_loop --cfg '{"iterations": 1}'`` overrides any field.

Each field is declared once, with ``posttrain.declaration.declare``: its default, its bounds and checks, its doc line
(docs/configuration.md is generated from them by ``posttrain.config_docs``). Every config validates when built
(``__post_init__``, which Flyte's deserialization runs too): each field against its declaration, then the class's
``RELATIONS`` between fields, and a value that cannot work raises one ``ConfigError`` naming every bad field by its
path in ``LoopConfig``, so a bad workflow input fails in the first seconds.

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
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import reduce
from pathlib import Path
from typing import Any, ClassVar

from posttrain.declaration import Check, Rule, declare, interval, rule_of, within
from posttrain.precision import ENGINE_DTYPES, PRECISIONS

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEMO_SUITE = str(Path(__file__).resolve().parent / "envs" / "suites" / "demo_python")  # on this machine
DEMO_SUITE_REF = "posttrain:envs/suites/demo_python"  # in configs: resolved where it runs (posttrain.locations)
DEMO_POLICY = "demo"  # in configs: the demo policy, built on first use at default_policy_dir()
AGENT_SUITE_REF = "posttrain:envs/suites/agent_repo"  # 96 generated repository bug-fix envs, each with an oracle
AGENT_LONG_SUITE_REF = "posttrain:envs/suites/agent_long"  # the regression hunts and the finance correction envs
DEMO_AGENT_POLICY = "demo-agent"  # the demo agent policy (posttrain.agent.warm_start), at default_agent_policy_dir()
DEMO_AGENT_LONG_POLICY = "demo-agent-long"  # the long-horizon one (make demo-agent-long)
DEMO_MULTI_POLICY = "demo-multi"  # the multi-domain one (make demo-multi): code, finance, scene and terminal
DEMO_AGENT_POLICIES = {DEMO_AGENT_POLICY: "agent-policy", DEMO_AGENT_LONG_POLICY: "agent-long-policy",
                       DEMO_MULTI_POLICY: "multi-policy"}  # name -> folder under .posttrain
MULTI_DOMAIN_SUITE_REF = "posttrain:envs/suites/multi_domain"  # code, finance, scene and terminal suites together
AGENT_LONG_CONTEXT_BUDGET = 384  # the long demo's budget: its policy is warm-started under it (agent.warm_start)


def default_policy_dir() -> str:
    """Where the demo policy is built and cached (``POSTTRAIN_POLICY`` overrides it)."""
    return os.environ.get("POSTTRAIN_POLICY", str(PROJECT_ROOT / ".posttrain" / "demo-policy"))


def default_agent_policy_dir(name: str = DEMO_AGENT_POLICY) -> str:
    """Where the demo agent policy ``name`` is built and cached: ``.posttrain/<folder>`` of ``DEMO_AGENT_POLICIES``,
    unless ``POSTTRAIN_<FOLDER>`` names another place (``POSTTRAIN_AGENT_POLICY``, ``POSTTRAIN_AGENT_LONG_POLICY``,
    ``POSTTRAIN_MULTI_POLICY``)."""
    folder = DEMO_AGENT_POLICIES[name]
    return os.environ.get("POSTTRAIN_" + folder.upper().replace("-", "_"), str(PROJECT_ROOT / ".posttrain" / folder))


class ConfigError(ValueError):
    """A config value that cannot work; the message lists every bad field of the config as ``path=value: problem``."""


# Each field is declared once (``posttrain.declaration.declare``): its default, its bounds, its checks and its doc
# line. A check maps a value to what is wrong with it ("" when it is fine); a relation maps (value, the whole config)
# to what is wrong with it, for what only the whole config can tell.
Relation = Callable[[Any, Any], "str | None"]


def must(ok: Callable[[Any], bool], expected: str) -> Check:
    """The check ``ok(value)``, reported as ``must be <expected>``."""
    return lambda value: "" if ok(value) else f"must be {expected}"


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


def one_of(choices: tuple | str) -> Check:
    return lambda value: "" if value in _resolve(choices) else f"must be one of {list(_resolve(choices))}"


def each_one_of(choices: tuple | str) -> Check:
    def check(values) -> str:
        unknown = [v for v in values if v not in _resolve(choices)]
        return f"unknown {unknown}; known: {list(_resolve(choices))}" if unknown else ""

    return check


def below(other: str) -> Relation:
    """Less than the field at dotted path ``other`` of the same config (unless that is 0: decided at run time, e.g.
    ``max_model_len`` from the model, which ``posttrain.rollout.context`` checks before an engine starts)."""
    def relation(value, cfg):
        limit = _get(cfg, other)
        return None if not limit or value < limit else f"must be < {other} ({limit})"

    return relation


ALGORITHMS = "posttrain.training.algorithms"  # the loss, advantage and aggregation registries


def registered(lookup: str) -> Check:
    """A name ``posttrain.training.algorithms.<lookup>`` knows (imported only when a value is checked)."""
    def check(value) -> str:
        try:
            _lookup(f"{ALGORITHMS}:{lookup}")(value)
        except ValueError as unknown:  # "TrainConfig.<field>: unknown ...; known: [...]"
            return str(unknown).split(": ", 1)[-1]
        return ""

    return check


def folder_reference(ref: str) -> str:
    """A folder a task can read: a local dir, ``posttrain:<folder in the package>`` or a URI of a filesystem Flyte
    reads (``s3://...``; only its filesystem is checked here), see ``posttrain.locations``."""
    from posttrain.locations import reference_problem

    return reference_problem(ref) or ""


def policy_reference(ref: str) -> str:
    """A folder reference, the demo policy (``demo``) or a registered version or alias (``models:/name@alias``)."""
    builtin = ref == DEMO_POLICY or ref in DEMO_AGENT_POLICIES or ref.startswith("models:/")
    return "" if builtin else folder_reference(ref)


SCRIPTED_POLICIES = ("reference", "identity", "noop", "noisy:P")  # admission's scripted policies (admission.policies)


def noisy_probability(name: str) -> float | None:
    """P of a ``noisy:P`` policy name; None for any other name; ``ValueError`` when P is not a number in [0, 1].

    >>> noisy_probability("noisy:0.25"), noisy_probability("identity")
    (0.25, None)
    """
    if not name.startswith("noisy:"):
        return None
    try:
        p = float(name.split(":", 1)[1])
    except ValueError:
        p = math.nan
    if not 0.0 <= p <= 1.0:
        raise ValueError("must be noisy:P with P a number in [0, 1]")
    return p


def admission_policy(name: str) -> str:
    """A scripted policy (``SCRIPTED_POLICIES``) or a policy reference (``policy_reference``)."""
    try:
        if name in SCRIPTED_POLICIES or noisy_probability(name) is not None:
            return ""
    except ValueError as malformed:
        return str(malformed)
    problem = policy_reference(name)
    return problem and f"not a scripted policy ({', '.join(SCRIPTED_POLICIES)}) nor a policy reference: {problem}"


def _get(cfg, path: str):
    return reduce(getattr, path.split("."), cfg)


def _bounds(rule: Rule) -> str:
    """What a value outside a declared rule's bounds must be: ``>= 1``, ``in (0, 1]``, ``non-empty``."""
    if rule.min_len is None and rule.max_len is None:
        return interval(rule)
    if rule.min_len == 1 and rule.max_len is None:
        return "non-empty"
    return f"of length {rule.min_len or 0}..{rule.max_len}"


class Validated:
    """Base of the configs: building one checks each field's declaration, then the config's ``RELATIONS``, and raises
    one ``ConfigError`` naming every bad field.

    ``PATH`` is where the config sits in ``LoopConfig`` (``"rollout."``): the prefix of its fields in messages.
    """

    PATH: ClassVar[str] = ""
    RELATIONS: ClassVar[dict[str, Relation]] = {}  # dotted field path -> relation

    def __post_init__(self) -> None:
        problems = []
        for f in fields(self):
            value, rule = getattr(self, f.name), rule_of(f)
            reasons = [] if within(value, rule) else [f"must be {_bounds(rule)}"]
            reasons += [reason for check in rule.checks if (reason := check(value))]
            problems += [f"{self.PATH}{f.name}={value!r}: {reason}" for reason in reasons]
        for name, relation in self.RELATIONS.items():
            value = _get(self, name)
            if problem := relation(value, self):
                problems.append(f"{self.PATH}{name}={value!r}: {problem}")
        if problems:
            raise ConfigError("; ".join(problems))


@dataclass
class DockerPoolConfig(Validated):
    """The Docker backend's warm pool (``posttrain.sandbox.docker.DockerPool``): image, sizing, daemon."""

    image: str = declare("posttrain-sandbox:latest", min_len=1,
                         doc="the sandbox image (make sandbox-image builds it offline)")
    size: int = declare(4, low=0, doc="containers kept started and clean, ready to take an execution")
    max_size: int = declare(16, low=0, doc="containers at most (ready + busy) during a burst")
    min_idle: int = declare(1, low=0, doc="containers kept once the pool has been idle for idle_s")
    idle_s: float = declare(60.0, low=0, doc="no acquisition for this long: shrink to min_idle")
    max_uses: int = declare(200, low=1, doc="executions one container serves before it is replaced")
    parallel_starts: int = declare(2, low=0, doc="containers started at once in the background")
    acquire_timeout_s: float = declare(60.0, low=0, open_low=True,
                                       doc="no container free this long: the execution is an infra error")
    api_timeout_s: float = declare(60.0, low=0, open_low=True, doc="one call to the Docker daemon")
    base_url: str = declare("", doc='the daemon\'s socket; "" means DOCKER_HOST or the local socket')

    PATH = "sandbox.docker."


@dataclass
class SandboxConfig(Validated):
    backend: str = declare("bwrap-warm", check=one_of("posttrain.sandbox:BACKENDS"),
                           doc='"bwrap-warm" (warm bwrap slots), "bwrap" (one bwrap per run), "docker" (dockerd)')
    timeout_s: float = declare(10.0, low=0, open_low=True,
                               doc="wall-clock limit of one execution, unless the env asks for less")
    memory_mb: int = declare(512, low=1, doc="address-space / cgroup memory limit per execution")
    max_output_bytes: int = declare(1 << 20, low=1, doc="stdout/stderr kept per execution; the rest is cut and flagged")
    batch_concurrency: int = declare(2, low=1, doc="executions of one batch (``run_many`` call) in flight at once")
    start_retries: int = declare(2, low=0,
                                 doc="retries of a sandbox that failed to *start* (infra), never of a failing program")
    global_concurrency: int = declare(16, low=1,
                                      doc="Scheduling (posttrain.sandbox.scheduler): one process-wide scheduler sits "
                                          "in front of every backend. In flight at once over all batches and sessions "
                                          "of this process.")
    long_slots: int = declare(0, low=0,
                              doc="slots long executions may hold; 0 means half of global_concurrency (at least 1)")
    short_timeout_s: float = declare(30.0, low=0,
                                     doc='deadline at most this: a "short" execution, never queued behind long ones')
    queue_timeout_s: float = declare(0.0, low=0,
                                     doc="not started this long after submission: an infra error; 0 means no limit")
    hang_grace_s: float = declare(120.0, low=0,
                                  doc="a backend still silent this long past a deadline is reported hung (infra)")
    deprioritise_long: bool = declare(True,
                                      doc="while a short execution runs, running long ones yield the CPU: their "
                                          "cgroup's CPU weight drops to long_cpu_share of its own, and comes back "
                                          "when no short one runs (posttrain.sandbox.priority; bwrap, warm bwrap, "
                                          "the Docker pool with a local daemon)")
    long_cpu_share: float = declare(0.01, low=0, open_low=True, high=1,
                                    doc="a yielding long execution's CPU weight, as a fraction of its own")
    deprioritise_max: float = declare(0.5, low=0,
                                      doc="a long execution yields for at most this fraction of its deadline in all, "
                                          "then keeps its weight to its end")
    workspace_mb: int = declare(64, low=1,
                                doc="Limits every backend applies besides timeout_s and memory_mb. Size cap of the "
                                    "writable workspace (/work) of one execution or session.")
    tmp_mb: int = declare(64, low=1, doc="size cap of the private /tmp")
    max_processes: int = declare(64, low=1, doc="processes (and threads) one execution may have")
    cpus: float = declare(1.0, low=0, open_low=True,
                          doc="CPU cores one execution may use (bwrap: its cgroup's quota; docker: its container's)")
    session_output_bytes: int = declare(16384, low=1,
                                        doc="output kept per session step (stdout and stderr each); the rest is cut, "
                                            "marked")
    host_uid_first: int = declare(1_900_000_000, low=1,
                                  doc="Each bwrap execution, session and warm slot (as root) and each Docker container "
                                      "runs its programs as a host uid (and gid) of its own from this range, so none "
                                      "shares another's per-user kernel limits (posttrain.sandbox.uids); no user, "
                                      "group or subuid range may be in it")
    host_uids: int = declare(65536, low=1, doc="uids in the range (from host_uid_first): sandboxes at once, at most")
    verify_duplicates_once: bool = declare(True,
                                           doc="reward stage: one sandbox run per distinct (env, completion), shared "
                                               "by copies")
    verdict_cache_entries: int = declare(20000, low=0,
                                         doc="with verify_duplicates_once: verdicts kept across the reward stages and "
                                             "evaluations of one process (posttrain.envs.verifiers.cache), a pair "
                                             "sampled again reusing its verdict; never an infra failure or a deadline "
                                             "hit; 0: off")
    docker: DockerPoolConfig = declare(factory=DockerPoolConfig, doc='backend "docker" only')

    PATH = "sandbox."


@dataclass
class RolloutConfig(Validated):
    samples_per_env: int = declare(8, low=1, doc="group size n for GRPO")
    envs_per_iteration: int = declare(32, low=1, doc="envs sampled from the admitted training split each iteration")
    temperature: float = declare(0.6, low=0,
                                 doc="The demo policy solves 7% of train samples at 1.0, 33% at 0.6: most groups would "
                                     "fail whole at 1.0 (no signal)")
    top_p: float = declare(1.0, low=0, open_low=True, high=1, doc="nucleus sampling of the rollout (1.0: off)")
    max_new_tokens: int = declare(48, low=1, doc="tokens one completion may generate")
    max_model_len: int = declare(0, low=0,
                                 doc="the engine's context: prompt + completion tokens at most; 0: the model's own "
                                     "(config.json's max_position_embeddings, at most 4096: posttrain.rollout.context)")
    chat_template: str = declare("auto", check=one_of("posttrain.rollout.chat_templates:CHOICES"),
                                 doc='How single-turn prompts reach the policy (posttrain.rollout.prompts: rollout, '
                                     'eval, and admission\'s checkpoint policies given this config): "auto" (the '
                                     'tokenizer\'s own chat template, else the raw prompt), "none" (the raw prompt: '
                                     'base models), or a built-in template: "chatml", "mistral", "llama3"')
    system_prompt: str = declare("", doc="placed first in every single-turn prompt (a system message through a "
                                         "template, else text before the prompt); \"\": none")
    dtype: str = declare("auto", check=one_of(ENGINE_DTYPES),
                         doc='vLLM\'s compute dtype: "auto" picks bfloat16 where the hardware computes it natively (a '
                             "GPU with bf16, a CPU with AVX512-BF16 or AMX), else float32 (posttrain.precision: "
                             "emulated bf16 costs ~5x on an AVX2-only CPU)")
    enable_prefix_caching: bool = declare(True,
                                          doc="vLLM reuses the KV cache of a shared prompt prefix (the n samples of "
                                              "one prompt)")
    replicas: int = declare(0, low=0,
                            doc="Engine processes serving the policy side by side, each on its own share of the cores, "
                                "the batch split between them by prompt (posttrain.rollout.engine). 0: one per core "
                                "the process may use on CPU (each holds the weights and its own KV cache: set 1 for a "
                                "large model), 1 on GPU (more there: vLLM's own data_parallel_size).")
    gpu_memory_utilization: float = declare(0.4, low=0, open_low=True, high=1,
                                            doc="On a GPU: the share of its memory each engine process takes (weights "
                                                "and KV cache; vLLM's gpu_memory_utilization). A local run keeps the "
                                                "live engine and the trainer on one GPU, so the default leaves the "
                                                "rest to the update; a rollout pod of its own may take 0.9. Unused on "
                                                "CPU (VLLM_CPU_KVCACHE_SPACE sizes the cache there).")
    engine_start_timeout_s: float = declare(600.0, low=0, open_low=True,
                                            doc="an engine process not serving this long after its start: an error")
    seed: int = declare(0,
                        doc="the engine's sampling seed (replica r: seed + r); the same seed gives the same rollouts")
    balance_domains: bool = declare(False,
                                    doc="each iteration's single-turn envs split evenly among the train split's "
                                        "domains (EnvSpec.domain), so a domain with more train envs is not rolled "
                                        "out more often (posttrain.rollout.collect.pick_by_domain; dynamic "
                                        "sampling's refills too); off: a uniform pick over envs, each domain's "
                                        "share following its size")
    domain_weights: dict[str, float] = declare(factory=dict,
                                               check=must(lambda d: all(w >= 0 for w in d.values()),
                                                          "a map of domain -> weight >= 0"),
                                               doc="with balance_domains: each domain's share of the picks in "
                                                   "proportion to its weight (a domain not named weighs 1, 0: never "
                                                   "picked); {}: even shares. A name no single-turn train env has, "
                                                   "or every weight 0, fails the first rollout")
    dynamic_sampling: bool = declare(False,
                                     doc="DAPO dynamic sampling (posttrain.rollout.dynamic_sampling): groups whose "
                                         "rewards are all equal carry no GRPO signal; they are dropped and refilled "
                                         "with fresh train envs sampled from the same policy version.")
    max_resample_rounds: int = declare(3, low=0,
                                       doc="refill rounds per iteration at most; each samples the groups still missing")
    settled_cooldown: int = declare(10, low=0,
                                    doc="Iterations a single-turn train env sits out of the rollout's pick after its "
                                        "group settled (no reward variance: all samples solved it, or none did), so "
                                        "the batch fills with envs that still teach; then it is picked as any other "
                                        "(posttrain.rollout.settled). 0: off, every pick is uniform. Neutral on the "
                                        "demo, whose few train envs are mostly solved early: docs/algorithms.md")

    PATH = "rollout."
    RELATIONS = {"max_new_tokens": below("max_model_len"),
                 "domain_weights": lambda weights, cfg: (
                     "weights the balanced pick: set balance_domains too" if weights and not cfg.balance_domains
                     else None)}


@dataclass
class TrainConfig(Validated):
    learning_rate: float = declare(1e-4, low=0, open_low=True,
                                   doc="the demo's 30 iterations: 2e-4 gains faster, then stalls lower "
                                       "(docs/algorithms.md ablation)")
    clip_eps: float = declare(0.2, low=0, open_low=True,
                              doc="PPO clip range, symmetric unless clip_eps_low / clip_eps_high say otherwise")
    clip_eps_low: float = declare(0.0, low=0, high=1, open_high=True,
                                  doc="the ratio's lower bound is 1 - clip_eps_low; 0 means clip_eps")
    clip_eps_high: float = declare(0.0, low=0,
                                   doc="upper bound 1 + clip_eps_high; 0 means clip_eps (DAPO clip-higher: 0.28; GSPO: "
                                       "4e-4)")
    micro_batch_size: int = declare(32, low=1, doc="sequences per forward/backward pass")
    micro_batch_tokens: int = declare(0, low=0,
                                      doc="> 0: a micro batch also holds at most this many tokens (its sequences x "
                                          "the longest, padding included), so memory follows sequence length; 0: by "
                                          "micro_batch_size alone")
    grad_accum_steps: int = declare(1, low=1,
                                    doc="micro batches per optimizer step (DeepSpeed gradient_accumulation_steps)")
    epochs: int = declare(1, low=1, doc="passes over one iteration's scored rollouts")
    min_steps: int = declare(0, low=0,
                             doc="optimizer steps an epoch takes at least, as far as its samples allow: micro batches "
                                 "shrink below micro_batch_size when few groups are learnable (PPO's mini-batches per "
                                 "rollout batch); 0: by micro_batch_size")
    nproc_per_node: int = declare(1, low=1,
                                  doc="data-parallel processes per node of the update; > 1: torch elastic "
                                      "(tasks.update)")
    nnodes: int = declare(1, low=1,
                          doc="nodes of the update; > 1: a Kubeflow PyTorchJob on a cluster (each node its own pod and "
                              "disk)")
    zero_stage: int = declare(-1, check=one_of((-1, 0, 1, 2, 3)),
                              doc="DeepSpeed ZeRO stage 0-3 (3 partitions the weights too); -1 (auto): 2 on several "
                                  "processes, 0 on one (where there is nothing to partition and the stages' "
                                  "bookkeeping costs ~a quarter of the demo's update)")
    precision: str = declare("auto", check=one_of(PRECISIONS),
                             doc='"auto": bf16 (DeepSpeed bf16, fp32 master weights) where the hardware computes it '
                                 'natively, else fp32 (posttrain.precision); "bf16" or "fp32" force one. The choice is '
                                 "logged with each update.")
    gradient_checkpointing: bool = declare(False,
                                           doc="recompute activations in backward: less memory, ~1/3 more compute")
    lora_rank: int = declare(0, low=0,
                             doc="> 0: train LoRA adapters of this rank through peft, the model frozen; each version "
                                 "holds the merged weights (what vLLM serves) and the adapter "
                                 "(posttrain.training.lora)")
    lora_alpha: float = declare(0.0, low=0, doc="LoRA scaling numerator (scaling = alpha / rank); 0: twice the rank")
    lora_targets: list[str] = declare(factory=list,
                                      doc='module names (or suffixes) LoRA adapts, e.g. ["q_proj", "v_proj"]; empty: '
                                          "every linear layer but the output head")
    lr_warmup_steps: int = declare(0, low=0,
                                   doc="linear LR warmup over the first N optimizer steps of the run; 0: constant LR")
    carry_train_state: bool = declare(True,
                                      doc="save optimizer, LR schedule and RNG beside each version; the next update "
                                          "resumes")
    state_every: int = declare(0, low=0,
                               doc="write the full training state (~7x the bf16 weights) with every N-th version; "
                                   "the others record only what replays their update (their samples, RNG and a "
                                   "weights digest: posttrain.training.replay). 0: every version where each update "
                                   "is a process of its own (a cluster's task pods, data parallel), none in a local "
                                   "single-process run, whose live trainer carries the state")
    keep_states: int = declare(2, check=must(lambda keep: keep == 0 or keep >= 2, "0 (keep all) or >= 2"),
                               doc="the newest written training states kept; each update prunes older ones' (their "
                                   "weights stay). 2: what a rerun after a kill resumes from; 0: keep all")
    max_grad_norm: float = declare(1.0, low=0, doc="global gradient-norm clip before each optimizer step (0: off)")
    advantage_eps: float = declare(1e-6, low=0, doc="added to the group std before dividing")
    seed: int = declare(0, doc="seeds the shuffle of samples into micro batches and torch's RNG")
    advantage_estimator: str = declare("grpo", check=registered("get_advantage_estimator"),
                                       doc="The algorithm, by registered name (posttrain.training.algorithms); the "
                                           'defaults are GRPO + PPO-clip. "grpo" (group-normalized), "dr_grpo" (minus '
                                           'the group mean), "rloo".')
    policy_loss: str = declare("ppo_clip", check=registered("get_policy_loss"),
                               doc='per-token loss: "ppo_clip" (per-token ratio) or "gspo" (per-sequence ratio)')
    loss_aggregation: str = declare("token_mean", check=registered("check_aggregation"),
                                    doc='or "seq_mean_token_mean", "seq_mean_token_sum_norm" (Dr. GRPO)')
    loss_norm_len: int = declare(0, low=0,
                                 doc="seq_mean_token_sum_norm's divisor, e.g. rollout max_new_tokens; 0: the batch's "
                                     "width")
    kl_coef: float = declare(0.0, low=0,
                             doc="Terms around the policy loss (posttrain.training.algorithms.objective); each 0 means "
                                 "off. KL penalty to the frozen initial policy, per token; 0: no reference model is "
                                 "loaded.")
    kl_estimator: str = declare("k3", check=one_of("posttrain.training.algorithms.kl:KL_ESTIMATORS"),
                                doc='"k3" (exp(ref - logp) - (ref - logp) - 1, >= 0) or "k1" (logp - ref)')
    entropy_coef: float = declare(0.0, low=0,
                                  doc="entropy bonus: coef * token entropy is subtracted from the per-token loss")
    tis_cap: float = declare(0.0, check=must(lambda cap: cap == 0 or cap >= 1, "0 (off) or >= 1"),
                             doc="truncated IS: weight min(exp(trainer_logp - vllm_logp), tis_cap) per token (e.g. "
                                 "2.0)")

    PATH = "train."


@dataclass
class EvalConfig(Validated):
    max_new_tokens: int = declare(48, low=1, doc="tokens one eval completion may generate")
    split: str = declare("eval", check=one_of("posttrain.envs.spec:SPLITS"), doc="the suite split evaluated")
    limit: int = declare(0, low=0, doc="0 means every env of the split")
    every: int = declare(10, low=0,
                         doc="evaluate policy versions k with k % every == 0; v0 and the final version always (0: only "
                             "those)")
    samples: int = declare(8, low=0,
                           doc="sampled pass@1: completions per eval env at the rollout temperature and top_p (0: "
                               "greedy only)")
    pass_k: list[int] = declare(factory=lambda: [1, 4, 8],
                                check=must(lambda ks: bool(ks) and all(k >= 1 for k in ks),
                                           "a non-empty list of k >= 1"),
                                doc="unbiased sampled pass@k reported for these k (<= n)")

    PATH = "eval."


@dataclass
class DemoPolicyConfig(Validated):
    vocab_size: int = declare(384, low=1)
    hidden_size: int = declare(128, low=1)
    intermediate_size: int = declare(384, low=1)
    num_layers: int = declare(3, low=1)
    num_heads: int = declare(2, low=1,
                             doc="head_dim = hidden_size / num_heads (64; vLLM's CPU attention takes 32, 64, 80, ...)")
    max_position_embeddings: int = declare(256, low=1)
    copy_steps: int = declare(0, low=0,
                              doc="steps of copy drills over fresh lines before SFT (each drill new, so only copying "
                                  "fits them; docs/multi-domain.md): a policy that must copy names out of its prompt "
                                  "learns it here; 0: none")
    copy_share: float = declare(0.0, low=0, high=1,
                                doc="the share of each SFT batch that is fresh copy drills (the rest: the pairs), so "
                                    "copying learnt in the copy steps is kept while the pairs are learnt; 0: none")
    split_digits: bool = declare(False,
                                 doc="every digit a token of its own: numbers of one width line up digit by digit, "
                                     "what a worked sum of two of them needs (finance_facts.work_line)")
    sft_steps: int = declare(175, low=0, doc="mid-way through SFT on purpose: ~40% greedy pass@1 on eval, room for RL")
    sft_batch_size: int = declare(16, low=1)
    sft_length_groups: int = declare(1, low=1,
                                     doc="batches whose examples are drawn together and sorted by length before "
                                         "they are cut, so a batch pads to similar lengths; 1: no sorting")
    sft_learning_rate: float = declare(2e-3, low=0, open_low=True,
                                       doc="3e-3 made pass@1 jump between ~0 and ~60% from one step count to the next")
    seed: int = declare(0, doc="seeds the demo policy's initialisation and SFT batches")

    PATH = "demo_policy."


AGENT_TOOLS = "posttrain.envs.tools:TOOLS"  # the registry of tool names
DEFAULT_AGENT_TOOLS = "posttrain.envs.tools:DEFAULT_TOOLS"


@dataclass
class AgentConfig(Validated):
    """Agent episodes (``posttrain.agent``): tools, termination, the context budget, sampling."""

    tools: list[str] = declare(factory=lambda: list(_resolve(DEFAULT_AGENT_TOOLS)),
                               doc="every registered tool but the env-bound ones (check: an env grants it)",
                               check=(each_one_of(AGENT_TOOLS), must(lambda names: "submit" in names,
                                                                     "a list with submit")))
    max_steps: int = declare(8, low=1, doc='model turns per episode; then finish_reason "max_steps"')
    max_new_tokens: int = declare(192, low=1,
                                  doc="tokens one model turn may generate (the demo tokenizer: ~2 characters a token)")
    token_budget: int = declare(1536, low=1,
                                doc='model tokens per episode (all turns); then finish_reason "token_budget"')
    deadline_s: float = declare(120.0, low=0, open_low=True,
                                doc='wall-clock seconds per episode; then finish_reason "deadline"')
    tool_timeout_s: float = declare(10.0, low=0, open_low=True, doc="one tool call's deadline in the sandbox session")
    tool_concurrency: int = declare(4, low=1,
                                    doc="episodes whose tool calls run at once (the sandbox scheduler caps the total "
                                        "too)")
    context_budget: int = declare(1536, low=1,
                                  doc="Context budget: once an episode's context exceeds it, observations older than "
                                      "the last keep_recent_turns turns become one-line summaries (their full text "
                                      "goes to state_file in the workspace). Per domain: context_budgets.")
    context_budgets: dict[str, int] = declare(factory=dict,
                                              check=must(lambda d: all(v >= 1 for v in d.values()),
                                                         "a map of domain -> budget >= 1"),
                                              doc="domain -> budget, overrides context_budget")
    keep_recent_turns: int = declare(2, low=0, doc="turns whose observations stay whole when the context is compressed")
    summary_chars: int = declare(80, low=1, doc="characters of an observation's first line kept in its summary")
    state_file: str = declare(".agent/state.md", min_len=1, doc="workspace file where compressed observations persist")
    snapshot_every: int = declare(0, low=0,
                                  doc="Per-step workspace snapshots (docs/agent.md, Snapshots, replay, rollback): one "
                                      "after every N-th turn of an episode, after its last turn and before its first "
                                      "(0: none); an env's agent.snapshot_every overrides it")
    snapshot_keep_mb: int = declare(16, low=0,
                                    doc="MiB of snapshot archives an evaluation keeps of its failed episodes (the "
                                        "agent_eval_snapshots table); an episode that would cross it keeps none")
    chat_template: str = declare("auto", check=one_of("posttrain.agent.template:CHOICES"),
                                 doc='The template of agent conversations (posttrain.agent.template): "auto" (the '
                                     'policy\'s own; a base model without one is refused), "agent" (the demo agent '
                                     'policy\'s compact one), or a built-in: "chatml", "mistral", "llama3"')
    tool_format: str = declare("auto", check=one_of("posttrain.agent.parser:CHOICES"),
                               doc='How the model writes tool calls (posttrain.agent.parser): "auto" (the format the '
                                   'chat template renders past calls in), or one named: "hermes", "mistral", '
                                   '"llama3_json"')
    temperature: float = declare(0.6, low=0, doc="sampling temperature of the agent's turns")
    top_p: float = declare(1.0, low=0, open_low=True, high=1, doc="nucleus sampling of the agent's turns (1.0: off)")
    seed: int = declare(0, doc="the agent engine's sampling seed")
    envs_per_iteration: int = declare(8, low=1,
                                      doc="The agent tier of the RL loop (tasks.agent): its own groups, beside the "
                                          "single-turn rollout. Agent train envs rolled out per iteration.")
    samples_per_env: int = declare(4, low=1, doc="episodes per env (the group)")
    eval_limit: int = declare(0, low=0, doc="agent eval envs evaluated greedily, first by id; 0: all")
    eval_samples: int = declare(0, low=0,
                                doc="sampled pass@1 of the agent eval envs: episodes per env at the agent's "
                                    "temperature and top_p, seeded alike for every version (0: greedy only)")
    failed_call_penalty: float = declare(0.0, low=0,
                                         doc="Reward shaping terms (posttrain.agent.rollout.shaping_terms), each "
                                             "logged on its own; 0 means off. Subtracted per failed or rejected tool "
                                             "call.")

    PATH = "agent."


ADMISSION_CHECKS = ("consistency", "solvability", "reproducibility", "anti_hacking", "coverage", "discrimination")


@dataclass
class AdmissionConfig(Validated):
    """Which admission checks run and how strict they are (``posttrain.admission``; reason codes documented there).

    Policies are named by a string: ``reference`` (answers the reference), ``identity`` / ``noop`` (degenerate),
    ``noisy:P`` (the reference with probability P, else a mutant of it), or any policy reference, sampled with vLLM:
    ``demo``, a registered version or alias (``models:/posttrain-policy@champion``), a checkpoint dir or URI.
    ``learnability`` runs only when ``learnability_policy`` is set, and rejects only if ``filter_learnability``.
    """

    checks: list[str] = declare(factory=lambda: list(ADMISSION_CHECKS), check=each_one_of(ADMISSION_CHECKS),
                                doc="the admission checks that run, in order (the reason codes: docs/admission.md)")
    repeats: int = declare(3, low=1,
                           doc="runs of the reference for reproducibility (the first also decides solvability)")
    mutation_threshold: float = declare(0.6, low=0, high=1, doc="minimum fraction of mutants the tests must kill")
    max_probe_reward: float = declare(0.1, low=0, high=1, open_high=True,
                                      doc="the most reward a degenerate probe (empty, constant, the prompt copied, "
                                          "self-consistent garbage) may earn")
    max_mutants: int = declare(12, low=0, doc="mutants run per env (spread evenly over the verifier's list)")
    weak_policy: str = declare("identity", check=admission_policy,
                               doc="discrimination's weak policy: a scripted policy or a policy reference (demo, "
                                   "models:/posttrain-policy@champion, a checkpoint dir)")
    strong_policy: str = declare("reference", check=admission_policy,
                                 doc="discrimination's strong policy, which must pass min_gap more often; named as "
                                     "weak_policy")
    k: int = declare(4, low=1, doc="samples per env and policy (discrimination, learnability)")
    min_gap: float = declare(0.1, low=0, high=1,
                             doc="the strong-minus-weak pass rate discrimination requires of every env (a spec's "
                                 "min_gap may ask more): envs both policies pass, or fail, alike are rejected")
    learnability_policy: str = declare("", check=lambda name: name and admission_policy(name),
                                       doc='named as weak_policy; "" = learnability not measured')
    filter_learnability: bool = declare(False, doc="reject envs the learnability policy always or never solves")
    batch_concurrency: int = declare(8, low=0,
                                     doc="sandbox runs of one batch in flight (short runs are latency-bound); 0: "
                                         "sandbox's")
    min_timeout_s: float = declare(0.5, low=0,
                                   doc="a spec's limits below these cannot run a program: consistency rejects them")
    min_memory_mb: int = declare(64, low=0,
                                 doc="a spec's memory limit below this cannot run a program: consistency rejects it")
    temperature: float = declare(1.0, low=0, doc="sampling settings of checkpoint (vLLM) policies")
    max_new_tokens: int = declare(64, low=1, doc="tokens one sampled completion of a checkpoint policy may generate")
    seed: int = declare(0, doc="the sampling seed of checkpoint policies")
    agent_batch: int = declare(0, low=0,
                               doc='Agent envs (kind "agent"): the oracle episode (solvability) and the agent probes '
                                   "(anti-hacking) run as scripted episodes in sandbox sessions "
                                   "(posttrain.admission.agent_episodes). Episodes run at once; 0: all of a check, on "
                                   "docker at most docker.max_size (one container each while it runs).")
    agent_deadline_s: float = declare(600.0, low=0, open_low=True,
                                      doc='wall seconds of one batch of episodes (then finish_reason "deadline")')

    PATH = "admission."


@dataclass
class PromotionConfig(Validated):
    """The regression gate that moves the registry's ``champion`` alias (``posttrain.tracking.registry.promote``)."""

    regression_envs: list[str] = declare(factory=list, doc="env ids a candidate must not break; []: every env")
    max_regressions: int = declare(0, low=0,
                                   doc="envs of the regression set the champion passes that a candidate may fail")

    PATH = "promotion."


@dataclass
class EvaluateConfig(Validated):
    """``workflows/evaluate.py``: one policy on one suite, outside the RL loop.

    ``policy`` is a checkpoint dir, a URI Flyte can read (``s3://...``), or a registered version or alias
    (``models:/posttrain-policy@champion``, ``models:/posttrain-policy/3``). ``baseline`` names the alias whose
    latest results on the same suite (same digest) the per-env flips compare against ("" for none).
    """

    policy: str = declare("models:/posttrain-policy@champion", check=policy_reference,
                          doc="the policy evaluated: a checkpoint dir, a URI, or a registered version or alias")
    suite: str = declare(DEMO_SUITE_REF, check=folder_reference,
                         doc="the suite evaluated: a folder reference (local dir, posttrain:<folder>, URI)")
    baseline: str = declare("champion",
                            doc="the alias whose latest results on the same suite the per-env flips compare against "
                                "('' for none)")
    experiment: str = declare("posttrain-eval", min_len=1, doc="the MLflow experiment of evaluation runs")
    eval: EvalConfig = declare(factory=EvalConfig)
    rollout: RolloutConfig = declare(factory=RolloutConfig)
    sandbox: SandboxConfig = declare(factory=SandboxConfig)
    agent: AgentConfig = declare(factory=AgentConfig,
                                 doc="the episodes of the suite's agent envs (eval split), for suites with agent envs")

    RELATIONS = {"eval.max_new_tokens": below("rollout.max_model_len")}


@dataclass
class LoopConfig(Validated):
    suite: str = declare(DEMO_SUITE_REF, check=folder_reference,
                         doc="a folder reference: local dir, posttrain:<folder>, or URI (s3://...)")
    policy: str = declare(DEMO_POLICY, check=policy_reference,
                          doc='a folder reference, "demo", or a registered version (models:/posttrain-policy@champion)')
    iterations: int = declare(30, low=0, doc="RL iterations: policy versions v1..vN are trained")
    max_staleness: int = declare(0, low=0,
                                 doc="rollouts sample from v_{k-s} (posttrain.rollout.staleness); 0: on-policy")
    experiment: str = declare("posttrain", min_len=1, doc="the MLflow experiment of training runs")
    sandbox: SandboxConfig = declare(factory=SandboxConfig)
    rollout: RolloutConfig = declare(factory=RolloutConfig)
    train: TrainConfig = declare(factory=TrainConfig)
    eval: EvalConfig = declare(factory=EvalConfig)
    admission: AdmissionConfig = declare(factory=AdmissionConfig)
    promotion: PromotionConfig = declare(factory=PromotionConfig)
    agent: AgentConfig = declare(factory=AgentConfig, doc="the agent tier, for suites with agent envs")

    # Each part checked itself when built; these are what only the whole config can tell.
    RELATIONS = {"eval.max_new_tokens": below("rollout.max_model_len"),
                 "max_staleness": lambda s, cfg: (
                     "rollout.dynamic_sampling refills from the version being trained: use max_staleness 0 with it"
                     if s > 0 and cfg.rollout.dynamic_sampling else None)}

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

    @classmethod
    def agent_long_demo(cls) -> "LoopConfig":
        """RL on long-horizon agent episodes (``make demo-agent-long``): the long demo agent policy (warm-started on
        oracle episodes of the regression hunts and of hunts of other functions) on ``agent_long``, the regression
        hunts (git history, bisect, a one-line fix) and the finance correction envs (``check`` feedback). A context
        budget of 384 tokens compresses every episode's older observations (docs/agent.md, Context budget): the
        policy's contexts stay as short as those it was warm-started on. Greedy agent eval of every eval env every 4
        versions."""
        return cls(
            suite=AGENT_LONG_SUITE_REF, policy=DEMO_AGENT_LONG_POLICY, iterations=12,
            rollout=RolloutConfig(max_model_len=2048),
            # at 0.6 episodes wander less than at 0.8: 15 min 51 s for the 12 iterations here against 21 min 10 s,
            # greedy eval 0.176 -> 0.500 against 0.176 -> 0.441 (docs/agent.md)
            agent=AgentConfig(envs_per_iteration=8, samples_per_env=8, temperature=0.6, max_new_tokens=160,
                              token_budget=1024, context_budget=AGENT_LONG_CONTEXT_BUDGET),
            # a compressed episode is several training sequences (one per context window): 32 windows a step keeps
            # the steps per iteration near the agent demo's 8 (8 a step gave 34 and an approx KL of 0.03-0.04 a
            # step, and the greedy solve rate fell from 0.56 to 0.06 in four iterations)
            train=TrainConfig(micro_batch_size=8, grad_accum_steps=4, learning_rate=1e-4),
            eval=EvalConfig(every=4),
            admission=AdmissionConfig(checks=["consistency", "solvability", "anti_hacking"]),
        )

    @classmethod
    def multi_domain_demo(cls) -> "LoopConfig":
        """RL on four domains at once (``make demo-multi``): the multi-domain demo policy on ``multi_domain``, the
        code (``demo_python``), finance extraction (``finance_facts``) and scene layout (``scene_layouts``) envs in the
        single-turn tier and the terminal tasks (``terminal_tasks``) as agent episodes, each iteration sampling both
        tiers; greedy and sampled eval of every eval env (8 completions, or 4 episodes, each), per domain, every 5
        versions. Single-turn prompts are the raw text the policy was warm-started on (``chat_template: none``), its
        agent template serves the episodes."""
        return cls(
            suite=MULTI_DOMAIN_SUITE_REF, policy=DEMO_MULTI_POLICY, iterations=20,
            # a worked answer quotes its lines first: a three-object layout is up to ~150 tokens of the policy's
            rollout=RolloutConfig(max_model_len=1024, max_new_tokens=192, chat_template="none", balance_domains=True),
            agent=AgentConfig(envs_per_iteration=8, samples_per_env=8, temperature=0.8, max_new_tokens=96,
                              token_budget=512, eval_samples=4),
            # an optimizer step is one micro batch of 2 groups: at 1e-4 a policy near its optimum random-walks (code
            # fell 22 points from a start at 0.55 greedy), at 2e-5 with the rate warmed up no domain fell more than
            # one env in 20 versions from the two strong starts measured, two from the weaker (docs/multi-domain.md)
            train=TrainConfig(micro_batch_size=16, learning_rate=2e-5, lr_warmup_steps=40),
            eval=EvalConfig(every=5, max_new_tokens=192),
            admission=AdmissionConfig(checks=["consistency", "solvability", "anti_hacking"]),
        )
