"""Single-turn prompts as the policy sees them: an env's prompt rendered through a chat template to token ids, once.

Every single-turn prompt reaches a model through ``PromptFormat.encode`` (``VLLMEngine.generate`` calls it, so the
rollout, the greedy and sampled eval, the standalone evaluation and admission's checkpoint policies all do), and the
engine gets the ids, never text: ``Trajectories.prompt_token_ids`` is exactly what the model saw, and what the
trainer scores.

``RolloutConfig.chat_template`` chooses the rendering:

- ``"auto"`` (default): the tokenizer's own template if it has one, else the raw prompt. A base model, or the demo
  policy (no template), sees exactly the text prompt as before, encoded as vLLM encodes text (BOS included when the
  tokenizer adds one);
- ``"none"``: the raw prompt, whatever the tokenizer holds;
- a built-in name (``posttrain.rollout.chat_templates``: ``chatml``, ``mistral``, ``llama3``): that template.

``RolloutConfig.system_prompt`` ("" for none) comes first: a system message through a template, else text before the
prompt; every prompt starts with the same tokens, which vLLM's prefix cache shares. A rendered prompt is encoded
without the tokenizer's own special tokens (the template writes them, as transformers and vLLM's chat API do);
the BOS a tokenizer adds on plain encoding is prepended only when the template did not write it, so there is exactly
one either way.

Generation stops at the policy's end-of-sequence tokens, ``stop_token_ids``: the tokenizer's EOS and every id of
``generation_config.json``'s ``eos_token_id`` (an int or a list: Llama 3 lists ``<|eot_id|>``, ``<|eom_id|>`` and
``<|end_of_text|>``). ``VLLMEngine`` sends them as every request's ``stop_token_ids``, in both tiers (vLLM also reads
``generation_config.json`` itself, by default; the engine does not rely on it).

Example (a demo-style tokenizer: BOS on encode, no template of its own):
    >>> from posttrain.training.demo_policy import train_tokenizer
    >>> tok = train_tokenizer(["# add_1(x)\\n"], 300)
    >>> raw = PromptFormat(tok)                                              # "auto", no template: the raw prompt
    >>> raw.encode(["# add_1(x)\\n"]) == [tok("# add_1(x)\\n").input_ids]
    True
    >>> chat = PromptFormat(tok, "chatml", system_prompt="Write Python.")
    >>> print(chat.render("# add_1(x)\\n"))
    <|im_start|>system
    Write Python.<|im_end|>
    <|im_start|>user
    # add_1(x)
    <|im_end|>
    <|im_start|>assistant
    <BLANKLINE>
    >>> ids = chat.encode(["# add_1(x)\\n"])[0]
    >>> ids[0] == tok.bos_token_id, ids.count(tok.bos_token_id)             # the tokenizer's BOS, once
    (True, 1)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from posttrain.rollout.chat_templates import builtin


class PromptFormat:
    """How single-turn prompts are rendered and encoded for one tokenizer (see module docstring)."""

    def __init__(self, tokenizer, chat_template: str = "auto", system_prompt: str = ""):
        self.tokenizer, self.chat_template, self.system_prompt = tokenizer, chat_template, system_prompt
        self.template = own_template(tokenizer) if chat_template == "auto" else (
            None if chat_template == "none" else builtin(chat_template))

    @classmethod
    def load(cls, policy_dir: str, chat_template: str = "auto", system_prompt: str = "") -> "PromptFormat":
        """The format of the policy in ``policy_dir`` (its tokenizer, loaded here)."""
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(policy_dir)), chat_template, system_prompt)

    @property
    def settings(self) -> tuple[str, str]:
        return self.chat_template, self.system_prompt

    def render(self, prompt: str) -> str:
        """The text the policy reads for ``prompt``: through the template, or the system prompt and the prompt."""
        if self.template is None:
            return self.system_prompt + prompt
        messages = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else []) + [
            {"role": "user", "content": prompt}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                  chat_template=self.template)

    def encode(self, prompts: Sequence[str]) -> list[list[int]]:
        """The token ids the policy reads for each of ``prompts``."""
        return [self._ids(self.render(p)) for p in prompts]

    def _ids(self, text: str) -> list[int]:
        if self.template is None:  # as vLLM encodes a text prompt
            return list(self.tokenizer(text).input_ids)
        ids = list(self.tokenizer(text, add_special_tokens=False).input_ids)
        bos = self.tokenizer.bos_token_id
        if bos is not None and adds_bos(self.tokenizer) and ids[:1] != [bos]:
            ids = [bos] + ids
        return ids


def own_template(tokenizer) -> str | None:
    """The tokenizer's own chat template (its default one when it names several), or None."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template or None


def adds_bos(tokenizer) -> bool:
    """Whether the tokenizer puts its BOS first when it encodes plain text."""
    bos = tokenizer.bos_token_id
    return bos is not None and list(tokenizer("x").input_ids[:1]) == [bos]


def stop_token_ids(tokenizer, policy_dir: str | None = None) -> list[int]:
    """The policy's end-of-sequence ids, sorted: the tokenizer's EOS and ``generation_config.json``'s
    ``eos_token_id`` (one id or a list) in ``policy_dir``, when it has one."""
    ids = {tokenizer.eos_token_id} - {None}
    config = Path(policy_dir) / "generation_config.json" if policy_dir else None
    if config is not None and config.is_file():
        eos = json.loads(config.read_text()).get("eos_token_id")
        ids.update([eos] if isinstance(eos, int) else eos or [])
    return sorted(ids)
