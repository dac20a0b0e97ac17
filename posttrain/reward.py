"""Reward stage: run every sampled completion's verifier in sandboxes, concurrently, and build the Scored table.

An infra failure (sandbox could not start, daemon gone) is flagged in ``infra_error`` and excluded from the update by
``trainable_rows``; it is never a reward of 0.

Example:
    >>> import pandas as pd
    >>> df = pd.DataFrame({"infra_error": ["", "docker: daemon gone"], "reward": [1.0, 0.0]})
    >>> len(trainable_rows(df))
    1
    >>> percentile([10.0, 20.0, 30.0], 50)
    20.0

What the sandboxes used: each row's ``sandbox_cpu_s`` and ``sandbox_memory_peak_mb`` (``schemas.UNACCOUNTED`` where
nothing was measured), summed up in ``RewardStats.sandbox_cpu_p50_s``, ``..._p99_s``, ``sandbox_memory_peak_p50_mb``
and ``..._max_mb`` (the ``sandbox/*`` metrics: ``sandbox/cpu_p50_s``, ...), over the rows with a measure:
    >>> df = pd.DataFrame({"env_id": "e", "completion": ["a", "b", "c"], "group_id": "g", "reward": [1.0, 0.0, 0.0],
    ...                    "infra_error": "", "timed_out": False, "sandbox_ms": [30.0, 40.0, 0.0],
    ...                    "sandbox_cpu_s": [0.02, 0.3, -1.0], "sandbox_memory_peak_mb": [3.5, 104.0, -1.0],
    ...                    "signals": "{}", "tests_passed": [1, 0, 0], "tests_total": 1})
    >>> stats = reward_stats(df)
    >>> stats.sandbox_cpu_p50_s, stats.sandbox_memory_peak_max_mb, stats.sandbox_p50_ms
    (0.16, 104.0, 30.0)

What the rewards were made of: each row's verdict signals (``signals``, a JSON object; ``Verdict.signals``), their
means over the usable rows that carry each in ``RewardStats.layer`` (the ``reward/layer/<signal>`` metrics):
    >>> layer_means(pd.DataFrame({"signals": ['{"tests": 1.0, "lint": 0.0}', '{"tests": 0.5}', '{}'],
    ...                           "infra_error": ["", "", "gone"]}))
    {'lint': 0.0, 'tests': 0.75}

and per env domain, the mean reward of its rows in ``RewardStats.domain`` (``reward/domain/<domain>``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import get_verifier
from posttrain.envs.verifiers.cache import verify_cached
from posttrain.sandbox import Sandbox
from posttrain.schemas import UNACCOUNTED, Scored, all_tests_passed, measured


@dataclass
class RewardStats:
    samples: int = 0
    reward_mean: float = 0.0
    pass_rate: float = 0.0
    infra_errors: int = 0
    timeouts: int = 0
    sandbox_p50_ms: float = 0.0
    sandbox_p99_ms: float = 0.0
    learnable_fraction: float = 0.0  # groups whose rewards differ: all that GRPO learns from
    wall_s: float = 0.0  # the whole stage: every verification, host side included
    verifications_per_s: float = 0.0  # samples / wall_s
    sandbox_runs: int = 0  # distinct (env, completion) pairs less cache hits: what the sandboxes ran
    cache_hits: int = 0  # distinct pairs whose verdict an earlier stage of this process had (verifiers.cache)
    # what the verifications' programs used, over the rows with a measure (0.0 when none has one: docs/sandboxes.md)
    sandbox_cpu_p50_s: float = 0.0
    sandbox_cpu_p99_s: float = 0.0
    sandbox_memory_peak_p50_mb: float = 0.0
    sandbox_memory_peak_max_mb: float = 0.0
    memory_peak_mb: float = 0.0  # the stage's own processes (posttrain.memory: the task and every process it started)
    layer: dict[str, float] = field(default_factory=dict)  # per signal, its mean over the usable rows (layer_means)
    domain: dict[str, float] = field(default_factory=dict)  # per env domain, its usable rows' mean reward


def percentile(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else 0.0


def trainable_rows(scored: pd.DataFrame) -> pd.DataFrame:
    """Rows the policy update may use: everything except infra failures."""
    return scored[scored["infra_error"] == ""]


def score(trajectories: pd.DataFrame, envs: dict[str, EnvSpec], sandbox: Sandbox, cfg: SandboxConfig) -> pd.DataFrame:
    """Verify each completion against its env; returns the Scored table (same row order).

    With ``cfg.verify_duplicates_once`` a completion sampled several times for one env is verified in one sandbox
    and its verdict given to every copy (``first_copies``): admission's reproducibility check admits only envs whose
    verdict does not change between runs, and a sharpening policy repeats itself (a third of the demo's samples at
    temperature 0.6 are copies). A pair verified in an earlier call of this process (``cfg.verdict_cache_entries``)
    reuses that verdict too (``posttrain.envs.verifiers.cache``; ``VERDICTS.hits`` counts them).
    """
    keys = list(zip(trajectories["env_id"], trajectories["completion"]))
    first = first_copies(keys) if cfg.verify_duplicates_once else list(range(len(keys)))
    distinct = sorted(set(first))
    pairs = [(envs[keys[i][0]], get_verifier(envs[keys[i][0]].verifier_kind).extract_solution(keys[i][1]))
             for i in distinct]
    by_row = dict(zip(distinct, verify_cached(pairs, sandbox, cfg)))
    verdicts = [by_row[i] for i in first]
    scored = trajectories.copy()
    scored["reward"] = [float(v.reward) for v in verdicts]
    scored["compiled"] = [bool(v.compiled) for v in verdicts]
    scored["tests_passed"] = [int(v.tests_passed) for v in verdicts]
    scored["tests_total"] = [int(v.tests_total) for v in verdicts]
    scored["exit_code"] = [-1 if v.exit_code is None else int(v.exit_code) for v in verdicts]
    scored["timed_out"] = [bool(v.timed_out) for v in verdicts]
    scored["infra_error"] = [v.infra_error or "" for v in verdicts]
    scored["sandbox_ms"] = [float(v.sandbox_ms) for v in verdicts]
    scored["sandbox_cpu_s"] = [measured(v.sandbox_cpu_s) for v in verdicts]
    scored["sandbox_memory_peak_mb"] = [measured(v.sandbox_memory_peak_mb) for v in verdicts]
    scored["signals"] = [json.dumps(v.signals, sort_keys=True) for v in verdicts]
    return Scored.validate(scored)


def first_copies(keys: list) -> list[int]:
    """For each key, the index of its first occurrence.

    >>> first_copies([("e1", "a"), ("e1", "b"), ("e1", "a"), ("e2", "a")])
    [0, 1, 0, 3]
    """
    seen: dict = {}
    return [seen.setdefault(key, index) for index, key in enumerate(keys)]


def learnable_fraction(scored: pd.DataFrame) -> float:
    """Learnability for the current policy: the share of groups whose usable rewards differ (the only groups a
    group-relative advantage is not zero for; dynamic sampling keeps exactly these).

    >>> learnable_fraction(pd.DataFrame({"group_id": ["a", "a", "b", "b", "c", "c"],
    ...                                  "reward": [1.0, 0.0, 1.0, 1.0, 0.5, 0.25], "infra_error": [""] * 6}))
    0.6666666666666666
    """
    if not len(scored):
        return 0.0
    return float((distinct_rewards(scored) > 1).sum() / scored["group_id"].nunique())


def distinct_rewards(scored: pd.DataFrame) -> pd.Series:
    """Per group id, how many different rewards its usable rows (no infra error) have; groups without one are absent.

    >>> distinct_rewards(pd.DataFrame({"group_id": ["a", "a", "b"], "reward": [1.0, 0.0, 0.0],
    ...                                "infra_error": ["", "", "gone"]})).to_dict()
    {'a': 2}
    """
    return trainable_rows(scored).groupby("group_id")["reward"].nunique()


def layer_means(scored: pd.DataFrame) -> dict[str, float]:
    """Per signal (the ``signals`` column's names, sorted), its mean over the usable rows that carry it: what the
    rewards were made of, one number per layer and iteration."""
    rows = pd.DataFrame([json.loads(text) for text in trainable_rows(scored)["signals"]])
    return {name: float(rows[name].mean()) for name in sorted(rows.columns)}


def domain_means(scored: pd.DataFrame, domains: dict[str, str]) -> dict[str, float]:
    """Per domain of the rows' envs (``domains``: env id -> domain), the mean reward of its usable rows: one training
    curve per domain when a run trains on several.

    >>> domain_means(pd.DataFrame({"env_id": ["c1", "c1", "f1"], "reward": [1.0, 0.0, 0.5], "infra_error": ""}),
    ...              {"c1": "python", "f1": "finance"})
    {'finance': 0.5, 'python': 0.5}
    """
    usable = trainable_rows(scored)
    means = usable.groupby(usable["env_id"].map(domains))["reward"].mean()
    return {str(name): float(mean) for name, mean in sorted(means.items())}


def reward_stats(scored: pd.DataFrame, wall_s: float = 0.0, memory_peak_mb: float = 0.0,
                 domains: dict[str, str] | None = None, cache_hits: int = 0) -> RewardStats:
    """The reward stage's summary of its Scored table; ``wall_s``: how long the stage took, ``memory_peak_mb``: the
    most its processes held, ``domains`` (env id -> domain): what ``domain_means`` is taken over, ``cache_hits``:
    the distinct pairs whose verdict came from ``verifiers.cache`` (no sandbox ran for them)."""
    usable = trainable_rows(scored)
    cpu = scored.loc[scored["sandbox_cpu_s"] != UNACCOUNTED, "sandbox_cpu_s"]
    peaks = scored.loc[scored["sandbox_memory_peak_mb"] != UNACCOUNTED, "sandbox_memory_peak_mb"]
    return RewardStats(
        samples=len(scored),
        reward_mean=float(usable["reward"].mean()) if len(usable) else 0.0,
        pass_rate=float(all_tests_passed(usable).mean()) if len(usable) else 0.0,
        infra_errors=int((scored["infra_error"] != "").sum()),
        timeouts=int(scored["timed_out"].sum()),
        sandbox_p50_ms=percentile(scored["sandbox_ms"].tolist(), 50),
        sandbox_p99_ms=percentile(scored["sandbox_ms"].tolist(), 99),
        learnable_fraction=learnable_fraction(usable),
        wall_s=wall_s,
        verifications_per_s=len(scored) / wall_s if wall_s > 0 else 0.0,
        sandbox_runs=int(len(scored[["env_id", "completion"]].drop_duplicates())) - cache_hits,
        cache_hits=cache_hits,
        sandbox_cpu_p50_s=percentile(cpu, 50),
        sandbox_cpu_p99_s=percentile(cpu, 99),
        sandbox_memory_peak_p50_mb=percentile(peaks, 50),
        sandbox_memory_peak_max_mb=float(peaks.max()) if len(peaks) else 0.0,
        memory_peak_mb=memory_peak_mb,
        layer=layer_means(scored),
        domain=domain_means(scored, domains) if domains else {},
    )
