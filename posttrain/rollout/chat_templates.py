"""Built-in chat templates, by name: ``chatml`` (Qwen2/Qwen3, Hermes tool calls), ``mistral`` (``[INST]``, tool calls
as ``[TOOL_CALLS]``) and ``llama3`` (header turns, JSON tool calls). ``RolloutConfig.chat_template`` names one to use
instead of the tokenizer's own; ``posttrain.training.families`` writes them into its tiny test checkpoints.

Each is written here from its family's published prompt format (not copied from a model repository) in the form
``tokenizer.apply_chat_template`` renders: ``messages`` (``role`` and ``content``; assistant ``tool_calls`` as
``{"function": {"name", "arguments": {...}}}``), ``tools`` (JSON schemas), ``add_generation_prompt``, ``bos_token``,
``eos_token``. An optional first ``system`` message comes first in the rendered text (in ``mistral``, inside the first
``[INST]``), so every prompt with the same system message shares its tokens as a prefix. Every template renders a
conversation incrementally: adding a turn never changes the text before it (``posttrain.agent.template`` relies on
it). Departures from the published formats, each for that property: ``mistral`` lists the tools and the system
message at the first user turn (Mistral's own templates: at the last one), and the turn markers are the tokenizer's
special tokens, so a template is only as good as the tokenizer it is used with.

Example:
    >>> from jinja2 import Environment
    >>> render = lambda name, **kw: Environment().from_string(TEMPLATES[name]).render(**kw)
    >>> chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    >>> print(render("chatml", messages=chat, add_generation_prompt=True))
    <|im_start|>system
    Be brief.<|im_end|>
    <|im_start|>user
    Hi<|im_end|>
    <|im_start|>assistant
    <BLANKLINE>
    >>> render("mistral", messages=chat, bos_token="<s>", eos_token="</s>")
    '<s>[INST] Be brief.\\n\\nHi[/INST]'
    >>> print(render("llama3", messages=chat[1:], bos_token="<|begin_of_text|>", add_generation_prompt=True))
    <|begin_of_text|><|start_header_id|>user<|end_header_id|>
    <BLANKLINE>
    Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>
    <BLANKLINE>
    <BLANKLINE>
"""

from __future__ import annotations

# The first message, when its role is system, is taken out of the loop (every template opens with this).
_SPLIT_SYSTEM = (
    r"{%- if messages and messages[0].role == 'system' %}"
    r"{%- set system = messages[0].content %}{%- set turns = messages[1:] %}"
    r"{%- else %}{%- set system = '' %}{%- set turns = messages %}{%- endif %}"
)

# ChatML with Hermes tool calls (Qwen2/Qwen2.5/Qwen3): tools in the system turn as JSON schemas inside <tools>, calls
# as <tool_call>{"name", "arguments"}</tool_call>, results in a user turn as <tool_response> blocks.
CHATML = _SPLIT_SYSTEM + (
    r"{%- if system or tools %}"
    r"{{- '<|im_start|>system\n' + system }}"
    r"{%- if tools %}"
    r"{{- ('\n\n' if system else '') + '# Tools\n\nYou may call one or more functions to assist with the user query.'"
    r" + '\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}"
    r"{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}"
    r"{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within'"
    r" + ' <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\":'"
    r" + ' <args-json-object>}\n</tool_call>' }}"
    r"{%- endif %}"
    r"{{- '<|im_end|>\n' }}"
    r"{%- endif %}"
    r"{%- for message in turns %}"
    r"{%- if message.role == 'tool' %}"
    r"{%- if loop.first or turns[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    r"{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}"
    r"{%- if loop.last or turns[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}"
    r"{%- else %}"
    r"{{- '<|im_start|>' + message.role + '\n' + (message.content or '') }}"
    r"{%- for call in message.tool_calls or [] %}"
    r"{{- ('\n' if (message.content or not loop.first) else '') + '<tool_call>\n{\"name\": \"' + call.function.name"
    r" + '\", \"arguments\": ' + (call.function.arguments | tojson) + '}\n</tool_call>' }}"
    r"{%- endfor %}"
    r"{{- '<|im_end|>\n' }}"
    r"{%- endif %}"
    r"{%- endfor %}"
    r"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

# Mistral (v3 tokenizer, control tokens): BOS, [AVAILABLE_TOOLS] json [/AVAILABLE_TOOLS], [INST] user [/INST], the
# answer and EOS; calls as [TOOL_CALLS] [{"name", "arguments"}, ...]; results as [TOOL_RESULTS] {"content"}
# [/TOOL_RESULTS]. The generation prompt is empty: the model answers right after [/INST].
MISTRAL = _SPLIT_SYSTEM + (
    r"{{- bos_token }}"
    r"{%- for message in turns %}"
    r"{%- if message.role == 'user' %}"
    r"{%- if loop.first and tools %}{{- '[AVAILABLE_TOOLS] ' + (tools | tojson) + '[/AVAILABLE_TOOLS]' }}{%- endif %}"
    r"{{- '[INST] ' + ((system + '\n\n') if (loop.first and system) else '') + message.content + '[/INST]' }}"
    r"{%- elif message.role == 'assistant' %}"
    r"{{- (' ' + message.content) if message.content else '' }}"
    r"{%- if message.tool_calls %}{{- '[TOOL_CALLS] [' }}"
    r"{%- for call in message.tool_calls %}"
    r"{{- ('' if loop.first else ', ') + '{\"name\": \"' + call.function.name + '\", \"arguments\": '"
    r" + (call.function.arguments | tojson) + '}' }}"
    r"{%- endfor %}{{- ']' }}{%- endif %}"
    r"{{- eos_token }}"
    r"{%- elif message.role == 'tool' %}"
    r"{{- '[TOOL_RESULTS] ' + ({'content': message.content} | tojson) + '[/TOOL_RESULTS]' }}"
    r"{%- else %}{{- raise_exception('the mistral template has no role ' + message.role) }}"
    r"{%- endif %}"
    r"{%- endfor %}"
)

# Llama 3 (3.1/3.2 instruct): BOS, <|start_header_id|>role<|end_header_id|>\n\n content <|eot_id|>; tools as JSON
# schemas in the system turn, a call as the bare JSON {"name", "parameters"}, results in an "ipython" turn.
LLAMA3 = _SPLIT_SYSTEM + (
    r"{{- bos_token }}"
    r"{%- if system or tools %}"
    r"{{- '<|start_header_id|>system<|end_header_id|>\n\n' + system }}"
    r"{%- if tools %}"
    r"{{- ('\n\n' if system else '') + 'You have access to the following functions. To call a function, respond'"
    r" + ' with JSON in the format {\"name\": function name, \"parameters\": dictionary of argument name and its'"
    r" + ' value}. Do not use variables.\n\n' }}"
    r"{%- for tool in tools %}{{- (tool | tojson) + '\n\n' }}{%- endfor %}"
    r"{%- endif %}"
    r"{{- '<|eot_id|>' }}"
    r"{%- endif %}"
    r"{%- for message in turns %}"
    r"{{- '<|start_header_id|>' + ('ipython' if message.role == 'tool' else message.role) + '<|end_header_id|>\n\n' }}"
    r"{%- if message.tool_calls %}"
    r"{%- for call in message.tool_calls %}"
    r"{{- '{\"name\": \"' + call.function.name + '\", \"parameters\": ' + (call.function.arguments | tojson) + '}' }}"
    r"{%- endfor %}"
    r"{%- else %}{{- message.content }}{%- endif %}"
    r"{{- '<|eot_id|>' }}"
    r"{%- endfor %}"
    r"{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}"
)

TEMPLATES = {"chatml": CHATML, "mistral": MISTRAL, "llama3": LLAMA3}
NAMES = tuple(TEMPLATES)
CHOICES = ("auto", "none", *NAMES)  # RolloutConfig.chat_template (posttrain.rollout.prompts)


def builtin(name: str) -> str:
    """The built-in template ``name``; a ValueError naming the known ones otherwise.

    >>> builtin("vicuna")
    Traceback (most recent call last):
    ...
    ValueError: no built-in chat template 'vicuna'; built-in: ['chatml', 'mistral', 'llama3']
    """
    if name not in TEMPLATES:
        raise ValueError(f"no built-in chat template {name!r}; built-in: {list(NAMES)}")
    return TEMPLATES[name]
