"""The process's live trainer: one DeepSpeed engine kept between updates when every task runs in this process.

A local ``pyflyte run`` (and a test, or a benchmark) runs the update of every iteration in one process. Building a
``PolicyTrainer`` for each of them loads the weights, initializes DeepSpeed and reads back the training state the
previous update had just written (``train_state/``: ~3.5x the fp32 weights) or replays. ``acquire`` skips all of that when the
update starts from exactly the version the live trainer saved last: the version's recorded state (its
``posttrain_state.json``: the digest of the weights beside it, the optimizer step, the settings) equals the one the
trainer wrote, and the config and reference are the same. The trainer then continues from its memory, with the
random state put back to what it saved, so the result is the one a rebuilt trainer restoring that state would get
(tested bit for bit). Any other start builds a new trainer (closing the old one) with the version's state, restored
or replayed (``training.replay.rebuild``): a resumed run, or a task pod on a cluster, rebuilds from disk. Which
versions write their full state is ``TrainConfig.state_every``'s choice (``tasks/update.py``).

Example (``policy_dir`` a version written by a trainer of this process with ``TrainConfig()``):
    >>> from posttrain.config import TrainConfig
    >>> trainer = acquire("/path/to/policy-v3", TrainConfig())   # doctest: +SKIP
    >>> stats = trainer.train_on(samples); trainer.save("/path/to/policy-v4")   # doctest: +SKIP
    >>> acquire("/path/to/policy-v4", TrainConfig()) is trainer  # doctest: +SKIP
    True
    >>> shutdown()
"""

from __future__ import annotations

import logging
import os
import threading

from posttrain.config import TrainConfig
from posttrain.training.checkpoints import read_state_meta
from posttrain.training.replay import rebuild
from posttrain.training.trainer import PolicyTrainer

log = logging.getLogger(__name__)

_lock = threading.Lock()
_live: PolicyTrainer | None = None


def acquire(policy_dir: str | os.PathLike, cfg: TrainConfig,
            reference_dir: str | os.PathLike | None = None) -> PolicyTrainer:
    """A trainer on ``policy_dir``: the live one when it saved exactly this version last, else a new one."""
    global _live
    with _lock:
        if _live is not None and continues(_live, policy_dir, cfg, reference_dir):
            _live.resume_from_memory()
            log.info("update continues the live trainer from %s (no reload)", policy_dir)
            return _live
        _close_live()
        _live = rebuild(policy_dir, cfg, reference_dir=reference_dir)
        return _live


def continues(trainer: PolicyTrainer, policy_dir: str | os.PathLike, cfg: TrainConfig,
              reference_dir: str | os.PathLike | None) -> bool:
    """Whether ``policy_dir`` is the version ``trainer`` saved last, under the same config and reference."""
    saved = trainer.last_saved_state
    return (saved is not None and cfg.carry_train_state and trainer.cfg == cfg
            and trainer.reference_dir == (str(reference_dir) if reference_dir is not None else None)
            and read_state_meta(policy_dir) == saved)


def discard(trainer: PolicyTrainer) -> None:
    """Close ``trainer`` and forget it if it is the live one (after a failed update: its state is unknown)."""
    global _live
    with _lock:
        if trainer is _live:
            _live = None
    trainer.close()


def shutdown() -> None:
    """Close the live trainer, if any (the workflow's end, or its failure)."""
    with _lock:
        _close_live()


def _close_live() -> None:
    global _live
    if _live is not None:
        trainer, _live = _live, None
        trainer.close()
