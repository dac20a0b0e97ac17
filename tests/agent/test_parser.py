"""Tool-call parsing: valid, several per turn, malformed, partial, unknown tool, wrong arguments; never a crash."""

from __future__ import annotations

import pytest

from posttrain.agent.parser import CallError, ToolCall, parse_calls
from posttrain.envs.tools import TOOLS

pytestmark = pytest.mark.unit

ALLOWED = {name: tool.arguments for name, tool in TOOLS.items()}


def test_one_valid_call_with_text_around_it():
    text = 'Let me look.\n<tool_call>{"name": "read_file", "arguments": {"path": "a.py"}}</tool_call><|im_end|>'
    assert parse_calls(text, ALLOWED) == [ToolCall("read_file", {"path": "a.py"})]


def test_several_calls_in_order_and_braces_inside_strings():
    text = ('<tool_call>{"name": "write_file", "arguments": {"path": "x.json", "content": "{\\"a\\": [1]}"}}'
            '</tool_call>\n<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    assert parse_calls(text, ALLOWED) == [ToolCall("write_file", {"path": "x.json", "content": '{"a": [1]}'}),
                                          ToolCall("submit", {})]


def test_no_call_is_an_empty_list():
    assert parse_calls("I am done.<|im_end|>", ALLOWED) == []


def test_submit_without_arguments_field():
    assert parse_calls('<tool_call>{"name": "submit"}</tool_call>', ALLOWED) == [ToolCall("submit", {})]


@pytest.mark.parametrize("text, fragment", [
    ('<tool_call>{"name": "bash", "arguments": {"command": "ls"}', "not closed"),  # partial: cut by max_tokens
    ("<tool_call>", "not closed"),
    ('<tool_call>{"name": "bash", "arguments": {"command": "ls"}</tool_call>', "not valid JSON"),
    ("<tool_call>bash ls</tool_call>", "not valid JSON"),
    ('<tool_call>["bash"]</tool_call>', "JSON object"),
    ('<tool_call>{"arguments": {}}</tool_call>', "JSON object"),
    ('<tool_call>{"name": 3}</tool_call>', "JSON object"),
    ('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', "unknown tool 'rm_rf'"),
    ('<tool_call>{"name": "bash", "arguments": "ls"}</tool_call>', "must be a JSON object"),
    ('<tool_call>{"name": "bash", "arguments": {}}</tool_call>', "missing ['command']"),
    ('<tool_call>{"name": "bash", "arguments": {"command": "ls", "x": "1"}}</tool_call>', "unexpected ['x']"),
    ('<tool_call>{"name": "bash", "arguments": {"command": ["ls"]}}</tool_call>', "not strings ['command']"),
])
def test_malformed_calls_become_error_observations(text, fragment):
    [error] = parse_calls(text, ALLOWED)
    assert isinstance(error, CallError)
    assert error.message.startswith("error: ")
    assert fragment in error.message


def test_a_bad_call_does_not_hide_the_good_ones():
    text = ('<tool_call>{"name": "nope"}</tool_call><tool_call>{"name": "bash", "arguments": {"command": "ls"}}'
            '</tool_call>')
    bad, good = parse_calls(text, ALLOWED)
    assert isinstance(bad, CallError)
    assert good == ToolCall("bash", {"command": "ls"})


def test_tools_outside_the_allowed_set_are_unknown():
    [error] = parse_calls('<tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>',
                          {"bash": ("command",), "submit": ()})
    assert "unknown tool 'python'" in error.message


@pytest.mark.parametrize("text, fragment, name", [
    ("<tool_call>" + "[" * 1000 + "]" * 1000 + "</tool_call>", "nested too deeply", ""),
    ('<tool_call>{"name": "bash", "arguments": {"command": "ls"}, "n": ' + "7" * 4301 + "}</tool_call>",
     "not valid JSON", ""),
    (r'<tool_call>{"name": "write_file", "arguments": {"path": "a\udc80", "content": "x"}}</tool_call>',
     "argument 'path' is not UTF-8 text (a lone surrogate at index 1)", "write_file"),
    (r'<tool_call>{"name": "edit_file", "arguments": {"path": "a", "search": "x", "replace": "\ud800"}}</tool_call>',
     "argument 'replace' is not UTF-8 text", "edit_file"),
    (r'<tool_call>{"name": "rm\udc80", "arguments": {}}</tool_call>', "unknown tool 'rm\\udc80'", "rm\\udc80"),
])
def test_hostile_json_is_an_error_observation_never_an_exception(text, fragment, name):
    [error] = parse_calls(text, ALLOWED)
    assert isinstance(error, CallError)
    assert fragment in error.message
    assert error.name == name
    error.message.encode("utf-8")  # the observation itself is text any tokenizer can take
