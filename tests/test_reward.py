"""The reward stage's ``score``: every completion gets its env's verdict (with what its program used and the signals
its reward was made of); copies of one completion share one run."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pandas as pd
import pytest

from posttrain.config import DEMO_SUITE, SandboxConfig
from posttrain.envs.suite import load_suite
from posttrain.envs.verifiers.cache import VERDICTS
from posttrain.reward import reward_stats, score
from posttrain.sandbox import make_sandbox
from posttrain.schemas import UNACCOUNTED
from posttrain.tracking.metrics import reward_metrics
from tests.sandbox.cases import ALLOCATE_100MB, usage_unaccounted

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")]


def trajectories(pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """A Trajectories table of (env id, completion) rows, one group per env."""
    return pd.DataFrame([{"env_id": env_id, "group_id": f"g-{env_id}", "sample_idx": i, "policy_version": 0,
                          "prompt": "", "completion": completion, "prompt_token_ids": "[]",
                          "completion_token_ids": "[]", "behavior_logprobs": "[]", "temperature": 0.6, "steps": 1, "tool_calls": 0,
                          "finish_reason": "stop", "tokens": 0} for i, (env_id, completion) in enumerate(pairs)])


@pytest.mark.parametrize("once", [True, False])
def test_copies_get_the_verdict_of_their_own_completion(once):
    a, b = [env for env in load_suite(DEMO_SUITE).envs if env.split == "train"][:2]
    wrong = "def nothing():\n    return None\n"
    rows = [(a.id, a.reference), (a.id, wrong), (a.id, a.reference), (b.id, a.reference), (b.id, b.reference),
            (a.id, a.reference)]
    cfg = SandboxConfig(verify_duplicates_once=once)
    with make_sandbox(cfg) as box:
        scored = score(trajectories(rows), {a.id: a, b.id: b}, box, cfg)
    assert scored["reward"].tolist() == [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    copies = scored["sandbox_ms"].iloc[[0, 2, 5]]
    # one run shared by the three copies of (a, a.reference) when verified once; three runs (three timings) if not
    assert (copies.nunique() == 1) is once
    assert reward_stats(scored).sandbox_runs == 4
    if not usage_unaccounted():  # and what it used: one run's measure, or three (CPU time, in nanoseconds, differs)
        assert (scored["sandbox_cpu_s"].iloc[[0, 2, 5]].nunique() == 1) is once


def test_each_verification_carries_what_its_program_used_and_the_stats_sum_it_up():
    a = [env for env in load_suite(DEMO_SUITE).envs if env.split == "train"][0]
    big = a.reference + "\n" + ALLOCATE_100MB  # still right, and holds 100 MiB at import
    cfg = SandboxConfig()
    with make_sandbox(cfg) as box:
        scored = score(trajectories([(a.id, a.reference), (a.id, big)]), {a.id: a}, box, cfg)
    assert scored["reward"].tolist() == [1.0, 1.0]
    stats = reward_stats(scored)
    if why := usage_unaccounted():
        assert (scored[["sandbox_cpu_s", "sandbox_memory_peak_mb"]] == UNACCOUNTED).all().all(), why
        assert (stats.sandbox_cpu_p50_s, stats.sandbox_memory_peak_max_mb) == (0.0, 0.0)
        return
    plain, heavy = scored.itertuples()
    assert 0 < plain.sandbox_cpu_s < 1.0, plain
    assert plain.sandbox_memory_peak_mb < 40 < 100 < heavy.sandbox_memory_peak_mb, (plain, heavy)
    assert stats.sandbox_memory_peak_max_mb == heavy.sandbox_memory_peak_mb
    assert stats.sandbox_cpu_p50_s == pytest.approx((plain.sandbox_cpu_s + heavy.sandbox_cpu_s) / 2)


def test_each_row_carries_its_signals_and_the_metrics_log_each_layer_mean():
    a = [env for env in load_suite(DEMO_SUITE).envs if env.split == "train"][0]
    linted = dataclasses.replace(a, id="t/linted", reward={"layers": [{"signal": "tests", "weight": 0.9},
                                                                       {"signal": "lint", "weight": 0.1}]})
    unused = "import os\n" + a.reference
    cfg = SandboxConfig()
    with make_sandbox(cfg) as box:
        scored = score(trajectories([(a.id, a.reference), (linted.id, unused), (linted.id, a.reference)]),
                       {a.id: a, linted.id: linted}, box, cfg)
    assert [json.loads(text) for text in scored["signals"]] == [
        {"compiles": 1.0, "tests": 1.0}, {"compiles": 1.0, "lint": 0.0, "tests": 1.0},
        {"compiles": 1.0, "lint": 1.0, "tests": 1.0}]
    assert scored["reward"].tolist() == pytest.approx([1.0, 0.9, 1.0])
    metrics = reward_metrics(reward_stats(scored))
    layers = {name: value for name, value in metrics.items() if name.startswith("reward/layer/")}
    assert layers == {"reward/layer/compiles": 1.0, "reward/layer/lint": 0.5, "reward/layer/tests": 1.0}
    by_domain = reward_metrics(reward_stats(scored, domains={a.id: "python", linted.id: "linted"}))
    assert {name: value for name, value in by_domain.items() if name.startswith("reward/domain/")} == \
           pytest.approx({"reward/domain/python": 1.0, "reward/domain/linted": 0.95})
    assert not any(name.startswith("reward/domain/") for name in metrics)  # no domains given: none logged


def test_a_pair_scored_in_an_earlier_call_reuses_its_verdict_and_no_sandbox_runs_for_it():
    a, b = [env for env in load_suite(DEMO_SUITE).envs if env.split == "train"][:2]
    wrong = "def nothing():\n    return None\n"
    rows = [(a.id, a.reference), (a.id, wrong), (b.id, b.reference)]
    cfg = SandboxConfig()
    with make_sandbox(cfg) as box:
        first = score(trajectories(rows), {a.id: a, b.id: b}, box, cfg)
        assert VERDICTS.hits == 0 and len(VERDICTS) == 3
        again = score(trajectories(rows + [(b.id, wrong)]), {a.id: a, b.id: b}, box, cfg)
    assert VERDICTS.hits == 3  # the new pair (b, wrong) ran; the three others did not
    assert again["reward"].tolist() == first["reward"].tolist() + [0.0]
    # a reused verdict is the whole verdict, its run's measures included (as a copy in one batch shares them)
    assert again["sandbox_ms"].iloc[:3].tolist() == first["sandbox_ms"].tolist()
    assert reward_stats(again, cache_hits=3).sandbox_runs == 1
    assert reward_metrics(reward_stats(again, cache_hits=3))["reward/cache_hits"] == 3.0


@pytest.mark.parametrize("change", ["spec", "sandbox", "off", "every_copy"])
def test_a_changed_spec_or_sandbox_setting_or_a_cache_turned_off_verifies_again(change):
    a = [env for env in load_suite(DEMO_SUITE).envs if env.split == "train"][0]
    cfg = SandboxConfig()
    with make_sandbox(cfg) as box:
        first = score(trajectories([(a.id, a.reference)]), {a.id: a}, box, cfg)
        spec, later = a, cfg
        if change == "spec":  # its tests changed: the reference now fails one of them
            cases = [dict(case) for case in a.verifier["cases"]]
            cases[0]["expected"] = "never this"
            spec = dataclasses.replace(a, verifier={**a.verifier, "cases": cases})
        else:
            later = {"sandbox": dataclasses.replace(cfg, memory_mb=cfg.memory_mb - 1),
                     "off": dataclasses.replace(cfg, verdict_cache_entries=0),
                     "every_copy": dataclasses.replace(cfg, verify_duplicates_once=False)}[change]
        again = score(trajectories([(a.id, a.reference)]), {a.id: spec}, box, later)
    assert VERDICTS.hits == 0
    assert first["reward"].tolist() == [1.0]
    assert again["reward"].tolist() == ([pytest.approx(1 - 1 / len(a.verifier["cases"]))] if change == "spec"
                                        else [1.0])


def test_a_verdict_stopped_at_its_deadline_is_verified_again():
    a = [env for env in load_suite(DEMO_SUITE).envs if env.split == "train"][0]
    spin = f"def {a.entry_point}(*args):\n    while True:\n        pass\n"
    cfg = SandboxConfig(timeout_s=1.0)
    with make_sandbox(cfg) as box:
        for _ in range(2):
            scored = score(trajectories([(a.id, spin)]), {a.id: a}, box, cfg)
            assert scored["timed_out"].tolist() == [True]
    assert VERDICTS.hits == 0 and len(VERDICTS) == 0
