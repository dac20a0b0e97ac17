"""vLLM's routine log lines of an in-place weight swap, kept out of the run's output.

Every policy version is swapped into the live engine in place (``engine.WorkerExtension.swap_weights``), and vLLM
logs the same lines on every swap, per engine process: a warning per parameter whose checkpoint dtype is not the
engine's (the demo policy's fp32 weights into a bf16 engine: one per tensor, cast as intended), "RotaryEmbedding:
Failed to load weights" (it has no weights to load), "ParallelLMHead: Failed to load weights" when the head is tied
to the input embeddings (the checkpoint holds no head; ``swap_weights`` re-packs it), the reload's time and the
prefix cache's reset. In a `make demo` on a 2-core CPU that was ~1,000 of the 1,370 lines printed, burying the
loop's one line per iteration. ``quiet_swap`` drops exactly those records while a swap runs; every other record
passes, among them "ParallelLMHead: Failed to load weights" of an untied head, which would mean a real failure.

Example:
    >>> record = logging.LogRecord("vllm.model_executor.models.utils", logging.WARNING, "utils.py", 333,
    ...     "Attempted to load weight %s with dtype %s into parameter with dtype %s",
    ...     ("norm.weight", "torch.float32", "torch.bfloat16"), None)
    >>> routine(record, tied_head=False)
    True
    >>> head = logging.LogRecord("vllm", logging.WARNING, "layerwise.py", 266, "%s: Failed to load weights",
    ...                          ("ParallelLMHead",), None)
    >>> routine(head, tied_head=True), routine(head, tied_head=False)
    (True, False)
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

CAST = "Attempted to load weight %s with dtype %s into parameter with dtype %s"  # vllm.model_executor.models.utils
NO_WEIGHTS = "%s: Failed to load weights"  # vllm.model_executor.model_loader.reload.layerwise
ROUTINE_INFO = ("Reloading and processing weights took %.2f seconds", "Successfully reset prefix cache")


def routine(record: logging.LogRecord, tied_head: bool) -> bool:
    """Whether ``record`` is one of the lines every swap logs (``tied_head``: the model ties its LM head to its input
    embeddings, so the head is expected not to load)."""
    if record.levelno > logging.WARNING:
        return False
    if record.msg == CAST or record.msg in ROUTINE_INFO:
        return True
    if record.msg == NO_WEIGHTS and record.args:
        module = record.args[0]
        return module == "RotaryEmbedding" or (module == "ParallelLMHead" and tied_head)
    return False


class RoutineSwapLines(logging.Filter):
    """A handler filter that drops ``routine`` records."""

    def __init__(self, tied_head: bool):
        super().__init__()
        self.tied_head = tied_head

    def filter(self, record: logging.LogRecord) -> bool:
        return not routine(record, self.tied_head)


@contextmanager
def quiet_swap(tied_head: bool) -> Iterator[None]:
    """Drop the ``routine`` records from vLLM's log handlers (its own, or the root's where vLLM left logging to the
    application) for the duration of the block."""
    vllm_logger = logging.getLogger("vllm")
    handlers = list(vllm_logger.handlers or (logging.getLogger().handlers if vllm_logger.propagate else []))
    quiet = RoutineSwapLines(tied_head)
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)
