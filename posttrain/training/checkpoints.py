"""Policy checkpoints: HF safetensors directories with a ``posttrain_policy.json`` beside the weights.

The weights of every version are stored in the model's own dtype: the one the starting checkpoint's ``config.json``
records (``checkpoint_dtype``), whatever precision the update computes in. A bf16 model's versions are bf16 files
(half the fp32 bytes); the demo policy, an fp32 checkpoint, stays fp32.

A version written by the update also carries its training state in ``train_state/`` (``TRAIN_STATE``): DeepSpeed's
own checkpoint (``engine.save_checkpoint``: Adam moments and step, fp32 master weights, LR scheduler, under every
ZeRO stage) plus ``posttrain_state.json``, which records what the state belongs to: a digest of the weights
beside it and the settings that shape the optimizer. The next update restores the state only when all of those
match (``state_mismatch``); otherwise, or without the subdirectory (v0, a user's checkpoint), it starts a fresh
optimizer and logs why. vLLM and ``from_pretrained`` read only the top-level files, so the subdirectory is inert
to them. Its size is about 7x the bf16 weights (fp32 master copy + two fp32 Adam moments + the module), so a version
may record instead only what replays the update that wrote it (``save_replay``: its samples, RNG and master-weights
digest; ``WRITTEN`` false; ``training.replay`` rebuilds the state from the newest written one), and only the
newest written states are kept (``prune_train_states``): each version records the one it was trained from (``parent`` in
``posttrain_policy.json``), and after an update saves v_n the states of v_{n-keep} .. v_1 are pruned: their weights
stay (lineage; they may be evaluated or rolled back to), their ``train_state/`` keeps only its
``posttrain_state.json``, marked ``pruned``. An update from a pruned version starts a fresh optimizer from the
exported weights (logged). ``keep`` >= 2 keeps what a rerun needs: the newest state, which the next update resumes
from, and its parent's, which a rerun of the update that wrote the newest resumes from after a kill.

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
    >>> _ = (d / "config.json").write_text('{"torch_dtype": "bfloat16"}'); checkpoint_dtype(d)
    'bfloat16'
    >>> [p.name for p in weight_files(d)]   # what leaves the machine: everything but train_state/
    ['config.json']
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

POLICY_META = "posttrain_policy.json"
PARENT = "parent"  # in POLICY_META: where the version this one was trained from lives (a path or URI)
EXPORT_DTYPES = ("float32", "bfloat16", "float16")  # the dtypes a checkpoint's weights may be stored in
TRAIN_STATE = "train_state"  # the subdirectory of a policy version that holds its training state
STATE_META = "posttrain_state.json"  # in TRAIN_STATE: what the state belongs to (weights digest, optimizer settings)
PRUNED = "pruned"  # in STATE_META of a pruned state: why it is gone (the rest of the meta says what it was)
WRITTEN = "written"  # in STATE_META: False when the state itself was not written, only what replays it (REPLAY)
REPLAY = "replay.pt"  # in TRAIN_STATE of a version whose state was not written: its samples and RNG (training.replay)
ADAPTER = "adapter"  # the subdirectory of a LoRA version that holds its adapter (``training.lora``)
LORA_META = "posttrain_lora.json"  # in ADAPTER: the base the adapter was trained on, and its settings
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


def checkpoint_dtype(path: str | os.PathLike) -> str:
    """The dtype the checkpoint's weights are stored in, as its ``config.json`` records it (``dtype``, or
    ``torch_dtype`` as transformers 4 wrote it); ``float32`` when it records none (what ``from_pretrained`` reads
    such weights as). Every version of a loop is exported in it."""
    config = json.loads((Path(path) / "config.json").read_text())
    dtype = config.get("dtype") or config.get("torch_dtype") or "float32"
    if dtype not in EXPORT_DTYPES:
        raise CheckpointError(f"{Path(path) / 'config.json'}: dtype {dtype!r} is not one of {', '.join(EXPORT_DTYPES)}")
    return dtype


def stored_parameters(path: str | os.PathLike) -> int:
    """Parameters stored in a checkpoint's safetensors files (a tied weight once), read from their headers only."""
    import math

    from safetensors import safe_open

    total = 0
    for file in Path(path).glob("*.safetensors"):
        with safe_open(str(file), "pt") as weights:
            total += sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    return total


def weight_files(path: str | os.PathLike) -> list[Path]:
    """Every file of a policy dir but its training state: what vLLM, ``from_pretrained`` and MLflow need."""
    root = Path(path)
    return sorted(p for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] != TRAIN_STATE)


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


def read_lora_meta(path: str | os.PathLike) -> dict[str, Any] | None:
    """The ``posttrain_lora.json`` of a LoRA version's adapter (``base``, ``base_sha256``, ``settings``); None for a
    version without an adapter."""
    meta = Path(path) / ADAPTER / LORA_META
    return json.loads(meta.read_text()) if meta.is_file() else None


def read_state_meta(path: str | os.PathLike) -> dict[str, Any] | None:
    """The ``posttrain_state.json`` of a policy dir's training state; None when the dir carries no state (pruned
    states keep theirs, with ``PRUNED`` added)."""
    meta = Path(path) / TRAIN_STATE / STATE_META
    return json.loads(meta.read_text()) if meta.is_file() else None


def state_mismatch(saved: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """Each key of ``expected`` whose saved value differs, as ``'key: saved X, now Y'``; empty when all match."""
    return [f"{key}: saved {saved.get(key)}, now {value}" for key, value in expected.items() if saved.get(key) != value]


def save_train_state(engine: DeepSpeedEngine, policy_dir: str | os.PathLike, meta: dict[str, Any],
                     client_state: dict[str, Any], trainable_only: bool = False) -> Path:
    """Write ``engine``'s checkpoint and ``client_state`` under ``policy_dir/train_state``, after the weights;
    ``trainable_only`` leaves the frozen weights out (LoRA: the base is not part of the state).

    Collective: every rank calls it (each writes its ZeRO partition); rank 0 writes ``STATE_META``: ``meta``
    plus the digest of the weights already saved in ``policy_dir``.
    """
    state_dir = Path(policy_dir) / TRAIN_STATE
    engine.save_checkpoint(str(state_dir), tag=_TAG, client_state=client_state, save_latest=False,
                           exclude_frozen_parameters=trainable_only)
    if engine.global_rank == 0:
        full = {**meta, "weights_sha256": weights_digest(policy_dir), "optimizer_steps": engine.global_steps}
        (state_dir / STATE_META).write_text(json.dumps(full, indent=2))
    return state_dir


def save_replay(policy_dir: str | os.PathLike, meta: dict[str, Any], replay: dict[str, Any], master_sha256: str,
                optimizer_steps: int) -> Path:
    """Record, instead of the training state, what replays the update that wrote ``policy_dir``: ``replay`` (the
    samples it trained on and the RNG after it, ``REPLAY``) and ``STATE_META`` with ``WRITTEN`` false, ``meta``,
    the weights digest and ``master_sha256`` (``master_digest`` of the weights the update ended with), against
    which a replay checks that it reached the same weights. Rank 0 only; a few KB to MB where the state is GBs.
    """
    import torch

    state_dir = Path(policy_dir) / TRAIN_STATE
    state_dir.mkdir(parents=True, exist_ok=True)
    torch.save(replay, state_dir / REPLAY)
    full = {**meta, "weights_sha256": weights_digest(policy_dir), "optimizer_steps": optimizer_steps,
            WRITTEN: False, "master_sha256": master_sha256}
    (state_dir / STATE_META).write_text(json.dumps(full, indent=2))
    return state_dir


def state_written(meta: dict[str, Any]) -> bool:
    """Whether the training state a ``STATE_META`` describes was written (possibly pruned since), rather than
    recorded for replay (``save_replay``)."""
    return meta.get(WRITTEN, True)


def master_digest(weights: dict[str, Any]) -> str:
    """SHA-256 over the names and exact bytes of ``weights`` (name -> tensor): whether two trainers hold the same
    master weights, bit for bit.

    >>> import torch
    >>> master_digest({"w": torch.ones(2)}) == master_digest({"w": torch.ones(2)}) != master_digest({"w": torch.zeros(2)})
    True
    """
    import torch

    h = hashlib.sha256()
    for name in sorted(weights):
        tensor = weights[name].detach().cpu().contiguous()
        h.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        h.update(tensor.reshape(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()


def load_train_state(engine: DeepSpeedEngine, policy_dir: str | os.PathLike,
                     expected: dict[str, Any], trainable_only: bool = False) -> dict[str, Any] | None:
    """Restore ``policy_dir``'s training state into a freshly built ``engine``; returns its client state.
    ``trainable_only``: the state was saved without the frozen weights (``save_train_state``).

    None, with the reason logged, when the dir carries no state, its state was pruned (``prune_train_states``) or
    does not match ``expected`` (the current optimizer settings) and the weights beside it; the engine is then left
    as built.
    """
    saved = read_state_meta(policy_dir)
    if saved is None:
        log.info("policy %s carries no training state: fresh optimizer", policy_dir)
        return None
    if PRUNED in saved:
        log.warning("training state of %s was pruned (%s): fresh optimizer from its exported weights", policy_dir,
                    saved[PRUNED])
        return None
    if not state_written(saved):
        log.warning("training state of %s was not written (train.state_every) and not replayed: fresh optimizer "
                    "from its exported weights", policy_dir)
        return None
    problems = state_mismatch(saved, {**expected, "weights_sha256": weights_digest(policy_dir)})
    if problems:
        log.warning("training state in %s not restored (%s): fresh optimizer", policy_dir, "; ".join(problems))
        return None
    path, client_state = engine.load_checkpoint(str(Path(policy_dir) / TRAIN_STATE), tag=_TAG,
                                                load_module_strict=not trainable_only)
    if path is None:
        raise CheckpointError(f"training state in {Path(policy_dir) / TRAIN_STATE} could not be loaded by DeepSpeed")
    log.info("restored the training state of %s (optimizer step %d)", policy_dir, engine.global_steps)
    return client_state


def prune_train_states(policy_dir: str | os.PathLike, keep: int) -> list[str]:
    """Prune the written training states of ``policy_dir``'s ancestors but the newest ``keep`` (``policy_dir``, a
    version v_n just saved, counts as the first when its state was written); returns where the states were pruned,
    newest first.

    The ancestors are found through each version's ``PARENT`` (a local path or a URI of any fsspec filesystem, as the
    update's input was handed to it) and are this loop's versions only: v_{n-1} .. v_1, never v0, the loop's starting
    checkpoint. A state is pruned by marking its ``STATE_META`` (``PRUNED``), then deleting every other file of
    ``train_state/``. Versions whose state was not written (``save_replay``) are passed over and keep their replay
    record: a rerun replays them from the newest written state before them, which ``keep`` >= 2 keeps. The walk
    stops at the first ancestor already pruned (a later update pruned everything older; the files an interrupted
    pruning left are deleted again) or carrying no state. ``keep=0`` keeps every state.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for n in range(4):
    ...     d = root / f"v{n}"; (d / TRAIN_STATE).mkdir(parents=True)
    ...     _ = (d / POLICY_META).write_text(json.dumps({"version": n, PARENT: str(root / f"v{n - 1}")}))
    ...     (d / TRAIN_STATE / "state").mkdir(); _ = (d / TRAIN_STATE / "state" / "optim.pt").write_text("x")
    ...     _ = (d / TRAIN_STATE / STATE_META).write_text("{}")
    >>> [pathlib.Path(p).name for p in prune_train_states(root / "v3", keep=2)]   # v0 is the loop's input
    ['v1']
    >>> sorted(p.name for p in (root / "v1" / TRAIN_STATE).iterdir()), read_state_meta(root / "v1")[PRUNED]
    (['posttrain_state.json'], 'keep_states=2 when v3 was saved')
    >>> prune_train_states(root / "v3", keep=2)   # nothing left to prune
    []
    """
    if keep == 0:
        return []
    uri = str(policy_dir)
    meta = read_json_at(uri, POLICY_META) or {}
    newest = int(meta.get("version", 0))
    reason = f"keep_states={keep} when v{newest} was saved"
    own = read_json_at(uri, f"{TRAIN_STATE}/{STATE_META}")
    kept = int(own is not None and state_written(own))
    pruned = []
    for _ in range(1, newest):  # the ancestors v_{n-1} .. v_1
        uri = meta.get(PARENT, "")
        if not uri:
            break
        meta = read_json_at(uri, POLICY_META) or {}
        state = read_json_at(uri, f"{TRAIN_STATE}/{STATE_META}")
        if state is None:
            break
        if not state_written(state):
            continue
        if kept < keep and PRUNED not in state:
            kept += 1
            continue
        _prune_state(uri, None if PRUNED in state else {**state, PRUNED: reason})
        if PRUNED in state:
            break
        pruned.append(uri)
    for where in pruned:
        log.info("pruned the training state of %s (%s)", where, reason)
    return pruned


def read_json_at(uri: str, relative: str) -> dict[str, Any] | None:
    """A JSON file of the policy dir at ``uri`` (any fsspec filesystem); None when there is none."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(uri)
    path = f"{root.rstrip('/')}/{relative}"
    return json.loads(fs.cat_file(path)) if fs.isfile(path) else None


def _prune_state(uri: str, meta: dict[str, Any] | None) -> None:
    """Mark the state of the policy dir at ``uri`` pruned (``meta``; None: it is marked already), then delete
    everything else in its ``train_state/``."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(uri)
    state = f"{root.rstrip('/')}/{TRAIN_STATE}"
    if meta is not None:
        fs.pipe_file(f"{state}/{STATE_META}", json.dumps(meta, indent=2).encode())
    for path in fs.ls(state, detail=False):
        if path.rstrip("/").rsplit("/", 1)[-1] != STATE_META:
            fs.rm(path, recursive=True)
