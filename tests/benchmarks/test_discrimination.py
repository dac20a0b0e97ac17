"""``benchmarks/discrimination.py`` reads admission's discrimination rows as they are written: each env's two pass
rates, its class, the verdict at the run's min_gap and the rejections at other thresholds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from posttrain.admission.discrimination import discrimination_row
from posttrain.admission.report import details_frame
from tests.admission.common import FAIL, INFRA, PASS

pytestmark = pytest.mark.unit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_envs_are_classed_by_their_rates_and_counted_per_threshold():
    from discrimination import summarize

    plan = {  # env: (weak verdicts, strong verdicts)
        "t/unsolved": ([FAIL] * 4, [FAIL] * 4), "t/solved": ([PASS] * 4, [PASS] * 4),
        "t/tie": ([PASS, FAIL] * 2, [FAIL, PASS] * 2), "t/regressed": ([PASS] * 4, [PASS, PASS, PASS, FAIL]),
        "t/improved": ([FAIL] * 4, [PASS, FAIL, FAIL, FAIL]), "t/infra": ([INFRA] * 4, [PASS] * 4),
    }
    rows = [discrimination_row(env, 0.1, weak, strong, "demo", "models:/posttrain-policy@candidate")
            for env, (weak, strong) in plan.items()]
    splits = {env: "eval" if env == "t/improved" else "train" for env in plan}
    out = summarize(details_frame(rows), splits, min_gap=0.1, examples=1)
    assert (out["envs"], out["infra"], out["admitted"], out["rejected"]) == (5, 1, 1, 4)
    assert out["classes"] == {"both_unsolved": 1, "both_solved": 1, "tie_between": 1, "regressed": 1, "improved": 1}
    assert out["rejected_by_class"] == {**out["classes"], "improved": 0}
    assert out["rejected_by_split"] == {"train": 4}
    assert out["rejected_at"]["0"] == 1  # only the regression
    assert out["rejected_at"]["0.25"] == 4  # a gap of 0.25 passes: margin 0
    assert out["rejected_at"]["0.5"] == 5
    assert out["examples"]["tie_between"] == [{"env_id": "t/tie", "split": "train", "weak": 0.5, "strong": 0.5,
                                               "gap": 0.0, "admitted": False}]
