"""The demo policy: a tiny Llama with its own byte-level BPE tokenizer, warm-started by supervised training.

It is trained on the demo suite's *train* split only (BOS + prompt + reference + EOS, loss on the reference and
EOS), on one thread so the weights are reproducible, in about 11 s on an idle 2-core CPU. SFT is deliberately
stopped part-way (``sft_steps``): the default policy passes about 40% of the eval split greedily (about 70% of the
train split), while ``sft_steps=240`` solves every eval env, so the eval split is learnable and RL has room. The
result is an HF dir (fp32 safetensors, ``tokenizer.json``, config) that vLLM loads with ``dtype="bfloat16"``, plus
``posttrain_policy.json`` = ``{"version": 0, "demo_policy": <cfg>}``.

Tensor shapes in the SFT loop: ``input_ids``/``labels`` ``[sft_batch_size, L]``, labels ``-100`` on prompt
and padding.

Example:
    >>> from posttrain.config import DemoPolicyConfig
    >>> pairs = [("# Write a function add_7(x) that returns x plus 7.\\n", "def add_7(x):\\n    return x + 7\\n")]
    >>> path = build_demo_policy("/tmp/demo-policy", DemoPolicyConfig(sft_steps=5), pairs)   # doctest: +SKIP
    >>> is_complete(path, DemoPolicyConfig(sft_steps=5))                                     # doctest: +SKIP
    True
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import random
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch

from posttrain.config import DEMO_SUITE, DemoPolicyConfig
from posttrain.envs.generators.common import drill_words, fresh_copy_drill
from posttrain.progress import progress
from posttrain.timing import timed
from posttrain.training.checkpoints import POLICY_META

SPECIAL_TOKENS = ("<s>", "</s>", "<pad>")  # ids 0, 1, 2
WEIGHTS = "model.safetensors"


def train_tokenizer(texts: Sequence[str], vocab_size: int, split_digits: bool = False):
    """Byte-level BPE over ``texts`` whose post-processor prepends ``<s>`` (so HF and vLLM encode alike);
    ``split_digits``: every digit a token of its own, so numbers of one width line up digit by digit.

    >>> tok = train_tokenizer(["193.5 - 100.4 = 093.1"] * 20, 300, split_digits=True)
    >>> [tok.decode([i]) for i in tok.encode("193.5")]
    ['<s>', '1', '9', '3', '.', '5']
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level]) \
        if split_digits else byte_level
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def _model_config(cfg: DemoPolicyConfig, tokenizer):
    from transformers import LlamaConfig

    if cfg.hidden_size % cfg.num_heads:
        raise ValueError(f"DemoPolicyConfig: hidden_size {cfg.hidden_size} not divisible by num_heads {cfg.num_heads}")
    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_heads,
        head_dim=cfg.hidden_size // cfg.num_heads, max_position_embeddings=cfg.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)


def _sft_examples(tokenizer, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], int]]:
    """``(ids, prompt_len)`` per pair: ids = BOS + prompt + reference + EOS, prompt encoded as rollout does."""
    out = []
    for prompt, reference in pairs:
        p = tokenizer(prompt).input_ids
        r = tokenizer(reference, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        out.append((p + r, len(p)))
    return out


def _collate(examples: list[tuple[list[int], int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    labels = torch.full_like(input_ids, -100)
    for b, (ids, plen) in enumerate(examples):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        attention[b, : len(ids)] = 1
        labels[b, plen : len(ids)] = input_ids[b, plen : len(ids)]
    return input_ids, attention, labels


def sft_batches(lengths: Sequence[int], batch: int, groups: int, gen: torch.Generator) -> Iterator[list[int]]:
    """Endless batches of example indices: the examples in random order, epoch after epoch (an epoch's tail carries
    into the next); with ``groups`` > 1 each ``groups`` batches' examples are drawn together, sorted by length, cut
    into batches and handed out in random order, so a batch pads to lengths alike (mixed data: a short statement no
    longer pads to an agent turn's context).

    >>> gen = torch.Generator().manual_seed(0)
    >>> grouped = sft_batches([5, 100, 6, 90, 7, 95, 8, 99], 2, 4, gen)
    >>> [sorted(next(grouped)) for _ in range(4)]   # lengths 99 and 100, 90 and 95, 5 and 6, 7 and 8
    [[1, 7], [3, 5], [0, 2], [4, 6]]
    """
    order: list[int] = []
    span = batch * groups
    while True:
        while len(order) < span:
            order += torch.randperm(len(lengths), generator=gen).tolist()
        drawn, order = order[:span], order[span:]
        if groups == 1:
            yield drawn
            continue
        drawn.sort(key=lambda i: lengths[i])
        cut = [drawn[start : start + batch] for start in range(0, span, batch)]
        for k in torch.randperm(groups, generator=gen).tolist():
            yield cut[k]


def build_demo_policy(out_dir: str | os.PathLike, cfg: DemoPolicyConfig, pairs: Sequence[tuple[str, str]],
                      snapshots: Sequence[int] = (), chat_template: str | None = None) -> Path:
    """Train the tokenizer and the model on ``(prompt, reference)`` pairs and write the policy to ``out_dir``; after
    each step in ``snapshots`` also write the model as it is then to ``<out_dir>-step<N>`` (a whole policy directory
    but for its meta: how far into the build a skill appears, ``benchmarks/warm_start_curve.py``). Every policy
    written carries ``chat_template`` in its tokenizer when one is given, so a snapshot serves agent episodes as
    soon as it is written, whether or not the build finishes."""
    if not pairs:
        raise ValueError("build_demo_policy: no (prompt, reference) pairs to train on")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same reduction order, hence the same weights, on any machine
    try:
        return _build(Path(out_dir), cfg, pairs, set(snapshots), chat_template)
    finally:
        torch.set_num_threads(threads)


def _build(out: Path, cfg: DemoPolicyConfig, pairs: Sequence[tuple[str, str]], snapshots: set[int],
           chat_template: str | None) -> Path:
    from transformers import LlamaForCausalLM, set_seed

    clock = timed()
    set_seed(cfg.seed)
    tokenizer = train_tokenizer([t for pair in pairs for t in pair], cfg.vocab_size, cfg.split_digits)
    if chat_template:
        tokenizer.chat_template = chat_template
    model = LlamaForCausalLM(_model_config(cfg, tokenizer))
    examples = _sft_examples(tokenizer, pairs)
    too_long = [i for i, (ids, _) in enumerate(examples) if len(ids) > cfg.max_position_embeddings]
    if too_long:
        raise ValueError(f"pairs {too_long} exceed max_position_embeddings={cfg.max_position_embeddings} tokens")
    words = drill_words(text for pair in pairs for text in pair)
    rng = random.Random(cfg.seed)

    def fresh_drills(count: int) -> list[tuple[list[int], int]]:
        return _sft_examples(tokenizer, [fresh_copy_drill(rng, words) for _ in range(count)])

    if cfg.copy_steps:
        _fit(model, cfg.copy_steps, cfg.sft_learning_rate, "demo policy copy drills",
             lambda: _collate(fresh_drills(cfg.sft_batch_size), tokenizer.pad_token_id))
    batches = sft_batches([len(ids) for ids, _ in examples], cfg.sft_batch_size, cfg.sft_length_groups,
                          torch.Generator().manual_seed(cfg.seed))
    drills_a_batch = round(cfg.copy_share * cfg.sft_batch_size)

    def sft_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        chosen = [examples[i] for i in next(batches)][drills_a_batch:]
        return _collate(chosen + fresh_drills(drills_a_batch), tokenizer.pad_token_id)

    def snapshot(step: int, loss: torch.Tensor) -> None:
        if step in snapshots:
            meta = {"version": 0, "snapshot_of": str(out), "snapshot_step": step, "sft_loss": float(loss.detach())}
            _write(Path(f"{out}-step{step}"), model, tokenizer, meta)

    loss = _fit(model, cfg.sft_steps, cfg.sft_learning_rate, "demo policy SFT", sft_batch, snapshot)
    meta = {"version": 0, "demo_policy": asdict(cfg), "num_pairs": len(pairs), "pairs_sha256": _digest(pairs),
            "final_sft_loss": float(loss.detach()),
            "build_seconds": round(clock.seconds, 1)}
    return _write(out, model, tokenizer, meta)


def _fit(model, steps: int, learning_rate: float, desc: str,
         next_batch: Callable[[], tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
         after_step: Callable[[int, torch.Tensor], None] | None = None) -> torch.Tensor:
    """``steps`` AdamW steps of next-token loss on ``next_batch()``'s ``(input_ids, attention, labels)``, each
    ``[batch, L]``, under a 10% linear warm-up then a cosine decay to 0; the last step's loss."""
    optim = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    warmup = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (
        1.0 + math.cos(math.pi * min(1.0, s / max(1, steps)))))
    model.train()
    bar = progress(total=steps, desc=desc, unit="step")  # a build takes minutes: say where it is
    for step in range(1, steps + 1):
        input_ids, attention, labels = next_batch()
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        optim.zero_grad(set_to_none=True)
        bar.update(1)
        if after_step:
            after_step(step, loss)
    bar.close()
    return loss


def _write(out: Path, model, tokenizer, meta: dict) -> Path:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(out, safe_serialization=True)  # fp32; vLLM casts to bf16 on load
    tokenizer.save_pretrained(out)
    (out / POLICY_META).write_text(json.dumps(meta, indent=2))  # written last: marks the dir complete
    return out


def _digest(pairs: Sequence[tuple[str, str]]) -> str:
    return hashlib.sha256(json.dumps([list(p) for p in pairs]).encode()).hexdigest()


def is_complete(out_dir: str | os.PathLike, cfg: DemoPolicyConfig,
                pairs: Sequence[tuple[str, str]] | None = None) -> bool:
    """True when ``out_dir`` holds a finished demo policy built with exactly ``cfg`` (and ``pairs``, if given). A
    field its meta lacks was added to ``DemoPolicyConfig`` after it was built, with a default that builds as before:
    it counts as that default, so a new field does not rebuild every cached policy."""
    out = Path(out_dir)
    try:
        meta = json.loads((out / POLICY_META).read_text())
    except (OSError, ValueError):
        return False
    files = (WEIGHTS, "config.json", "tokenizer.json", "tokenizer_config.json")
    same_data = pairs is None or meta.get("pairs_sha256") == _digest(pairs)
    built = {**asdict(DemoPolicyConfig()), **meta.get("demo_policy", {})}
    return "demo_policy" in meta and built == asdict(cfg) and same_data and all((out / f).is_file() for f in files)


def main_demo_policy(out_dir: str | os.PathLike, cfg: DemoPolicyConfig | None = None,
                     suite: str = DEMO_SUITE) -> Path:
    """Build the demo policy from ``suite``'s train split into ``out_dir`` unless an identical one is there."""
    from posttrain.envs.suite import load_suite

    cfg = cfg or DemoPolicyConfig()
    pairs = [(env.prompt, env.reference) for env in load_suite(suite).envs if env.split == "train"]
    with building(out_dir):
        if is_complete(out_dir, cfg, pairs):
            return Path(out_dir)
        return build_demo_policy(out_dir, cfg, pairs)


@contextmanager
def building(out_dir: str | os.PathLike) -> Iterator[None]:
    """Hold the build lock of ``out_dir`` (``.<name>.lock`` beside it): one builder of a policy folder at a time on
    a machine. A second caller (two test workers, two local runs) waits, then finds the first one's policy complete
    instead of deleting it while it is being written or read.

    >>> import tempfile
    >>> with building(Path(tempfile.mkdtemp()) / "policy"):
    ...     pass
    """
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
