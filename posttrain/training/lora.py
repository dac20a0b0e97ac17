"""LoRA through ``peft``: with ``train.lora_rank > 0`` the update trains low-rank adapters and freezes the model.

A LoRA run has one base, the loop's starting checkpoint (the update's ``reference``), and one adapter that every
update continues. Each version it writes holds:

- the merged weights ``W + scaling * B @ A`` of every adapted layer (``merged_weights``), in the checkpoint's dtype:
  a LoRA version is a plain HF checkpoint, so vLLM reloads it in place and ``evaluate``/``admit`` read it as any;
- ``adapter/`` (``ADAPTER``): peft's ``adapter_config.json`` and ``adapter_model.safetensors`` (the fp32 master
  copy of A and B), plus ``posttrain_lora.json`` (``LORA_META``) naming the base by the digest of its weights;
- ``train_state/`` with the adapter's optimizer only (the frozen weights are not in it): a few MB, not ~7x the model.

The next update rebuilds base + adapter when the version's adapter was trained on the base it is given, with the
same rank and targets (``adapter_to_continue``); otherwise (the first update, another base, other LoRA settings) it
starts a fresh adapter on the version's merged weights, and says why in the log.

peft's names are ``base_model.model.<hf name>`` with ``.base_layer`` before an adapted layer's own parameters and
``.lora_A.default`` / ``.lora_B.default`` for the adapter; ``hf_name`` maps them back. Shapes: an adapted
``Linear(in, out)`` has ``A`` ``[r, in]`` and ``B`` ``[out, r]``; ``B @ A`` is ``[out, in]``, the weight's shape.

Example (a Linear(3, 2) adapted with rank 1 and scaling 2):
    >>> import torch
    >>> named = {"base_model.model.proj.base_layer.weight": torch.zeros(2, 3),
    ...          "base_model.model.proj.lora_A.default.weight": torch.tensor([[1.0, 0.0, 2.0]]),
    ...          "base_model.model.proj.lora_B.default.weight": torch.tensor([[1.0], [0.5]]),
    ...          "base_model.model.head.weight": torch.ones(1, 2)}
    >>> merged = merged_weights(named, {"base_model.model.proj": 2.0})
    >>> sorted(merged), merged["proj.weight"].tolist()
    (['head.weight', 'proj.weight'], [[2.0, 0.0, 4.0], [1.0, 0.0, 2.0]])
    >>> hf_name("base_model.model.model.layers.0.mlp.up_proj.base_layer.weight")
    'model.layers.0.mlp.up_proj.weight'
    >>> hf_name("base_model.model.model.layers.0.mlp.up_proj.lora_A.default.weight") is None
    True
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from posttrain.config import TrainConfig
from posttrain.training.checkpoints import ADAPTER, LORA_META, read_lora_meta

if TYPE_CHECKING:
    from peft import LoraConfig, PeftModel

ADAPTER_NAME = "default"  # peft's name of the one adapter
_PREFIX = "base_model.model."
_BASE_LAYER = ".base_layer"

log = logging.getLogger(__name__)


def lora_config(cfg: TrainConfig) -> LoraConfig:
    """peft's config for ``cfg``: rank ``lora_rank``, ``lora_alpha`` (0: twice the rank), on ``lora_targets``
    (empty: every linear layer but the output head, peft's ``"all-linear"``), no dropout (the update's log-probs
    must be the policy's own), no bias."""
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha or 2 * cfg.lora_rank, lora_dropout=0.0,
                      target_modules=list(cfg.lora_targets) or "all-linear", bias="none", task_type="CAUSAL_LM")


def settings(cfg: TrainConfig) -> dict[str, object]:
    """What an adapter (and its optimizer state) must have been trained under to be continued; ``{"lora_rank": 0}``
    for a full fine-tune, whose state a LoRA update must not load, nor the other way round."""
    if not cfg.lora_rank:
        return {"lora_rank": 0}
    config = lora_config(cfg)
    targets = config.target_modules
    return {"lora_rank": config.r, "lora_alpha": config.lora_alpha,
            "lora_targets": targets if isinstance(targets, str) else sorted(targets)}


def adapter_to_continue(policy_dir: str | os.PathLike, base_sha256: str | None, cfg: TrainConfig) -> Path | None:
    """``policy_dir``'s adapter when an update under ``cfg`` continues it on the base whose weights digest is
    ``base_sha256`` (None: no base given): it was trained on exactly those weights under the same LoRA settings. None
    (the reason logged) when there is none to continue: the update then starts a fresh adapter on ``policy_dir``'s
    own (merged) weights."""
    meta = read_lora_meta(policy_dir)
    if meta is None:
        log.info("policy %s carries no LoRA adapter: a fresh adapter on its weights", policy_dir)
        return None
    if meta.get("settings") != settings(cfg):
        log.warning("LoRA adapter of %s was trained under %s, now %s: a fresh adapter on its merged weights",
                    policy_dir, meta.get("settings"), settings(cfg))
        return None
    if meta.get("base_sha256") != base_sha256:
        log.warning("LoRA adapter of %s was trained on %s, not on the base given (%s): a fresh adapter on its merged "
                    "weights", policy_dir, meta.get("base"), "none" if base_sha256 is None else base_sha256[:12])
        return None
    return Path(policy_dir) / ADAPTER


def wrap(model: torch.nn.Module, cfg: TrainConfig, adapter_dir: Path | None) -> PeftModel:
    """``model`` with LoRA layers, only the adapter trainable: ``adapter_dir``'s adapter loaded, or a fresh one (peft
    initialises B to zero, so the wrapped model computes what ``model`` did)."""
    from peft import PeftModel, get_peft_model

    if adapter_dir is None:
        return get_peft_model(model, lora_config(cfg))
    return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=True)


def scalings(model: PeftModel) -> dict[str, float]:
    """Adapted layer (its module name in ``model``) -> its scaling (``lora_alpha / r``)."""
    from peft.tuners.lora import LoraLayer

    return {name: module.scaling[ADAPTER_NAME] for name, module in model.named_modules()
            if isinstance(module, LoraLayer)}


def is_adapter(name: str) -> bool:
    """Whether a peft parameter name is one of the adapter's (A or B)."""
    return ".lora_A." in name or ".lora_B." in name


def hf_name(name: str) -> str | None:
    """The HF checkpoint name of a peft parameter name; None for the adapter's own parameters."""
    if is_adapter(name):
        return None
    return name.removeprefix(_PREFIX).replace(_BASE_LAYER + ".", ".")


def merged_weights(named: Mapping[str, torch.Tensor], scaling: Mapping[str, float],
                   base: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """HF name -> weight with every adapter merged in: ``W + scaling * B @ A`` (``[out, in]``) for each adapted layer
    of ``scaling``, the other weights as they are. ``named`` maps peft parameter names to the trainer's fp32 copies;
    ``base`` (HF names, ``base_weights``) overrides a frozen weight's copy with the base checkpoint's own value."""
    merged = {}
    for name, weight in named.items():
        target = hf_name(name)
        if target is None:
            continue
        weight = (base or {}).get(target, weight)
        layer = name.removesuffix(_BASE_LAYER + ".weight")
        if layer != name and layer in scaling:
            a = named[f"{layer}.lora_A.{ADAPTER_NAME}.weight"]  # [r, in]
            b = named[f"{layer}.lora_B.{ADAPTER_NAME}.weight"]  # [out, r]
            weight = weight + scaling[layer] * (b @ a)
        merged[target] = weight
    return merged


@contextmanager
def frozen_left_out(model: torch.nn.Module) -> Iterator[None]:
    """``model.state_dict()`` without the frozen weights while in the block: what a LoRA training state holds.
    DeepSpeed's ``exclude_frozen_parameters`` drops frozen parameters by name and misses a weight tied under a second
    name (Qwen2's ``lm_head`` is its embeddings: 272 MB of a 0.5B model's state); this drops every tensor that is a
    frozen parameter's storage."""
    frozen = {p.data_ptr() for p in model.parameters() if not p.requires_grad}

    def drop(module, state_dict, prefix, local_metadata):
        for key in [k for k, v in state_dict.items() if torch.is_tensor(v) and v.data_ptr() in frozen]:
            del state_dict[key]

    handle = model._register_state_dict_hook(drop)
    try:
        yield
    finally:
        handle.remove()


def base_weights(base_dir: str | os.PathLike) -> dict[str, torch.Tensor]:
    """HF name -> fp32 weight, as the base checkpoint stores it (exact: no bf16 round trip of the training copy)."""
    from safetensors.torch import load_file

    weights = {}
    for file in sorted(Path(base_dir).glob("*.safetensors")):
        weights.update({name: t.to(torch.float32) for name, t in load_file(file).items()})
    return weights


def save_adapter(model: PeftModel, out_dir: str | os.PathLike, adapter: Mapping[str, torch.Tensor],
                 base: str, base_sha256: str, cfg: TrainConfig) -> Path:
    """Write ``adapter`` (peft names -> fp32 A and B) as peft's adapter files under ``out_dir/adapter``, with the base
    it was trained on (where it was, ``base``, and the digest of its weights) and its settings in ``LORA_META``."""
    where = Path(out_dir) / ADAPTER
    model.save_pretrained(str(where), state_dict=dict(adapter))
    meta = {"base_sha256": base_sha256, "base": base, "settings": settings(cfg)}
    (where / LORA_META).write_text(json.dumps(meta, indent=2))
    return where
