"""Verdicts kept across reward stages: a (spec, solution) pair verified once per process, however often it is sampled.

A policy that sharpens repeats itself across iterations, not only within one (``SandboxConfig.verify_duplicates_once``
shares a verdict among the copies of one batch): on the demo, 27% of the distinct (env, completion) pairs of the first
25 iterations had been verified in an earlier one, and 60-78% after iteration 30. Local ``pyflyte run`` executes every
task in one process, so the reward stages of a run (and its evaluations) share this cache the way they share the live
engine; on a cluster each task's pod starts with an empty one.

A pair's key is a digest of the env spec as loaded (a changed test, limit or reward layer is another key), of the
sandbox settings its execution ran under, and of the extracted solution. Only verdicts that say something about the
solution are kept: never an infra failure (``Verdict.excluded``) and never one stopped at a deadline
(``Verdict.hit_deadline``: on a loaded machine the load decides those as much as the solution does). A kept verdict
is reused whole, with the sandbox measures of the run it came from, as a copy in one batch is. The cache holds at
most ``SandboxConfig.verdict_cache_entries`` verdicts, the least recently used going first; 0 turns it off.

Example:
    >>> from posttrain.envs.verifiers.base import Verdict
    >>> cache = VerdictCache()
    >>> ok = Verdict(reward=1.0, passed=True, compiled=True, tests_passed=2, tests_total=2)
    >>> cache.put(("spec", "solution"), ok, entries=2)
    >>> cache.get(("spec", "solution")) is ok, cache.get(("spec", "other")), cache.hits, cache.misses
    (True, None, 1, 1)
    >>> late = Verdict(reward=0.0, passed=False, compiled=True, tests_passed=0, tests_total=2, timed_out=True)
    >>> cache.put(("spec", "slow"), late, entries=2)      # a deadline hit is not kept
    >>> cache.get(("spec", "slow")), len(cache)
    (None, 1)
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import asdict
from typing import Sequence

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import get_verifier, verify_many
from posttrain.envs.verifiers.base import Verdict


class VerdictCache:
    """A bounded least-recently-used map from pair keys to verdicts, with hit and miss counters (thread-safe)."""

    def __init__(self):
        self._verdicts: OrderedDict[tuple[str, str], Verdict] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._verdicts)

    def get(self, key: tuple[str, str]) -> Verdict | None:
        with self._lock:
            verdict = self._verdicts.get(key)
            if verdict is None:
                self.misses += 1
                return None
            self._verdicts.move_to_end(key)
            self.hits += 1
            return verdict

    def put(self, key: tuple[str, str], verdict: Verdict, entries: int) -> None:
        """Keep ``verdict`` unless it is an infra failure or a deadline hit; then hold at most ``entries``."""
        if verdict.excluded or verdict.hit_deadline or entries <= 0:
            return
        with self._lock:
            self._verdicts[key] = verdict
            self._verdicts.move_to_end(key)
            while len(self._verdicts) > entries:
                self._verdicts.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._verdicts.clear()
            self.hits = self.misses = 0


VERDICTS = VerdictCache()  # the process's: every reward stage and evaluation of a local run


def verify_cached(specs_and_solutions: Sequence[tuple[EnvSpec, str]], sandbox, cfg: SandboxConfig) -> list[Verdict]:
    """``verify_many`` of the pairs ``VERDICTS`` has no verdict for; the others get the kept one (in input order).
    With ``cfg.verdict_cache_entries`` 0 or ``cfg.verify_duplicates_once`` off (every sample verified), it is
    ``verify_many`` exactly. Host-only verifiers need no sandbox and are never kept."""
    if cfg.verdict_cache_entries <= 0 or not cfg.verify_duplicates_once:
        return verify_many(specs_and_solutions, sandbox, cfg)
    contexts: dict[int, str] = {}  # one digest per env, not per pair
    for spec, _ in specs_and_solutions:
        if id(spec) not in contexts and get_verifier(spec.verifier_kind).needs_sandbox:
            contexts[id(spec)] = context_digest(spec, cfg)
    keys = [(contexts[id(spec)], solution) if id(spec) in contexts else None for spec, solution in specs_and_solutions]
    verdicts = [VERDICTS.get(key) if key else None for key in keys]
    missing = [i for i, verdict in enumerate(verdicts) if verdict is None]
    for i, verdict in zip(missing, verify_many([specs_and_solutions[i] for i in missing], sandbox, cfg)):
        verdicts[i] = verdict
        if keys[i]:
            VERDICTS.put(keys[i], verdict, cfg.verdict_cache_entries)
    return verdicts


def context_digest(spec: EnvSpec, cfg: SandboxConfig) -> str:
    """What a verdict depends on besides the solution: the env spec as loaded and the sandbox settings.

    >>> from posttrain.envs.spec import EnvSpec
    >>> spec = EnvSpec(id="demo/x", prompt="p", reference="r",
    ...                verifier={"kind": "python_tests", "cases": [{"args": [1], "expected": 1}]})
    >>> context_digest(spec, SandboxConfig()) == context_digest(spec, SandboxConfig(timeout_s=3.0))
    False
    """
    text = json.dumps([asdict(spec), asdict(cfg)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
