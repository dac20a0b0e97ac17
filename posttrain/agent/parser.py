"""Parse the tool calls of one model turn in the Hermes/Qwen format: ``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>``, possibly several per turn.

``parse_calls(text, tools)`` never raises: each block becomes a ``ToolCall`` (name and arguments checked against
the allowed tools and their argument names) or a ``CallError`` whose ``message`` is the observation the model gets
back (malformed JSON, JSON nested too deeply or with a number too long to convert, a block never closed, an unknown
tool, missing or unexpected arguments, an argument that is not UTF-8 text: a lone surrogate such as ``"\\udc80"``).
A turn without any block gives ``[]``.

Example:
    >>> tools = {"bash": ("command",), "submit": ()}
    >>> parse_calls('ok <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>', tools)
    [ToolCall(name='bash', arguments={'command': 'ls'})]
    >>> parse_calls('<tool_call>{"name": "rm"}</tool_call>', tools)[0].message
    "error: unknown tool 'rm'; tools: ['bash', 'submit']"
    >>> parse_calls('<tool_call>{"name": "bash", "arguments": {"command": "ls"', tools)[0].message
    'error: <tool_call> not closed with </tool_call>'
    >>> parse_calls('<tool_call>' + '[' * 5000 + '</tool_call>', tools)[0].message
    'error: tool call is not valid JSON (nested too deeply)'
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

OPEN, CLOSE = "<tool_call>", "</tool_call>"
BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(" + re.escape(CLOSE) + r"|$)", re.DOTALL)


@dataclass
class ToolCall:
    name: str
    arguments: dict


@dataclass
class CallError:
    message: str  # the observation the model gets back
    raw: str = ""  # the block's text as the model wrote it
    name: str = ""  # the tool name the block gave, when it gave one (for the steps table)


def parse_calls(text: str, tools: Mapping[str, Sequence[str]]) -> list[ToolCall | CallError]:
    """Every ``<tool_call>`` block of ``text``, in order; ``tools`` maps a tool name to its argument names."""
    return [_parse_block(body, closed == CLOSE, tools) for body, closed in BLOCK.findall(text)]


def _parse_block(body: str, closed: bool, tools: Mapping[str, Sequence[str]]) -> ToolCall | CallError:
    if not closed:
        return CallError(f"error: {OPEN} not closed with {CLOSE}", body)
    try:
        call = json.loads(body)
    except json.JSONDecodeError as exc:
        return CallError(f"error: tool call is not valid JSON ({exc.msg} at char {exc.pos})", body)
    except RecursionError:
        return CallError("error: tool call is not valid JSON (nested too deeply)", body)
    except ValueError as exc:  # e.g. an integer literal over Python's digit limit
        return CallError(f"error: tool call is not valid JSON ({str(exc)[:120]})", body)
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return CallError('error: a tool call is a JSON object {"name": ..., "arguments": {...}}', body)
    name, arguments = call["name"], call.get("arguments", {})
    if name not in tools:
        return CallError(f"error: unknown tool {name!r}; tools: {list(tools)}", body, _text(name))
    if not isinstance(arguments, dict):
        return CallError(f"error: {name}: arguments must be a JSON object", body, name)
    expected = list(tools[name])
    missing = [a for a in expected if a not in arguments]
    extra = [a for a in arguments if a not in expected]
    wrong = [a for a in expected if a in arguments and not isinstance(arguments[a], str)]
    if missing or extra or wrong:
        parts = [f"missing {missing}" if missing else "", f"unexpected {extra}" if extra else "",
                 f"not strings {wrong}" if wrong else ""]
        return CallError(f"error: {name}: arguments {'; '.join(p for p in parts if p)}; expected {expected}", body,
                         name)
    for arg in expected:
        if (bad := _not_text(arguments[arg])) is not None:
            return CallError(f"error: {name}: argument {arg!r} is not UTF-8 text (a lone surrogate at index {bad})",
                             body, name)
    return ToolCall(name, arguments)


def _not_text(value: str) -> int | None:
    """The index of the first character of ``value`` that UTF-8 cannot encode (a lone surrogate), or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _text(name: str) -> str:
    """``name`` as UTF-8-safe text (lone surrogates escaped) for the tables."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")
