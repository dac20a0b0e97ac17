"""An agent env's own episode settings (its spec's ``agent:``): the tools its episodes may call and their budgets,
each overriding the run's ``AgentConfig`` (``agent.*``) for that env's episodes.

Accepted shape (YAML); every key is optional, an absent one is the run's::

    agent:
      tools: [bash, read_file, edit_file, submit]   # registered tools, submit among them
      max_steps: 12                                 # model turns
      max_new_tokens: 256                           # tokens of one model turn
      token_budget: 3000                            # model tokens of the episode
      context_budget: 2048                          # context tokens before old observations are summarized
      deadline_s: 300                               # the episode's own seconds
      snapshot_every: 2                             # a workspace snapshot every 2 turns (0: none)

The budgets are declared by ``AgentConfig``'s own fields (said once): an env may ask for what a run could be
configured with, within the same bounds, with a doc line of its own. ``AgentSettings`` is the declaration, so the
loader's messages (``settings_problems``), the JSON Schema (``json_schema(AgentSettings)``) and the table in
``docs/env-spec.md`` come from it. How the runner applies the settings (and the one ceiling, the engine's context):
``posttrain.agent.runner.episode_config``.

Example:
    >>> settings = parse_settings({"tools": ["submit", "bash"], "max_steps": 3})
    >>> settings.tools, settings.max_steps, settings.given()
    (['bash', 'submit'], 3, {'tools': ['bash', 'submit'], 'max_steps': 3})
    >>> for problem in settings_problems({"tools": ["bash", "curl"], "max_step": 3, "deadline_s": 0}):
    ...     print(problem)
    ('agent.max_step', 'unknown key for agent settings (allowed: context_budget, deadline_s, max_new_tokens, \
max_steps, snapshot_every, token_budget, tools)')
    ('agent.tools[1]', "must be 'bash' or 'python' or 'read_file' or 'write_file' or 'edit_file' or 'check' or \
'submit', got 'curl'")
    ('agent.deadline_s', 'must be a positive number, got 0')
    >>> settings_problems({"tools": ["bash"]})
    [('agent.tools', 'must include submit: the agent ends its episode with it')]
"""

from __future__ import annotations

import typing
from collections import Counter
from dataclasses import dataclass, fields, replace
from typing import Annotated, Literal

from posttrain.config import AgentConfig
from posttrain.declaration import Rule, rule_of
from posttrain.envs.tools import TOOLS
from posttrain.envs.verifiers.typed_config import Problems, config_problems, parse

WHERE = "agent"  # the spec field


def _run_field(name: str, doc: str):
    """``AgentConfig``'s declaration of ``name`` (its type and bounds), with the env's own ``doc`` line."""
    [declared] = [f for f in fields(AgentConfig) if f.name == name]
    return Annotated[typing.get_type_hints(AgentConfig)[name], replace(rule_of(declared), doc=doc)]


def _tool_set_problem(names: list[str]) -> str:
    twice = sorted(name for name, count in Counter(names).items() if count > 1)
    if twice:
        return f"lists {twice} more than once"
    return "" if "submit" in names else "must include submit: the agent ends its episode with it"


ToolName = Annotated[Literal[tuple(TOOLS)], Rule(noun="tool")]
ToolSet = Annotated[list[ToolName], Rule(min_len=1, noun="tools", check=_tool_set_problem, doc=(
    "the tools its episodes may call (listed in the prompt; any other is rejected like an unknown tool, never run); "
    "submit among them"))]
MaxSteps = _run_field("max_steps", 'model turns of its episodes; then finish_reason "max_steps"')
MaxNewTokens = _run_field("max_new_tokens", "tokens one model turn may generate (in the policy's tokens)")
TokenBudget = _run_field("token_budget", 'model tokens of an episode (all turns); then finish_reason "token_budget"')
ContextBudget = _run_field("context_budget", "context tokens before older observations become one-line summaries "
                                             "(over the run's context_budgets for its domain); the engine's "
                                             "max_model_len caps it")
DeadlineS = _run_field("deadline_s", 'the episode\'s own wall-clock seconds; then finish_reason "deadline"')
SnapshotEvery = _run_field("snapshot_every", "a workspace snapshot after every N-th turn of its episodes (and "
                                             "their first and last); 0: none. Kept for failed eval episodes, for "
                                             "posttrain replay and rollback (docs/agent.md)")


@dataclass
class AgentSettings:
    """The ``agent:`` mapping of an env spec; None: the run's ``agent.<key>``."""

    tools: ToolSet = None
    max_steps: MaxSteps = None
    max_new_tokens: MaxNewTokens = None
    token_budget: TokenBudget = None
    context_budget: ContextBudget = None
    deadline_s: DeadlineS = None
    snapshot_every: SnapshotEvery = None

    def given(self) -> dict:
        """The settings the env gives, by key (what overrides the run's config)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def settings_problems(agent: object) -> Problems:
    """Problems of a spec's ``agent`` value as (field, reason), each naming the field (``agent.tools[1]``); ``{}``
    (the run's settings) has none."""
    if agent == {}:
        return []
    return config_problems(AgentSettings, agent, "agent settings", where=WHERE)


def parse_settings(agent: dict) -> AgentSettings:
    """The settings of a valid ``agent`` value (``settings_problems`` found none), its tools in the registry's order:
    two envs that list one tool set in different orders render one prompt prefix."""
    settings = parse(AgentSettings, agent)
    if settings.tools is not None:
        settings.tools = [name for name in TOOLS if name in settings.tools]
    return settings
