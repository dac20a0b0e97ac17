"""Policy checkpoints: HF safetensors directories with a ``posttrain_policy.json`` beside the weights.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "config.json").write_text("{}")
    >>> check_policy_dir(d)
    Traceback (most recent call last):
    ...
    posttrain.training.checkpoints.CheckpointError: policy dir ... has no weights (*.safetensors): ...
    >>> len(dir_digest(d))
    64
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

POLICY_META = "posttrain_policy.json"


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
    h = hashlib.sha256()
    root = Path(path)
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(file.relative_to(root)).encode())
        with open(file, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()
