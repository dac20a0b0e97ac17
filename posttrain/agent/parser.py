"""Tool-call formats, one class each, registered by name in ``FORMATS``: how a model writes the calls of one turn,
and the text that says so (``render``).

- ``hermes`` (ChatML/Qwen, the agent template): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  possibly several per turn;
- ``mistral``: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]``;
- ``llama3_json``: the turn is the bare JSON ``{"name": ..., "parameters": {...}}`` (several: separated by ``;``).

Which one a policy uses is read from its chat template (``posttrain.agent.template.ChatFormat``: the registered
format that parses back the call the template renders for a past turn).

``parse(text, tools)`` never raises: each call becomes a ``ToolCall`` (name and arguments checked against the allowed
tools and their argument names) or a ``CallError`` whose ``message`` is the observation the model gets back
(malformed JSON, JSON nested too deeply or with a number too long to convert, a block never closed, an unknown tool,
missing or unexpected arguments, an argument that is not UTF-8 text: a lone surrogate such as ``"\\udc80"``). A
turn without any call gives ``[]``. Text after the calls (the template's end-of-turn) is ignored.

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
    >>> parse_calls('[TOOL_CALLS] [{"name": "submit", "arguments": {}}]</s>', tools, "mistral")
    [ToolCall(name='submit', arguments={})]
    >>> parse_calls('{"name": "bash", "parameters": {"command": "ls"}}<|eot_id|>', tools, "llama3_json")
    [ToolCall(name='bash', arguments={'command': 'ls'})]
    >>> FORMATS["llama3_json"].render({"name": "submit", "arguments": {}})
    '{"name": "submit", "parameters": {}}'
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar


@dataclass
class ToolCall:
    name: str
    arguments: dict


@dataclass
class CallError:
    message: str  # the observation the model gets back
    raw: str = ""  # the block's text as the model wrote it
    name: str = ""  # the tool name the block gave, when it gave one (for the steps table)


class CallFormat(ABC):
    """One way of writing tool calls: ``calls`` finds the decoded JSON of each call in a turn's text (or a
    ``CallError``), ``render`` writes one call as the model would, ``parse`` checks the calls against the tools."""

    name: ClassVar[str]
    arguments_key: ClassVar[str] = "arguments"  # the key of a call's arguments in its JSON object

    @abstractmethod
    def calls(self, text: str) -> Iterator[tuple[str, object]]:
        """``(raw text, decoded JSON or CallError)`` of each call in ``text``, in order."""

    @abstractmethod
    def render(self, call: Mapping) -> str:
        """``call`` (``{"name", "arguments"}``) as the model writes it."""

    def parse(self, text: str, tools: Mapping[str, Sequence[str]]) -> list[ToolCall | CallError]:
        """Every call of ``text``, in order; ``tools`` maps a tool name to its argument names."""
        return [found if isinstance(found, CallError) else self._check(found, raw, tools)
                for raw, found in self.calls(text)]

    def _json(self, call: Mapping) -> str:
        return json.dumps({"name": call["name"], self.arguments_key: call["arguments"]})

    def _check(self, call: object, raw: str, tools: Mapping[str, Sequence[str]]) -> ToolCall | CallError:
        key = self.arguments_key
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return CallError(f'error: a tool call is a JSON object {{"name": ..., "{key}": {{...}}}}', raw)
        name, arguments = call["name"], call.get(key, {})
        if name not in tools:
            return CallError(f"error: unknown tool {name!r}; tools: {list(tools)}", raw, _text(name))
        if not isinstance(arguments, dict):
            return CallError(f"error: {name}: {key} must be a JSON object", raw, name)
        expected = list(tools[name])
        missing = [a for a in expected if a not in arguments]
        extra = [a for a in arguments if a not in expected]
        wrong = [a for a in expected if a in arguments and not isinstance(arguments[a], str)]
        if missing or extra or wrong:
            parts = [f"missing {missing}" if missing else "", f"unexpected {extra}" if extra else "",
                     f"not strings {wrong}" if wrong else ""]
            return CallError(f"error: {name}: {key} {'; '.join(p for p in parts if p)}; expected {expected}", raw,
                             name)
        for arg in expected:
            if (bad := _not_text(arguments[arg])) is not None:
                return CallError(f"error: {name}: argument {arg!r} is not UTF-8 text (a lone surrogate at index "
                                 f"{bad})", raw, name)
        return ToolCall(name, arguments)


FORMATS: dict[str, CallFormat] = {}


def register(cls: type[CallFormat]) -> type[CallFormat]:
    """Add a format to ``FORMATS`` under its ``name``."""
    FORMATS[cls.name] = cls()
    return cls


def parse_calls(text: str, tools: Mapping[str, Sequence[str]],
                call_format: str = "hermes") -> list[ToolCall | CallError]:
    """The calls of ``text`` in the registered format ``call_format``."""
    return FORMATS[call_format].parse(text, tools)


@register
class Hermes(CallFormat):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (ChatML/Qwen, the agent template)."""

    name = "hermes"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"
    BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(" + re.escape(CLOSE) + r"|$)", re.DOTALL)

    def calls(self, text: str) -> Iterator[tuple[str, object]]:
        for body, closed in self.BLOCK.findall(text):
            yield body, _decode(body)[0] if closed else CallError(f"error: {self.OPEN} not closed with {self.CLOSE}",
                                                                  body)

    def render(self, call: Mapping) -> str:
        return f"{self.OPEN}{self._json(call)}{self.CLOSE}"


@register
class Mistral(CallFormat):
    """``[TOOL_CALLS]`` then a JSON list of ``{"name": ..., "arguments": {...}}`` (Mistral's v3 tokenizer)."""

    name = "mistral"
    MARK = "[TOOL_CALLS]"

    def calls(self, text: str) -> Iterator[tuple[str, object]]:
        for part in text.split(self.MARK)[1:]:
            found, _ = _decode(part, prefix=True)
            if isinstance(found, list):
                yield from ((json.dumps(item), item) for item in found)
            else:
                yield part, found if isinstance(found, CallError) else CallError(
                    f'error: {self.MARK} is followed by a JSON list [{{"name": ..., "arguments": {{...}}}}, ...]', part)

    def render(self, call: Mapping) -> str:
        return f"{self.MARK} [{self._json(call)}]"


@register
class Llama3Json(CallFormat):
    """The turn is a bare JSON ``{"name": ..., "parameters": {...}}`` (Llama 3.1/3.2 JSON tool calling); a turn that
    does not start with ``{`` calls nothing."""

    name = "llama3_json"
    arguments_key = "parameters"

    def calls(self, text: str) -> Iterator[tuple[str, object]]:
        rest = text.lstrip()
        while rest.startswith("{"):
            found, end = _decode(rest, prefix=True)
            yield rest[:end], found
            rest = rest[end:].lstrip().removeprefix(";").lstrip()

    def render(self, call: Mapping) -> str:
        return self._json(call)


CHOICES = ("auto", *FORMATS)  # AgentConfig.tool_format: "auto" reads the format from the chat template


def _decode(text: str, prefix: bool = False) -> tuple[object, int]:
    """The JSON value ``text`` holds (with ``prefix``: the one it starts with, after whitespace), or a CallError; and
    where in ``text`` the value ends."""
    start = len(text) - len(text.lstrip()) if prefix else 0
    try:
        if prefix:
            return json.JSONDecoder().raw_decode(text, start)
        return json.loads(text), len(text)
    except json.JSONDecodeError as exc:
        error = f"{exc.msg} at char {exc.pos - start}"
    except RecursionError:
        error = "nested too deeply"
    except ValueError as exc:  # e.g. an integer literal over Python's digit limit
        error = str(exc)[:120]
    return CallError(f"error: tool call is not valid JSON ({error})", text), len(text)


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
