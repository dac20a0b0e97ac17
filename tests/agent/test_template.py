"""The agent chat format: rendering through ``apply_chat_template(tools=...)``, the token pieces around the model's
own tokens, structured tool calls rendered as the model writes them, templates of other models, and an env's own
tool set in its prompt."""

from __future__ import annotations

import pytest

from posttrain.agent.parser import FORMATS
from posttrain.agent.template import AGENT_TEMPLATE, ChatFormat, TemplateError
from posttrain.envs.agent_settings import parse_settings
from posttrain.envs.tools import tool_specs

pytestmark = pytest.mark.unit

TASK = [{"role": "user", "content": "Fix calc.py."}]


def test_tools_are_listed_in_the_system_turn_and_the_prompt_ends_with_the_generation_prompt(fmt):
    text = fmt.render(TASK, add_generation_prompt=True)
    system = text.split("<|im_end|>")[0]
    assert system.startswith(fmt.tokenizer.bos_token + "<|im_start|>system\n")
    for line in ("- bash(command): ", "- edit_file(path, search, replace): ", "- submit(): ", "<tool_call>"):
        assert line in system
    assert text.endswith("<|im_start|>user\nFix calc.py.<|im_end|>\n<|im_start|>assistant\n")
    assert fmt.prompt_ids(TASK) == fmt.tokenizer(text, add_special_tokens=False).input_ids
    assert fmt.prompt_ids(TASK)[0] == fmt.tokenizer.bos_token_id  # once: the template writes it


def test_an_envs_own_tool_set_is_listed_and_shares_the_prefix_up_to_where_the_lists_differ(fmt):
    listed = [parse_settings({"tools": tools}).tools for tools in (["submit", "edit_file", "read_file", "bash"],
                                                                   ["bash", "read_file", "edit_file", "submit"])]
    own, same = (fmt.prompt_ids(TASK, tool_specs(tools)) for tools in listed)
    assert own == same  # listed in the registry's order: one set, one prefix
    every = fmt.prompt_ids(TASK)
    shared = next(k for k, (a, b) in enumerate(zip(every, own)) if a != b)
    assert "- bash(command): " in fmt.tokenizer.decode(every[:shared])  # the registry's first tool, in both lists
    assert "python" not in fmt.tokenizer.decode(every[:shared])  # the first one only the run's list has
    text = fmt.render(TASK, add_generation_prompt=True, tools=tool_specs(listed[0]))
    assert "- python(" not in text
    assert "- write_file(" not in text
    assert text.endswith("<|im_start|>user\nFix calc.py.<|im_end|>\n<|im_start|>assistant\n")


def test_a_system_message_replaces_the_default(fmt):
    text = fmt.render([{"role": "system", "content": "Be brief."}, *TASK])
    assert "<|im_start|>system\nBe brief.\nTools:" in text
    assert "You solve tasks" not in text


def test_closing_adds_only_what_the_model_did_not_write(fmt):
    assert fmt.closing == "<|im_end|>"
    assert fmt.closing_text('<tool_call>{"name": "submit"}</tool_call><|im_end|>') == ""
    assert fmt.closing_text("<tool_call>...</tool_call><|im_") == "end|>"
    assert fmt.closing_text("cut off mid-sentence") == "<|im_end|>"
    eos = fmt.encode("hi") + [fmt.tokenizer.eos_token_id]  # stopped at EOS: the turn is closed after it
    assert fmt.tokenizer.decode(fmt.closing_ids(eos)) == "<|im_end|>"


def test_observations_render_as_tool_turns_then_the_next_generation_prompt(fmt):
    assert fmt.observation_text(["ok\n", "error: x"]) == (
        "\n<|im_start|>tool\nok\n<|im_end|>\n<|im_start|>tool\nerror: x<|im_end|>\n<|im_start|>assistant\n")


def test_pieces_concatenate_to_the_full_rendering_of_the_conversation(fmt):
    call = {"name": "bash", "arguments": {"command": "ls"}}
    model = FORMATS["hermes"].render(call) + "<|im_end|>"
    pieces = fmt.render(TASK, add_generation_prompt=True) + model + fmt.observation_text(["a.py\n"])
    structured = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]}
    full = fmt.render([*TASK, structured, {"role": "tool", "content": "a.py\n"}], add_generation_prompt=True)
    assert pieces == full  # an oracle's structured calls render exactly as the model writes them


QWEN_LIKE = (  # a Qwen2.5-style template: tool results go back as a user turn with <tool_response> blocks
    "{%- if tools %}{{- '<|im_start|>system\\nTools:' }}{%- for t in tools %}{{- '\\n' + (t | tojson) }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def test_a_tokenizer_with_its_own_template_is_served_by_the_same_code(tokenizer):
    fmt = ChatFormat(tokenizer, tool_specs(["bash", "submit"]), chat_template=QWEN_LIKE, call_format="hermes")
    assert fmt.closing == "<|im_end|>\n"
    assert fmt.closing_text("<tool_call>x</tool_call><|im_end|>") == "\n"
    assert fmt.observation_text(["a", "b"]) == (
        "<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\nb\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")
    assert '"name": "bash"' in fmt.render(TASK)


def test_a_tokenizer_without_a_template_is_refused_naming_what_is_missing(tokenizer, fmt):
    assert tokenizer.chat_template is None  # the demo policy is a base model: its fixture names the agent template
    with pytest.raises(TemplateError, match=r"has no chat template \(no chat_template in tokenizer_config.json, no "
                                            r"chat_template.jinja\).*agent.chat_template: \['agent', 'chatml'"):
        ChatFormat(tokenizer, tool_specs(["bash", "submit"]))
    assert fmt.template == AGENT_TEMPLATE


def test_a_template_that_rewrites_earlier_turns_is_refused(tokenizer):
    last_only = "{%- for m in messages %}{%- if loop.last %}{{- m.content }}{%- endif %}{%- endfor %}"
    with pytest.raises(TemplateError, match="does not extend the generation prompt"):
        ChatFormat(tokenizer, [], chat_template=last_only)
