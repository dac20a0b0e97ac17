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

``prestart`` builds the first update's trainer in a background thread (``tasks.update.warm_trainer``: while
admission runs and v0 is evaluated), after the engine's own background start has ended (their imports must not
race); the next ``acquire`` waits for it and takes it when it asks for the same start (directory, config,
reference), torch's random state put back to what it was right after the build, so the update is the one a trainer
built there would make (tested bit for bit). Asked for another start, it closes it and builds its own.

Example (``policy_dir`` a version written by a trainer of this process with ``TrainConfig()``):
    >>> from posttrain.config import TrainConfig
    >>> trainer = acquire("/path/to/policy-v3", TrainConfig())   # doctest: +SKIP
    >>> stats = trainer.train_on(samples); trainer.save("/path/to/policy-v4")   # doctest: +SKIP
    >>> acquire("/path/to/policy-v4", TrainConfig()) is trainer  # doctest: +SKIP
    True
    >>> shutdown()
"""

from __future__ import annotations

import copy
import logging
import os
import threading

import torch

from posttrain.config import TrainConfig
from posttrain.training.checkpoints import read_state_meta
from posttrain.training.replay import rebuild
from posttrain.training.trainer import PolicyTrainer

log = logging.getLogger(__name__)

_lock = threading.Lock()
_live: PolicyTrainer | None = None
_building: threading.Thread | None = None  # prestart's background build
_prestarted: tuple | None = None  # what it built: (start key, trainer, torch's random state after the build)


def acquire(policy_dir: str | os.PathLike, cfg: TrainConfig,
            reference_dir: str | os.PathLike | None = None) -> PolicyTrainer:
    """A trainer on ``policy_dir``: the live one when it saved exactly this version last, the one ``prestart`` built
    when it was built for this start, else a new one."""
    global _live
    settle()
    with _lock:
        if _live is not None and continues(_live, policy_dir, cfg, reference_dir):
            _live.resume_from_memory()
            log.info("update continues the live trainer from %s (no reload)", policy_dir)
            return _live
        _close_live()
        if (prestarted := _take_prestarted(_start_key(policy_dir, cfg, reference_dir))) is not None:
            log.info("update takes the trainer built in the background on %s", policy_dir)
            _live = prestarted
            return _live
        _live = rebuild(policy_dir, cfg, reference_dir=reference_dir)
        return _live


def prestart(policy_dir: str | os.PathLike, cfg: TrainConfig,
             reference_dir: str | os.PathLike | None = None) -> threading.Thread:
    """Build the trainer ``acquire(policy_dir, cfg, reference_dir)`` would, in a background thread; the next
    ``acquire`` waits for it. A failed build is logged, and the next ``acquire`` builds again (and raises)."""
    from posttrain.rollout import live as live_engine

    key = _start_key(policy_dir, cfg, reference_dir)

    def run() -> None:
        global _prestarted
        try:
            live_engine.settle()  # the engine's background start: two threads importing one package at once can fail
            trainer = rebuild(policy_dir, cfg, reference_dir=reference_dir)
        except Exception:  # noqa: BLE001 - reported where it matters: the next acquire builds again and raises
            log.exception("update: background trainer build failed; the next update builds its own")
            return
        with _lock:
            _prestarted = (key, trainer, torch.get_rng_state())

    global _building
    _building = threading.Thread(target=run, name="posttrain-trainer-prestart", daemon=True)
    _building.start()
    return _building


def settle() -> None:
    """Wait for a background build (``prestart``) to end."""
    if _building is not None and _building is not threading.current_thread():
        _building.join()


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
    """Close the live trainer and one built in the background, if any (the workflow's end, or its failure)."""
    settle()
    with _lock:
        _close_live()
        _take_prestarted(None)


def _start_key(policy_dir: str | os.PathLike, cfg: TrainConfig, reference_dir: str | os.PathLike | None) -> tuple:
    return (os.path.realpath(policy_dir), copy.deepcopy(cfg),
            os.path.realpath(reference_dir) if reference_dir is not None else None)


def _take_prestarted(key: tuple | None) -> PolicyTrainer | None:
    """The trainer ``prestart`` built, when it was built for ``key`` (torch's random state put back); else None, and
    one built for another start (or any, ``key`` None) is closed. Either way it is taken: it serves one update."""
    global _prestarted
    built, _prestarted = _prestarted, None
    if built is None:
        return None
    built_key, trainer, rng_state = built
    if key is None or built_key != key:
        trainer.close()
        return None
    torch.set_rng_state(rng_state)
    return trainer


def _close_live() -> None:
    global _live
    if _live is not None:
        trainer, _live = _live, None
        trainer.close()
