"""``posttrain.rollout.vllm_logs``: the lines vLLM logs on every in-place swap are dropped while a swap runs, and
only those: an untied head that did not load, an error, or any line outside the swap still reaches the output."""

from __future__ import annotations

import io
import logging

import pytest

from posttrain.rollout.vllm_logs import CAST, NO_WEIGHTS, ROUTINE_INFO, quiet_swap

pytestmark = pytest.mark.unit


@pytest.fixture
def vllm_output():
    """What vLLM's logger prints, through a handler of its own (as vLLM configures it: no propagation)."""
    logger = logging.getLogger("vllm")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    saved = logger.handlers[:], logger.propagate, logger.level
    logger.handlers, logger.propagate = [handler], False
    logger.setLevel(logging.INFO)
    yield stream
    logger.handlers, logger.propagate, _ = saved
    logger.setLevel(saved[2])


def log_a_swap(untied_head_failed: bool = False) -> None:
    utils, layerwise = logging.getLogger("vllm.model_executor.models.utils"), logging.getLogger("vllm.layerwise")
    for name in ("embed_tokens.weight", "norm.weight"):
        utils.warning(CAST, name, "torch.float32", "torch.bfloat16")
    layerwise.warning(NO_WEIGHTS, "RotaryEmbedding")
    layerwise.warning(NO_WEIGHTS, "ParallelLMHead")
    logging.getLogger("vllm.inplace").info(ROUTINE_INFO[0], 0.02)
    logging.getLogger("vllm.block_pool").info(ROUTINE_INFO[1])
    logging.getLogger("vllm.engine").error("the engine lost a worker")


def test_a_tied_models_swap_prints_only_what_is_not_routine(vllm_output):
    with quiet_swap(tied_head=True):
        log_a_swap()
    assert vllm_output.getvalue().splitlines() == ["the engine lost a worker"]


def test_an_untied_head_that_did_not_load_is_still_reported(vllm_output):
    with quiet_swap(tied_head=False):
        log_a_swap()
    assert vllm_output.getvalue().splitlines() == ["ParallelLMHead: Failed to load weights", "the engine lost a worker"]


def test_outside_a_swap_every_line_passes(vllm_output):
    with quiet_swap(tied_head=True):
        pass
    log_a_swap()
    assert len(vllm_output.getvalue().splitlines()) == 2 + 2 + len(ROUTINE_INFO) + 1
