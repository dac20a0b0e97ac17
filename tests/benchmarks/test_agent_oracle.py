"""``benchmarks/agent_oracle.py`` on the demo policy's tokenizer (a base model: no chat template of its own) runs its
episodes in the agent template; the oracle solves and the no-op does not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_the_oracle_benchmark_runs_on_a_base_model_tokenizer(tiny_policy):
    from agent_oracle import run_suite

    result = run_suite("bwrap-warm", tokenizer_dir=str(tiny_policy), limit=2)
    assert result["oracle"]["envs"] == 2
    assert result["oracle"]["solve_rate"] == 1.0
    assert result["noop"]["solve_rate"] == 0.0
    assert result["oracle"]["infra_errors"] == 0
