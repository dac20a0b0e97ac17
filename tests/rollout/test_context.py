"""The engine's context: the config's ``max_model_len``, else the checkpoint's own positions (capped); completions
that cannot fit are refused before an engine starts, naming the field."""

from __future__ import annotations

import json

import pytest

from posttrain.config import RolloutConfig
from posttrain.rollout.context import AUTO_CONTEXT_CAP, context_length, model_positions

pytestmark = pytest.mark.unit


def checkpoint(tmp_path, **config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_the_default_context_is_the_models_own(tmp_path, family_policy):
    assert context_length(checkpoint(tmp_path, max_position_embeddings=512), RolloutConfig()) == 512
    assert context_length(checkpoint(tmp_path, n_positions=1024), RolloutConfig()) == 1024
    assert context_length(checkpoint(tmp_path, text_config={"max_position_embeddings": 2048}), RolloutConfig()) == 2048
    policy = family_policy("qwen2")
    assert context_length(policy, RolloutConfig()) == min(model_positions(policy), AUTO_CONTEXT_CAP)


def test_a_long_context_model_is_capped_and_the_config_overrides_both(tmp_path):
    path = checkpoint(tmp_path, max_position_embeddings=131072)
    assert context_length(path, RolloutConfig()) == AUTO_CONTEXT_CAP
    assert context_length(path, RolloutConfig(max_model_len=16384)) == 16384


def test_completions_that_cannot_fit_are_refused_naming_the_field(tmp_path):
    path = checkpoint(tmp_path, max_position_embeddings=64)
    with pytest.raises(ValueError, match=r"rollout.max_new_tokens \(64\) must be < the engine's context, 64"):
        context_length(path, RolloutConfig(max_new_tokens=64))
    with pytest.raises(ValueError, match=r"eval.max_new_tokens \(100\).*the model's own 64 positions"):
        context_length(path, RolloutConfig(max_new_tokens=16), {"eval.max_new_tokens": 100})
    assert context_length(path, RolloutConfig(max_new_tokens=16), {"eval.max_new_tokens": 63}) == 64


def test_a_config_without_positions_needs_the_field(tmp_path):
    path = checkpoint(tmp_path, hidden_size=64)
    with pytest.raises(ValueError, match="names no position count.*set rollout.max_model_len"):
        context_length(path, RolloutConfig())
    assert context_length(path, RolloutConfig(max_model_len=128)) == 128


def test_a_context_beyond_the_checkpoints_positions_is_refused_naming_both(tmp_path):
    """vLLM refuses it at engine start with its own words; here it is refused first, naming the field and the file."""
    path = checkpoint(tmp_path, max_position_embeddings=1024)
    assert context_length(path, RolloutConfig(max_model_len=1024)) == 1024
    with pytest.raises(ValueError, match=r"rollout.max_model_len \(2048\) is above the 1024 positions .*config.json"):
        context_length(path, RolloutConfig(max_model_len=2048))
    assert context_length(checkpoint(tmp_path), RolloutConfig(max_model_len=2048)) == 2048  # no count: the config's
