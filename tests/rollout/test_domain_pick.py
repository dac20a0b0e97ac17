"""``rollout.balance_domains`` (``posttrain.rollout.collect.pick_by_domain``): an even share of each iteration's
single-turn envs a domain, whatever the sizes of the domains' train splits, or a share by ``rollout.domain_weights``,
in the first pick and in dynamic sampling's refills; off, the uniform pick it always was."""

from __future__ import annotations

import random
from collections import Counter

import pandas as pd
import pytest

from posttrain.config import ConfigError, LoopConfig, RolloutConfig
from posttrain.envs.spec import EnvSpec
from posttrain.rollout.collect import domain_shares, iteration_seed, rollout_envs
from posttrain.rollout.dynamic_sampling import refill_envs

pytestmark = pytest.mark.unit


def pool(sizes: dict[str, int], split: str = "train") -> list[EnvSpec]:
    return [EnvSpec(id=f"{domain}/{i:03d}", prompt="p", verifier={"kind": "numeric"}, reference="", domain=domain,
                    split=split) for domain, n in sizes.items() for i in range(n)]


def test_each_domain_gets_an_even_share_whatever_its_size_and_the_pick_is_seeded():
    envs = pool({"python": 307, "finance": 160, "scene": 160}) + pool({"scene": 5}, split="eval")
    cfg = RolloutConfig(envs_per_iteration=32, balance_domains=True)
    for iteration in range(1, 6):
        picked = rollout_envs(envs, cfg, iteration)
        counts = Counter(e.domain for e in picked)
        assert len({e.id for e in picked}) == 32 and all(e.split == "train" for e in picked)
        assert set(counts) == {"python", "finance", "scene"} and max(counts.values()) - min(counts.values()) <= 1
        assert [e.id for e in rollout_envs(envs, cfg, iteration)] == [e.id for e in picked]
    assert rollout_envs(envs, cfg, 1) != rollout_envs(envs, cfg, 2)


def test_a_small_domain_gives_all_it_has_and_resting_envs_sit_out_within_their_domain():
    envs = pool({"python": 50, "scene": 3})
    cfg = RolloutConfig(envs_per_iteration=12, balance_domains=True)
    assert Counter(e.domain for e in rollout_envs(envs, cfg, 1)) == {"python": 9, "scene": 3}
    rest = {f"python/{i:03d}": 1 for i in range(45)}
    picked = rollout_envs(envs, cfg, 1, rest=rest)
    assert {e.id for e in picked if e.domain == "python"} >= {f"python/{i:03d}" for i in range(45, 50)}
    assert domain_shares({"a": 0, "b": 4}, 3, random.Random(0)) == {"a": 0, "b": 3}


def test_off_the_pick_is_the_uniform_one_and_the_multi_domain_preset_balances():
    envs = pool({"python": 30, "scene": 10})
    cfg = RolloutConfig(envs_per_iteration=8)
    assert [e.id for e in rollout_envs(envs, cfg, 3)] == [e.id for e in random.Random(cfg.seed + 3).sample(envs, 8)]
    assert LoopConfig.multi_domain_demo().rollout.balance_domains and not LoopConfig().rollout.balance_domains


def test_dynamic_sampling_refills_keep_the_even_shares_and_off_they_are_the_uniform_pick():
    ids = [e.id for e in pool({"python": 40, "scene": 12})]
    envs = pd.DataFrame({"env_id": ids, "split": "train", "kind": "single_turn",
                         "domain": [env_id.split("/")[0] for env_id in ids]})
    used = ids[:4]  # one round so far, nothing learnable: the whole target is refilled
    scored = pd.DataFrame({"env_id": used, "group_id": [f"it1/{i}" for i in used], "reward": 0.0, "infra_error": ""})
    balanced = RolloutConfig(envs_per_iteration=10, balance_domains=True, dynamic_sampling=True)
    refilled = refill_envs(envs, scored, balanced, iteration=1, rounds_done=0)
    assert Counter(env_id.split("/")[0] for env_id in refilled) == {"python": 5, "scene": 5}
    assert not set(refilled) & set(used) and refilled == refill_envs(envs, scored, balanced, 1, 0)
    uniform = RolloutConfig(envs_per_iteration=10, dynamic_sampling=True)
    unused = sorted(set(ids) - set(used))
    expected = random.Random(iteration_seed(uniform.seed, 1)).sample(unused, 10)
    assert refill_envs(envs, scored, uniform, iteration=1, rounds_done=0) == expected


def test_domain_weights_set_each_domains_share_in_the_pick_and_the_refills():
    envs = pool({"python": 307, "finance": 160, "scene": 160})
    cfg = RolloutConfig(envs_per_iteration=32, balance_domains=True, domain_weights={"scene": 2, "finance": 1.5})
    for iteration in range(1, 4):  # 32 x 1 / 4.5, 32 x 1.5 / 4.5, 32 x 2 / 4.5: 7.1, 10.7, 14.2
        assert Counter(e.domain for e in rollout_envs(envs, cfg, iteration)) == {"python": 7, "finance": 11,
                                                                               "scene": 14}
    never = RolloutConfig(envs_per_iteration=32, balance_domains=True, domain_weights={"python": 0})
    assert Counter(e.domain for e in rollout_envs(envs, never, 1)) == {"finance": 16, "scene": 16}
    ids = [e.id for e in pool({"python": 40, "scene": 12})]
    table = pd.DataFrame({"env_id": ids, "split": "train", "kind": "single_turn",
                          "domain": [env_id.split("/")[0] for env_id in ids]})
    scored = pd.DataFrame({"env_id": ids[:4], "group_id": [f"it1/{i}" for i in ids[:4]], "reward": 0.0,
                           "infra_error": ""})
    weighted = RolloutConfig(envs_per_iteration=10, balance_domains=True, dynamic_sampling=True,
                             domain_weights={"python": 4})
    refilled = refill_envs(table, scored, weighted, iteration=1, rounds_done=0)
    assert Counter(env_id.split("/")[0] for env_id in refilled) == {"python": 8, "scene": 2}


def test_domain_weights_are_refused_without_the_balanced_pick_or_below_zero():
    with pytest.raises(ConfigError, match="rollout.domain_weights.*set balance_domains too"):
        RolloutConfig(domain_weights={"scene": 2})
    with pytest.raises(ConfigError, match="rollout.domain_weights.*weight >= 0"):
        RolloutConfig(balance_domains=True, domain_weights={"scene": -1})


def test_domain_weights_that_name_no_train_domain_or_weigh_all_zero_are_refused_at_the_first_pick():
    envs = pool({"python": 30, "scene": 10}) + pool({"finance": 5}, split="eval")
    for weights, problem in (({"scenes": 2}, "names scenes: no single-turn train env has that domain"),
                             ({"finance": 2}, "names finance"),  # eval envs only: never picked
                             ({"python": 0, "scene": 0}, "weighs every domain 0")):
        cfg = RolloutConfig(envs_per_iteration=8, balance_domains=True, domain_weights=weights)
        with pytest.raises(ConfigError, match=f"rollout.domain_weights {problem}"):
            rollout_envs(envs, cfg, 1)
    kept = RolloutConfig(envs_per_iteration=8, balance_domains=True, domain_weights={"python": 0})
    assert {e.domain for e in rollout_envs(envs, kept, 1)} == {"scene"}
