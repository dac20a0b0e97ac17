"""DAPO dynamic sampling's decisions against hand-computed values: which groups carry a signal, how many envs a refill
round samples and which, what the update keeps, and the counts that say so."""

from __future__ import annotations

import pandas as pd
import pytest

from posttrain.config import RolloutConfig
from posttrain.rollout.dynamic_sampling import (DynamicSamplingStats, group_signal, keep_learnable, refill_count,
                                                refill_envs)

pytestmark = pytest.mark.unit

INFRA = "sandbox did not start"


def _scored(rewards: dict[str, list[float | str]], iteration: int = 1) -> pd.DataFrame:
    """Rows of a Scored table with what dynamic sampling reads: env -> its samples' rewards (INFRA: an infra error)."""
    rows = [{"env_id": env, "group_id": f"it{iteration}/{env}", "sample_idx": i,
             "reward": 0.0 if r == INFRA else r, "infra_error": INFRA if r == INFRA else ""}
            for env, group in rewards.items() for i, r in enumerate(group)]
    return pd.DataFrame(rows)


def _envs(train: list[str], eval_: list[str] = (), agent: list[str] = ()) -> pd.DataFrame:
    ids = [*train, *eval_, *agent]
    splits = ["train"] * len(train) + ["eval"] * len(eval_) + ["train"] * len(agent)
    return pd.DataFrame({"env_id": ids, "split": splits,
                         "kind": ["single_turn"] * (len(train) + len(eval_)) + ["agent"] * len(agent)})


def test_group_signal_is_reward_variance_over_usable_samples():
    scored = _scored({"solved": [1.0, 1.0, 1.0], "failed": [0.0, 0.0, 0.0], "half": [0.5, 0.5, 0.5],
                      "mixed": [1.0, 0.0, 0.0], "partial": [0.5, 0.25, 0.5], "one_left": [1.0, INFRA, INFRA],
                      "masked": [1.0, INFRA, 0.0], "all_infra": [INFRA, INFRA, INFRA]})
    assert group_signal(scored) == {
        "it1/solved": "zero_variance", "it1/failed": "zero_variance", "it1/half": "zero_variance",
        "it1/mixed": "learnable", "it1/partial": "learnable",
        "it1/one_left": "zero_variance",  # the infra error is no reward of 0: one usable sample, no variance
        "it1/masked": "learnable", "it1/all_infra": "no_usable_sample"}


@pytest.mark.parametrize("learnable, target, rounds_done, max_rounds, unused, expected", [
    (0, 8, 0, 3, 100, 8),   # nothing learnable: a whole batch again
    (5, 8, 2, 3, 100, 3),   # the 3 missing
    (5, 8, 2, 3, 2, 2),     # only 2 train envs left unused
    (5, 8, 3, 3, 100, 0),   # rounds used up
    (8, 8, 0, 3, 100, 0),   # the target is met
    (9, 8, 0, 3, 100, 0),
    (0, 8, 0, 0, 100, 0),   # max_resample_rounds 0: drop only
])
def test_refill_count(learnable, target, rounds_done, max_rounds, unused, expected):
    assert refill_count(learnable, target, rounds_done, max_rounds, unused) == expected


def test_refill_envs_picks_the_missing_number_of_unused_train_envs_deterministically():
    envs = _envs([f"t{i}" for i in range(10)], eval_=["e0", "e1"], agent=[f"a{i}" for i in range(10)])
    scored = _scored({"t0": [1.0, 0.0], "t1": [1.0, 1.0], "t2": [0.0, 0.0]})  # 1 learnable of 3
    cfg = RolloutConfig(envs_per_iteration=3, max_resample_rounds=2, seed=5)
    chosen = refill_envs(envs, scored, cfg, iteration=4, rounds_done=0)
    assert len(chosen) == 2
    assert len(set(chosen)) == 2
    # never an env used this iteration, an eval env or an agent env (the agent tier's)
    assert set(chosen) <= {f"t{i}" for i in range(3, 10)}
    assert refill_envs(envs, scored, cfg, iteration=4, rounds_done=0) == chosen
    assert refill_envs(envs, scored, cfg, iteration=4, rounds_done=2) == []  # rounds used up
    assert refill_envs(envs, scored, RolloutConfig(envs_per_iteration=1), iteration=4, rounds_done=0) == []
    few = _envs(["t0", "t1", "t2", "t3"])
    assert refill_envs(few, scored, cfg, iteration=4, rounds_done=0) == ["t3"]  # the only unused one


def test_keep_learnable_keeps_the_rows_of_learnable_groups_and_counts_every_group():
    scored = _scored({"a": [1.0, 0.0], "b": [1.0, 1.0], "c": [0.5, 1.0], "d": [INFRA, INFRA], "e": [0.0, 0.0]})
    kept, stats = keep_learnable(scored, target=4, rounds=2, refilled=3)
    assert kept["group_id"].tolist() == ["it1/a", "it1/a", "it1/c", "it1/c"]
    assert kept.index.tolist() == [0, 1, 2, 3]
    assert stats == DynamicSamplingStats(target_groups=4, learnable_groups=2, zero_variance_groups=2,
                                         dropped_groups=3, refilled_groups=3, resample_rounds=2)


def test_rounds_until_the_bound_when_refills_carry_no_signal():
    """The refill loop as ``workflows/rl_loop.py::refill`` runs it, scored by a table of rewards per env: 8 train
    envs, only ``a`` learnable, target 3, at most 3 rounds. Hand-computed: round 0 [a, b, c] has 1 learnable, so
    round 1 samples 2 of the 5 unused, round 2 the 2 still missing of the 3 left, round 3 the last one; then no
    train env is unused: 3 rounds, 5 refilled, 1 kept, 7 dropped."""
    rewards = {"a": [1.0, 0.0], **{env: [0.0, 0.0] for env in "bcdefgh"}}
    envs = _envs(list("abcdefgh"))
    cfg = RolloutConfig(envs_per_iteration=3, max_resample_rounds=3)
    scored, rounds, refilled, sizes = _scored({env: rewards[env] for env in "abc"}), 0, 0, []
    while env_ids := refill_envs(envs, scored, cfg, iteration=1, rounds_done=rounds):
        scored = pd.concat([scored, _scored({env: rewards[env] for env in env_ids})], ignore_index=True)
        rounds, refilled, sizes = rounds + 1, refilled + len(env_ids), [*sizes, len(env_ids)]
    kept, stats = keep_learnable(scored, cfg.envs_per_iteration, rounds, refilled)
    assert sizes == [2, 2, 1]
    assert sorted(scored["env_id"].unique()) == list("abcdefgh")
    assert stats == DynamicSamplingStats(target_groups=3, learnable_groups=1, zero_variance_groups=7,
                                         dropped_groups=7, refilled_groups=5, resample_rounds=3)
    assert set(kept["env_id"]) == {"a"}
    assert stats.learnable_groups + stats.dropped_groups == 3 + stats.refilled_groups  # every group accounted for


def test_no_refill_when_the_first_round_is_learnable_enough():
    scored = _scored({"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [0.0, 0.0]})
    cfg = RolloutConfig(envs_per_iteration=2, max_resample_rounds=3)
    assert refill_envs(_envs(list("abcdef")), scored, cfg, iteration=1, rounds_done=0) == []
    kept, stats = keep_learnable(scored, cfg.envs_per_iteration, rounds=0, refilled=0)
    assert set(kept["env_id"]) == {"a", "b"}
    assert (stats.dropped_groups, stats.resample_rounds) == (1, 0)
