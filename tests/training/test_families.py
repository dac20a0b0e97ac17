"""Tiny checkpoints of the Mistral, Qwen2 and Llama 3 families, built offline around real tokenizers: architecture,
special tokens, chat template, stop ids, and the tokenizer a loader gets back is the one that was built. (vLLM serves
each of them in ``tests/rollout/test_prompts.py``.)"""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from posttrain.training.families import FAMILIES, build_family_checkpoint

pytestmark = pytest.mark.unit

TURN_MARKERS = {"mistral": ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[TOOL_RESULTS]"],
                "qwen2": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>"],
                "llama3": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]}
STOPS = {"mistral": ["</s>"], "qwen2": ["<|im_end|>", "<|endoftext|>"],
         "llama3": ["<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"]}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_family_checkpoint_has_its_architecture_tokens_template_and_stops(family, family_policy):
    from transformers import AutoConfig, AutoTokenizer

    path = family_policy(family)
    config = AutoConfig.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert config.architectures == [FAMILIES[family].architecture]
    assert (config.hidden_size, config.num_hidden_layers) == (64, 2)
    assert config.vocab_size == len(tokenizer)

    for marker in TURN_MARKERS[family]:  # each turn marker is one token, never split into text pieces
        assert len(tokenizer(marker, add_special_tokens=False).input_ids) == 1, marker
    generation = json.loads((path / "generation_config.json").read_text())
    assert generation["eos_token_id"] == tokenizer.convert_tokens_to_ids(STOPS[family])
    assert tokenizer.eos_token == STOPS[family][0]

    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "# Write add_1(x).\n"}]
    text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert "Be brief." in text
    assert text.index("Be brief.") < text.index("# Write add_1(x).")
    bos = FAMILIES[family].bos
    if bos:  # the BOS is the template's first token, and plain encoding adds it too
        assert text.startswith(bos)
        assert tokenizer("x").input_ids[0] == tokenizer.bos_token_id
    else:
        assert tokenizer.bos_token is None
        assert tokenizer("x").input_ids == tokenizer("x", add_special_tokens=False).input_ids


def test_the_mistral_tokenizer_is_mistrals_v3_sentencepiece(family_policy):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(family_policy("mistral"))
    assert len(tokenizer) == 32768
    # v3's control tokens at their ids (mistral_common's tokenizer file)
    controls = ["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]
    assert tokenizer.convert_tokens_to_ids(controls) == list(range(1, 10))
    assert tokenizer.convert_ids_to_tokens(tokenizer("[INST] hello world[/INST]").input_ids) == [
        "<s>", "[INST]", "▁hell", "o", "▁world", "[/INST]"]


@pytest.mark.parametrize("family", ["qwen2", "llama3"])
def test_a_trained_bpe_loads_back_as_built_and_round_trips_text(family, family_policy, tmp_path):
    """transformers rebuilds a Qwen2 tokenizer's normalizer and pre-tokenizer on load: the built one must use the
    same, or the checkpoint's tokens would differ from the ones it was made with."""
    from transformers import AutoTokenizer

    from posttrain.training.families import _tokenizer

    text = "def add_1(x):\n    return x + 12345  # é, ü\n\t'''s'''"
    built = _tokenizer(FAMILIES[family], None, 512)
    loaded = AutoTokenizer.from_pretrained(family_policy(family))
    assert loaded(text).input_ids == built(text).input_ids
    assert loaded.decode(loaded(text, add_special_tokens=False).input_ids) == text


def test_builds_are_deterministic_and_unknown_families_refused(tmp_path):
    a = build_family_checkpoint("qwen2", tmp_path / "a", seed=3)
    b = build_family_checkpoint("qwen2", tmp_path / "b", seed=3)
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert all((wa[k] == wb[k]).all() for k in wa)
    with pytest.raises(ValueError, match=r"unknown model family 'gemma'; known: \['mistral', 'qwen2', 'llama3'\]"):
        build_family_checkpoint("gemma", tmp_path / "c")


def test_a_published_shape_pads_the_vocabulary_and_stores_its_dtype(tmp_path, monkeypatch):
    """A shape's vocabulary beyond the trained BPE is filled with entries no text encodes to; the family's tokens
    and template keep working, the weights are stored in the dtype asked for (the real shapes are the same code at
    hundreds of millions of parameters: benchmarks/one_iteration.py)."""
    from transformers import AutoTokenizer

    from posttrain.training import families

    shape = {"family": "qwen2", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
             "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 2048, "tie_word_embeddings": True}
    monkeypatch.setitem(families.SHAPES, "qwen2-test", shape)
    path = build_family_checkpoint("qwen2", tmp_path / "p", shape="qwen2-test", dtype="bfloat16")
    config = json.loads((path / "config.json").read_text())
    assert (config["vocab_size"], config["hidden_size"], config["dtype"]) == (2048, 32, "bfloat16")
    tok = AutoTokenizer.from_pretrained(path)
    assert len(tok) == 2048
    assert tok.convert_tokens_to_ids("</tool_call>") == 2047  # the added tokens keep the last ids
    assert tok.convert_ids_to_tokens(600) == "<|reserved_600|>"
    text = "def f(x):\n    return x + 1<|im_end|>"
    ids = tok(text).input_ids
    assert not any(token.startswith("<|reserved_") for token in tok.convert_ids_to_tokens(ids))  # no text makes them
    assert ids[-1] == tok.eos_token_id
    assert tok.decode(ids) == text
    assert "<|im_start|>assistant" in tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                               add_generation_prompt=True)
    with pytest.raises(ValueError, match="not of the mistral family"):
        build_family_checkpoint("mistral", tmp_path / "m", shape="qwen2-test")
