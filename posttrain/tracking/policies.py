"""Policy references resolved to local checkpoint directories: the one resolution every stage that samples a policy
goes through (the loop's starting policy, admission's weak, strong and learnability policies, the evaluate workflow).

It sits above the trainer (it builds the demo policies) and the registry (it downloads registered versions), so the
library layers below take local checkpoint directories and the entry points resolve first: the Flyte tasks in the
pod that samples, ``posttrain admit`` before admission.

- ``policy_dir(ref)``: the local directory of ``demo`` / ``demo-agent`` / ``demo-agent-long`` (built, seeded and
  cached on disk if absent), a registered version or alias (``models:/posttrain-policy@champion``, ``/3``:
  downloaded), a URI (fetched: ``posttrain.locations.local_copy``) or a local or packaged folder (as it is), checked
  (config.json, weights, tokenizer).
- ``pin_aliases(cfg)``: an ``AdmissionConfig`` with each registry alias among its policies replaced by the version it
  points at now, so admission's cache key and report say which version it sampled.
- ``resolved(cfg)``: an ``AdmissionConfig`` with each policy reference among its policies replaced by its local
  directory (scripted policies kept); what admission samples then needs no registry.

Errors name the config field (``admission.weak_policy: policy='models:/posttrain-policy@nobody': no such ...``).

Example:
    >>> from posttrain.config import AdmissionConfig
    >>> resolved(AdmissionConfig(weak_policy="identity")).weak_policy  # scripted: kept
    'identity'
    >>> cfg = AdmissionConfig(weak_policy="demo", strong_policy="models:/posttrain-policy@champion")
    >>> pin_aliases(cfg).strong_policy                             # doctest: +SKIP
    'models:/posttrain-policy/3'
    >>> resolved(cfg).strong_policy                                 # doctest: +SKIP
    '/tmp/posttrain-policy-x1y2/policy'
"""

from __future__ import annotations

import tempfile
from dataclasses import replace

from posttrain.admission.policies import POLICY_FIELDS, naming, scripted_policy
from posttrain.config import DEMO_AGENT_POLICIES, DEMO_POLICY, AdmissionConfig, default_agent_policy_dir, \
    default_policy_dir
from posttrain.locations import local_copy
from posttrain.tracking import registry
from posttrain.training.checkpoints import check_policy_dir


def policy_dir(ref: str) -> str:
    """The local directory of the policy ``ref`` names, checked (config.json, weights, tokenizer)."""
    if ref == DEMO_POLICY:
        from posttrain.training.demo_policy import main_demo_policy

        return str(check_policy_dir(main_demo_policy(default_policy_dir())))
    if ref in DEMO_AGENT_POLICIES:
        from posttrain.agent.warm_start import RECIPES, main_agent_policy

        return str(check_policy_dir(main_agent_policy(default_agent_policy_dir(ref), RECIPES[ref])))
    if registry.parse_model_uri(ref):
        return str(check_policy_dir(registry.download_policy(ref, tempfile.mkdtemp(prefix="posttrain-policy-"))))
    return str(check_policy_dir(local_copy(ref)))


def pin_aliases(cfg: AdmissionConfig) -> AdmissionConfig:
    """``cfg`` with each registry alias among its policies replaced by the version it points at now
    (``models:/posttrain-policy@champion`` -> ``models:/posttrain-policy/3``)."""
    pinned = {}
    for field in POLICY_FIELDS:
        with naming(field):
            pinned[field] = registry.pinned(getattr(cfg, field))
    return replace(cfg, **pinned)


def resolved(cfg: AdmissionConfig) -> AdmissionConfig:
    """``cfg`` with each of its policies that is a reference (not scripted, not off) replaced by its local
    directory; one that cannot be resolved raises ``ConfigError`` naming the field."""
    local = {}
    for field in POLICY_FIELDS:
        name = getattr(cfg, field)
        if name and scripted_policy(name) is None:
            with naming(field):
                local[field] = policy_dir(name)
    return replace(cfg, **local)
