"""DAPO dynamic sampling: keep only the groups that carry a GRPO signal, refill the rest from fresh train envs.

A group (the n samples of one env prompt) whose usable rewards are all equal (all solved, all failed, all the same
partial score) has zero advantage under every group-relative estimator: it costs an update slot and teaches nothing.
With ``RolloutConfig.dynamic_sampling`` the loop drops such groups and refills the batch: while fewer than
``envs_per_iteration`` groups are learnable and ``max_resample_rounds`` are not used up, it samples that many more
train envs not yet used this iteration, from the same policy version, and scores them. Nothing is dropped silently:
``DynamicSamplingStats`` counts every group (learnable + dropped = first-round groups + refilled).

The decisions are the pure functions here; ``workflows/rl_loop.py`` (``refill``) runs the rounds as Flyte tasks.

Example (hand-computed: target 3 groups, one learnable so far, 2 of 4 train envs unused, 1 round left):
    >>> import pandas as pd
    >>> scored = pd.DataFrame({"env_id": ["a", "a", "b", "b"], "group_id": ["it1/a", "it1/a", "it1/b", "it1/b"],
    ...                        "reward": [1.0, 0.0, 1.0, 1.0], "infra_error": ["", "", "", ""]})
    >>> group_signal(scored)
    {'it1/a': 'learnable', 'it1/b': 'zero_variance'}
    >>> refill_count(learnable=1, target=3, rounds_done=0, max_rounds=1, unused=2)
    2
    >>> kept, stats = keep_learnable(scored, target=3, rounds=0, refilled=0)
    >>> kept["group_id"].unique().tolist(), stats.learnable_groups, stats.dropped_groups
    (['it1/a'], 1, 1)
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pandas as pd

from posttrain.config import RolloutConfig
from posttrain.reward import distinct_rewards
from posttrain.rollout.collect import iteration_seed, pick_in_shares

LEARNABLE, ZERO_VARIANCE, NO_USABLE_SAMPLE = "learnable", "zero_variance", "no_usable_sample"


@dataclass
class DynamicSamplingStats:
    """What dynamic sampling did in one iteration (logged as ``rollout/<field>``)."""

    target_groups: int = 0  # learnable groups wanted: rollout.envs_per_iteration
    learnable_groups: int = 0  # groups the update trains on: their usable rewards differ
    zero_variance_groups: int = 0  # groups whose usable rewards are all equal: no GRPO signal
    dropped_groups: int = 0  # groups removed from the update's table: the zero-variance ones and all-infra-error ones
    refilled_groups: int = 0  # groups the refill rounds sampled (fresh train envs, same policy version)
    resample_rounds: int = 0  # refill rounds run, at most rollout.max_resample_rounds


def group_signal(scored: pd.DataFrame) -> dict[str, str]:
    """Per group, in table order: ``learnable`` (its usable rewards differ), ``zero_variance`` (all equal) or
    ``no_usable_sample`` (every sample hit an infra error). Infra-error rows never count as a reward.

    >>> group_signal(pd.DataFrame({"group_id": ["g", "g", "h"], "reward": [0.5, 0.5, 0.0],
    ...                            "infra_error": ["", "", "sandbox did not start"]}))
    {'g': 'zero_variance', 'h': 'no_usable_sample'}
    """
    distinct = distinct_rewards(scored)
    return {group: NO_USABLE_SAMPLE if group not in distinct.index
            else LEARNABLE if distinct[group] > 1 else ZERO_VARIANCE
            for group in pd.unique(scored["group_id"])}


def refill_count(learnable: int, target: int, rounds_done: int, max_rounds: int, unused: int) -> int:
    """Envs the next refill round samples: the learnable groups still missing to ``target``, at most the ``unused``
    train envs; 0 when none are missing or the ``max_rounds`` are used up.

    >>> refill_count(learnable=5, target=8, rounds_done=1, max_rounds=3, unused=100)
    3
    >>> refill_count(5, 8, rounds_done=3, max_rounds=3, unused=100), refill_count(8, 8, 0, 3, 100)
    (0, 0)
    """
    if rounds_done >= max_rounds:
        return 0
    return max(0, min(target - learnable, unused))


def refill_envs(envs: pd.DataFrame, scored: pd.DataFrame, cfg: RolloutConfig, iteration: int,
                rounds_done: int) -> list[str]:
    """Ids of the single-turn train envs (``envs``: an Envs table) the next refill round of ``iteration`` samples,
    given its ``scored`` rows so far: a seeded choice among those it has not used (with ``cfg.balance_domains``, a
    share a domain as in the iteration's first pick, even or by ``cfg.domain_weights``:
    ``posttrain.rollout.collect.pick_in_shares``); [] when no round is needed or left.

    >>> envs = pd.DataFrame({"env_id": ["a", "b", "c", "d", "x", "y"], "split": ["train"] * 4 + ["eval", "train"],
    ...                      "kind": ["single_turn"] * 5 + ["agent"]})
    >>> scored = pd.DataFrame({"env_id": ["a", "a"], "group_id": ["it1/a"] * 2, "reward": [1.0, 1.0],
    ...                        "infra_error": ["", ""]})
    >>> cfg = RolloutConfig(envs_per_iteration=2, max_resample_rounds=1)
    >>> chosen = refill_envs(envs, scored, cfg, iteration=1, rounds_done=0)
    >>> len(chosen), set(chosen) <= {"b", "c", "d"}, chosen == refill_envs(envs, scored, cfg, 1, 0)
    (2, True, True)
    >>> refill_envs(envs, scored, cfg, iteration=1, rounds_done=1)
    []
    >>> envs["domain"] = ["code", "code", "code", "scene", "scene", "code"]
    >>> balanced = RolloutConfig(envs_per_iteration=2, max_resample_rounds=1, balance_domains=True)
    >>> sorted(envs.set_index("env_id").loc[refill_envs(envs, scored, balanced, 1, 0), "domain"])
    ['code', 'scene']
    """
    learnable = sum(kind == LEARNABLE for kind in group_signal(scored).values())
    single_turn = (envs["split"] == "train") & (envs["kind"] != "agent")  # agent groups are the agent tier's
    unused = sorted(set(envs.loc[single_turn, "env_id"]) - set(scored["env_id"]))
    count = refill_count(learnable, cfg.envs_per_iteration, rounds_done, cfg.max_resample_rounds, len(unused))
    rng = random.Random(iteration_seed(cfg.seed, iteration) + rounds_done)
    if not cfg.balance_domains:
        return rng.sample(unused, count)
    domain_of = dict(zip(envs["env_id"], envs["domain"]))
    by_domain: dict[str, list[str]] = {}
    for env_id in unused:
        by_domain.setdefault(domain_of[env_id], []).append(env_id)
    return pick_in_shares(by_domain, count, rng, rng.sample, cfg.domain_weights)


def keep_learnable(scored: pd.DataFrame, target: int, rounds: int,
                   refilled: int) -> tuple[pd.DataFrame, DynamicSamplingStats]:
    """The rows of the learnable groups (what the update trains on), and the stats of the iteration's dynamic
    sampling: ``rounds`` refill rounds sampled ``refilled`` groups, ``target`` learnable groups were wanted."""
    signal = group_signal(scored)
    learnable = [group for group, kind in signal.items() if kind == LEARNABLE]
    kept = scored[scored["group_id"].isin(learnable)].reset_index(drop=True)
    kinds = list(signal.values())
    return kept, DynamicSamplingStats(
        target_groups=target, learnable_groups=len(learnable), zero_variance_groups=kinds.count(ZERO_VARIANCE),
        dropped_groups=len(signal) - len(learnable), refilled_groups=refilled, resample_rounds=rounds)
