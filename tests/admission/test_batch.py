"""Admission's batches re-run a verdict that hit a deadline, once, after the batch: a test that timed out because the
machine was busy passes on its second run; a solution that loops stays timed out (real bwrap sandboxes)."""

from __future__ import annotations

import time

import pytest

from posttrain.admission.batch import SandboxBatches
from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec, Limits
from posttrain.sandbox import make_sandbox

pytestmark = pytest.mark.unit


def env(asserts: list[str]) -> EnvSpec:
    return EnvSpec(id="t/slow", prompt="p", entry_point="f", reference="def f():\n    return 1\n",
                   verifier={"kind": "python_asserts", "asserts": asserts, "test_timeout_s": 2},
                   limits=Limits(timeout_s=10))


@pytest.fixture(scope="module")
def batches():
    box = make_sandbox("bwrap")
    yield SandboxBatches(box, SandboxConfig())
    box.close()


def test_a_test_that_ran_out_of_time_in_the_batch_is_judged_on_its_second_run(batches):
    busy_until = time.time() + 1.5  # the first run's test stalls past its 2 s deadline; a run after the batch does not
    slow = ("import time\n"
            f"def f():\n    time.sleep(10 if time.time() < {busy_until} else 0)\n    return 1\n")
    loops = "def f():\n    while True:\n        pass\n"
    first, looping = batches.run("solvability", [(env(["assert f() == 1"]), slow),
                                                 (env(["assert f() == 1"]), loops)], fresh=True)
    assert first.passed
    assert not first.hit_deadline
    assert not looping.passed
    assert looping.tests_timed_out == 1
    assert looping.hit_deadline
    assert batches.reruns["solvability"] == 2
    assert batches.executions["solvability"] == 2


def test_a_verdict_within_its_deadlines_is_not_run_again(batches):
    [wrong] = batches.run("coverage", [(env(["assert f() == 2"]), "def f():\n    return 1\n")])
    assert not wrong.passed
    assert not wrong.hit_deadline
    assert batches.reruns["coverage"] == 0
    assert batches.executions["coverage"] == 1
