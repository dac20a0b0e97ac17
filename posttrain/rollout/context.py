"""The engine's context length: ``RolloutConfig.max_model_len``, or the model's own when it is 0 (the default).

A user's checkpoint says how many positions it was trained for (``config.json``: ``max_position_embeddings``, or
the older ``n_positions`` / ``max_sequence_length`` / ``seq_length``); the engine serves that many, at most
``AUTO_CONTEXT_CAP`` (a KV cache for a 128k-token context is not what a default should reserve: set
``max_model_len`` to go beyond it). The demo policy has 256 positions, so the demo's context is 256 either way.
A ``max_model_len`` above the checkpoint's positions is refused here, naming both, rather than by vLLM's engine
start. Completions must fit: ``max_new_tokens`` (the rollout's, and any other the caller names, e.g. the eval's)
below the context, else a ``ValueError`` naming the fields, before an engine starts.

Example:
    >>> import json, pathlib, tempfile
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "config.json").write_text(json.dumps({"max_position_embeddings": 32768}))
    >>> from posttrain.config import RolloutConfig
    >>> context_length(d, RolloutConfig(max_model_len=0)), context_length(d, RolloutConfig(max_model_len=512))
    (4096, 512)
    >>> _ = (d / "config.json").write_text(json.dumps({"max_position_embeddings": 256}))
    >>> context_length(d, RolloutConfig(max_model_len=512))
    Traceback (most recent call last):
    ...
    ValueError: rollout.max_model_len (512) is above the 256 positions .../config.json gives the model, which vLLM ...
    >>> context_length(d, RolloutConfig(max_model_len=0, max_new_tokens=48), {"eval.max_new_tokens": 300})
    Traceback (most recent call last):
    ...
    ValueError: eval.max_new_tokens (300) must be < the engine's context, 256 (rollout.max_model_len: 0, the model's own ...
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from posttrain.config import RolloutConfig

AUTO_CONTEXT_CAP = 4096
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def model_positions(policy_dir: str | Path) -> int | None:
    """The positions the checkpoint in ``policy_dir`` was built for (None when its config.json names none)."""
    config = json.loads((Path(policy_dir) / "config.json").read_text())
    config = {**config.get("text_config", {}), **config}  # multimodal configs keep the language model's apart
    return next((int(config[key]) for key in POSITION_KEYS if isinstance(config.get(key), int)), None)


def context_length(policy_dir: str | Path, cfg: RolloutConfig,
                   completions: Mapping[str, int] | None = None) -> int:
    """The engine's context for the policy in ``policy_dir``: ``cfg.max_model_len``, or (0) the model's positions
    capped at ``AUTO_CONTEXT_CAP``; checks that ``cfg.max_new_tokens`` and each of ``completions`` (field -> tokens)
    fit below it."""
    positions = model_positions(policy_dir)
    if cfg.max_model_len:
        if positions is not None and cfg.max_model_len > positions:
            raise ValueError(f"rollout.max_model_len ({cfg.max_model_len}) is above the {positions} positions "
                             f"{policy_dir}/config.json gives the model, which vLLM refuses to serve: lower it, or "
                             f"set it to 0 for the model's own")
        length, source = cfg.max_model_len, f"rollout.max_model_len: {cfg.max_model_len}"
    else:
        if positions is None:
            raise ValueError(f"{policy_dir}/config.json names no position count ({', '.join(POSITION_KEYS)}): set "
                             f"rollout.max_model_len")
        length = min(positions, AUTO_CONTEXT_CAP)
        source = (f"rollout.max_model_len: 0, the model's own {positions} positions"
                  + (f" capped at {AUTO_CONTEXT_CAP}" if positions > AUTO_CONTEXT_CAP else ""))
    for field, tokens in {"rollout.max_new_tokens": cfg.max_new_tokens, **(completions or {})}.items():
        if tokens >= length:
            raise ValueError(f"{field} ({tokens}) must be < the engine's context, {length} ({source}): lower it or "
                             f"set rollout.max_model_len")
    return length
