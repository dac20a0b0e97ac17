"""``rollout.settled_cooldown`` (``posttrain.rollout.settled``): which envs settled, how long they rest, and the pick
that leaves them out; with the cooldown off the pick is the uniform one it always was."""

from __future__ import annotations

import random

import pandas as pd
import pytest

from posttrain.config import RolloutConfig
from posttrain.envs.spec import EnvSpec
from posttrain.rollout.collect import pick_envs, rollout_envs
from posttrain.rollout.settled import record, resting

pytestmark = pytest.mark.unit


def scored(iteration: int, rewards: dict[str, list[float]], infra: frozenset = frozenset()) -> pd.DataFrame:
    rows = [(env, f"it{iteration}/{env}", r, "sandbox did not start" if env in infra else "")
            for env, group in rewards.items() for r in group]
    return pd.DataFrame(rows, columns=["env_id", "group_id", "reward", "infra_error"])


def envs(n: int, **kw) -> list[EnvSpec]:
    return [EnvSpec(id=f"e{i:02d}", prompt="p", verifier={"kind": "python_tests"}, reference="", **kw)
            for i in range(n)]


def test_all_solved_and_all_failed_groups_settle_mixed_and_infra_error_groups_do_not():
    history = record(None, scored(4, {"solved": [1, 1], "failed": [0, 0], "mixed": [0, 1], "broken": [0, 0]},
                                  infra=frozenset({"broken"})), iteration=4)
    assert dict(zip(history["env_id"], history["settled"])) == {"broken": False, "failed": True, "mixed": False,
                                                                 "solved": True}
    assert set(history["iteration"]) == {4}


def test_a_later_group_overwrites_its_envs_row_and_the_others_keep_theirs():
    first = record(None, scored(1, {"a": [1, 1], "b": [1, 1]}), iteration=1)
    second = record(first, scored(2, {"a": [0, 1], "c": [0.5, 0.5]}), iteration=2)
    assert second.values.tolist() == [["a", 2, False], ["b", 1, True], ["c", 2, True]]
    assert record(second, None, iteration=3).equals(second)  # nothing scored: nothing changes


def test_a_settled_env_rests_exactly_cooldown_iterations():
    history = record(None, scored(5, {"a": [1, 1], "b": [0, 1]}), iteration=5)
    assert [bool(resting(history, it, cooldown=3)) for it in (6, 7, 8, 9)] == [True, True, True, False]
    assert resting(history, 6, cooldown=0) == {} and resting(None, 6, cooldown=3) == {}


def test_without_resting_envs_the_pick_is_the_uniform_seeded_sample():
    pool = envs(40)
    for seed in range(5):
        expected = [e.id for e in random.Random(seed).sample(pool, 8)]
        assert [e.id for e in pick_envs(pool, 8, seed)] == [e.id for e in pick_envs(pool, 8, seed, rest={})] \
            == expected


def test_resting_envs_are_left_out_while_enough_others_remain_then_the_longest_resting_fill_in():
    pool = envs(10)
    rest = {f"e{i:02d}": 10 + i for i in range(6)}  # e00 settled first
    picked = {e.id for e in pick_envs(pool, 4, seed=3, rest=rest)}
    assert picked == {"e06", "e07", "e08", "e09"}
    picked = [e.id for e in pick_envs(pool, 6, seed=3, rest=rest)]
    assert set(picked) == {"e06", "e07", "e08", "e09", "e00", "e01"}
    assert picked == [e.id for e in pick_envs(pool, 6, seed=3, rest=rest)]  # deterministic


def test_rollout_envs_leave_resting_envs_out_of_the_single_turn_train_split_only():
    pool = envs(12) + [EnvSpec(id="held_out", prompt="p", verifier={"kind": "python_tests"}, reference="",
                               split="eval")]
    cfg = RolloutConfig(envs_per_iteration=5)
    rest = {f"e{i:02d}": 1 for i in range(7)}
    assert {e.id for e in rollout_envs(pool, cfg, iteration=2, rest=rest)} == {f"e{i:02d}" for i in range(7, 12)}
    assert [e.id for e in rollout_envs(pool, cfg, iteration=2)] == \
        [e.id for e in random.Random(cfg.seed + 2).sample(pool[:12], 5)]
