"""Training state rebuilt by replaying updates: what lets a version skip writing its state (``train.state_every``).

A full fine-tune's training state (fp32 master weights, two Adam moments) is ~7x the bf16 weights; writing it with
every version would write ~8x the weights per iteration. A version saved without it (``PolicyTrainer.save`` with
``write_state=False``) records instead what replays the update that wrote it (``checkpoints.save_replay``): the
samples it trained on, the RNG it continued with, and the digest of the master weights it reached -- kilobytes to
megabytes. ``rebuild`` gives the update of such a version a trainer holding exactly the state the original trainer
had: it follows the versions' ``parent`` links back to the newest version whose state was written (or to the
loop's start, which has none: a fresh optimizer, as the first update had), builds a trainer there and replays every
later update in order, checking each version's master digest bit for bit. A rerun after a kill, or a task pod of
a cluster, then continues as if the trainer had never stopped; the cost is the replayed updates' compute (no
rollout, no reward).

Where a replay cannot be exact -- an ancestor is gone, a state was pruned, the settings changed, or an update does
not reproduce bit for bit on this hardware -- the update starts a fresh optimizer from the version's exported
weights, with the reason logged, as for a pruned state: never a trainer whose weights differ from the version's.

Example (``policy-v3`` saved with ``write_state=False``, its parents back to the loop's start likewise):
    >>> from posttrain.config import TrainConfig
    >>> trainer = rebuild("/runs/policy-v3", TrainConfig())   # builds on v0, replays v1, v2, v3  # doctest: +SKIP
    >>> replay_chain("/runs/policy-v0")                       # nothing to replay: no state meta  # doctest: +SKIP
    ('/runs/policy-v0', [])
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from posttrain.config import TrainConfig
from posttrain.locations import local_copy
from posttrain.training import records
from posttrain.training.checkpoints import (
    PARENT,
    POLICY_META,
    PRUNED,
    REPLAY,
    STATE_META,
    TRAIN_STATE,
    read_json_at,
    state_mismatch,
    state_written,
)
from posttrain.training.trainer import PolicyTrainer

log = logging.getLogger(__name__)


class ReplayError(RuntimeError):
    """A version's training state cannot be replayed exactly; the message says which version and why."""


def replay_chain(policy_dir: str | os.PathLike) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """``(base, versions)``: the newest ancestor-or-self of ``policy_dir`` whose training state was written (or that
    has none), and the versions after it to replay, oldest first, each ``(where it lives, its state meta)``.

    Raises ``ReplayError`` when a parent link is missing or leads nowhere, or the state to start from was pruned."""
    where, versions = str(policy_dir), []
    while True:
        state = read_json_at(where, f"{TRAIN_STATE}/{STATE_META}")
        if state is not None and PRUNED in state and versions:
            raise ReplayError(f"the training state of {where}, which the replay of {versions[-1][0]} starts from, "
                              f"was pruned ({state[PRUNED]})")
        if state is None or state_written(state):
            return where, versions[::-1]
        versions.append((where, state))
        parent = (read_json_at(where, POLICY_META) or {}).get(PARENT)
        if not parent:
            raise ReplayError(f"{where} records no {PARENT} ({POLICY_META}): its update cannot be replayed")
        if read_json_at(parent, POLICY_META) is None and read_json_at(parent, "config.json") is None:
            raise ReplayError(f"the parent of {where}, {parent}, is gone: its update cannot be replayed")
        where = parent


def rebuild(policy_dir: str | os.PathLike, cfg: TrainConfig,
            reference_dir: str | os.PathLike | None = None) -> PolicyTrainer:
    """A trainer on ``policy_dir`` with its training state: restored from disk when it was written, replayed from
    the newest written state before it when it was not (checked bit for bit), else a fresh optimizer (logged)."""
    if not cfg.carry_train_state:
        return PolicyTrainer(policy_dir, cfg, reference_dir=reference_dir)
    try:
        base, versions = replay_chain(policy_dir)
    except ReplayError as error:
        log.warning("%s: fresh optimizer from the exported weights of %s", error, policy_dir)
        return PolicyTrainer(policy_dir, cfg, reference_dir=reference_dir)
    if not versions:
        return PolicyTrainer(policy_dir, cfg, reference_dir=reference_dir)
    # a downloaded base stays for the trainer's life (a LoRA trainer reads its base weights again when it saves)
    trainer = PolicyTrainer(local_copy(base), cfg, reference_dir=reference_dir)
    try:
        _replay(trainer, versions)
    except ReplayError as error:
        trainer.close()
        log.warning("%s: fresh optimizer from the exported weights of %s", error, policy_dir)
        return PolicyTrainer(policy_dir, cfg, reference_dir=reference_dir)
    except BaseException:
        trainer.close()
        raise
    return trainer


def _replay(trainer: PolicyTrainer, versions: list[tuple[str, dict[str, Any]]]) -> None:
    """Replay each of ``versions`` on ``trainer`` (built on the version before the first), raising ``ReplayError``
    at the first that cannot be reproduced."""
    import torch

    expected = trainer.state_settings()
    for where, state in versions:
        problems = state_mismatch(state, expected)
        if problems:
            raise ReplayError(f"{where} was trained under other settings ({'; '.join(problems)})")
        record = torch.load(Path(local_copy(f"{where}/{TRAIN_STATE}")) / REPLAY, map_location="cpu",
                            weights_only=True)
        reached = trainer.replay(records.unpack(record["samples"]), record["client_state"])
        if reached != state["master_sha256"]:
            raise ReplayError(f"replaying the update that wrote {where} reached other weights (not bit for bit "
                              "reproducible here: another thread count, device or library version?)")
        log.info("replayed the update that wrote %s (optimizer step %d)", where, trainer.engine.global_steps)
