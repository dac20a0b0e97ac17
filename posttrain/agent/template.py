"""The agent chat format: a Hermes/Qwen-style Jinja template and the token pieces an episode is built from.

Prompts are rendered with ``tokenizer.apply_chat_template(messages, tools=...)``: the policy's own template, or the
one given (``AgentConfig.chat_template``: ``agent_template``). A tokenizer without a template (a base model) is
refused with a ``TemplateError`` naming what is missing: without turns there is no agent conversation to hold. The
``agent`` template is ``AGENT_TEMPLATE``, the demo agent policy's (attached at render time, so no policy directory is
rewritten); in it, tools are listed in the system turn, the model calls them as ``<tool_call>{"name": ...,
"arguments": {...}}</tool_call>`` and each observation comes back in a ``tool`` turn. The demo tokenizer has no
special tokens for the turn markers: they are plain text.

Nothing about the format is assumed; it is read from the template:

- ``closing``: what the template writes after an assistant's text; generation stops at it (``stop``: the closing
  without surrounding whitespace), and at the policy's end-of-sequence tokens (the engine's ``stop_token_ids``);
- ``calls``: the tool-call format (``posttrain.agent.parser.FORMATS``) that parses back the call the template renders
  for a past assistant turn (exactly one must), unless one is named (``AgentConfig.tool_format``: for a template
  that renders no past calls);
- an assistant's text may follow the generation prompt after whitespace (Mistral writes ``[/INST] answer``): the
  model writes that space itself.

An episode is never re-tokenized: ``ChatFormat`` derives, once, the template text around the model's own tokens by
rendering sentinel conversations and taking differences (so it works for any incremental template):

- ``prompt_ids(messages, tools)``: the stable prefix (system, tools, task) plus the generation prompt; tokens
  ``[P]``; ``tools``: an env's own tool set (``AgentSettings.tools``) instead of the format's. The tools are listed
  before the task, so episodes whose envs list different tool sets share the engine's prefix cache only up to where
  the lists differ; each episode's own prefix stays the same in every turn and window, and the episodes of one env
  (a group) share all of it;
- ``closing_ids(model_text)``: what closes an assistant turn after the model's tokens (the part of ``<|im_end|>\\n``
  the model did not write itself); ``[C]``;
- ``observation_ids(observations)``: the tool turn(s) plus the next generation prompt; ``[O]``.

Example (a demo-style byte-level BPE tokenizer, trained in place):
    >>> from posttrain.envs.tools import tool_specs
    >>> from posttrain.training.demo_policy import train_tokenizer
    >>> fmt = ChatFormat(train_tokenizer(["x = 1\\n"], 300), tool_specs(["bash", "submit"]), AGENT_TEMPLATE)
    >>> print(fmt.render([{"role": "user", "content": "List files."}], add_generation_prompt=True))
    <s><|im_start|>system
    You solve tasks in a sandbox.
    Tools:
    - bash(command): run a shell command in /work
    - submit(): finish the task
    Call: <tool_call>{"name": NAME, "arguments": {...}}</tool_call><|im_end|>
    <|im_start|>user
    List files.<|im_end|>
    <|im_start|>assistant
    <BLANKLINE>
    >>> fmt.closing, fmt.stop, fmt.calls.name, fmt.observation_text(["hi"])
    ('<|im_end|>', ['<|im_end|>'], 'hermes', '\\n<|im_start|>tool\\nhi<|im_end|>\\n<|im_start|>assistant\\n')
"""

from __future__ import annotations

from collections.abc import Sequence

from posttrain.agent.parser import FORMATS, CallFormat, ToolCall
from posttrain.rollout.chat_templates import NAMES, builtin
from posttrain.rollout.prompts import own_template

# Hermes/Qwen style, compact for small-vocabulary policies: one line per tool (name, argument names, description)
# instead of the full JSON schema.
AGENT_TEMPLATE = (
    "{{- bos_token if bos_token else '' }}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- else %}{{- 'You solve tasks in a sandbox.' }}"
    "{%- endif %}"
    "{%- if tools %}{{- '\\nTools:' }}"
    "{%- for tool in tools %}"
    "{{- '\\n- ' + tool.function.name + '(' + (tool.function.parameters.properties | list | join(', ')) + '): ' }}"
    "{{- tool.function.description }}"
    "{%- endfor %}"
    "{{- '\\nCall: <tool_call>{\"name\": NAME, \"arguments\": {...}}</tool_call>' }}"
    "{%- endif %}{{- '<|im_end|>' }}"
    "{%- for message in messages %}"
    "{%- if not (loop.first and message.role == 'system') %}"
    "{{- '\\n<|im_start|>' + message.role + '\\n' + message.content }}"
    "{%- for call in message.tool_calls or [] %}"
    "{{- '<tool_call>{\"name\": \"' + call.function.name + '\", \"arguments\": ' }}"
    "{{- call.function.arguments | tojson }}{{- '}</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '\\n<|im_start|>assistant\\n' }}{%- endif %}"
)

CHOICES = ("auto", "agent", *NAMES)  # AgentConfig.chat_template


def agent_template(name: str) -> str | None:
    """The template text ``AgentConfig.chat_template`` names: None for ``auto`` (the tokenizer's own), ``agent``
    (``AGENT_TEMPLATE``) or a built-in of ``posttrain.rollout.chat_templates``."""
    return None if name == "auto" else AGENT_TEMPLATE if name == "agent" else builtin(name)


BASE = [{"role": "user", "content": "x"}]  # a conversation's start, for the sentinel renderings
SENTINEL = "\u2063SENTINEL\u2063"  # content no real message contains, used to split rendered text


PROBE = {"name": "probe", "arguments": {"arg": "value"}}  # the past call whose rendering tells the call format


class TemplateError(ValueError):
    """The chat template does not render conversations as the agent needs: incrementally (a prefix changed when a
    turn was added), with a call format it renders past calls in."""


class ChatFormat:
    """Rendering and tokenizing of agent conversations for one tokenizer and tool list (see module docstring)."""

    def __init__(self, tokenizer, tools: Sequence[dict], chat_template: str | None = None,
                 call_format: str = "auto"):
        self.tokenizer, self.tools = tokenizer, list(tools)
        self.template = chat_template or own_template(tokenizer)
        if not self.template:
            raise TemplateError(
                f"the tokenizer of {tokenizer.name_or_path or 'the policy'!r} has no chat template (no chat_template "
                "in tokenizer_config.json, no chat_template.jinja): a base model has no turns for agent episodes. "
                f"Give the policy a chat template, or name one in agent.chat_template: {list(CHOICES[1:])}")
        self.opened = self.render(BASE, add_generation_prompt=True)
        text = self.assistant_text(_assistant(SENTINEL))
        if not text.lstrip().startswith(SENTINEL):
            raise TemplateError("chat template: an assistant turn does not extend the generation prompt")
        self.closing = text.lstrip()[len(SENTINEL):]  # e.g. "<|im_end|>"
        self.stop = [self.closing.strip()] if self.closing.strip() else []
        self.calls = self._call_format(call_format)

    def assistant_text(self, message: dict) -> str:
        """What the template writes for the assistant turn ``message`` after the generation prompt (closing
        included)."""
        closed = self.render(BASE + [message])
        if not closed.startswith(self.opened):
            raise TemplateError("chat template: an assistant turn does not extend the generation prompt")
        return closed[len(self.opened):]

    def _call_format(self, name: str) -> CallFormat:
        """The format ``name``, else (``auto``) the one registered format that parses back the template's rendering
        of ``PROBE`` (a past call)."""
        if name != "auto":
            if name not in FORMATS:
                raise TemplateError(f"no tool-call format {name!r}; formats: {list(FORMATS)}")
            return FORMATS[name]
        text = self.assistant_text({**_assistant(""), "tool_calls": [{"type": "function", "function": PROBE}]})
        fits = [f for f in FORMATS.values()
                if f.parse(text, {PROBE["name"]: tuple(PROBE["arguments"])}) == [ToolCall(**PROBE)]]
        if len(fits) != 1:
            raise TemplateError(f"chat template: its past tool call {text!r} parses back in "
                                f"{[f.name for f in fits] or 'no'} format of {list(FORMATS)}, not exactly one; "
                                "name the format (agent.tool_format)")
        return fits[0]

    def render(self, messages: Sequence[dict], add_generation_prompt: bool = False,
               tools: Sequence[dict] | None = None) -> str:
        """``messages`` as the template writes them, with ``tools`` (default: the format's) listed."""
        tools = self.tools if tools is None else list(tools)
        return self.tokenizer.apply_chat_template(list(messages), tools=tools or None, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  chat_template=self.template)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def prompt_ids(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> list[int]:
        """The stable prefix: ``messages`` (system?, user) with ``tools`` (default: the format's), then the
        generation prompt. ``[P]``"""
        return self.encode(self.render(messages, add_generation_prompt=True, tools=tools))

    def closing_text(self, model_text: str) -> str:
        """What closes the assistant turn after ``model_text``: the rest of ``closing`` the model did not write."""
        for k in range(len(self.closing), 0, -1):
            if model_text.endswith(self.closing[:k]):
                return self.closing[k:]
        return self.closing

    def closing_ids(self, model_ids: Sequence[int]) -> list[int]:
        text = self.tokenizer.decode(list(model_ids), skip_special_tokens=False)
        rest = self.closing_text(text)
        return self.encode(rest) if rest else []

    def observation_text(self, observations: Sequence[str]) -> str:
        """The tool turn(s) carrying ``observations`` and the next generation prompt, as the template renders them."""
        base = [*BASE, _assistant(SENTINEL)]
        before = self.render(base)
        after = self.render(base + [{"role": "tool", "content": o} for o in observations], add_generation_prompt=True)
        if not after.startswith(before):
            raise TemplateError("chat template: adding a tool turn changed the text before it")
        return after[len(before):]

    def observation_ids(self, observations: Sequence[str]) -> list[int]:
        """Tokens of ``observation_text``. ``[O]``"""
        return self.encode(self.observation_text(observations))


def _assistant(content: str) -> dict:
    return {"role": "assistant", "content": content}
