"""Collect one iteration's rollouts: pick envs, sample a group of n completions per env, build Trajectories.

Every row carries the policy version the engine serves (``engine.version``), and each iteration's sampling is seeded
(``iteration_seed``): the same iteration gives the same samples, whatever the engine served before. Iterations
count from 1, so iteration 0's seeds are free: the sampled eval uses them (``posttrain.evaluation.greedy``).

Example:
    >>> from posttrain.envs.spec import EnvSpec
    >>> envs = [EnvSpec(id=f"e{i}", prompt="p", verifier={"kind": "python_tests"}, reference="") for i in range(5)]
    >>> [e.id for e in pick_envs(envs, count=3, seed=7)] == [e.id for e in pick_envs(envs, count=3, seed=7)]
    True
    >>> iteration_seed(0, 1), iteration_seed(0, 2), iteration_seed(1, 1)
    (1048576, 2097152, 1074790400)
    >>> both = combine_stats(RolloutStats(samples=4, tokens=40, seconds=1.0, truncated_fraction=0.5, wall_s=2.0),
    ...                      RolloutStats(samples=4, tokens=20, seconds=1.0, truncated_fraction=0.0, wall_s=1.5))
    >>> both.samples, both.tokens_per_s, both.truncated_fraction, both.wall_s
    (8, 30.0, 0.25, 3.5)
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields
from typing import Callable, Mapping, TypeVar

import pandas as pd

from posttrain.config import ConfigError, RolloutConfig
from posttrain.envs.spec import EnvSpec
from posttrain.rollout.engine import RolloutEngine
from posttrain.schemas import Trajectories, encode_floats, encode_ints
from posttrain.timing import timed

T = TypeVar("T")


@dataclass
class RolloutStats:
    prompts: int = 0
    samples: int = 0
    tokens: int = 0
    seconds: float = 0.0  # generation only
    tokens_per_s: float = 0.0
    truncated_fraction: float = 0.0  # samples cut by max_tokens instead of ending with EOS
    engine_start_s: float = 0.0  # waited for a vLLM engine start (0 when the live engine was reused)
    engine_swap_s: float = 0.0  # waited for the live engine's in-place weight swap
    eval_seconds: float = 0.0  # greedy eval decoding in the same engine lifetime (``tasks.rollout.sample``)
    wall_s: float = 0.0  # the whole stage, set by the task
    refill_wall_s: float = 0.0  # of wall_s: the dynamic-sampling refill rounds (run after the first one was scored)
    memory_peak_mb: float = 0.0  # the stage's processes, the engine's included (posttrain.memory), set by the task
    resting_envs: int = 0  # settled train envs sitting out the pick (rollout.settled_cooldown, rollout.settled)


def combine_stats(a: RolloutStats, b: RolloutStats) -> RolloutStats:
    """The stats of two rollouts of one iteration together (``b``, a dynamic-sampling refill round, joins ``a``):
    counts and seconds add up (``b``'s wall time also to ``refill_wall_s``), the rates are recomputed over both, the
    memory peak is the higher one."""
    total = RolloutStats(**{f.name: getattr(a, f.name) + getattr(b, f.name) for f in fields(RolloutStats)})
    total.refill_wall_s = a.refill_wall_s + b.wall_s
    total.tokens_per_s = total.tokens / total.seconds if total.seconds > 0 else 0.0
    total.memory_peak_mb = max(a.memory_peak_mb, b.memory_peak_mb)
    total.truncated_fraction = ((a.truncated_fraction * a.samples + b.truncated_fraction * b.samples) / total.samples
                                if total.samples else 0.0)
    return total


def pick_envs(envs: list[EnvSpec], count: int, seed: int, rest: Mapping[str, int] | None = None) -> list[EnvSpec]:
    """Deterministically choose ``count`` envs (all of them when count <= 0 or count >= len(envs)), none of those in
    ``rest`` (env id -> the iteration it settled at: ``posttrain.rollout.settled``) while enough others are left; if
    not, every other one and the longest-resting of ``rest``. With nothing resting it is a seeded ``random.sample``.

    >>> envs = [EnvSpec(id=i, prompt="p", verifier={"kind": "python_tests"}, reference="") for i in "abcdef"]
    >>> [e.id for e in pick_envs(envs, 3, seed=7)] == [e.id for e in random.Random(7).sample(envs, 3)]
    True
    >>> sorted(e.id for e in pick_envs(envs, 3, seed=7, rest={"a": 5, "b": 5, "c": 4}))
    ['d', 'e', 'f']
    >>> sorted(e.id for e in pick_envs(envs, 4, seed=7, rest={"a": 5, "b": 5, "c": 4}))   # c settled first
    ['c', 'd', 'e', 'f']
    """
    if count <= 0 or count >= len(envs):
        return list(envs)
    rest = rest or {}
    fresh = [e for e in envs if e.id not in rest]
    if len(fresh) >= count:
        return random.Random(seed).sample(fresh, count)
    longest_resting = sorted((e for e in envs if e.id in rest), key=lambda e: (rest[e.id], e.id))
    return fresh + longest_resting[:count - len(fresh)]


def domain_shares(sizes: Mapping[str, int], count: int, rng: random.Random,
                  weights: Mapping[str, float] | None = None) -> dict[str, int]:
    """``count`` split among the keys of ``sizes`` in proportion to their ``weights`` (a key not named weighs 1;
    none given: evenly) as far as their sizes allow: each key gets the whole part of its exact share, the ones left
    go to the keys with the largest fractions (ties drawn by ``rng``), a key never gets more than its size (one of
    weight 0: nothing), and what a small key cannot take goes to the others in proportion.

    >>> domain_shares({"code": 307, "finance": 160, "scene": 160}, 32, random.Random(0))
    {'code': 10, 'finance': 11, 'scene': 11}
    >>> domain_shares({"code": 307, "tiny": 2}, 10, random.Random(0))
    {'code': 8, 'tiny': 2}
    >>> domain_shares({"code": 307, "finance": 160, "scene": 160}, 32, random.Random(0), {"scene": 2})
    {'code': 8, 'finance': 8, 'scene': 16}
    """
    weights = weights or {}
    shares = dict.fromkeys(sizes, 0)
    growing = [key for key, size in sizes.items() if size > 0 and weights.get(key, 1.0) > 0]
    left = min(count, sum(sizes[key] for key in growing))
    while left > 0:
        total = sum(weights.get(key, 1.0) for key in growing)
        exact = {key: left * weights.get(key, 1.0) / total for key in growing}
        fraction = {key: exact[key] - math.floor(exact[key]) for key in growing}
        extra, lucky = left - sum(math.floor(share) for share in exact.values()), []
        for largest in sorted(set(fraction.values()), reverse=True):  # equal weights: one draw among all keys
            tied = [key for key in growing if fraction[key] == largest]
            need = extra - len(lucky)
            lucky += tied if len(tied) <= need else rng.sample(tied, need)
        for key in growing:
            add = min(math.floor(exact[key]) + (key in lucky), sizes[key] - shares[key])
            shares[key], left = shares[key] + add, left - add
        growing = [key for key in growing if shares[key] < sizes[key]]
    return shares


def pick_by_domain(envs: list[EnvSpec], count: int, seed: int, rest: Mapping[str, int] | None = None,
                   weights: Mapping[str, float] | None = None) -> list[EnvSpec]:
    """``count`` envs with a share for each domain of ``envs`` (``EnvSpec.domain``; ``domain_shares``: even, or in
    proportion to ``weights``), each share picked among its domain's envs as ``pick_envs`` picks: a domain with more
    train envs is not rolled out more often. All of them when count <= 0 or count >= len(envs).

    >>> pool = [EnvSpec(id=f"{d}{i}", prompt="p", verifier={"kind": "numeric"}, reference="", domain=d)
    ...         for d, n in (("code", 30), ("scene", 10)) for i in range(n)]
    >>> picked = pick_by_domain(pool, 8, seed=3)
    >>> sorted(e.domain for e in picked).count("scene"), picked == pick_by_domain(pool, 8, seed=3)
    (4, True)
    >>> sorted(e.domain for e in pick_by_domain(pool, 8, seed=3, weights={"scene": 3})).count("scene")
    6
    """
    if count <= 0 or count >= len(envs):
        return list(envs)
    domains: dict[str, list[EnvSpec]] = {}
    for env in envs:
        domains.setdefault(env.domain, []).append(env)
    return pick_in_shares(domains, count, random.Random(seed),
                          lambda members, share: pick_envs(members, share, seed=seed, rest=rest), weights)


def pick_in_shares(groups: Mapping[str, list[T]], count: int, rng: random.Random,
                   pick: Callable[[list[T], int], list[T]], weights: Mapping[str, float] | None = None) -> list[T]:
    """``count`` items of ``groups``, a share of each group (``domain_shares`` over the groups in sorted order,
    drawn with ``rng``: even, or in proportion to ``weights``), each share chosen by ``pick(group, share)``; a group
    whose share is 0 is not asked.

    >>> pick_in_shares({"b": [3, 4, 5], "a": [1, 2]}, 4, random.Random(0), lambda members, n: members[:n])
    [1, 2, 3, 4]
    """
    shares = domain_shares({key: len(members) for key, members in sorted(groups.items())}, count, rng, weights)
    return [item for key, share in shares.items() if share for item in pick(groups[key], share)]


def iteration_seed(seed: int, iteration: int) -> int:
    """Base of one iteration's per-request sampling seeds: its samples get ``base + i`` (i < 2**20), distinct from
    every other iteration's (< 1024 iterations per ``seed``)."""
    return (seed * 1024 + iteration) << 20


def collect(
    engine: RolloutEngine,
    envs: list[EnvSpec],
    *,
    n: int,
    temperature: float,
    max_tokens: int,
    group_prefix: str,
    top_p: float = 1.0,
    seed: int | None = None,
    policy_version: int | None = None,
) -> tuple[pd.DataFrame, RolloutStats]:
    """Sample ``n`` completions for each env's prompt; one Trajectories row per completion.

    ``policy_version`` defaults to the version the engine serves (``engine.version``).
    """
    version = engine.version if policy_version is None else policy_version
    with timed() as generate:
        groups = engine.generate([e.prompt for e in envs], n=n, temperature=temperature, max_tokens=max_tokens,
                                 top_p=top_p, seed=seed)
    rows = []
    for env, group in zip(envs, groups):
        for idx, sample in enumerate(group):
            rows.append({
                "env_id": env.id,
                "group_id": f"{group_prefix}/{env.id}",
                "sample_idx": idx,
                "policy_version": version,
                "prompt": env.prompt,
                "completion": sample.text,
                "prompt_token_ids": encode_ints(sample.prompt_token_ids),
                "completion_token_ids": encode_ints(sample.token_ids),
                "behavior_logprobs": encode_floats(sample.logprobs),
                "temperature": temperature,
                "steps": 1,
                "tool_calls": 0,
                "finish_reason": sample.finish_reason,
                "tokens": len(sample.token_ids),
            })
    table = Trajectories.validate(pd.DataFrame(rows, columns=list(Trajectories.to_schema().columns)))
    tokens = int(table["tokens"].sum()) if len(table) else 0
    stats = RolloutStats(
        prompts=len(envs),
        samples=len(table),
        tokens=tokens,
        seconds=generate.seconds,
        tokens_per_s=tokens / generate.seconds if generate.seconds > 0 else 0.0,
        truncated_fraction=float((table["finish_reason"] == "length").mean()) if len(table) else 0.0,
    )
    return table, stats


def rollout_envs(envs: list[EnvSpec], cfg: RolloutConfig, iteration: int,
                 rest: Mapping[str, int] | None = None) -> list[EnvSpec]:
    """The single-turn train-split envs iteration ``iteration`` rolls out (``cfg.envs_per_iteration`` of them,
    seeded, none of those that ``rest`` while enough others are left: ``pick_envs``; with ``cfg.balance_domains``
    a share a domain, even or by ``cfg.domain_weights``: ``pick_by_domain``); agent envs are the agent tier's
    (``posttrain.agent.tier``)."""
    single_turn = [e for e in envs if e.split == "train" and e.kind != "agent"]
    if cfg.balance_domains:
        check_domain_weights(cfg.domain_weights, {e.domain for e in single_turn})
        return pick_by_domain(single_turn, cfg.envs_per_iteration, seed=cfg.seed + iteration, rest=rest,
                              weights=cfg.domain_weights)
    return pick_envs(single_turn, cfg.envs_per_iteration, seed=cfg.seed + iteration, rest=rest)


def check_domain_weights(weights: Mapping[str, float], domains: set[str]) -> None:
    """Refuse ``rollout.domain_weights`` that name a domain none of the single-turn train envs has (misspelt, an agent
    domain, or one admission rejected whole: its weight would do nothing, silently) or that weigh every domain 0
    (nothing would be picked).

    >>> check_domain_weights({"scene": 2}, {"python", "scene"})
    >>> check_domain_weights({"scenes": 2}, {"python", "scene"})
    Traceback (most recent call last):
    ...
    posttrain.config.ConfigError: rollout.domain_weights names scenes: no single-turn train env has that domain (they \
have: python, scene)
    """
    if unknown := sorted(set(weights) - domains):
        raise ConfigError(f"rollout.domain_weights names {', '.join(unknown)}: no single-turn train env has that "
                          f"domain (they have: {', '.join(sorted(domains))})")
    if domains and all(weights.get(domain, 1.0) == 0 for domain in domains):
        raise ConfigError(f"rollout.domain_weights weighs every domain 0 ({', '.join(sorted(domains))}): nothing "
                          "would be picked")


def rollout_with(engine: RolloutEngine, envs: list[EnvSpec], cfg: RolloutConfig, iteration: int,
                 env_ids: list[str] | None = None, seed_offset: int = 0,
                 rest: Mapping[str, int] | None = None) -> tuple[pd.DataFrame, RolloutStats]:
    """Iteration ``iteration``'s rollout with an engine already serving the policy it samples.

    ``env_ids``: exactly these envs (a dynamic-sampling refill round) instead of the iteration's pick;
    ``seed_offset``: how many samples the iteration drew before this call, so that its sample i gets seed
    ``iteration_seed + seed_offset + i``, a seed of its own; ``rest``: the settled envs the pick leaves out
    (``posttrain.rollout.settled``).
    """
    by_id = {e.id: e for e in envs}
    chosen = rollout_envs(envs, cfg, iteration, rest) if env_ids is None else [by_id[env_id] for env_id in env_ids]
    table, stats = collect(engine, chosen, n=cfg.samples_per_env, temperature=cfg.temperature,
                           max_tokens=cfg.max_new_tokens, group_prefix=f"it{iteration}", top_p=cfg.top_p,
                           seed=iteration_seed(cfg.seed, iteration) + seed_offset)
    stats.resting_envs = len(rest or {})
    return table, stats
