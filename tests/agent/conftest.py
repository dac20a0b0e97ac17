"""Fixtures of the agent tests: the demo policy's tokenizer and its chat format (the ``agent`` template), and
sandboxes of every backend (docker only where dockerd and the sandbox image are there, as in
``tests/sandbox/docker``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from posttrain.agent.template import AGENT_TEMPLATE, ChatFormat
from posttrain.config import DockerPoolConfig, SandboxConfig, default_policy_dir
from posttrain.envs.tools import DEFAULT_TOOLS, tool_specs
from posttrain.sandbox import make_sandbox
from tests.sandbox.cases import docker_reason


@pytest.fixture(scope="session")
def demo_policy() -> Path:
    """The demo policy (``posttrain demo-policy``): built with its default recipe if it is not there yet."""
    from posttrain.training.demo_policy import main_demo_policy

    return main_demo_policy(default_policy_dir())


@pytest.fixture(scope="session")
def tokenizer(demo_policy):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_policy)


@pytest.fixture(scope="session")
def fmt(tokenizer) -> ChatFormat:
    return ChatFormat(tokenizer, tool_specs(DEFAULT_TOOLS), AGENT_TEMPLATE)  # what the loop lists: agent.tools


@pytest.fixture(scope="module", params=["bwrap-warm", "docker"])
def sandbox(request):
    if request.param == "docker" and (why := docker_reason()):
        pytest.skip(why)
    # docker: each open session holds a container; the verifier needs a few more while sessions are open
    cfg = SandboxConfig(backend=request.param, docker=DockerPoolConfig(size=2, max_size=12))
    box = make_sandbox(cfg)
    yield box
    box.close()


class Recording:
    """Wraps a token engine and keeps every (prompt ids the engine reported, sampled ids) pair and batch size."""

    def __init__(self, engine):
        self.engine, self.calls, self.batches = engine, [], []

    def generate_ids(self, prompts, n, temperature, max_tokens, top_p=1.0, seed=None, stop=()):
        groups = self.engine.generate_ids(prompts, n, temperature, max_tokens, top_p, seed, stop)
        self.batches.append(len(prompts))
        self.calls += [(list(g[0].prompt_token_ids), list(g[0].token_ids), list(g[0].logprobs)) for g in groups]
        return groups


def assert_exact_tokens(episode, recording) -> None:
    """Every window of ``episode`` is exactly one engine call's prompt plus its sampled tokens (the last turn of the
    window), and its loss mask covers exactly the model tokens sampled in that window, with their logprobs."""
    from posttrain.agent.episode import behavior_logprobs, concat, loss_mask

    for window in episode.all_windows():
        ids = concat(window)
        matches = [(p, t, lp) for p, t, lp in recording.calls if p + t == ids]
        assert matches, "a window is not a prompt the engine received plus what it sampled"
        prompt, sampled, logprobs = matches[-1]
        assert window[-1].kind == "model"
        assert window[-1].token_ids == sampled
        mask = loss_mask(window)
        model = [s for s in window if s.kind == "model"]
        assert sum(mask) == sum(len(s.token_ids) for s in model)
        assert [t for t, m in zip(ids, mask) if m] == [t for s in model for t in s.token_ids]
        assert [lp for lp, m in zip(behavior_logprobs(window), mask) if m] == [x for s in model for x in s.logprobs]
        assert mask[len(prompt):] == [1] * len(sampled)
