"""The scripted policies admission samples as probes (reference, degenerate, noisy), and policy references
(checkpoints, registered versions and aliases) resolved for the discrimination check, through a real MLflow registry
(sqlite in a temp dir)."""

from __future__ import annotations

import pytest

from posttrain import tracking
from posttrain.admission.policies import (
    DegeneratePolicy,
    NoisyReferencePolicy,
    ReferencePolicy,
    VLLMPolicy,
    config_policy,
    make_policy,
)
from posttrain.config import AdmissionConfig, ConfigError
from posttrain.tracking.policies import pin_aliases, resolved
from posttrain.training.checkpoints import weights_digest
from tests import mlflow_store
from tests.admission.common import spec


@pytest.mark.unit
def test_scripted_policies():
    s = spec()
    assert ReferencePolicy().solutions(s, 3, seed=0) == [s.reference] * 3
    assert DegeneratePolicy("noop").solutions(s, 1, 0) == ["def add_1(*args, **kwargs):\n    pass\n"]
    assert DegeneratePolicy("identity").solutions(spec(runtime="bash"), 1, 0) == [""]
    noisy = NoisyReferencePolicy(0.5).solutions(s, 40, seed=3)
    assert noisy == NoisyReferencePolicy(0.5).solutions(s, 40, seed=3)
    assert 5 < noisy.count(s.reference) < 35
    assert len(set(noisy)) > 2
    assert NoisyReferencePolicy(1.0).solutions(s, 5, 0) == [s.reference] * 5
    assert s.reference not in NoisyReferencePolicy(0.0).solutions(s, 5, 0)
    names = ("reference", "identity", "noop", "noisy:0.25")
    assert [make_policy(name).name for name in names] == list(names)
    assert [len(group) for group in make_policy("noisy:0.25").solutions_many([s, s], 3, seed=0)] == [3, 3]
    with pytest.raises(FileNotFoundError, match="policy dir /nonexistent/checkpoint does not exist"):
        make_policy("/nonexistent/checkpoint")


@pytest.mark.unit
def test_a_bad_policy_name_is_refused_when_the_config_is_built_naming_the_field():
    with pytest.raises(ConfigError, match=r"admission.weak_policy='identiy': not a scripted policy \(reference, "
                                          r"identity, noop, noisy:P\) nor a policy reference: no such directory"):
        AdmissionConfig(weak_policy="identiy")
    with pytest.raises(ConfigError, match=r"admission.strong_policy='noisy:x': must be noisy:P"):
        AdmissionConfig(strong_policy="noisy:x")
    assert AdmissionConfig(learnability_policy="").learnability_policy == ""  # "" switches learnability off


@pytest.fixture
def registered(tmp_path, monkeypatch, tiny_policy):
    """A registry holding ``tiny_policy`` as version 1 of ``posttrain-policy``, aliased ``champion``."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(tmp_path))
    monkeypatch.setenv("POSTTRAIN_ARTIFACT_ROOT", (tmp_path / "artifacts").as_uri())
    run = tracking.start_run("posttrain-policies-test", run_name="iteration-0")
    version = tracking.register_policy(run, str(tiny_policy), 0)
    tracking.client().set_registered_model_alias(tracking.POLICY_MODEL_NAME, "champion", version)
    return version


@pytest.mark.integration
@pytest.mark.parametrize("reference", ["models:/posttrain-policy@champion", "models:/posttrain-policy/1"])
def test_weak_and_strong_policies_resolve_registered_versions_and_aliases(registered, tiny_policy, reference):
    cfg = AdmissionConfig(weak_policy="identity", strong_policy=reference, temperature=0.5)
    policy = config_policy(resolved(cfg), "strong_policy")
    assert isinstance(policy, VLLMPolicy)
    assert weights_digest(policy.policy_dir) == weights_digest(tiny_policy)  # the registered weights, downloaded
    assert policy.temperature == 0.5
    assert pin_aliases(cfg).strong_policy == "models:/posttrain-policy/1"  # an alias pinned; a version kept
    assert pin_aliases(cfg).weak_policy == "identity"


@pytest.mark.integration
def test_an_alias_that_names_nothing_is_refused_naming_the_config_field(registered, tmp_path):
    cfg = AdmissionConfig(weak_policy="models:/posttrain-policy@nobody", strong_policy=str(tmp_path))
    expected = r"admission.weak_policy: policy='models:/posttrain-policy@nobody': no such registered version or alias"
    with pytest.raises(ConfigError, match=expected):
        resolved(cfg)
    with pytest.raises(ConfigError, match=expected):
        pin_aliases(cfg)
    with pytest.raises(ConfigError, match=f"admission.strong_policy: policy dir {tmp_path} has no config.json"):
        config_policy(cfg, "strong_policy")
