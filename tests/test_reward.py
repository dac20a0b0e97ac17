"""The reward stage's ``score``: every completion gets its env's verdict; copies of one completion share one run."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from posttrain.config import DEMO_SUITE, SandboxConfig
from posttrain.envs.suite import load_suite
from posttrain.reward import reward_stats, score
from posttrain.sandbox import make_sandbox

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
