"""Tiny checkpoints of the model families users bring (Mistral, Qwen2, Llama 3), built offline for tests.

``build_family_checkpoint(family, out_dir)`` writes an HF checkpoint directory the way a user's would look: the
family's architecture (``MistralForCausalLM``, ``Qwen2ForCausalLM``, ``LlamaForCausalLM``), randomly initialised and
tiny (hidden 64, 2 layers: vLLM's CPU backend serves it in seconds), around a real tokenizer of the family's kind
with its special tokens, a chat template (``posttrain.rollout.chat_templates``) and ``generation_config.json`` with
the family's end-of-sequence ids. Nothing is downloaded:

- ``mistral``: the sentencepiece model of Mistral's v3 instruct tokenizer that ``mistral_common`` installs (32768
  pieces, control tokens ``[INST]``, ``[TOOL_CALLS]``, ``[AVAILABLE_TOOLS]``, ``[TOOL_RESULTS]``), loaded as
  ``LlamaTokenizer`` with BOS added on encode, as Mistral's HF tokenizers do (the template writes BOS too);
- ``qwen2``: a byte-level BPE trained in place (like the demo policy's) with Qwen's ``<|endoftext|>`` (pad),
  ``<|im_start|>`` and ``<|im_end|>`` (EOS) as special tokens and ``<tool_call>`` tags as added tokens; no BOS;
- ``llama3``: a byte-level BPE trained in place with Llama 3's header and turn tokens (``<|begin_of_text|>`` added
  on encode, ``<|eot_id|>`` the EOS, ``<|eom_id|>`` and ``<|end_of_text|>`` stop too); no pad token, as in Llama 3.

The BPEs are trained on the demo suite's train split (or ``texts``) with a fixed vocabulary size, deterministically;
weights are seeded. The output is a test double of a user's checkpoint: it has the shapes and the token
conventions, not the skill.

Example (tests/training/test_families.py builds each family and serves it with vLLM):
    >>> path = build_family_checkpoint("qwen2", "/tmp/tiny-qwen2")                          # doctest: +SKIP
    >>> sorted(p.name for p in path.iterdir())                                               # doctest: +SKIP
    ['chat_template.jinja', 'config.json', 'generation_config.json', 'model.safetensors', 'posttrain_policy.json',
     'tokenizer.json', 'tokenizer_config.json']
    >>> FAMILIES["llama3"].architecture, FAMILIES["llama3"].template
    ('LlamaForCausalLM', 'llama3')
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from posttrain.rollout.chat_templates import builtin
from posttrain.training.checkpoints import POLICY_META

MISTRAL_V3 = "mistral_instruct_tokenizer_240323.model.v3"  # in mistral_common's package data
# The published pre-tokenizer regexes: Qwen2's (one digit a piece) and Llama 3's (up to three digits a piece).
_WORDS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
_REST = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_SPLIT = _WORDS + r"\p{N}" + _REST
LLAMA3_SPLIT = _WORDS + r"\p{N}{1,3}" + _REST


@dataclass(frozen=True)
class Family:
    """How one family's checkpoints look: architecture, tokenizer kind and special tokens, template, stop tokens."""

    architecture: str  # the transformers model class (config.json "architectures")
    template: str  # the built-in chat template (posttrain.rollout.chat_templates)
    tokenizer: str  # "sentencepiece:<file in mistral_common/data>" or "bpe" (trained in place)
    bos: str | None  # the BOS token, added on encode when set
    eos: str  # the tokenizer's EOS: what ends an assistant turn
    stops: tuple[str, ...] = ()  # further end-of-sequence tokens in generation_config.json
    pad: str | None = None
    special: tuple[str, ...] = ()  # the BPE's special tokens (control tokens: never split, skipped on decode)
    added: tuple[str, ...] = ()  # the BPE's added tokens that are ordinary text (decoded as they are)
    split: str | None = None  # the BPE's pre-tokenizer regex (the family's own; transformers re-applies Qwen2's)
    tied: bool = False  # input embeddings tied to the LM head
    extra: dict = field(default_factory=dict)  # further config.json fields


FAMILIES = {
    "mistral": Family("MistralForCausalLM", "mistral", f"sentencepiece:{MISTRAL_V3}", bos="<s>", eos="</s>",
                      extra={"sliding_window": None}),
    "qwen2": Family("Qwen2ForCausalLM", "chatml", "bpe", bos=None, eos="<|im_end|>", stops=("<|endoftext|>",),
                    pad="<|endoftext|>", special=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
                    added=("<tool_call>", "</tool_call>"), split=QWEN2_SPLIT, tied=True),
    "llama3": Family("LlamaForCausalLM", "llama3", "bpe", bos="<|begin_of_text|>", eos="<|eot_id|>",
                     stops=("<|end_of_text|>", "<|eom_id|>"),
                     special=("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                              "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"), split=LLAMA3_SPLIT),
}

# Published model shapes (the fields of their config.json), for a random checkpoint of real size: ``shape=`` of
# ``build_family_checkpoint``. Qwen2-0.5B(-Instruct): 494M parameters, 136M of them the tied embeddings.
SHAPES = {
    "qwen2-0.5b": {"family": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                   "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "rope_theta": 1e6,
                   "max_position_embeddings": 32768, "tie_word_embeddings": True},
}


def build_family_checkpoint(family: str, out_dir: str | os.PathLike, *, hidden_size: int = 64, num_layers: int = 2,
                            max_position_embeddings: int = 1024, bpe_vocab_size: int = 512, seed: int = 0,
                            texts: Sequence[str] | None = None, shape: str | None = None,
                            dtype: str = "float32") -> Path:
    """Write a random checkpoint of ``family`` (a key of ``FAMILIES``) to ``out_dir`` (replaced) and return it: tiny
    by default, or of a published ``shape`` (a key of ``SHAPES`` of that family; the other size arguments are then
    ignored), with its weights stored in ``dtype``.

    ``texts``: what a trained BPE learns from (default: the demo suite's train prompts and references). A shape's
    vocabulary beyond the tokenizer's own is filled with reserved special tokens, as the real tokenizers fill theirs.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; known: {list(FAMILIES)}")
    published = dict(SHAPES[shape]) if shape is not None else {}
    if published and published.pop("family") != family:
        raise ValueError(f"shape {shape!r} is not of the {family} family")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    spec = FAMILIES[family]
    tokenizer = _tokenizer(spec, texts, bpe_vocab_size)
    if published.get("vocab_size", 0) > len(tokenizer):
        tokenizer = _padded(tokenizer, published["vocab_size"], spec)
    tokenizer.chat_template = builtin(spec.template)
    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in (spec.eos, *spec.stops)}
    model_type = {"MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2", "LlamaForCausalLM": "llama"}
    tiny = {"vocab_size": len(tokenizer), "hidden_size": hidden_size, "intermediate_size": 2 * hidden_size,
            "num_hidden_layers": num_layers, "num_attention_heads": 1, "num_key_value_heads": 1,
            "head_dim": hidden_size, "max_position_embeddings": max_position_embeddings,
            "tie_word_embeddings": spec.tied}
    config = AutoConfig.for_model(
        model_type[spec.architecture], **(published or tiny), bos_token_id=tokenizer.bos_token_id,
        eos_token_id=ids[spec.eos], pad_token_id=tokenizer.pad_token_id, architectures=[spec.architecture],
        **spec.extra)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=list(ids.values()),
                                               pad_token_id=tokenizer.pad_token_id)
    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / POLICY_META).write_text(json.dumps({"version": 0, "family": family}, indent=2))
    return out


def _tokenizer(spec: Family, texts: Sequence[str] | None, vocab_size: int):
    if spec.tokenizer.startswith("sentencepiece:"):
        return _sentencepiece(spec.tokenizer.split(":", 1)[1])
    return _bpe(spec, list(texts) if texts is not None else _demo_texts(), vocab_size)


def _sentencepiece(name: str):
    """A real Mistral tokenizer: the sentencepiece model ``name`` from mistral_common's data, as ``LlamaTokenizer``
    (its control tokens become special tokens); BOS on encode."""
    from transformers import LlamaTokenizer

    try:
        import mistral_common
    except ImportError as exc:
        raise RuntimeError("the mistral family's tokenizer comes from the mistral_common package, not installed") \
            from exc
    model = Path(mistral_common.__file__).parent / "data" / name
    if not model.is_file():
        raise RuntimeError(f"mistral_common has no {model}")
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(model, Path(tmp) / "tokenizer.model")
        return LlamaTokenizer.from_pretrained(tmp, add_bos_token=True, legacy=False)


def _bpe(spec: Family, texts: list[str], vocab_size: int):
    """A byte-level BPE over ``texts`` with the family's special and added tokens; BOS prepended on encode when the
    family has one."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(spec.split), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(spec.special),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in spec.added])
    if spec.bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{spec.bos} $A", pair=f"{spec.bos} $A $B", special_tokens=[(spec.bos, tok.token_to_id(spec.bos))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=spec.bos, eos_token=spec.eos, pad_token=spec.pad)


def _padded(tokenizer, size: int, spec: Family):
    """``tokenizer`` (a trained BPE) with vocabulary entries no text encodes to (``<|reserved_N|>``: no merge makes
    them), up to ``size`` ids, as published vocabularies pad theirs. Entries of the BPE model, not added tokens: a
    tokenizer with 150k added tokens takes minutes to load, one with a 150k-entry vocabulary does not."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    if spec.tokenizer != "bpe":
        raise ValueError(f"a {spec.tokenizer} tokenizer keeps its own vocabulary ({len(tokenizer)}), not {size}")
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = state["model"]["vocab"]
    added = len(tokenizer) - len(vocab)  # the added tokens keep the last ids
    vocab.update({f"<|reserved_{i}|>": i for i in range(len(vocab), size - added)})
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(state)), bos_token=spec.bos,
                                   eos_token=spec.eos, pad_token=spec.pad)


def _demo_texts() -> list[str]:
    from posttrain.config import DEMO_SUITE
    from posttrain.envs.suite import load_suite

    roles = ["system", "user", "assistant", "tool", "ipython"]  # the templates' words
    train = [env for env in load_suite(DEMO_SUITE).envs if env.split == "train"]
    return roles + [text for env in train for text in (env.prompt, env.reference)]
