"""Evaluation of a policy version on the agent eval envs: one greedy episode per env (temperature 0) and, with
``agent.eval_samples``, that many sampled episodes per env at the agent's temperature and top_p (seeded alike for
every version, as the single-turn sampled eval is); each final workspace scored by the env's verifier, then one
``EvalResults`` row per episode (``decoding`` "greedy" or "sampled") whose assertions are judged on the verdict, on
the episode's step log and on the destructive effects its final workspace shows
(``posttrain.evaluation.results.eval_results``): the batch the agent rollout makes
(``posttrain.agent.rollout.rollout_episodes``), so the eval sees the same evidence by text and by effect.

An eval row's ``reward`` is the verifier's (``verifier_reward``: shaping terms are a training signal, not a
measurement); ``passed``: the verifier passed the final workspace and no infra error got in the way; ``steps``:
the episode's model turns. Eval episodes' group ids are ``eval-v<version>/<env_id>`` (greedy) and
``eval-sampled-v<version>/<env_id>`` (sampled), their Steps rows' too, as the single-turn eval's. With
``agent.snapshot_every``, the workspace snapshots of the greedy episodes that failed are kept (``kept_snapshots``,
at most ``agent.snapshot_keep_mb``), for ``posttrain replay`` (docs/agent.md, Snapshots, replay, rollback).

Example (pure: the envs evaluated, and the per-episode rows of an AgentScored table with two windows):
    >>> from posttrain.envs.spec import EnvSpec
    >>> envs = {i: EnvSpec(id=i, prompt="p", reference="", verifier={"kind": "workspace_tests"}, kind="agent",
    ...                    split="eval") for i in ("t/b", "t/a", "t/c")}
    >>> [e.id for e in eval_envs(envs, limit=2)]
    ['t/a', 't/b']
    >>> import pandas as pd
    >>> scored = pd.DataFrame({"env_id": ["t/a"] * 2, "group_id": ["it0/t/a"] * 2, "sample_idx": 0, "window": [0, 1],
    ...                        "policy_version": 3, "steps": 5, "reward": 0.9, "verifier_reward": 1.0,
    ...                        "tests_passed": 4, "tests_total": 4, "infra_error": ""})
    >>> episode_rows(scored, version=3).to_dict("records")
    [{'env_id': 't/a', 'group_id': 'eval-v3/t/a', 'sample_idx': 0, 'policy_version': 3, 'steps': 5, \
'reward': 1.0, 'tests_passed': 4, 'tests_total': 4, 'infra_error': '', 'decoding': 'greedy'}]
    >>> episode_rows(scored, version=3, decoding="sampled")["group_id"].tolist()
    ['eval-sampled-v3/t/a']
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

import pandas as pd

from posttrain.agent.metrics import EPISODE, AgentStats
from posttrain.agent.template import ChatFormat
from posttrain.agent.tier import run_batch
from posttrain.config import AgentConfig, SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.evaluation.greedy import group_prefix, split_envs
from posttrain.evaluation.results import eval_results
from posttrain.rollout.collect import iteration_seed
from posttrain.rollout.engine import TokenRolloutEngine
from posttrain.schemas import EpisodeSnapshots, EvalResults, Steps, empty

log = logging.getLogger(__name__)


def eval_envs(envs: Mapping[str, EnvSpec], limit: int = 0, split: str = "eval") -> list[EnvSpec]:
    """The agent envs of ``split`` in stable id order, capped at ``limit`` (0: all): ``greedy.split_envs``."""
    return split_envs(dict(envs), split, limit, agent=True)


def eval_group(version: int, env_id, decoding: str = "greedy") -> str:
    return f"{group_prefix(version, decoding)}/{env_id}"


def episode_rows(scored: pd.DataFrame, version: int, decoding: str = "greedy") -> pd.DataFrame:
    """One row per episode of ``scored`` (AgentScored: one row per window), what ``eval_results`` reads."""
    rows = scored.drop_duplicates(EPISODE)
    return pd.DataFrame({"env_id": rows["env_id"],
                         "group_id": [eval_group(version, e, decoding) for e in rows["env_id"]],
                         "sample_idx": rows["sample_idx"], "policy_version": rows["policy_version"],
                         "steps": rows["steps"], "reward": rows["verifier_reward"].astype(float),
                         "tests_passed": rows["tests_passed"], "tests_total": rows["tests_total"],
                         "infra_error": rows["infra_error"], "decoding": decoding}).reset_index(drop=True)


@dataclass
class Decoded:
    """The episodes of one decoding, under their eval group ids: rows for ``eval_results``, their Steps, the
    destructive effects by ``(group_id, sample_idx)``, their EpisodeSnapshots and the batch's stats."""

    rows: pd.DataFrame
    steps: pd.DataFrame
    effects: dict
    snapshots: pd.DataFrame
    stats: AgentStats


def decode_episodes(engine: TokenRolloutEngine, fmt: ChatFormat, envs: list[EnvSpec], n: int, cfg: AgentConfig,
                    sandbox, sandbox_cfg: SandboxConfig, max_context: int, decoding: str) -> Decoded:
    """``n`` episodes per env of ``envs`` under ``cfg``, grouped as ``decoding``'s eval episodes."""
    batch, stats = run_batch(engine, fmt, envs, n, cfg, sandbox, sandbox_cfg, max_context, iteration=0)
    version = max(0, engine.version)

    def grouped(table: pd.DataFrame) -> pd.DataFrame:
        return table.assign(group_id=[eval_group(version, e, decoding) for e in table["env_id"]])

    effects = {(eval_group(version, env_id, decoding), idx): found for (env_id, idx), found in batch.effects.items()}
    return Decoded(episode_rows(batch.scored, version, decoding), grouped(batch.steps), effects,
                   grouped(batch.snapshots), stats)


def evaluate_agent(engine: TokenRolloutEngine, fmt: ChatFormat, envs: Mapping[str, EnvSpec], cfg: AgentConfig,
                   sandbox, sandbox_cfg: SandboxConfig, max_context: int, limit: int = 0,
                   previous: pd.DataFrame | Mapping[str, bool | None] | None = None,
                   ) -> tuple[pd.DataFrame, pd.DataFrame, AgentStats, pd.DataFrame]:
    """``(EvalResults, Steps, stats, EpisodeSnapshots)`` of the policy ``engine`` serves on the agent eval envs
    (``limit``: the first ``limit`` by id; 0: all): a greedy episode per env, then ``cfg.eval_samples`` sampled ones.
    ``stats`` are the greedy episodes'; the snapshots are the failed greedy episodes' (``kept_snapshots``; sampled
    episodes take none unless their env asks, and those are not kept). ``previous``: the previous policy's greedy
    verdicts, for the ``no_regression`` assertion of the greedy rows (``eval_results``)."""
    chosen = eval_envs(envs, limit)
    if not chosen:
        return empty(EvalResults), empty(Steps), AgentStats(), empty(EpisodeSnapshots)
    greedy = decode_episodes(engine, fmt, chosen, 1, replace(cfg, temperature=0.0), sandbox, sandbox_cfg,
                             max_context, "greedy")
    decoded = [greedy]
    if cfg.eval_samples:
        seeded = replace(cfg, seed=iteration_seed(cfg.seed, 0), snapshot_every=0)  # no rollout is iteration 0
        decoded.append(decode_episodes(engine, fmt, chosen, cfg.eval_samples, seeded, sandbox, sandbox_cfg,
                                       max_context, "sampled"))
    steps = Steps.validate(pd.concat([d.steps for d in decoded], ignore_index=True))
    effects = {key: found for d in decoded for key, found in d.effects.items()}
    results = eval_results(pd.concat([d.rows for d in decoded], ignore_index=True), {e.id: e for e in chosen},
                           steps=steps, previous=previous, effects=effects)
    kept = kept_snapshots(greedy.snapshots, results[results.decoding == "greedy"], cfg.snapshot_keep_mb)
    return results, steps, greedy.stats, kept


def kept_snapshots(snapshots: pd.DataFrame, results: pd.DataFrame, keep_mb: int) -> pd.DataFrame:
    """The ``snapshots`` (``EpisodeSnapshots``) of the episodes whose env failed (``results``: ``EvalResults``), whole
    episodes in env order while their archives total at most ``keep_mb`` MiB; one that would cross it keeps none
    (logged).

    >>> snaps = pd.DataFrame({"env_id": ["t/a", "t/a", "t/b", "t/c"], "group_id": ["g/a", "g/a", "g/b", "g/c"],
    ...                       "sample_idx": 0, "turn": [-1, 0, -1, -1], "archive": [b"x" * 400_000] * 4})
    >>> results = pd.DataFrame({"env_id": ["t/a", "t/b", "t/c"], "passed": [False, True, False]})
    >>> kept_snapshots(snaps, results, keep_mb=1)[["group_id", "turn"]].values.tolist()
    [['g/a', -1], ['g/a', 0]]
    """
    failed = set(results.env_id[~results.passed.astype(bool)])
    rows = snapshots[snapshots.env_id.isin(failed)].sort_values(["env_id", "sample_idx", "turn"])
    sizes = rows.archive.map(len).groupby([rows.group_id, rows.sample_idx], sort=False).sum()
    kept, total = set(), 0
    for episode, size in sizes.items():
        if total + size > keep_mb << 20:
            log.warning("eval snapshots of %s/%s not kept: %d bytes over agent.snapshot_keep_mb=%d with the others",
                        *episode, size, keep_mb)
            continue
        kept.add(episode)
        total += size
    chosen = pd.Series([key in kept for key in zip(rows.group_id, rows.sample_idx)], index=rows.index, dtype=bool)
    return EpisodeSnapshots.validate(rows[chosen].reset_index(drop=True))
