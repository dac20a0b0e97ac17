"""The tool vocabulary of the env spec: the tools an agent env's episode may call, by name, with their arguments.

Each tool is one ``Tool`` (name, description, argument names) in ``TOOLS``, registered by name; an env's oracle
(``envs.suite``), its ``used_tool`` assertions (``envs.assertions``) and ``AgentConfig.tools`` name tools from here,
and ``tool_specs(names)`` gives the OpenAI-style function specs that ``apply_chat_template(tools=...)`` takes. What a
call does in the env's sandbox session is the agent's (``posttrain.agent.tools``, one executor per name here).
An *env-bound* tool (``check``) needs its env: the host runs it against the env's spec (``posttrain.agent.check``),
so only envs that grant it in their ``agent.tools`` have it, never a run's default set (``DEFAULT_TOOLS``).

Example:
    >>> list(TOOLS)
    ['bash', 'python', 'read_file', 'write_file', 'edit_file', 'check', 'submit']
    >>> DEFAULT_TOOLS   # a run's tools unless configured: every tool but the env-bound ones
    ['bash', 'python', 'read_file', 'write_file', 'edit_file', 'submit']
    >>> TOOLS["edit_file"].arguments
    ('path', 'search', 'replace')
    >>> [spec["function"]["name"] for spec in tool_specs(["bash", "submit"])]
    ['bash', 'submit']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    arguments: tuple[str, ...]  # all required, all strings
    env_bound: bool = False  # run by the host against the env's spec: only envs that list it grant it

    def spec(self) -> dict:
        properties = {arg: {"type": "string"} for arg in self.arguments}
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": {"type": "object", "properties": properties, "required": list(self.arguments)}}}


TOOLS: dict[str, Tool] = {tool.name: tool for tool in (
    Tool("bash", "run a shell command in /work", ("command",)),
    Tool("python", "run Python code in /work", ("code",)),
    Tool("read_file", "show a file", ("path",)),
    Tool("write_file", "create or replace a file", ("path", "content")),
    Tool("edit_file", "replace the one occurrence of search in a file", ("path", "search", "replace")),
    Tool("check", "check the answer file: which fields or formulas do not match yet (never the right values)", (),
         env_bound=True),
    Tool("submit", "finish the task", ()),
)}
DEFAULT_TOOLS = [name for name, tool in TOOLS.items() if not tool.env_bound]


def tool_specs(names: Sequence[str]) -> list[dict]:
    """The function specs of the tools ``names`` (in that order) for ``apply_chat_template(tools=...)``."""
    unknown = [n for n in names if n not in TOOLS]
    if unknown:
        raise ValueError(f"AgentConfig.tools: unknown {unknown}; known: {list(TOOLS)}")
    return [TOOLS[name].spec() for name in names]
