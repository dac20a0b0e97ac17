"""Admission's sandbox work: one large ``verify_many`` batch per check, a shared verdict cache, a progress bar.

Within one admission run, the verdict of a (env, solution) pair is computed once and reused: a policy sample equal
to the reference reuses the solvability run, the identity or a no-op sample reuses a probe's. This is sound because
admission only uses cached verdicts for envs whose reference passed the reproducibility check (their verdicts do
not vary between runs); the reproducibility repeats themselves are always run afresh (``fresh=True``).
Infra verdicts are never cached.

A verdict that hit a deadline (the execution's, a solution phase's or one test's: ``Verdict.hit_deadline``) or
failed on infra (a sandbox that did not start, a workspace setup that timed out) is run once more after the batch,
with the other such runs only, and the second verdict kept: in a batch of hundreds of concurrent executions on a
loaded machine, a test, a setup or a reference that needs a fraction of its time alone can run out of it (a
multi-domain demo run rejected a two-step terminal reference as "2/3 tests passed", its second step undone, that
passes 30 of 30 runs alone), and admission would then reject a sound env (a reference that "failed", a guard
label "wrong", a reproducibility "flake", an env it could not run). A solution that loops stays timed out and a
setup that cannot work stays infra, at the cost of one more run each per check.
``reruns`` counts them per check (``executions`` counts first runs only, so it does not vary with the load).

Example:
    >>> from posttrain.config import DEMO_SUITE, SandboxConfig
    >>> from posttrain.envs.suite import load_suite
    >>> from posttrain.sandbox import make_sandbox
    >>> spec = load_suite(DEMO_SUITE).envs[0]
    >>> batches = SandboxBatches(make_sandbox("bwrap"), SandboxConfig())               # doctest: +SKIP
    >>> [v.passed for v in batches.run("solvability", [(spec, spec.reference)] * 2)]  # doctest: +SKIP
    [True, True]
    >>> batches.executions["solvability"]                                               # doctest: +SKIP
    1
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Sequence

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import verify_many
from posttrain.envs.verifiers.base import Verdict
from posttrain.progress import progress as progress_bar
from posttrain.timing import timed


class _CountingSandbox:
    """Passes runs through to a sandbox and advances the progress bar once per execution."""

    def __init__(self, inner, bar):
        self.inner, self.bar, self.name = inner, bar, inner.name
        self._lock = threading.Lock()
        self.budget = 0  # bar steps this batch may still take (retries do not over-count)

    def run(self, execution):
        result = self.inner.run(execution)
        with self._lock:
            if self.budget > 0:
                self.budget -= 1
                self.bar.update(1)
        return result

    def close(self) -> None:
        self.inner.close()


class SandboxBatches:
    """Runs (spec, solution) pairs through ``verify_many`` per check; counts executions and seconds per check."""

    def __init__(self, sandbox, cfg: SandboxConfig, progress: bool = False, desc: str = "admission"):
        self.cfg = cfg
        self.bar = progress_bar(total=0, desc=desc, unit="run", enabled=progress)  # a live bar, or lines in a log
        self.box = _CountingSandbox(sandbox, self.bar)
        self.cache: dict[tuple[str, str], Verdict] = {}
        self.seconds: dict[str, float] = defaultdict(float)
        self.executions: dict[str, int] = defaultdict(int)
        self.reruns: dict[str, int] = defaultdict(int)  # deadline-hit and infra verdicts run again after their batch

    def time(self, check: str):
        """A context manager adding wall seconds to ``check`` (host-side work such as consistency or sampling)."""
        return timed(check, into=self.seconds)

    def run(self, check: str, pairs: Sequence[tuple[EnvSpec, str]], fresh: bool = False) -> list[Verdict]:
        """Verdicts for ``pairs`` in order. Cached pairs are not re-run and duplicates run once, unless ``fresh``."""
        keys = [(spec.id, solution) for spec, solution in pairs]
        if fresh:
            todo = list(range(len(pairs)))
        else:
            first: dict[tuple[str, str], int] = {}
            for i, key in enumerate(keys):
                if key not in self.cache:
                    first.setdefault(key, i)
            todo = list(first.values())
        with self.time(check):
            self.bar.set_description(check)
            self.bar.total += len(todo)
            self.bar.refresh()
            self.box.budget = len(todo)
            verdicts = verify_many([pairs[i] for i in todo], self.box, self.cfg) if todo else []
            self.bar.update(self.box.budget)  # host-scored verifiers never reach the sandbox
            self.box.budget = 0
            verdicts = self._rerun_stalled(check, [pairs[i] for i in todo], verdicts)
        self.executions[check] += len(todo)
        fresh_verdicts: dict[int, Verdict] = dict(zip(todo, verdicts))
        this_batch: dict[tuple[str, str], Verdict] = {}
        for i, verdict in fresh_verdicts.items():
            this_batch.setdefault(keys[i], verdict)
            if not verdict.excluded:
                self.cache.setdefault(keys[i], verdict)
        return [fresh_verdicts.get(i) or this_batch.get(keys[i]) or self.cache[keys[i]] for i in range(len(pairs))]

    def _rerun_stalled(self, check: str, pairs: Sequence[tuple[EnvSpec, str]],
                       verdicts: list[Verdict]) -> list[Verdict]:
        """``verdicts`` with those that hit a deadline or failed on infra replaced by a second run of theirs, made
        once the batch is over (the second verdict is kept, whatever it is)."""
        again = [i for i, verdict in enumerate(verdicts) if verdict.hit_deadline or verdict.excluded]
        if not again:
            return verdicts
        self.reruns[check] += len(again)
        replaced = list(verdicts)
        for i, verdict in zip(again, verify_many([pairs[i] for i in again], self.box, self.cfg)):
            replaced[i] = verdict
        return replaced

    def close(self) -> None:
        self.bar.close()
