"""What the admission-check tests share: verdicts of each kind and a small consistent ``python_tests`` spec."""

from __future__ import annotations

from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers.base import Verdict

PASS = Verdict(reward=1.0, passed=True, compiled=True, tests_passed=4, tests_total=4, exit_code=0,
               detail="4/4 cases passed")
FAIL = Verdict(reward=0.0, passed=False, compiled=True, tests_passed=0, tests_total=4, exit_code=0,
               detail="0/4 cases passed; case 0: f(*[1]) returned 5, expected 2")
PART = Verdict(reward=0.75, passed=False, compiled=True, tests_passed=3, tests_total=4, exit_code=0,
               detail="3/4 cases passed; case 2: ...")
INFRA = Verdict(reward=0.0, passed=False, compiled=False, tests_passed=0, tests_total=4,
                infra_error="bwrap: cannot start", detail="infra: bwrap: cannot start")


def spec(**changes) -> EnvSpec:
    base = dict(id="t/add_1", prompt="# Write a function add_1(x) that returns x plus 1.\n", entry_point="add_1",
                reference="def add_1(x):\n    return x + 1\n",
                verifier={"kind": "python_tests", "cases": [{"args": [x], "expected": x + 1} for x in (0, 1, 5)]},
                source="t/add_1.yaml")
    return EnvSpec(**{**base, **changes})
