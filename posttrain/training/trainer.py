"""The policy update: a registered policy loss (PPO-clip by default), optimized by a real DeepSpeed engine.

``PolicyTrainer`` loads an HF causal-LM dir, wraps it in ``deepspeed.initialize`` with a config built from
``TrainConfig``, trains on one iteration's scored rollouts and writes the next policy as an HF safetensors dir in
the checkpoint's own dtype (``checkpoints.checkpoint_dtype``: bf16 for a bf16 model, whatever the update computes
in), which vLLM loads in its own dtype. On a CPU machine set ``DS_ACCELERATOR=cpu``;
the process group is gloo, single rank unless the launcher set ``RANK``/``WORLD_SIZE``. Every ZeRO stage (0-3)
trains and checkpoints on CPU; by default (``zero_stage=-1``) one process runs stage 0 and several stage 2. The
precision is ``TrainConfig.precision`` resolved on this hardware (``posttrain.precision``): bf16 with fp32 master
weights where bf16 is native, else fp32.

Training state is carried, not rebuilt: ``save`` also writes the optimizer (Adam moments and step count, fp32
master weights), the LR schedule, the shuffle seed and the torch RNG into the version's ``train_state/``
(``checkpoints.save_train_state``), and a trainer built on that version restores them, so consecutive updates
continue one optimizer run; the fp32 master weights come back from the state, so exporting bf16 loses nothing
between updates. A dir without state (v0, a user's checkpoint, a version whose state was pruned) or with state
saved under other optimizer settings starts a fresh optimizer from the exported weights (logged).
``carry_train_state=False`` turns both off.

With ``lora_rank > 0`` the model is frozen and peft's LoRA adapters train instead (``posttrain.training.lora``): the
version saved holds the merged weights and the adapter, its training state the adapter's optimizer only.

An optimizer step accumulates ``grad_accum_steps`` micro batches; each micro batch's loss is weighted by its
share of the step's aggregation denominator (``batching.accumulation_weights``), so the step is the one of a
single batch of all of them.

The algorithm is named by ``TrainConfig`` (``policy_loss``, ``loss_aggregation``, and the optional terms
``tis_cap``, ``kl_coef``, ``entropy_coef``; see ``algorithms/``); the advantages arrive with the samples
(``samples.with_advantages``). Before its first optimizer step an update scores its samples once, without
gradient, when a term needs it: the trainer's own log-probs for truncated IS (``tis_cap``) and, when
``kl_coef > 0``, those of a frozen reference policy (``reference_dir``, the loop's initial policy; never loaded
otherwise); with neither (the default) no such pass runs. ``behavior_kl``, the measured gap between vLLM's
log-probs and the trainer's, is taken on the first epoch's own forward passes. Tensor shapes in a step:
``input_ids`` ``[B, L]``; ``logits`` ``[B, L-1, V]``; ``logprobs``, ``mask``, the per-token loss ``[B, L-1]``;
``advantages`` ``[B]``.

Example (``samples`` come from scored rollouts with advantages; infra failures already excluded):
    >>> from posttrain.config import TrainConfig
    >>> from posttrain.training.samples import TrainSample
    >>> trainer = PolicyTrainer("/path/to/policy", TrainConfig(micro_batch_size=8))   # doctest: +SKIP
    >>> stats = trainer.train_on([TrainSample([0, 5, 9], [17, 1], [-1.2, -0.3], 1.0, "g0"),
    ...                           TrainSample([0, 5, 9], [23, 1], [-2.0, -0.4], -1.0, "g0")])  # doctest: +SKIP
    >>> stats.steps, stats.num_samples, stats.num_tokens                                 # doctest: +SKIP
    (1, 2, 4)
    >>> trainer.save("/path/to/policy-v1"); trainer.close()                              # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import os
import socket
from contextlib import nullcontext
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from posttrain import memory, precision
from posttrain.config import TrainConfig
from posttrain.timing import timed
from posttrain.training.algorithms import aggregate, check_aggregation, get_policy_loss
from posttrain.training.algorithms.objective import per_token_objective
from posttrain.training.algorithms.tis import behavior_mismatch
from posttrain.training import lora, records
from posttrain.training.batching import (
    Batch,
    accumulation_weights,
    lockstep,
    micro_size,
    pad_batch,
    shard_steps,
    split_micros,
)
from posttrain.training.checkpoints import (
    POLICY_META,
    checkpoint_dtype,
    load_train_state,
    master_digest,
    read_state_meta,
    save_replay,
    save_train_state,
    stored_parameters,
    weights_digest,
)
from posttrain.training.logprobs import completion_values, place_completion_values, token_entropy, token_logprobs

if TYPE_CHECKING:  # the trainer reads TrainSample's fields; samples.py (pandas, the reward stage) is not imported
    from posttrain.training.samples import TrainSample

log = logging.getLogger(__name__)

@dataclass
class TrainStats:
    loss: float  # mean over optimizer steps of the step's loss (0.0 when no step ran)
    clip_fraction: float  # mean over steps of the loss's stat of that name (nan when the loss reports none)
    approx_kl: float  # mean over steps, likewise
    grad_norm: float  # mean pre-clip global grad norm over steps (nan when none is known)
    num_samples: int  # samples trained on, counted once per epoch
    num_tokens: int  # completion tokens trained on, counted once per epoch
    steps: int  # optimizer steps (micro batches / grad_accum_steps, rounded up per epoch)
    seconds: float
    skipped_samples: int = 0  # samples of zero-advantage groups (no signal), counted once per epoch
    entropy: float = 0.0  # mean over steps of the policy's token-mean entropy (nats)
    kl: float = float("nan")  # mean over steps of the KL estimator to the reference (nan when kl_coef is 0)
    # k3 KL(vLLM || trainer) per token over the trained samples, on the first epoch's forward passes (each micro batch
    # at the weights it trains: the first one's before any step)
    behavior_kl: float = 0.0
    wall_s: float = 0.0  # the whole update stage (trainer start, training, save), set by the update task
    memory_peak_mb: float = 0.0  # the update stage's processes (posttrain.memory), set by the update task
    bf16: bool = False  # whether the update computed in bf16 (TrainConfig.precision, resolved on this hardware)


@dataclass
class PreUpdate:
    """What an update computes once, before its first optimizer step, for the samples it trains on."""

    old: dict[int, torch.Tensor]  # sample index -> the trainer's log-probs of its completion tokens, [C_i]; empty
    #                               unless tis_cap
    reference: dict[int, torch.Tensor]  # likewise under the frozen reference; empty when kl_coef is 0


def zero_stage(cfg: TrainConfig, world_size: int) -> int:
    """The ZeRO stage the update runs: ``cfg.zero_stage``, or for -1 (auto) 2 on several processes and 0 on one,
    where there is nothing to partition and stages 1-3 only add their bookkeeping (~a quarter of a demo update).

    >>> zero_stage(TrainConfig(), 1), zero_stage(TrainConfig(), 4), zero_stage(TrainConfig(zero_stage=3), 1)
    (0, 2, 3)
    """
    if cfg.zero_stage >= 0:
        return cfg.zero_stage
    return 2 if world_size > 1 else 0


def deepspeed_config(cfg: TrainConfig, bf16: bool, stage: int) -> dict[str, Any]:
    """The DeepSpeed JSON config for one data-parallel rank group, from ``TrainConfig``, the resolved precision and
    ZeRO stage."""
    return {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": cfg.grad_accum_steps,
        "gradient_clipping": cfg.max_grad_norm,
        "bf16": {"enabled": bf16},
        "zero_optimization": {"stage": stage},
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": cfg.learning_rate, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0,
                       "torch_adam": True},
        },
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


def warmup_factor(step: int, warmup_steps: int) -> float:
    """The LR multiplier of optimizer step ``step`` (0-based, counted over the run): linear warmup, then 1.

    >>> [warmup_factor(step, 4) for step in range(5)], warmup_factor(0, 0)
    ([0.25, 0.5, 0.75, 1.0, 1.0], 1.0)
    """
    return min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0


def _init_distributed() -> None:
    """Join (or create) the process group; a single local rank gets defaults and a free loopback port."""
    import deepspeed
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return
    defaults = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    if not torch.cuda.is_available() and os.environ["WORLD_SIZE"] == "1":
        # DeepSpeed's CPU backend JIT-compiles a shared-memory all-reduce op on first use (~35 s, once per
        # extensions folder: a fresh install's first update); one process reduces with nobody. Marked incompatible,
        # DeepSpeed keeps to gloo, as it does on platforms without the op.
        from deepspeed.ops.op_builder.cpu.comm import ShareMemCommBuilder

        deepspeed.ops.__compatible_ops__[ShareMemCommBuilder.NAME] = False
    deepspeed.init_distributed(dist_backend="gloo" if not torch.cuda.is_available() else "nccl")


class PolicyTrainer:
    """A DeepSpeed engine around one policy; ``train_on`` is one RL update, ``save`` writes the next version."""

    def __init__(self, policy_dir: str | os.PathLike, cfg: TrainConfig,
                 reference_dir: str | os.PathLike | None = None):
        import deepspeed
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.cfg = cfg
        self.precision = precision.here(cfg.precision)
        self.bf16 = self.precision.precision == "bf16"
        self.policy_loss = get_policy_loss(cfg.policy_loss)
        check_aggregation(cfg.loss_aggregation)  # a bad name fails here, before any model is loaded
        if cfg.kl_coef and reference_dir is None:
            raise ValueError("TrainConfig.kl_coef > 0 needs reference_dir: the frozen reference (the initial policy)")
        self.policy_dir = Path(policy_dir)
        self.export_dtype = checkpoint_dtype(self.policy_dir)  # what ``save`` writes the weights in
        self.reference_dir = str(reference_dir) if reference_dir is not None else None
        # the weights the model is built from: the policy's, or under LoRA the base its adapter continues on
        self.base_dir, adapter_dir, self.base_sha256 = self._lora_sources() if cfg.lora_rank else (self.policy_dir,
                                                                                                   None, "")
        self.last_saved_state: dict[str, Any] | None = None  # the state meta ``save`` wrote last (single rank)
        self._saved_client_state: dict[str, Any] = {}
        self._trained_on: list[TrainSample] = []  # the last ``train_on``'s samples: what a replay record holds
        torch.manual_seed(cfg.seed)
        _init_distributed()
        import torch.distributed as dist

        self.zero_stage = zero_stage(cfg, dist.get_world_size())
        self._check_memory(dist.get_world_size())
        log.info("update: %s (%s), ZeRO stage %d on %d process(es)", self.precision.precision,
                 self.precision.reason, self.zero_stage, dist.get_world_size())
        self.tokenizer = AutoTokenizer.from_pretrained(self.policy_dir)
        # what fills a batch's padding (masked out of attention and loss): Llama 3 and Mistral tokenizers have no pad
        self.pad_id = next((i for i in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id) if i is not None), 0)
        model = AutoModelForCausalLM.from_pretrained(self.base_dir, dtype=torch.float32)
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if cfg.lora_rank:
            model = lora.wrap(model, cfg, adapter_dir)
        fp32 = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad} \
            if self.bf16 else {}
        self.engine, _, _, _ = deepspeed.initialize(
            model=model, model_parameters=[p for p in model.parameters() if p.requires_grad],
            config=deepspeed_config(cfg, self.bf16, self.zero_stage), lr_scheduler=self._lr_schedule)
        self._epoch_seed = cfg.seed
        restored = load_train_state(self.engine, self.policy_dir, self.state_settings(),
                                    trainable_only=bool(cfg.lora_rank)) \
            if cfg.carry_train_state and (adapter_dir is not None or not cfg.lora_rank) else None
        if restored is None:
            self._restore_master_weights(fp32)
        else:
            self._restore_client_state(restored)
        self.reference = self._load_reference(reference_dir) if cfg.kl_coef else None

    def _check_memory(self, world_size: int) -> None:
        """Fail before loading anything when the update's weights, gradients and optimizer state would not fit in the
        memory left (``posttrain.memory``). One CPU process only: ranks on one node load at once, and a GPU's memory is
        its own."""
        if world_size > 1 or torch.cuda.is_available():
            return
        parameters = stored_parameters(self.base_dir)
        kind = memory.update_kind(self.cfg.lora_rank)
        memory.check_fits(
            memory.update_memory_mb(parameters, 0 if self.cfg.lora_rank else parameters, self.bf16),
            memory.available_mb(),
            f"the update of {self.policy_dir} ({parameters / 1e6:.0f}M parameters, {kind}, {self.precision.precision}"
            f"; before activations)",
            "train.lora_rank > 0 keeps only the frozen weights and a small adapter's optimizer; or free memory, or "
            "a machine with more")

    def _lora_sources(self) -> tuple[Path, Path | None, str]:
        """Under LoRA: the base to build on, the adapter to continue (None: a fresh one) and the base's weights digest.
        The policy's adapter continues on the reference (the loop's starting checkpoint) when it was trained on it;
        otherwise a fresh adapter starts on the policy's own weights (``lora.adapter_to_continue``)."""
        reference_sha256 = weights_digest(self.reference_dir) if self.reference_dir is not None else None
        adapter_dir = lora.adapter_to_continue(self.policy_dir, reference_sha256, self.cfg)
        if adapter_dir is not None:
            return Path(self.reference_dir), adapter_dir, reference_sha256
        return self.policy_dir, None, weights_digest(self.policy_dir)

    def _lr_schedule(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
        """Linear warmup over ``lr_warmup_steps`` (the multiplier is exactly 1.0 without warmup)."""
        warmup = self.cfg.lr_warmup_steps
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_factor(step, warmup))

    def state_settings(self) -> dict[str, Any]:
        """The settings a carried training state must have been saved under to be restored."""
        return {"zero_stage": self.zero_stage, "bf16": self.bf16, "world_size": self.engine.world_size,
                "learning_rate": self.cfg.learning_rate, "lr_warmup_steps": self.cfg.lr_warmup_steps,
                **lora.settings(self.cfg)}

    def _client_state(self) -> dict[str, Any]:
        """What the trainer itself adds to the checkpoint: the next shuffle seed and the torch RNG states."""
        state = {"epoch_seed": self._epoch_seed, "torch_rng": torch.get_rng_state()}
        if torch.cuda.is_available():
            state["cuda_rng"] = torch.cuda.get_rng_state_all()
        return state

    def _restore_client_state(self, state: dict[str, Any]) -> None:
        self._epoch_seed = state["epoch_seed"]
        torch.set_rng_state(state["torch_rng"])
        if "cuda_rng" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])

    def _load_reference(self, reference_dir: str | os.PathLike) -> torch.nn.Module:
        """The frozen reference policy: eval mode, no gradients, the engine's dtype (bf16 or fp32) and device."""
        from transformers import AutoModelForCausalLM

        dtype = torch.bfloat16 if self.bf16 else torch.float32
        model = AutoModelForCausalLM.from_pretrained(reference_dir, dtype=dtype).to(self.engine.device).eval()
        return model.requires_grad_(False)

    def _restore_master_weights(self, fp32: dict[str, torch.Tensor]) -> None:
        """Seed the optimizer's fp32 master copy with the checkpoint's fp32 values.

        DeepSpeed builds the master copy from the bf16-cast module, which would re-round every weight to bf16
        at each iteration and erase updates smaller than bf16's resolution.
        """
        from deepspeed.utils import safe_set_full_fp32_param

        unfused = self._unfused_masters()
        for name, param in self.engine.module.named_parameters():
            if name in fp32 and id(param) in unfused:
                unfused[id(param)].data.copy_(fp32[name])
            elif name in fp32:
                safe_set_full_fp32_param(param, fp32[name].to(self.engine.device))

    def _unfused_masters(self) -> dict[int, torch.Tensor]:
        """``id(module param) -> its fp32 master copy`` under ZeRO-0 with bf16; empty otherwise.

        There DeepSpeed's ``FP16_UnfusedOptimizer`` keeps the copies where ``safe_get_full_fp32_param`` and
        ``safe_set_full_fp32_param`` do not look (they reach ZeRO 1-3's partitions).
        """
        from deepspeed.runtime.fp16.unfused_optimizer import FP16_UnfusedOptimizer

        opt = self.engine.optimizer
        if not isinstance(opt, FP16_UnfusedOptimizer):
            return {}
        pairs = (zip(lows, highs) for lows, highs in zip(opt.fp16_groups, opt.fp32_groups))
        return {id(low): high for group in pairs for low, high in group}

    def train_on(self, samples: Sequence[TrainSample]) -> TrainStats:
        """One update on scored rollouts that carry their advantages.

        Groups whose advantages are all zero are skipped (and counted). The rest are scored once without gradient
        when a term needs it (``_score_before_update``); then each epoch shuffles them into micro batches (of
        ``micro_size``) and takes
        one optimizer step per ``grad_accum_steps`` of them per rank (the last step of an epoch may have fewer).
        Under data parallelism every rank gets all samples, shuffles them alike and runs its own share of each step's
        micro batches (``batching.shard_steps``), so W ranks with A accumulation steps take the steps one process takes
        with W * A. A step's stats are its micro batches' stats, weighted as their losses are, summed over ranks.
        Stats stay device tensors until the update ends, so no micro step waits on the device to report them.
        """
        clock = timed()
        self._trained_on = list(samples)
        lengths = [len(s.prompt_token_ids) + len(s.completion_token_ids) for s in samples]
        live = {s.group_id for s in samples if s.advantage != 0.0}
        keep = [i for i, s in enumerate(samples) if s.group_id in live]
        before = self._score_before_update(samples, keep, lengths)
        world, rank = self.engine.world_size, self.engine.global_rank
        sums: dict[str, torch.Tensor] = {}
        grad_norms = 0.0
        steps = num_tokens = 0
        mismatch = torch.zeros((), dtype=torch.float64, device=self.engine.device)  # first epoch, summed over tokens
        self.engine.train()
        for epoch in range(self.cfg.epochs):
            gen = torch.Generator().manual_seed(self._epoch_seed)
            self._epoch_seed += 1
            order = [keep[i] for i in torch.randperm(len(keep), generator=gen).tolist()]
            size = micro_size(len(order), self.cfg, world)
            micros = split_micros(order, lengths, size, self.cfg.micro_batch_tokens)
            batches = [(micro, self._batch([samples[i] for i in micro])) for micro in micros]
            batches = [(micro, batch) for micro, batch in batches if batch.num_tokens]
            for shards in shard_steps(len(batches), self.cfg.grad_accum_steps, world):
                window = [index for shard in shards for index in shard]
                weights = dict(zip(window, accumulation_weights([batches[i][1].mask for i in window],
                                                                self.cfg.loss_aggregation)))
                passes = lockstep(shards, rank)
                for j, (index, real) in enumerate(passes):
                    micro, batch = batches[index]
                    weight = weights[index] if real else 0.0
                    old, ref = (None if not scores else place_completion_values([scores[i] for i in micro], batch.mask)
                                for scores in (before.old, before.reference))  # [B, L-1] each, or None
                    # DeepSpeed averages gradients over the W ranks: a loss scaled by W sums them instead
                    stats, token_mismatch = self._micro_step(batch, old, ref, weight * world, j == len(passes) - 1)
                    grad_norm = self._step(j == len(passes) - 1)
                    mismatch += token_mismatch if epoch == 0 and real else 0.0
                    for key, value in stats.items():
                        sums[key] = sums.get(key, 0.0) + weight * value.double()  # float64, as Python floats
                    num_tokens += batch.num_tokens if real else 0
                grad_norms += torch.as_tensor(float("nan") if grad_norm is None else grad_norm, dtype=torch.float64)
                steps += 1
        sums, num_tokens = self._sum_over_ranks({**sums, "behavior_mismatch": mismatch}, num_tokens)
        first_epoch_tokens = num_tokens // self.cfg.epochs  # every epoch trains the same tokens
        behavior_kl = float(sums.pop("behavior_mismatch")) / first_epoch_tokens if first_epoch_tokens else 0.0
        means = {key: float(total) / steps for key, total in {**sums, "grad_norm": grad_norms}.items()} if steps else {}
        unreported = float("nan") if steps else 0.0
        return TrainStats(loss=means.get("loss", 0.0), clip_fraction=means.get("clip_fraction", unreported),
                          approx_kl=means.get("approx_kl", unreported), grad_norm=means.get("grad_norm", 0.0),
                          num_samples=len(keep) * self.cfg.epochs, num_tokens=num_tokens, steps=steps,
                          seconds=clock.seconds,
                          skipped_samples=(len(samples) - len(keep)) * self.cfg.epochs,
                          entropy=means.get("entropy", unreported), kl=means.get("kl", unreported),
                          behavior_kl=behavior_kl, bf16=self.bf16)

    def _sum_over_ranks(self, sums: dict[str, torch.Tensor], num_tokens: int) -> tuple[dict[str, torch.Tensor], int]:
        """Each rank's weighted stat sums and token count, summed over the data-parallel ranks (as is for one)."""
        if self.engine.world_size == 1:
            return sums, num_tokens
        import torch.distributed as dist

        keys = sorted(sums)
        values = [torch.as_tensor(sums[key], dtype=torch.float64, device=self.engine.device) for key in keys]
        total = torch.stack(values + [torch.tensor(float(num_tokens), dtype=torch.float64, device=self.engine.device)])
        dist.all_reduce(total)
        return dict(zip(keys, total[:-1])), int(total[-1].item())

    def _batch(self, micro: Sequence[TrainSample]) -> Batch:
        return pad_batch([(s.prompt_token_ids, s.completion_token_ids, s.behavior_logprobs) for s in micro],
                         [s.advantage for s in micro], self.pad_id, [s.loss_mask for s in micro],
                         [s.temperature for s in micro])

    def _logits(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        """``[B, L-1, V]``: the logits that score each target token, divided by each row's sampling temperature, so
        that the policy trained (and the reference, and the entropy) is the one the samples were drawn from."""
        device = self.engine.device
        logits = model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device)).logits
        return logits[:, :-1] / batch.logit_scale.to(device, logits.dtype)[:, None, None]

    @torch.no_grad()
    def _score_before_update(self, samples: Sequence[TrainSample], keep: list[int], lengths: list[int]) -> PreUpdate:
        """The trainer's log-probs of the kept samples' completion tokens before any step (with ``tis_cap``) and the
        reference's (with ``kl_coef``); nothing, and no forward, when neither is on.

        One forward per micro batch and model, in eval mode, without gradient; the samples are stored per index so
        that every shuffled micro batch of every epoch reuses them. Under data parallelism each rank scores its
        share of the micro batches (in lockstep) and the ranks exchange the results. ``lengths``: every sample's
        prompt + completion tokens (micro batches are cut as the update cuts them, ``batching.split_micros``).
        """
        device, world = self.engine.device, self.engine.world_size
        old: dict[int, torch.Tensor] = {}
        reference: dict[int, torch.Tensor] = {}
        if not self.cfg.tis_cap and self.reference is None:
            return PreUpdate(old, reference)
        self.engine.eval()
        micros = split_micros(keep, lengths, self.cfg.micro_batch_size, self.cfg.micro_batch_tokens)
        shards = [list(range(len(micros)))[rank::world] for rank in range(world)]
        for index, real in lockstep(shards, self.engine.global_rank) if micros else []:
            batch = self._batch([samples[i] for i in micros[index]])
            targets, mask = batch.targets.to(device), batch.mask.to(device)  # [B, L-1]
            for model, scores in ((self.engine if self.cfg.tis_cap else None, old), (self.reference, reference)):
                if model is not None:
                    logprobs = token_logprobs(self._logits(model, batch), targets)  # [B, L-1]
                    scores.update(zip(micros[index], completion_values(logprobs, mask)) if real else ())
        if world > 1:
            old, reference = self._gather_scores(old, reference)
        return PreUpdate(old, reference)

    @staticmethod
    def _gather_scores(old: dict[int, torch.Tensor], reference: dict[int, torch.Tensor]
                       ) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
        """Every rank's pre-update scores joined on every rank (any rank may train on any sample in an epoch)."""
        import torch.distributed as dist

        parts: list[Any] = [None] * dist.get_world_size()
        mine = tuple({i: t.cpu() for i, t in scores.items()} for scores in (old, reference))
        dist.all_gather_object(parts, mine)
        return tuple({i: t for part in parts for i, t in part[which].items()} for which in (0, 1))

    def _micro_step(self, batch: Batch, old_logprobs: torch.Tensor | None, ref_logprobs: torch.Tensor | None,
                    weight: float, boundary: bool) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Forward, loss and backward on one micro batch, the last of its step when ``boundary`` (``_step`` follows).

        ``old_logprobs`` and ``ref_logprobs`` are ``[B, L-1]``: the trainer's and the reference's log-probs from
        before the update (None unless ``tis_cap``, resp. ``kl_coef``). ``weight`` scales the loss that is
        backpropagated (the micro batch's share of its step). Returns detached, unweighted 0-dim stat tensors, and
        the k3 KL(vLLM || trainer) summed over the batch's trained tokens (float64, for ``behavior_kl``).
        """
        device = self.engine.device
        self.engine.set_gradient_accumulation_boundary(boundary)
        logits = self._logits(self.engine, batch)  # [B, L-1, V]
        logprobs = token_logprobs(logits, batch.targets.to(device))  # [B, L-1]
        mask = batch.mask.to(device)  # [B, L-1]
        behavior = batch.behavior_logprobs.to(device)  # [B, L-1]
        old = None if old_logprobs is None else old_logprobs.to(device)  # [B, L-1]
        # With truncated IS the ratio is taken against the trainer's own pre-update log-probs, and the IS weight
        # min(old / behavior, tis_cap) accounts for the sampler (vLLM); without it, against the sampler's.
        proximal = old if self.cfg.tis_cap else behavior
        policy_loss, stats = self.policy_loss(logprobs, proximal, batch.advantages.to(device), mask, self.cfg)
        with torch.set_grad_enabled(bool(self.cfg.entropy_coef)):  # a stat only: one row's [L-1, V] at a time
            entropy = torch.cat([token_entropy(rows) for rows in logits.split(1)])  # [B, L-1]
        per_token, terms = per_token_objective(
            policy_loss, logprobs, mask, self.cfg, old_logprobs=old, behavior_logprobs=behavior,
            ref_logprobs=None if ref_logprobs is None else ref_logprobs.to(device), entropy=entropy)
        loss = aggregate(per_token, mask, self.cfg.loss_aggregation, self.cfg.loss_norm_len or None)
        self.engine.backward(loss * weight, scale_wrt_gas=False)  # the weights already divide by the step's total
        mismatch = behavior_mismatch(logprobs.detach(), behavior, mask).sum().double()
        return {**stats, **terms, "loss": loss.detach()}, mismatch

    def _step(self, boundary: bool) -> float | None:
        """``engine.step()``, called after every micro batch (DeepSpeed steps the optimizer at the boundary only);
        at the boundary returns the step's pre-clip global gradient norm (None when nothing reports one). fp32
        ZeRO-0 clips without keeping the norm: there it is taken from the gradients just before the step."""
        unreported = boundary and not self.bf16 and self.zero_stage == 0
        norm = torch.nn.utils.get_total_norm([p.grad for p in self.engine.module.parameters()
                                              if p.grad is not None]) if unreported else None
        self.engine.step()
        if not boundary:
            return None
        return float(norm) if norm is not None else self.engine.get_global_grad_norm()

    def master_weights(self) -> dict[str, torch.Tensor]:
        """Parameter name -> a CPU fp32 copy of its master weights: ZeRO 1-3's partitions gathered (collective),
        ZeRO-0 bf16's unfused optimizer copies, or the parameter itself where it is the master (fp32, ZeRO-0)."""
        from deepspeed.utils import safe_get_full_fp32_param

        unfused, weights = self._unfused_masters(), {}
        for name, param in self.engine.module.named_parameters():
            full = unfused.get(id(param), safe_get_full_fp32_param(param))  # None: no separate master copy
            weights[name] = (param if full is None else full).detach().to("cpu", torch.float32).clone()
        return weights

    def save(self, out_dir: str | os.PathLike, metadata: dict[str, Any] | None = None,
             write_state: bool = True) -> Path:
        """Write the master weights, cast to the checkpoint's dtype (``export_dtype``), as an HF safetensors dir
        (+ tokenizer, + ``POLICY_META`` if given); its ``config.json`` records that dtype.

        The fp32 master copy, which keeps the small updates bf16 rounding would erase, goes with the training state
        (``carry_train_state``: to ``out_dir/train_state``), where the next update restores it from; vLLM casts the
        weights on load (``RolloutConfig.dtype``). ``write_state=False`` records instead what replays this update
        (``checkpoints.save_replay``: the samples, the RNG, the master weights' digest; ``training.replay``). Every
        rank must call this (the gathers and the state are collective); rank 0 writes the HF files.
        """
        out = Path(out_dir)
        state = self.master_weights()
        reached = master_digest(state) if self.cfg.carry_train_state and not write_state else ""
        if self.engine.global_rank == 0:
            out.mkdir(parents=True, exist_ok=True)
            dtype = getattr(torch, self.export_dtype)
            module = self.engine.module
            if self.cfg.lora_rank:  # the merged weights as the version's, the adapter beside them
                lora.save_adapter(module, out, {name: w for name, w in state.items() if lora.is_adapter(name)},
                                  str(self.base_dir), self.base_sha256, self.cfg)
                state = lora.merged_weights(state, lora.scalings(module), lora.base_weights(self.base_dir))
                module = module.get_base_model()
            module.save_pretrained(out, state_dict={name: w.to(dtype) for name, w in state.items()},
                                   safe_serialization=True)
            module.config.dtype = self.export_dtype  # save_pretrained recorded the module's (the training precision)
            module.config.save_pretrained(out)
            self.tokenizer.save_pretrained(out)
            if metadata is not None:
                (out / POLICY_META).write_text(json.dumps({**metadata, "train": asdict(self.cfg)}, indent=2))
        if self.cfg.carry_train_state:
            import torch.distributed as dist

            dist.barrier()  # the weights are on disk before the state records their digest
            self._saved_client_state = self._client_state()
            if write_state:
                with lora.frozen_left_out(self.engine.module) if self.cfg.lora_rank else nullcontext():
                    save_train_state(self.engine, out, self.state_settings(), self._saved_client_state,
                                     trainable_only=bool(self.cfg.lora_rank))
            elif self.engine.global_rank == 0:
                record = {"samples": records.pack(self._trained_on),
                          "client_state": self._saved_client_state}
                save_replay(out, self.state_settings(), record, reached, self.engine.global_steps)
            self.last_saved_state = read_state_meta(out) if self.engine.world_size == 1 else None
        return out

    def resume_from_memory(self) -> None:
        """Continue after ``save`` as a trainer rebuilt from that version would: the optimizer, schedule and
        weights are already the saved ones; put back the random state saved with them (``training.live``)."""
        self._restore_client_state(self._saved_client_state)

    def replay(self, samples: Sequence[TrainSample], client_state: dict[str, Any]) -> str:
        """Redo an update a replay record (``save_replay``) describes: train on its ``samples``, then take the RNG
        (``client_state``) its trainer saved and continued from; returns the ``master_digest`` reached
        (``training.replay`` checks it against the version's)."""
        self.train_on(samples)
        self._saved_client_state = client_state
        self._restore_client_state(self._saved_client_state)
        return master_digest(self.master_weights())

    def close(self) -> None:
        """Release the engine (optimizer state, ZeRO buffers, hooks); the trainer is unusable afterwards."""
        self.engine.destroy()
        del self.engine
        self.reference = None
