"""Shared integration fixtures: ``tiny_policy``, a real demo policy (HF dir) built once per test session."""

from __future__ import annotations

import os

import pytest
import torch

from posttrain.config import DEMO_SUITE, DemoPolicyConfig

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache for vLLM's CPU backend
if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # read when deepspeed is first imported

TINY_POLICY = DemoPolicyConfig(sft_steps=12, sft_batch_size=8)  # seconds to build; output is near random


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory):
    """Path of a tiny demo policy trained for a few steps on the demo suite's train split."""
    from posttrain.envs.suite import load_suite
    from posttrain.training.demo_policy import build_demo_policy

    pairs = [(env.prompt, env.reference) for env in load_suite(DEMO_SUITE).envs if env.split == "train"]
    return build_demo_policy(tmp_path_factory.mktemp("tiny_policy") / "policy", TINY_POLICY, pairs)
