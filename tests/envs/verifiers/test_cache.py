"""``VerdictCache``: bounded, least recently used first out, and never keeping what says nothing about a solution."""

from __future__ import annotations

import dataclasses

import pytest

from posttrain.config import DEMO_SUITE, SandboxConfig
from posttrain.envs.suite import load_suite
from posttrain.envs.verifiers.base import Verdict
from posttrain.envs.verifiers.cache import VerdictCache, context_digest

pytestmark = pytest.mark.unit

PASSED = Verdict(reward=1.0, passed=True, compiled=True, tests_passed=3, tests_total=3)


def test_it_holds_at_most_its_entries_and_drops_the_least_recently_used():
    cache = VerdictCache()
    for name in "abc":
        cache.put(("ctx", name), PASSED, entries=2)
    assert len(cache) == 2 and cache.get(("ctx", "a")) is None
    cache.get(("ctx", "b"))  # b used last: c goes first
    cache.put(("ctx", "d"), PASSED, entries=2)
    assert cache.get(("ctx", "b")) is PASSED and cache.get(("ctx", "c")) is None
    assert (cache.hits, cache.misses) == (2, 2)


@pytest.mark.parametrize("verdict", [
    dataclasses.replace(PASSED, reward=0.0, passed=False, infra_error="sandbox did not start"),
    dataclasses.replace(PASSED, reward=0.0, passed=False, timed_out=True),
    dataclasses.replace(PASSED, reward=2 / 3, passed=False, tests_passed=2, tests_timed_out=1),
], ids=["infra", "execution deadline", "test deadline"])
def test_infra_failures_and_deadline_hits_are_not_kept(verdict):
    cache = VerdictCache()
    cache.put(("ctx", "solution"), verdict, entries=10)
    assert len(cache) == 0 and cache.get(("ctx", "solution")) is None


def test_nothing_is_kept_with_no_entries_and_clear_empties_it():
    cache = VerdictCache()
    cache.put(("ctx", "a"), PASSED, entries=0)
    assert len(cache) == 0
    cache.put(("ctx", "a"), PASSED, entries=1)
    cache.get(("ctx", "a"))
    cache.clear()
    assert (len(cache), cache.hits, cache.misses) == (0, 0, 0)


def test_the_context_changes_with_the_spec_and_the_sandbox_settings():
    spec = load_suite(DEMO_SUITE).envs[0]
    base = context_digest(spec, SandboxConfig())
    assert context_digest(spec, SandboxConfig()) == base
    assert context_digest(dataclasses.replace(spec, reference=spec.reference + "\n"), SandboxConfig()) != base
    assert context_digest(spec, SandboxConfig(memory_mb=256)) != base
