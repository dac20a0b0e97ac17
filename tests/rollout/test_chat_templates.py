"""The built-in chat templates, rendered by transformers as a policy's own template would be: each family's published
markers in place, tools and tool calls in the family's format, and incremental rendering (a turn added never changes
the text before it)."""

from __future__ import annotations

import json

import pytest

from posttrain.rollout.chat_templates import NAMES, TEMPLATES, builtin
from posttrain.training.families import FAMILIES

pytestmark = pytest.mark.unit

FAMILY_OF = {spec.template: name for name, spec in FAMILIES.items()}
BASH = {"name": "bash", "description": "run a command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}
TOOLS = [{"type": "function", "function": BASH}]
CALL = {"role": "assistant", "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}]}
CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "List files."}, CALL,
                {"role": "tool", "content": "a.py"}, {"role": "assistant", "content": "Done."}]


def render(name, family_policy, messages, **kw):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(family_policy(FAMILY_OF[name]))
    return tokenizer.apply_chat_template(messages, tokenize=False, chat_template=TEMPLATES[name], **kw)


@pytest.mark.parametrize("name", NAMES)
def test_each_template_renders_incrementally_with_tools(name, family_policy):
    texts = [render(name, family_policy, CONVERSATION[:k], tools=TOOLS) for k in range(2, len(CONVERSATION) + 1)]
    for shorter, longer in zip(texts, texts[1:]):
        assert longer.startswith(shorter)
    opened = render(name, family_policy, CONVERSATION[:2], tools=TOOLS, add_generation_prompt=True)
    assert texts[1].startswith(opened)  # the assistant turn extends the generation prompt


@pytest.mark.parametrize(("name", "expected"), [
    ("chatml", ['<|im_start|>system\nBe brief.\n\n# Tools', '<tools>\n{"type": "function"',
                '<|im_start|>assistant\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
                '<|im_end|>\n<|im_start|>user\n<tool_response>\na.py\n</tool_response><|im_end|>\n',
                '<|im_start|>assistant\nDone.<|im_end|>\n']),
    ("mistral", ['<s>[AVAILABLE_TOOLS] [{"type": "function"', '[/AVAILABLE_TOOLS][INST] Be brief.\n\nList files.[/INST]'
                 '[TOOL_CALLS] [{"name": "bash", "arguments": {"command": "ls"}}]</s>'
                 '[TOOL_RESULTS] {"content": "a.py"}[/TOOL_RESULTS] Done.</s>']),
    ("llama3", ['<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.\n\nYou have access',
                '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "bash", "parameters": {"command": "ls"}}'
                '<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\na.py<|eot_id|>']),
])
def test_each_template_writes_its_familys_markers_and_tool_call_format(name, expected, family_policy):
    text = render(name, family_policy, CONVERSATION, tools=TOOLS)
    for piece in expected:
        assert piece in text, f"{piece!r} not in {text!r}"
    assert json.dumps(TOOLS[0]) in text  # the tool's schema, whole


@pytest.mark.parametrize("name", NAMES)
def test_without_a_system_message_or_tools_only_the_turns_are_rendered(name, family_policy):
    text = render(name, family_policy, [{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    assert "system" not in text
    assert "Tools" not in text
    assert "functions" not in text
    assert text.count("Hi") == 1


def test_an_unknown_name_is_refused_naming_the_built_in_ones():
    with pytest.raises(ValueError, match=r"template 'zephyr'; built-in: \['chatml', 'mistral', 'llama3'\]"):
        builtin("zephyr")
