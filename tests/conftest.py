"""Shared fixtures (``tiny_policy``: a real demo policy, HF dir, built once per session; the process's live vLLM
engine, shut down when the session ends) and the kind rule.

Tests mirror the library (``tests/<package>/test_<module>.py``); what kind a test is, is a marker, never a folder:
every test carries exactly one of ``unit``, ``integration``, ``e2e`` (``pytest -m unit`` runs the fast ones), and
collection fails on a test that has none or several.
"""

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


@pytest.fixture(scope="session", autouse=True)
def _shutdown_live_engine():
    """Tests share the process's live vLLM engine (``posttrain.rollout.live``): the first that needs one starts it,
    later ones swap weights in place; it stops here, before pytest closes the streams its shutdown logs to."""
    yield
    from posttrain.rollout import live

    live.shutdown_all()


KINDS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(config, items):
    """Refuse to run a test whose kind is missing or ambiguous: a new test module must say what it needs."""
    wrong = [f"{item.nodeid}: {kinds or 'no kind marker'}" for item in items
             if len(kinds := [k for k in KINDS if item.get_closest_marker(k)]) != 1]
    if wrong:
        raise pytest.UsageError("every test needs exactly one of the markers " + ", ".join(KINDS) + " "
                                "(pytestmark = pytest.mark.<kind> at module level):\n  " + "\n  ".join(wrong))
