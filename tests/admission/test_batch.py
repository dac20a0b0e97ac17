"""Admission's batches re-run a verdict that hit a deadline or failed on infra, once, after the batch: a test that
timed out because the machine was busy passes on its second run, and so does an env whose workspace setup timed out,
in the verifier or before a scripted agent episode; a solution that loops stays timed out (real bwrap sandboxes)."""

from __future__ import annotations

import time

import pytest

from posttrain.admission.agent_episodes import run_scripted
from posttrain.admission.batch import SandboxBatches
from posttrain.config import AdmissionConfig, SandboxConfig
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


def test_a_workspace_setup_that_timed_out_in_the_batch_is_judged_on_its_second_run(batches):
    busy_until = time.time() + 1.0  # the first run's setup stalls past its deadline (2 s, a third of 6); a rerun not
    stalls = f"sleep $(python3 -c 'import time; print(10 if time.time() < {busy_until} else 0)')"
    spec = EnvSpec(id="t/setup", prompt="p", reference="echo 1 > out.txt\n", kind="agent", runtime="bash",
                   setup=stalls, limits=Limits(timeout_s=6),
                   verifier={"kind": "workspace_tests",
                             "tests": [{"name": "out", "cmd": "cat out.txt", "stdout": "1"}]})
    [verdict] = batches.run("reproducibility", [(spec, spec.reference)], fresh=True)
    assert verdict.passed and not verdict.excluded, verdict.detail
    assert batches.reruns["reproducibility"] == 1
    assert batches.executions["reproducibility"] == 1


def test_an_agent_episode_whose_setup_timed_out_runs_again_after_the_others(batches):
    busy_until = time.time() + 1.0  # the first episode's setup stalls past the session's 2 s; the rerun's does not
    stalls = f"sleep $(python3 -c 'import time; print(10 if time.time() < {busy_until} else 0)')"
    spec = EnvSpec(id="t/agent_setup", prompt="Write 1 to out.txt, then submit.", reference="echo 1 > out.txt\n",
                   kind="agent", runtime="bash", setup=stalls, limits=Limits(timeout_s=2),
                   verifier={"kind": "workspace_tests",
                             "tests": [{"name": "out", "cmd": "cat out.txt", "stdout": "1"}]})
    calls = [{"name": "write_file", "arguments": {"path": "out.txt", "content": "1\n"}},
             {"name": "submit", "arguments": {}}]
    [verdict] = run_scripted(batches, "solvability", batches.box.inner, SandboxConfig(), AdmissionConfig(),
                             [(spec, calls)])
    assert verdict.passed and not verdict.excluded, verdict.detail
    assert batches.reruns["solvability"] >= 1
