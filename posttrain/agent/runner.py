"""Run agent episodes: all active episodes advance together, one batched generate per turn, their tool calls
executed concurrently in their sandbox sessions.

Each turn, top to bottom:

1. one ``engine.generate_ids`` over the token-id contexts of every active episode (the engine sees exactly the
   recorded tokens; generation stops at the template's end-of-turn string);
2. each episode's model tokens become a ``model`` segment; its tool calls are parsed (``parser.py``) and run in its
   session, episodes concurrently (``AgentConfig.tool_concurrency`` threads; the sandbox scheduler caps the total);
3. termination: ``submit`` called, ``max_steps`` turns, the ``token_budget`` (model tokens, or no room left in the
   engine's context), the wall ``deadline``; otherwise the closing and observation tokens are appended as a masked
   ``template`` segment, and the context budget is applied (``budget.py``). A session that cannot even be prepared
   ends its episode as ``infra``.

An episode that ends keeps its last window as *last prompt + last model tokens*, exactly.

Example (a scripted policy here; a ``VLLMEngine`` the same way):
    >>> from posttrain.agent.scripted import ScriptedPolicy
    >>> from posttrain.agent.template import ChatFormat
    >>> from posttrain.agent.tools import tool_specs
    >>> from posttrain.sandbox import make_sandbox
    >>> from posttrain.training.demo_policy import train_tokenizer
    >>> fmt = ChatFormat(train_tokenizer(["x = 1\\n"], 300), tool_specs(["bash", "submit"]))
    >>> task = AgentTask(env_id="t/ls", prompt="List the files, then submit.", files={"a.txt": "hi"})
    >>> oracle = ScriptedPolicy(fmt, {task.prompt: [{"name": "bash", "arguments": {"command": "ls"}}]})
    >>> with make_sandbox("bwrap").session() as session:
    ...     [episode] = run_episodes(oracle, fmt, [task], [session], AgentConfig(tools=["bash", "submit"]), 2048)
    >>> episode.finish_reason, [s.tool for s in episode.steps], episode.turns[0].observations
    ('submit', ['bash', 'submit'], ['a.txt\\n'])
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from posttrain.agent.budget import compress
from posttrain.agent.episode import Episode, StepRecord, Turn
from posttrain.agent.parser import CallError, parse_calls
from posttrain.agent.template import ChatFormat
from posttrain.agent.tools import TOOLS, Observation, run_tool
from posttrain.config import AgentConfig
from posttrain.rollout.engine import TokenRolloutEngine
from posttrain.sandbox.session import SandboxSession, SessionError

log = logging.getLogger(__name__)

NO_CALL = "error: no tool call in this turn; call a tool, or submit when done"


@dataclass
class AgentTask:
    """One episode to run: the task message, the workspace files it starts with, where its rows go."""

    env_id: str
    prompt: str
    files: dict[str, str] = field(default_factory=dict)
    domain: str = "agent"
    group_id: str = ""
    sample_idx: int = 0
    system: str = ""  # "" uses the template's default system prompt

    def messages(self) -> list[dict]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + [{"role": "user", "content": self.prompt}]


def turn_room(episode: Episode, cfg: AgentConfig, max_context: int) -> int:
    """Tokens the next model turn may generate: per-turn cap, what is left of the budget and of the context.

    >>> turn_room(Episode("e", "g", 0, [0] * 100), AgentConfig(max_new_tokens=192, token_budget=1536), 150)
    50
    """
    return min(cfg.max_new_tokens, cfg.token_budget - episode.model_tokens, max_context - len(episode.context_ids()))


def run_episodes(engine: TokenRolloutEngine, fmt: ChatFormat, tasks: Sequence[AgentTask],
                 sessions: Sequence[SandboxSession], cfg: AgentConfig, max_context: int) -> list[Episode]:
    """Run one episode per task in the matching session (opened and closed by the caller, so a verifier can score
    the final workspace); ``max_context``: the engine's context length (``RolloutConfig.max_model_len``)."""
    if len(tasks) != len(sessions):
        raise ValueError(f"run_episodes: {len(tasks)} tasks but {len(sessions)} sessions")
    allowed = {name: TOOLS[name].arguments for name in cfg.tools}
    episodes = [Episode(t.env_id, t.group_id, t.sample_idx, fmt.prompt_ids(t.messages())) for t in tasks]
    too_long = [t.env_id for t, e in zip(tasks, episodes) if turn_room(e, cfg, max_context) < 1]
    if too_long:
        raise ValueError(f"run_episodes: the prompt leaves no room to generate within {max_context} tokens: "
                         f"{too_long}")
    with ThreadPoolExecutor(cfg.tool_concurrency, thread_name_prefix="agent-tools") as pool:
        list(pool.map(lambda k: prepare(episodes[k], tasks[k], sessions[k]), range(len(tasks))))
        for e in episodes:  # the wall deadline counts from the first turn
            e.started = time.monotonic()
        turn = 0
        while live := [i for i, e in enumerate(episodes) if e.active]:
            # step 1. one batched generate over every active episode
            samples = engine.generate_ids([episodes[i].context_ids() for i in live], 1, cfg.temperature,
                                          [turn_room(episodes[i], cfg, max_context) for i in live], cfg.top_p,
                                          seed=cfg.seed + turn * len(tasks), stop=fmt.stop)
            for i, [sample] in zip(live, samples):
                episodes[i].add_model_turn(Turn(
                    index=turn, prompt_tokens=len(sample.prompt_token_ids), model_ids=list(sample.token_ids),
                    logprobs=list(sample.logprobs), engine_finish=sample.finish_reason,
                    cached_tokens=sample.cached_tokens,
                    text=fmt.tokenizer.decode(list(sample.token_ids), skip_special_tokens=False)))
            # step 2. every episode's tool calls, episodes concurrently
            list(pool.map(lambda i: act(episodes[i].turns[-1], sessions[i], allowed), live))
            # step 3. termination, or the template tokens and the context budget
            for i in live:
                after_turn(episodes[i], fmt, tasks[i], sessions[i], cfg, max_context)
            turn += 1
    return episodes


def prepare(episode: Episode, task: AgentTask, session: SandboxSession) -> None:
    """Write the task's files into the workspace; a session that cannot ends the episode as ``infra``."""
    try:
        for path, content in task.files.items():
            session.write_file(path, content)
    except SessionError as exc:
        episode.infra_error = f"workspace not prepared: {exc}"
        episode.finish("infra")


def act(turn: Turn, session: SandboxSession, allowed: dict[str, tuple[str, ...]]) -> None:
    """Run the calls of ``turn`` in order, recording a step and an observation each; stop after ``submit``."""
    calls = parse_calls(turn.text, allowed)
    if not calls:
        _record(turn, "", {}, Observation(NO_CALL, ok=False), 0.0, error="no_tool_call")
    for call in calls:
        if isinstance(call, CallError):
            _record(turn, _name_of(call.raw), {}, Observation(call.message, ok=False), 0.0, error=call.message)
            continue
        t0 = time.monotonic()
        try:
            obs = run_tool(session, call.name, call.arguments)
        except SessionError as exc:  # the session itself failed (closed, refused the step): infra, not the agent's
            obs = Observation(f"error: {exc}", ok=False, infra_error=str(exc))
        _record(turn, call.name, call.arguments, obs, (time.monotonic() - t0) * 1000)
        if obs.submitted:
            return


def after_turn(episode: Episode, fmt: ChatFormat, task: AgentTask, session: SandboxSession, cfg: AgentConfig,
               max_context: int) -> None:
    """End the episode if a limit is reached; else append the turn's template tokens and apply the budget."""
    turn = episode.turns[-1]
    if any(s.tool == "submit" and s.ok for s in turn.steps):
        return episode.finish("submit")
    if len(episode.turns) >= cfg.max_steps:
        return episode.finish("max_steps")
    if time.monotonic() - episode.started >= cfg.deadline_s:
        return episode.finish("deadline")
    turn.closing_ids = fmt.closing_ids(turn.model_ids)
    turn.observation_ids = fmt.observation_ids(turn.observations)
    if len(episode.context_ids()) + len(turn.closing_ids) + len(turn.observation_ids) >= max_context \
            or episode.model_tokens >= cfg.token_budget:
        return episode.finish("token_budget")
    episode.add_template(turn)
    if compress(episode, fmt, task.domain, cfg):
        try:
            session.write_file(cfg.state_file, episode.state_text)
        except SessionError as exc:
            log.warning("episode %s: state file %s not written: %s", task.env_id, cfg.state_file, exc)


def _record(turn: Turn, tool: str, arguments: dict, obs: Observation, duration_ms: float, error: str = "") -> None:
    turn.observations.append(obs.text)
    turn.steps.append(StepRecord(turn=turn.index, tool=tool, arguments=json.dumps(arguments), ok=obs.ok,
                                 exit_code=obs.exit_code, duration_ms=duration_ms,
                                 observation_bytes=len(obs.text.encode()), error=error,
                                 infra_error=obs.infra_error))


def _name_of(raw: str) -> str:
    """The tool name a malformed call gave, if it can be read at all (for the steps table)."""
    try:
        name = json.loads(raw).get("name", "")
    except (ValueError, AttributeError):
        return ""
    return name if isinstance(name, str) else ""
