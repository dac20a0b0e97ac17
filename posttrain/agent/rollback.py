"""Restart an agent episode from the workspace snapshot of one of its turns: the rollback of a long episode.

An episode run with ``snapshot_every`` keeps a workspace tar after every N-th turn (``Episode.snapshots``: turn ->
archive; -1: the prepared workspace before the first turn). ``restart`` puts a session's workspace back to turn
``k``'s archive, rebuilds the episode as it stood after turn ``k`` (``rebuild``: its recorded turns replayed through
the runner's own ``after_turn``, so the next prompt is token for token the one the original sent, compressions
included) and runs the policy on from there with the runner's loop (``runner.continue_episodes``). Turns ``0..k``
are not run again: their model tokens and observations are the recorded ones, and the workspace is what they left.
The restarted episode's own time (``spent_s``, for its deadline) counts from the restart.

Example (a scripted policy that breaks what it wrote, restarted from the snapshot before it did):
    >>> from posttrain.agent.runner import AgentTask, run_episodes
    >>> from posttrain.agent.scripted import ScriptedPolicy
    >>> from posttrain.agent.template import AGENT_TEMPLATE, ChatFormat
    >>> from posttrain.envs.tools import tool_specs
    >>> from posttrain.sandbox import make_sandbox
    >>> from posttrain.training.demo_policy import train_tokenizer
    >>> fmt = ChatFormat(train_tokenizer(["x = 1\\n"], 300), tool_specs(["bash", "submit"]), AGENT_TEMPLATE)
    >>> task, cfg = AgentTask(env_id="t/x", prompt="Write x."), AgentConfig(tools=["bash", "submit"], snapshot_every=1)
    >>> write, wipe = ({"name": "bash", "arguments": {"command": c}} for c in ("echo 1 > x", "rm x"))
    >>> box = make_sandbox("bwrap")
    >>> with box.session() as session:
    ...     [e] = run_episodes(ScriptedPolicy(fmt, {task.prompt: [write, wipe]}), fmt, [task], [session], cfg, 2048)
    >>> with box.session() as session:
    ...     again = restart(ScriptedPolicy(fmt, {task.prompt: [write]}), fmt, task, session, e, 0, cfg, 2048)
    ...     session.read_file("x")
    '1\\n'
    >>> [s.tool for s in e.steps], [s.tool for s in again.steps]
    (['bash', 'bash', 'submit'], ['bash', 'submit'])
"""

from __future__ import annotations

from dataclasses import replace

from posttrain.agent.episode import Episode, Turn
from posttrain.agent.runner import AgentTask, after_turn, continue_episodes
from posttrain.agent.template import ChatFormat
from posttrain.config import AgentConfig
from posttrain.rollout.engine import TokenRolloutEngine
from posttrain.sandbox.session import SandboxSession, Snapshot


def restart(engine: TokenRolloutEngine, fmt: ChatFormat, task: AgentTask, session: SandboxSession,
            episode: Episode, k: int, cfg: AgentConfig, max_context: int) -> Episode:
    """``episode`` (of ``task``) restarted from turn ``k``'s snapshot in ``session`` (open; its workspace is
    replaced) and run on by ``engine`` to its end; ``episode`` itself is left as it was."""
    if k not in episode.snapshots:
        raise ValueError(f"restart: episode {episode.group_id}/{episode.sample_idx} has no snapshot of turn {k} "
                         f"(it has {sorted(episode.snapshots)})")
    resumed = rebuild(episode, fmt, task, k, max_context)
    session.restore(Snapshot(id=k, data=episode.snapshots[k], step=len(session.log)))
    [done] = continue_episodes(engine, fmt, [task], [session], [resumed], cfg, max_context)
    return done


def rebuild(episode: Episode, fmt: ChatFormat, task: AgentTask, k: int, max_context: int) -> Episode:
    """A new episode as ``episode`` stood after turn ``k`` (-1: before its first): the same prompt and config, its
    recorded turns ``0..k`` with their tokens and observations, closed the way the runner closes a turn; the
    snapshots up to turn ``k``. An episode that ended at turn ``k`` cannot go on (ValueError)."""
    if not -1 <= k < len(episode.turns):
        raise ValueError(f"restart: turn {k} is not one of the episode's turns (0..{len(episode.turns) - 1})")
    resumed = Episode(episode.env_id, episode.group_id, episode.sample_idx, list(episode.prefix_ids), episode.config,
                      snapshots={t: data for t, data in episode.snapshots.items() if t <= k})
    for turn in episode.turns[:k + 1]:
        resumed.add_model_turn(Turn(
            index=turn.index, prompt_tokens=turn.prompt_tokens, model_ids=list(turn.model_ids),
            logprobs=list(turn.logprobs), text=turn.text, engine_finish=turn.engine_finish,
            cached_tokens=turn.cached_tokens, observations=list(turn.observations),
            steps=[replace(step, compressed_at_turn=-1) for step in turn.steps]))  # compress marks them again
        after_turn(resumed, fmt, task, max_context)
    if not resumed.active:
        raise ValueError(f"restart: the episode ended at turn {k} ({resumed.finish_reason}): nothing to continue")
    return resumed
