"""Settled envs sit out of the rollout's pick for a while (``rollout.settled_cooldown``).

A train env is *settled* at iteration i when its group in iteration i's scored rollout had no reward variance: every
sample solved it, or none did (``dynamic_sampling.group_signal``: ``zero_variance``). GRPO's advantages of such a
group are all zero, so it gave the update nothing, and as the policy learns most groups end that way: on the demo
~70% of them by iteration 100, when the update is down to a few optimizer steps a round. Leaving a settled env out
of the next ``cooldown`` picks fills the batch with envs that still carry a signal, without the extra sampling and
scoring rounds of dynamic sampling (``rollout.dynamic_sampling``); after the cooldown it is picked as any other, so
an env the policy unlearns comes back. When fewer unsettled envs are left than the batch needs, the ones that
settled longest ago fill it.

The history (per env: the last iteration that rolled it out, and whether its group settled) is an ``EnvHistory``
table that each iteration's reward task writes from its first scored round and the next rollout reads
(``workflows.tiers``), so a resumed run picks the same envs as the run it resumes. An env whose every sample hit an
infra error is not settled: nothing was learned about it.

Example (iteration 3 rolled out ``a`` (all solved) and ``b`` (rewards differ)):
    >>> scored = pd.DataFrame({"env_id": ["a", "a", "b", "b"], "group_id": ["it3/a"] * 2 + ["it3/b"] * 2,
    ...                        "reward": [1.0, 1.0, 0.0, 1.0], "infra_error": [""] * 4})
    >>> history = record(None, scored, iteration=3)
    >>> history.values.tolist()
    [['a', 3, True], ['b', 3, False]]
    >>> resting(history, iteration=4, cooldown=2), resting(history, iteration=6, cooldown=2)
    ({'a': 3}, {})

The pick that leaves them out is ``posttrain.rollout.collect.pick_envs``.
"""

from __future__ import annotations

from typing import Optional

import pandas as pd

from posttrain.rollout.dynamic_sampling import ZERO_VARIANCE, group_signal
from posttrain.schemas import EnvHistory


def record(history: Optional[pd.DataFrame], scored: Optional[pd.DataFrame], iteration: int) -> pd.DataFrame:
    """``history`` (an EnvHistory table, or None: nothing yet) with iteration ``iteration``'s groups of ``scored``
    (its Scored rows, or None) written over their envs' rows; one row per env, sorted by env id."""
    rows = {} if history is None else {r.env_id: (r.iteration, r.settled) for r in history.itertuples(index=False)}
    if scored is not None and len(scored):
        env_of = dict(zip(scored["group_id"], scored["env_id"]))
        for group, signal in group_signal(scored).items():
            rows[env_of[group]] = (iteration, signal == ZERO_VARIANCE)
    table = pd.DataFrame([(env_id, *rows[env_id]) for env_id in sorted(rows)],
                         columns=["env_id", "iteration", "settled"])
    return EnvHistory.validate(table)


def resting(history: Optional[pd.DataFrame], iteration: int, cooldown: int) -> dict[str, int]:
    """The envs that sit out iteration ``iteration``'s pick: env id -> the iteration it settled at, for every env
    that settled within the last ``cooldown`` iterations (none when ``cooldown`` is 0)."""
    if history is None or cooldown <= 0:
        return {}
    return {r.env_id: int(r.iteration) for r in history.itertuples(index=False)
            if r.settled and iteration - r.iteration <= cooldown}
