"""Policy checkpoints: HF safetensors directories with a ``posttrain_policy.json`` beside the weights.

A version written by the update also carries its training state in ``train_state/`` (``TRAIN_STATE``): DeepSpeed's
own checkpoint (``engine.save_checkpoint``: Adam moments and step, fp32 master weights, LR scheduler, under every
ZeRO stage) plus ``posttrain_state.json``, which records what the state belongs to: a digest of the weights
beside it and the settings that shape the optimizer. The next update restores the state only when all of those
match (``state_mismatch``); otherwise, or without the subdirectory (v0, a user's checkpoint), it starts a fresh
optimizer and logs why. vLLM and ``from_pretrained`` read only the top-level files, so the subdirectory is inert
to them. Its size is about 3.5x the fp32 weights (fp32 master copy + two Adam moments + the bf16 module).

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "config.json").write_text("{}")
    >>> check_policy_dir(d)
    Traceback (most recent call last):
    ...
    posttrain.training.checkpoints.CheckpointError: policy dir ... has no weights (*.safetensors): ...
    >>> len(dir_digest(d))
    64
    >>> read_state_meta(d) is None      # no train_state/: the next update starts a fresh optimizer
    True
    >>> state_mismatch({"zero_stage": 2, "learning_rate": 1e-4}, {"zero_stage": 3, "learning_rate": 1e-4})
    ['zero_stage: saved 2, now 3']
"""

from __future__ import annotations

import hashlib
import json
import os
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

POLICY_META = "posttrain_policy.json"
TRAIN_STATE = "train_state"  # the subdirectory of a policy version that holds its training state
STATE_META = "posttrain_state.json"  # in TRAIN_STATE: what the state belongs to (weights digest, optimizer settings)
_TAG = "state"  # DeepSpeed's checkpoint tag: one state per directory

log = logging.getLogger(__name__)


class CheckpointError(FileNotFoundError):
    """A policy directory is missing or incomplete; the message names the directory and what is missing."""


def check_policy_dir(path: str | os.PathLike) -> Path:
    """Return ``path`` if it holds a loadable HF policy (config, tokenizer, safetensors weights), else raise."""
    d = Path(path)
    if not d.is_dir():
        raise CheckpointError(f"policy dir {d} does not exist: build the demo policy (make policy) or point "
                              f"'policy' in the config at an HF checkpoint directory")
    if not (d / "config.json").is_file():
        raise CheckpointError(f"policy dir {d} has no config.json: not an HF checkpoint directory")
    if not list(d.glob("*.safetensors")):
        raise CheckpointError(f"policy dir {d} has no weights (*.safetensors): save with safe_serialization=True")
    if not (d / "tokenizer.json").is_file() and not (d / "tokenizer_config.json").is_file():
        raise CheckpointError(f"policy dir {d} has no tokenizer files (tokenizer.json / tokenizer_config.json)")
    return d


def policy_version(path: str | os.PathLike) -> int:
    """The version recorded in the policy's metadata file (0 for a checkpoint posttrain did not write)."""
    meta = Path(path) / POLICY_META
    return int(json.loads(meta.read_text()).get("version", 0)) if meta.is_file() else 0


def dir_digest(path: str | os.PathLike) -> str:
    """SHA-256 over every file's relative path and bytes: a content address for caching."""
    root = Path(path)
    return _digest(root, (p for p in root.rglob("*") if p.is_file()))


def weights_digest(path: str | os.PathLike) -> str:
    """SHA-256 over the top-level ``*.safetensors`` files (names and bytes): which weights a training state is for."""
    return _digest(Path(path), Path(path).glob("*.safetensors"))


def _digest(root: Path, files: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for file in sorted(files):
        h.update(str(file.relative_to(root)).encode())
        with open(file, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def read_state_meta(path: str | os.PathLike) -> dict[str, Any] | None:
    """The ``posttrain_state.json`` of a policy dir's training state; None when the dir carries no state."""
    meta = Path(path) / TRAIN_STATE / STATE_META
    return json.loads(meta.read_text()) if meta.is_file() else None


def state_mismatch(saved: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """Each key of ``expected`` whose saved value differs, as ``'key: saved X, now Y'``; empty when all match."""
    return [f"{key}: saved {saved.get(key)}, now {value}" for key, value in expected.items() if saved.get(key) != value]


def save_train_state(engine: DeepSpeedEngine, policy_dir: str | os.PathLike, meta: dict[str, Any],
                     client_state: dict[str, Any]) -> Path:
    """Write ``engine``'s checkpoint and ``client_state`` under ``policy_dir/train_state``, after the weights.

    Collective: every rank calls it (each writes its ZeRO partition); rank 0 writes ``STATE_META``: ``meta``
    plus the digest of the weights already saved in ``policy_dir``.
    """
    state_dir = Path(policy_dir) / TRAIN_STATE
    engine.save_checkpoint(str(state_dir), tag=_TAG, client_state=client_state, save_latest=False)
    if engine.global_rank == 0:
        full = {**meta, "weights_sha256": weights_digest(policy_dir), "optimizer_steps": engine.global_steps}
        (state_dir / STATE_META).write_text(json.dumps(full, indent=2))
    return state_dir


def load_train_state(engine: DeepSpeedEngine, policy_dir: str | os.PathLike,
                     expected: dict[str, Any]) -> dict[str, Any] | None:
    """Restore ``policy_dir``'s training state into a freshly built ``engine``; returns its client state.

    None, with the reason logged, when the dir carries no state or the state does not match ``expected`` (the
    current optimizer settings) and the weights beside it; the engine is then left as built.
    """
    saved = read_state_meta(policy_dir)
    if saved is None:
        log.info("policy %s carries no training state: fresh optimizer", policy_dir)
        return None
    problems = state_mismatch(saved, {**expected, "weights_sha256": weights_digest(policy_dir)})
    if problems:
        log.warning("training state in %s not restored (%s): fresh optimizer", policy_dir, "; ".join(problems))
        return None
    path, client_state = engine.load_checkpoint(str(Path(policy_dir) / TRAIN_STATE), tag=_TAG)
    if path is None:
        raise CheckpointError(f"training state in {Path(policy_dir) / TRAIN_STATE} could not be loaded by DeepSpeed")
    log.info("restored the training state of %s (optimizer step %d)", policy_dir, engine.global_steps)
    return client_state
