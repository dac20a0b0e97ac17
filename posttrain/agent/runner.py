"""Run agent episodes: all active episodes advance together, one batched generate per turn, their tool calls
executed concurrently in their sandbox sessions.

Each turn, top to bottom:

1. one ``engine.generate_ids`` over the token-id contexts of every active episode (the engine sees exactly the
   recorded tokens; generation stops at the template's end-of-turn and the policy's end-of-sequence tokens);
2. each episode's model tokens become a ``model`` segment; its tool calls are parsed in the template's call format
   (``fmt.calls``: ``parser.py``) and run in its session, episodes concurrently (``AgentConfig.tool_concurrency``
   threads; the sandbox scheduler caps the total); each call's step records what its session steps used
   (``StepLog``: CPU seconds summed, the largest peak);
3. termination: ``submit`` called, ``max_steps`` turns, the ``token_budget`` (model tokens, or no room left in the
   engine's context), the ``deadline``; otherwise the closing and observation tokens are appended as a masked
   ``template`` segment, and the context budget is applied (``budget.py``; the state files of the episodes that
   compressed are written concurrently, like tool calls).

Each episode runs under its own config (``Episode.config``: ``episode_config``, the run's with its env's ``agent:``
settings over it): its tools (listed in its prompt; a call of any other is rejected as an unknown tool, naming the
ones it has, and never runs), ``max_steps``, ``max_new_tokens``, ``token_budget``, ``context_budget`` and
``deadline_s``. Episodes with different budgets share each turn's batched generate (each gets its own
``max_tokens``) and end each at its own limit.

One episode never takes down or escapes its batch. Whatever the agent sends is its own outcome, scored: a call the
parser or the session refuses (malformed JSON, a lone surrogate, a NUL in a command, an argument too long for a
program's argv), a tool that fails, even a tool that raises, become error observations (``ok=False``), never an
exception out of ``run_episodes`` and never an infra error. Only the sandbox failing the step (it could not start)
is ``infra_error``; a session that cannot even be prepared ends its episode as ``infra``, as does a first prompt
that leaves no room to generate in the engine's context (``refuse_if_no_room``). An episode's
``deadline_s`` counts its own time (``Episode.spent_s``: the generate calls of its turns, its own tool calls and
state-file writes), so slow calls in one episode never spend another's.

An episode that ends keeps its last window as *last prompt + last model tokens*, exactly.

Example (a scripted policy here; a ``VLLMEngine`` the same way):
    >>> from posttrain.agent.scripted import ScriptedPolicy
    >>> from posttrain.agent.template import AGENT_TEMPLATE, ChatFormat
    >>> from posttrain.envs.tools import tool_specs
    >>> from posttrain.sandbox import make_sandbox
    >>> from posttrain.training.demo_policy import train_tokenizer
    >>> fmt = ChatFormat(train_tokenizer(["x = 1\\n"], 300), tool_specs(["bash", "submit"]), AGENT_TEMPLATE)
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
from dataclasses import dataclass, field, replace

from posttrain.agent.budget import budget_for, compress
from posttrain.agent.episode import Episode, StepRecord, Turn
from posttrain.agent.parser import CallError, CallFormat
from posttrain.agent.template import ChatFormat
from posttrain.agent.tools import Executor, Observation, run_tool
from posttrain.config import AgentConfig
from posttrain.envs.agent_settings import AgentSettings
from posttrain.envs.tools import TOOLS, tool_specs
from posttrain.rollout.engine import TokenRolloutEngine
from posttrain.sandbox.base import Usage, serial_usage
from posttrain.sandbox.session import SandboxSession, SessionError

log = logging.getLogger(__name__)

NO_CALL = "error: no tool call in this turn; call a tool, or submit when done"


@dataclass
class AgentTask:
    """One episode to run: the task message, the workspace files it starts with (and the env's ``setup`` script,
    run on them before the first turn), where its rows go."""

    env_id: str
    prompt: str
    files: dict[str, str] = field(default_factory=dict)
    setup: str = ""
    domain: str = "agent"
    group_id: str = ""
    sample_idx: int = 0
    system: str = ""  # "" uses the template's default system prompt
    settings: AgentSettings = field(default_factory=AgentSettings)  # its env's own tools and budgets (spec agent:)
    env_tools: dict[str, Executor] = field(default_factory=dict)  # env-bound tools' executors (agent.check)

    def messages(self) -> list[dict]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + [{"role": "user", "content": self.prompt}]


def episode_config(cfg: AgentConfig, task: AgentTask, max_context: int) -> AgentConfig:
    """The config ``task``'s episode runs under: the run's ``cfg`` with its env's own settings over it (up or down:
    ``task.settings``), the context budget resolved once (the env's, else the run's ``context_budgets[domain]``, else
    its ``context_budget``) and capped by the engine's context ``max_context``, the one hard ceiling: no context grows
    past it, so a budget above it could never apply (``turn_room`` bounds every turn by it the same way).

    >>> task = AgentTask("t/x", "p", domain="repo", settings=AgentSettings(tools=["bash", "submit"], max_steps=3))
    >>> run = AgentConfig(max_steps=8, context_budget=8000, context_budgets={"repo": 900})
    >>> own = episode_config(run, task, max_context=4096)
    >>> own.tools, own.max_steps, own.context_budget, own.deadline_s == run.deadline_s
    (['bash', 'submit'], 3, 900, True)
    >>> episode_config(run, AgentTask("t/y", "p"), max_context=4096).context_budget
    4096
    """
    own = task.settings.given()
    own["context_budget"] = min(own.get("context_budget") or budget_for(task.domain, cfg), max_context)
    return replace(cfg, **own, context_budgets={})  # the domain's budget is resolved: compress reads context_budget


def turn_room(episode: Episode, max_context: int) -> int:
    """Tokens the next model turn may generate: per-turn cap, what is left of the budget and of the context.

    >>> turn_room(Episode("e", "g", 0, [0] * 100, AgentConfig(max_new_tokens=192, token_budget=1536)), 150)
    50
    """
    cfg = episode.config
    return min(cfg.max_new_tokens, cfg.token_budget - episode.model_tokens, max_context - len(episode.context_ids()))


def run_episodes(engine: TokenRolloutEngine, fmt: ChatFormat, tasks: Sequence[AgentTask],
                 sessions: Sequence[SandboxSession], cfg: AgentConfig, max_context: int) -> list[Episode]:
    """Run one episode per task in the matching session (opened and closed by the caller, so a verifier can score
    the final workspace); ``max_context``: the engine's context length (``RolloutConfig.max_model_len``)."""
    if len(tasks) != len(sessions):
        raise ValueError(f"run_episodes: {len(tasks)} tasks but {len(sessions)} sessions")
    episodes = [Episode(t.env_id, t.group_id, t.sample_idx, fmt.prompt_ids(t.messages(), _listed(t)),
                        episode_config(cfg, t, max_context)) for t in tasks]
    for task, episode in zip(tasks, episodes):
        refuse_if_no_room(episode, task, max_context)
    with ThreadPoolExecutor(cfg.tool_concurrency, thread_name_prefix="agent-tools") as pool:
        list(pool.map(lambda k: prepare(episodes[k], tasks[k], sessions[k]),
                      [k for k, e in enumerate(episodes) if e.active]))
        list(pool.map(lambda k: snapshot(episodes[k], sessions[k]),
                      [k for k, e in enumerate(episodes) if e.active and e.config.snapshot_every]))
    return continue_episodes(engine, fmt, tasks, sessions, episodes, cfg, max_context)


def continue_episodes(engine: TokenRolloutEngine, fmt: ChatFormat, tasks: Sequence[AgentTask],
                      sessions: Sequence[SandboxSession], episodes: list[Episode], cfg: AgentConfig,
                      max_context: int) -> list[Episode]:
    """Advance ``episodes`` (each with its task and its prepared session) turn by turn until every one has ended:
    the loop of ``run_episodes``, from wherever each episode is (``rollback.restart`` resumes one from a snapshot)."""
    with ThreadPoolExecutor(cfg.tool_concurrency, thread_name_prefix="agent-tools") as pool:
        turn = min((len(e.turns) for e in episodes), default=0)
        while live := [i for i, e in enumerate(episodes) if e.active]:
            # step 1. one batched generate over every active episode (its time counts for each of them)
            t0 = time.monotonic()
            samples = engine.generate_ids([episodes[i].context_ids() for i in live], 1, cfg.temperature,
                                          [turn_room(episodes[i], max_context) for i in live], cfg.top_p,
                                          seed=cfg.seed + turn * len(tasks), stop=fmt.stop)
            generate_s = time.monotonic() - t0
            for i, [sample] in zip(live, samples):
                episodes[i].spent_s += generate_s
                episodes[i].add_model_turn(Turn(
                    index=len(episodes[i].turns), prompt_tokens=len(sample.prompt_token_ids),
                    model_ids=list(sample.token_ids), logprobs=list(sample.logprobs),
                    engine_finish=sample.finish_reason, cached_tokens=sample.cached_tokens,
                    text=fmt.tokenizer.decode(list(sample.token_ids), skip_special_tokens=False)))
            # step 2. every episode's tool calls, episodes concurrently, each timed to its own episode
            list(pool.map(lambda i: _timed(episodes[i], act, episodes[i].turns[-1], sessions[i],
                                           _allowed(episodes[i]), fmt.calls, tasks[i].env_tools), live))
            # step 3. termination, or the template tokens and the context budget; state files concurrently
            compressed = [i for i in live if after_turn(episodes[i], fmt, tasks[i], max_context)]
            list(pool.map(lambda i: _timed(episodes[i], write_state, episodes[i], tasks[i], sessions[i]),
                          compressed))
            # step 4. the workspace snapshots due (not the episodes' time: a snapshot never changes an outcome)
            list(pool.map(lambda i: snapshot(episodes[i], sessions[i]),
                          [i for i in live if snapshot_due(episodes[i])]))
            turn += 1
    return episodes


def snapshot_due(episode: Episode) -> bool:
    """Whether the turn ``episode`` just ran is snapshotted: every ``snapshot_every``-th turn, and its last.

    >>> e = Episode("e", "g", 0, [0], AgentConfig(snapshot_every=2))
    >>> e.turns = [None, None, None]
    >>> snapshot_due(e), e.finish("submit"), snapshot_due(e)
    (False, None, True)
    """
    every = episode.config.snapshot_every
    return bool(every) and episode.infra_error == "" and (len(episode.turns) % every == 0 or not episode.active)


def snapshot(episode: Episode, session: SandboxSession) -> None:
    """Keep the workspace as a tar in ``episode.snapshots`` under its last turn (-1 before the first); a snapshot
    that cannot be taken is logged and missing, never the episode's failure."""
    try:
        episode.snapshots[len(episode.turns) - 1] = session.snapshot().data
    except SessionError as exc:
        log.warning("episode %s/%s: no snapshot after turn %d: %s", episode.group_id, episode.sample_idx,
                    len(episode.turns) - 1, exc)


def _listed(task: AgentTask) -> list[dict] | None:
    """The tool specs ``task``'s prompt lists: its env's own tools, else (None) the chat format's."""
    return None if task.settings.tools is None else tool_specs(task.settings.tools)


def _allowed(episode: Episode) -> dict[str, tuple[str, ...]]:
    """The tools ``episode`` may call, with their argument names (a call of any other is rejected, never run)."""
    return {name: TOOLS[name].arguments for name in episode.config.tools}


def _timed(episode: Episode, fn, *args) -> None:
    """``fn(*args)``, its wall time added to ``episode.spent_s`` (the episode's own time, for its deadline)."""
    t0 = time.monotonic()
    try:
        fn(*args)
    finally:
        episode.spent_s += time.monotonic() - t0


def refuse_if_no_room(episode: Episode, task: AgentTask, max_context: int) -> None:
    """End an episode whose first prompt leaves no token to generate within ``max_context`` (the engine's context)
    as ``infra`` before it starts, saying so: the env's prompt and tools, or the context, are the fault (never the
    agent's), and the rest of the batch goes on.

    >>> e = Episode("t/long", "g", 0, list(range(10)))
    >>> refuse_if_no_room(e, AgentTask("t/long", "p"), max_context=10)
    >>> e.finish_reason, e.infra_error.startswith("t/long: its first prompt is 10 tokens, leaving none to generate")
    ('infra', True)
    """
    if turn_room(episode, max_context) < 1:
        episode.infra_error = (f"{task.env_id}: its first prompt is {len(episode.context_ids())} tokens, leaving none "
                               f"to generate within the context of {max_context} (rollout.max_model_len): shorten "
                               f"the env's prompt or raise the context")
        episode.finish("infra")


def prepare(episode: Episode, task: AgentTask, session: SandboxSession) -> None:
    """Write the task's files into the workspace and run its setup; a session that cannot, or a setup that fails
    (the env's fault, never the agent's), ends the episode as ``infra``."""
    try:
        for path, content in task.files.items():
            session.write_file(path, content)
        if task.setup:
            result = session.run(task.setup)
            if result.infra_error or result.timed_out or result.exit_code != 0:
                why = result.infra_error or ("timed out" if result.timed_out else f"exit {result.exit_code}")
                raise SessionError(f"setup failed: {why}: {result.stderr.strip()[-300:]}")
    except SessionError as exc:
        episode.infra_error = f"workspace not prepared: {exc}"
        episode.finish("infra")


def act(turn: Turn, session: SandboxSession, allowed: dict[str, tuple[str, ...]], call_format: CallFormat,
        env_tools: dict[str, Executor] | None = None) -> None:
    """Run the calls of ``turn`` (in ``call_format``) in order, recording a step and an observation each; stop after
    ``submit``. ``env_tools``: the executors of the env-bound tools its task grants (``AgentTask.env_tools``)."""
    calls = call_format.parse(turn.text, allowed)
    if not calls:
        _record(turn, "", {}, Observation(NO_CALL, ok=False), 0.0, error="no_tool_call")
    for call in calls:
        if isinstance(call, CallError):
            _record(turn, call.name, {}, Observation(call.message, ok=False), 0.0, error=call.message)
            continue
        t0, mark = time.monotonic(), len(session.log)
        error = ""
        try:
            obs = run_tool(session, call.name, call.arguments, env_tools)
        except SessionError as exc:  # infra only when the sandbox failed the step; a refused argument is the agent's
            obs = Observation(f"error: {exc}", ok=False, infra_error=exc.infra_error)
        except Exception as exc:  # noqa: BLE001 - a tool raised on what the agent sent: its failure, not the batch's
            log.exception("tool %s raised on the agent's call", call.name)
            error = f"tool raised {type(exc).__name__}"
            obs = Observation(f"error: {call.name}: {type(exc).__name__}: {exc}", ok=False)
        _record(turn, call.name, call.arguments, obs, (time.monotonic() - t0) * 1000, error=error,
                usage=serial_usage(step.usage for step in session.log[mark:]))  # e.g. edit_file: a read, a write
        if obs.submitted:
            return


def after_turn(episode: Episode, fmt: ChatFormat, task: AgentTask, max_context: int) -> bool:
    """End the episode if one of its limits is reached; else append the turn's template tokens and apply its budget.
    True when the budget compressed the context (the caller then writes the state file: ``write_state``)."""
    turn, cfg = episode.turns[-1], episode.config
    reason = ("submit" if any(s.tool == "submit" and s.ok for s in turn.steps) else
              "max_steps" if len(episode.turns) >= cfg.max_steps else
              "deadline" if episode.spent_s >= cfg.deadline_s else "")
    if not reason:
        turn.closing_ids = fmt.closing_ids(turn.model_ids)
        turn.observation_ids = fmt.observation_ids(turn.observations)
        if len(episode.context_ids()) + len(turn.closing_ids) + len(turn.observation_ids) >= max_context \
                or episode.model_tokens >= cfg.token_budget:
            reason = "token_budget"
    if reason:
        episode.finish(reason)
        return False
    episode.add_template(turn)
    return compress(episode, fmt, task.domain, cfg, max_context) is not None


def write_state(episode: Episode, task: AgentTask, session: SandboxSession) -> None:
    """Write ``episode.state_text`` to the state file in its workspace (a failure is logged: the text stays in
    the episode, and the agent finds the file missing or stale)."""
    state_file = episode.config.state_file
    try:
        session.write_file(state_file, episode.state_text)
    except SessionError as exc:
        log.warning("episode %s: state file %s not written: %s", task.env_id, state_file, exc)


def _record(turn: Turn, tool: str, arguments: dict, obs: Observation, duration_ms: float, error: str = "",
            usage: Usage = Usage()) -> None:
    text = _utf8(obs.text)  # what the model reads back must be text every tokenizer can encode
    turn.observations.append(text)
    turn.steps.append(StepRecord(turn=turn.index, tool=_utf8(tool), arguments=json.dumps(arguments), ok=obs.ok,
                                 exit_code=obs.exit_code, duration_ms=duration_ms,
                                 observation_bytes=len(text.encode()), error=_utf8(error),
                                 infra_error=obs.infra_error, cpu_s=usage.cpu_s,
                                 memory_peak_mb=usage.memory_peak_mb))


def _utf8(text: str) -> str:
    """``text`` with anything UTF-8 cannot encode (lone surrogates) escaped as ``\\udc80``.

    >>> _utf8("a\\udc80b")
    'a\\\\udc80b'
    """
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
