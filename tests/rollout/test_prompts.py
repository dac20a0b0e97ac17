"""Single-turn prompts rendered through the policy's chat template to token ids, with real tokenizers (unit), and
served by vLLM for each model family with exact token accounting (integration): the prompt ids a Trajectories row
records are what the engine saw, the completion ids decode to its text, and the trainer's batch scores the same
tokens to the engine's log-probabilities."""

from __future__ import annotations

import json

import pytest

from posttrain.config import ConfigError, RolloutConfig
from posttrain.envs.spec import EnvSpec
from posttrain.rollout.prompts import PromptFormat, stop_token_ids
from posttrain.training.families import FAMILIES

PROMPT = "# Write a function add_1(x) that returns x plus 1.\n"
SYSTEM = "Answer with Python code only."


def demo_tokenizer():
    from posttrain.training.demo_policy import train_tokenizer

    return train_tokenizer([PROMPT, "def add_1(x):\n    return x + 1\n"], 300)


@pytest.mark.unit
def test_auto_without_a_template_is_the_raw_prompt_encoded_as_vllm_encodes_text():
    """The demo policy's case: no template, so "auto" changes nothing (same prompts, same tokens)."""
    tok = demo_tokenizer()
    assert PromptFormat(tok).encode([PROMPT]) == [tok(PROMPT).input_ids]
    assert tok(PROMPT).input_ids[0] == tok.bos_token_id
    assert PromptFormat(tok, system_prompt="# ").encode([PROMPT]) == [tok("# " + PROMPT).input_ids]


@pytest.mark.unit
def test_a_built_in_template_on_a_tokenizer_without_one_keeps_its_bos_once():
    tok = demo_tokenizer()
    [ids] = PromptFormat(tok, "chatml").encode([PROMPT])
    assert ids[0] == tok.bos_token_id
    assert ids.count(tok.bos_token_id) == 1
    assert tok.decode(ids[1:]) == f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.unit
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_auto_renders_through_the_familys_own_template_to_one_bos(family, family_policy):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(family_policy(family))
    fmt = PromptFormat(tok, "auto", SYSTEM)
    text = fmt.render(PROMPT)
    assert text == tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}],
                                           tokenize=False, add_generation_prompt=True)
    [ids] = fmt.encode([PROMPT])
    if FAMILIES[family].bos:  # the template writes BOS and the tokenizer adds one on encode: still one
        assert text.startswith(tok.bos_token)
        assert ids[0] == tok.bos_token_id
        assert ids.count(tok.bos_token_id) == 1
    else:
        assert tok.bos_token_id is None
    assert ids == tok(text, add_special_tokens=False).input_ids  # the text's own tokens, special markers whole
    # "none": the raw prompt, whatever the tokenizer holds
    assert PromptFormat(tok, "none").encode([PROMPT]) == [tok(PROMPT).input_ids]


@pytest.mark.unit
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_system_prompt_is_a_shared_prefix_of_every_prompt(family, family_policy):
    from transformers import AutoTokenizer

    fmt = PromptFormat(AutoTokenizer.from_pretrained(family_policy(family)), "auto", SYSTEM)
    a, b = fmt.encode([PROMPT, "# Write a function neg(x) that returns -x.\n"])
    shared = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert SYSTEM in fmt.tokenizer.decode(a[:shared])


@pytest.mark.unit
def test_the_config_names_the_template_choices():
    assert RolloutConfig().chat_template == "auto"
    assert RolloutConfig().system_prompt == ""
    with pytest.raises(ConfigError, match=r"rollout.chat_template='vicuna': must be one of \['auto', 'none', 'chatml'"):
        RolloutConfig(chat_template="vicuna")


def _env(i: int) -> EnvSpec:
    return EnvSpec(id=f"demo/add_{i}", prompt=f"# Write a function add_{i}(x) that returns x plus {i}.\n",
                   entry_point=f"add_{i}", verifier={"kind": "python_tests", "cases": []}, reference="")


@pytest.mark.integration
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_vllm_serves_each_family_and_the_trainer_scores_exactly_the_tokens_it_sampled(family, family_policy):
    """vLLM loads the family's checkpoint; a collected row's prompt ids are the rendered prompt's, its completion
    ids decode to its text, and the trainer's batch (``pad_batch`` of ``train_samples``) scored by the HF model
    gives the engine's log-probabilities (fp32 on both sides)."""
    pytest.importorskip("vllm", reason="vLLM is not installed (make install with EXTRA=cpu or gpu)")
    import torch
    from transformers import AutoModelForCausalLM

    from posttrain.rollout.collect import collect
    from posttrain.rollout.engine import VLLMEngine
    from posttrain.training.batching import pad_batch
    from posttrain.training.logprobs import token_logprobs
    from posttrain.training.samples import train_samples

    path = family_policy(family)
    cfg = RolloutConfig(replicas=1, max_model_len=512, dtype="float32", system_prompt=SYSTEM)
    envs = [_env(1), _env(2)]
    with VLLMEngine(str(path), cfg, version=0) as engine:
        table, _ = collect(engine, envs, n=2, temperature=1.0, max_tokens=12, group_prefix="it1", seed=0)
    fmt = PromptFormat.load(str(path), "auto", SYSTEM)
    expected = dict(zip([e.prompt for e in envs], fmt.encode([e.prompt for e in envs])))
    assert len(table) == 4
    for row in table.itertuples():
        assert json.loads(row.prompt_token_ids) == expected[row.prompt]
        completion = json.loads(row.completion_token_ids)
        assert fmt.tokenizer.decode(completion, skip_special_tokens=True) == row.completion

    samples = train_samples(table.assign(advantage=1.0))
    batch = pad_batch([(s.prompt_token_ids, s.completion_token_ids, s.behavior_logprobs) for s in samples],
                      [s.advantage for s in samples], 0, temperatures=[s.temperature for s in samples])
    for b, s in enumerate(samples):
        assert batch.input_ids[b, :len(s.prompt_token_ids) + len(s.completion_token_ids)].tolist() == (
            s.prompt_token_ids + s.completion_token_ids)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
    scored = token_logprobs(logits / batch.logit_scale[:, None, None], batch.targets)
    on = batch.mask.bool()
    assert on.sum() == sum(len(s.completion_token_ids) for s in samples)
    gap = (scored[on] - batch.behavior_logprobs[on]).abs().max()
    assert gap < 2e-3, gap


@pytest.mark.unit
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_stop_ids_are_the_tokenizers_eos_and_every_eos_of_generation_config(family, family_policy):
    from transformers import AutoTokenizer

    from posttrain.rollout.engine import sampling_params

    path = family_policy(family)
    tok = AutoTokenizer.from_pretrained(path)
    ids = stop_token_ids(tok, str(path))
    spec = FAMILIES[family]
    assert tok.convert_ids_to_tokens(ids) == sorted((spec.eos, *spec.stops), key=tok.convert_tokens_to_ids)
    listed = json.loads((path / "generation_config.json").read_text())["eos_token_id"]
    assert isinstance(listed, list)
    assert set(listed) | {tok.eos_token_id} == set(ids)
    assert sampling_params(1, 1, 1.0, 8, stop_token_ids=ids)["stop_token_ids"] == ids
    assert stop_token_ids(tok) == [tok.eos_token_id]  # no policy dir: the tokenizer's EOS alone


@pytest.mark.unit
def test_a_single_eos_id_in_generation_config_or_none_at_all(tmp_path):
    tok = demo_tokenizer()
    assert stop_token_ids(tok, str(tmp_path)) == [tok.eos_token_id]  # no generation_config.json
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 7}))
    assert stop_token_ids(tok, str(tmp_path)) == sorted({7, tok.eos_token_id})
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": None}))
    assert stop_token_ids(tok, str(tmp_path)) == [tok.eos_token_id]


@pytest.mark.integration
def test_the_engine_stops_at_each_eos_of_generation_config(family_policy):
    """Llama 3's ``<|eom_id|>`` and ``<|end_of_text|>`` are not its tokenizer's EOS: the engine stops at them because
    its requests list them (a logit bias makes the random model write each one first)."""
    pytest.importorskip("vllm", reason="vLLM is not installed (make install with EXTRA=cpu or gpu)")
    from posttrain.rollout.engine import VLLMEngine, sampling_params

    path = family_policy("llama3")
    with VLLMEngine(str(path), RolloutConfig(replicas=1, max_model_len=512, dtype="float32"), version=0) as engine:
        tok = engine.prompts.tokenizer
        assert engine.stop_token_ids == stop_token_ids(tok, str(path))
        [ids] = engine.prompts.encode([PROMPT])
        for stop in engine.stop_token_ids:
            params = {**sampling_params(1, 1, 1.0, 8, stop_token_ids=engine.stop_token_ids),
                      "logit_bias": {stop: 100.0}}
            [out] = engine.request_outputs([{"prompt_token_ids": ids}], params)
            assert (list(out.outputs[0].token_ids), out.outputs[0].finish_reason) == ([stop], "stop"), \
                tok.convert_ids_to_tokens([stop])
