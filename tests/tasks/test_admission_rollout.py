"""Admission samples a checkpoint policy as the run's rollout would (its chat template and system prompt), and a run
whose admission samples none keeps one admission cache key whatever its rollout settings."""

from __future__ import annotations

import pytest

from posttrain.config import AdmissionConfig, RolloutConfig
from tasks.admit import admission_rollout

pytestmark = pytest.mark.unit

RUN = RolloutConfig(chat_template="chatml", system_prompt="Write Python.", temperature=0.6)


@pytest.mark.parametrize("role", ["weak_policy", "strong_policy", "learnability_policy"])
def test_a_checkpoint_policy_is_prompted_with_the_runs_rollout_settings(tmp_path, role):
    assert admission_rollout(rollout=RUN, cfg=AdmissionConfig(**{role: str(tmp_path)})) == RUN


def test_scripted_policies_keep_the_default_so_the_admission_cache_ignores_rollout_settings():
    assert admission_rollout(rollout=RUN, cfg=AdmissionConfig()) == RolloutConfig()
