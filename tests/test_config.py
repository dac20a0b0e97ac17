"""Configs validate when built: a value that cannot work raises one ``ConfigError`` naming every bad field."""

from __future__ import annotations

from dataclasses import replace

import pytest

from posttrain.config import (
    ADMISSION_CHECKS,
    AdmissionConfig,
    ConfigError,
    DemoPolicyConfig,
    DockerPoolConfig,
    EvalConfig,
    LoopConfig,
    RolloutConfig,
    SandboxConfig,
    TrainConfig,
    policy_reference,
)
from posttrain.locations import local_copy

pytestmark = pytest.mark.unit

CONFIGS = [DockerPoolConfig, SandboxConfig, RolloutConfig, TrainConfig, EvalConfig, DemoPolicyConfig, AdmissionConfig,
           LoopConfig]


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda cls: cls.__name__)
def test_defaults_are_valid(cls):
    assert cls() == cls()


def test_smoke_is_valid_and_unchanged():
    cfg = LoopConfig.smoke()
    assert (cfg.iterations, cfg.rollout.samples_per_env, cfg.rollout.envs_per_iteration, cfg.rollout.max_new_tokens,
            cfg.train.micro_batch_size, cfg.eval.limit, cfg.eval.max_new_tokens, cfg.admission.checks) == \
           (1, 4, 6, 40, 24, 12, 40, ["consistency", "solvability", "anti_hacking"])
    assert replace(cfg) == cfg  # built again through __init__: still valid


@pytest.mark.parametrize("preset", ["smoke", "agent_demo", "agent_long_demo", "multi_domain_demo"])
def test_every_workflow_preset_is_valid_and_names_what_exists(preset):
    cfg = getattr(LoopConfig, preset)()
    assert replace(cfg) == cfg  # built again through __init__: every field and relation checked
    assert local_copy(cfg.suite) and policy_reference(cfg.policy) == ""


@pytest.mark.parametrize("cls, kwargs, message", [
    (RolloutConfig, {"samples_per_env": 0}, "rollout.samples_per_env=0: must be >= 1"),
    (RolloutConfig, {"envs_per_iteration": -1}, "rollout.envs_per_iteration=-1: must be >= 1"),
    (RolloutConfig, {"temperature": -0.1}, "rollout.temperature=-0.1: must be >= 0"),
    (RolloutConfig, {"top_p": 0.0}, "rollout.top_p=0.0: must be in (0, 1]"),
    (RolloutConfig, {"top_p": 1.5}, "rollout.top_p=1.5: must be in (0, 1]"),
    (RolloutConfig, {"max_new_tokens": 256, "max_model_len": 256},
     "rollout.max_new_tokens=256: must be < max_model_len (256)"),
    (SandboxConfig, {"backend": "vm"}, "sandbox.backend='vm': must be one of ['bwrap', 'bwrap-warm', 'docker']"),
    (SandboxConfig, {"timeout_s": 0}, "sandbox.timeout_s=0: must be > 0"),
    (SandboxConfig, {"memory_mb": -5}, "sandbox.memory_mb=-5: must be >= 1"),
    (SandboxConfig, {"batch_concurrency": 0}, "sandbox.batch_concurrency=0: must be >= 1"),
    (SandboxConfig, {"queue_timeout_s": -1.0}, "sandbox.queue_timeout_s=-1.0: must be >= 0"),
    (SandboxConfig, {"cpus": 0}, "sandbox.cpus=0: must be > 0"),
    (DockerPoolConfig, {"image": ""}, "sandbox.docker.image='': must be non-empty"),
    (TrainConfig, {"zero_stage": 4}, "train.zero_stage=4: must be one of [-1, 0, 1, 2, 3]"),
    (TrainConfig, {"micro_batch_size": 0}, "train.micro_batch_size=0: must be >= 1"),
    (TrainConfig, {"epochs": 0}, "train.epochs=0: must be >= 1"),
    (TrainConfig, {"learning_rate": 0.0}, "train.learning_rate=0.0: must be > 0"),
    (TrainConfig, {"policy_loss": "ppo"}, "train.policy_loss='ppo': unknown policy loss 'ppo'; known: ["),
    (TrainConfig, {"advantage_estimator": "loo"}, "train.advantage_estimator='loo': unknown advantage estimator"),
    (TrainConfig, {"loss_aggregation": "sum"}, "train.loss_aggregation='sum': unknown mode 'sum'; known: ["),
    (EvalConfig, {"split": "test"}, "eval.split='test': must be one of ['train', 'eval']"),
    (EvalConfig, {"limit": -1}, "eval.limit=-1: must be >= 0"),
    (AdmissionConfig, {"checks": ["solvability", "vibes"]}, "admission.checks=['solvability', 'vibes']: unknown"),
    (AdmissionConfig, {"k": 0}, "admission.k=0: must be >= 1"),
    (AdmissionConfig, {"repeats": 0}, "admission.repeats=0: must be >= 1"),
    (AdmissionConfig, {"mutation_threshold": 1.2}, "admission.mutation_threshold=1.2: must be in [0, 1]"),
    (DemoPolicyConfig, {"num_heads": 0}, "demo_policy.num_heads=0: must be >= 1"),
    (LoopConfig, {"iterations": -1}, "iterations=-1: must be >= 0"),
    (LoopConfig, {"suite": "no/such/suite"}, "suite='no/such/suite': no such directory"),
    (LoopConfig, {"policy": "no/such/policy"}, "policy='no/such/policy': no such directory"),
    (LoopConfig, {"eval": EvalConfig(max_new_tokens=300), "rollout": RolloutConfig(max_model_len=256)},
     "eval.max_new_tokens=300: must be < rollout.max_model_len (256)"),
])
def test_a_bad_value_names_its_field(cls, kwargs, message):
    with pytest.raises(ConfigError) as raised:
        cls(**kwargs)
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_every_problem_of_a_config_is_reported_at_once():
    with pytest.raises(ConfigError) as raised:
        TrainConfig(epochs=0, zero_stage=7, policy_loss="nope")
    assert str(raised.value).count("; ") >= 2
    assert all(name in str(raised.value) for name in ("train.epochs=0", "train.zero_stage=7", "train.policy_loss="))


def test_a_nested_config_is_named_by_its_path():
    with pytest.raises(ConfigError, match=r"^sandbox\.docker\.max_uses=0: must be >= 1$"):
        SandboxConfig(docker=DockerPoolConfig(max_uses=0))


@pytest.mark.parametrize("cls, kwargs", [
    (AdmissionConfig, {"batch_concurrency": 0}),  # 0 means the sandbox's
    (AdmissionConfig, {"checks": list(ADMISSION_CHECKS), "k": 1, "min_timeout_s": 0, "min_memory_mb": 0}),
    (DockerPoolConfig, {"size": 3, "max_size": 1, "min_idle": 5, "parallel_starts": 0}),  # the pool normalizes these
    (SandboxConfig, {"timeout_s": 1, "memory_mb": 64, "start_retries": 0, "long_slots": 0}),
    (RolloutConfig, {"temperature": 0.0, "max_model_len": 128}),
    (TrainConfig, {"advantage_eps": 0, "max_grad_norm": 0, "loss_aggregation": "seq_mean_token_sum_norm"}),
    (LoopConfig, {"iterations": 0, "suite": "s3://bucket/suite"}),  # a URI is left to the task's machine
])
def test_legitimate_edge_values_are_accepted(cls, kwargs):
    cls(**kwargs)


def test_only_the_demo_policy_may_be_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("POSTTRAIN_POLICY", str(tmp_path / "built-on-demand"))
    assert LoopConfig().policy == "demo"  # the workflow builds it, where POSTTRAIN_POLICY says when it runs
    assert LoopConfig(policy=str(tmp_path)).policy == str(tmp_path)
    with pytest.raises(ConfigError, match="policy=.*missing.*: no such directory"):
        LoopConfig(policy=str(tmp_path / "missing"))


def test_replace_validates_again():
    with pytest.raises(ConfigError, match="admission.k=0"):
        replace(AdmissionConfig(), k=0)


def test_flyte_deserialization_validates():
    """What a task receives is built through ``__init__`` too: a bad value cannot slip past as a workflow input."""
    from flytekit.core.context_manager import FlyteContextManager
    from flytekit.core.type_engine import TypeEngine

    cfg = LoopConfig()
    cfg.rollout.samples_per_env = 0  # attribute assignment is not checked; the literal carries the bad value
    ctx = FlyteContextManager.current_context()
    literal = TypeEngine.to_literal(ctx, cfg, LoopConfig, TypeEngine.to_literal_type(LoopConfig))
    with pytest.raises(Exception) as raised:  # mashumaro's InvalidFieldValue("rollout"), raised while handling ours
        TypeEngine.to_python_value(ctx, literal, LoopConfig)
    assert str(raised.value.__context__) == "rollout.samples_per_env=0: must be >= 1"
