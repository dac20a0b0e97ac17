"""The process's live sandbox (``posttrain.sandbox.live``): the tasks of a local run share one backend and its warm
slots, per settings, until the workflow releases it; each execution still runs in a sandbox of its own."""

from __future__ import annotations

import shutil

import pytest

from posttrain.config import DEMO_SUITE, LoopConfig, SandboxConfig
from posttrain.envs.suite import load_suite
from posttrain.envs.table import envs_to_table
from posttrain.sandbox import live
from posttrain.sandbox.base import Execution
from tests.test_reward import trajectories

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")]


@pytest.fixture(autouse=True)
def _no_live_sandbox_left():
    live.shutdown()
    yield
    live.shutdown()


def slot_processes(box) -> set:
    """The bwrap processes of the warm slots ``box`` keeps idle."""
    return {slot.proc for slot in box._idle}


def test_equal_settings_share_the_backend_and_other_settings_replace_it():
    box = live.acquire(SandboxConfig())
    leave = Execution(files={"m.py": "open('/tmp/left', 'w').write('x')\nprint(1)"}, command=["python3", "m.py"])
    look = Execution(files={"m.py": "import os\nprint(os.path.exists('/tmp/left'))"}, command=["python3", "m.py"])
    assert box.run(leave).stdout == "1\n"
    slots = slot_processes(box)
    assert len(slots) == 1
    assert live.acquire(SandboxConfig()) is box
    assert box.run(look).stdout == "False\n"  # the same slot, a fresh sandbox: nothing of the last execution
    assert slot_processes(box) == slots

    other = live.acquire(SandboxConfig(timeout_s=5))
    assert other is not box and live.live_sandbox() is other
    assert all(proc.wait(timeout=10) is not None for proc in slots)  # the old backend's slots are stopped
    other.run(look)
    kept = slot_processes(other)
    live.shutdown()
    assert live.live_sandbox() is None
    assert all(proc.wait(timeout=10) is not None for proc in kept)


def test_the_reward_tasks_of_a_local_run_share_the_slots_until_the_workflow_releases_them(flyte_cache):
    from tasks.reward import reward
    from tasks.rollout import release_engines

    env_a, env_b = [env for env in load_suite(DEMO_SUITE).envs if env.split == "train"][:2]
    envs, cfg = envs_to_table([env_a, env_b]), SandboxConfig()
    first = reward(trajectories=trajectories([(env_a.id, env_a.reference)]), envs=envs, sandbox=cfg)
    box = live.live_sandbox()
    slots = slot_processes(box)
    assert slots
    second = reward(trajectories=trajectories([(env_b.id, env_b.reference), (env_b.id, "def f():\n    pass\n")]),
                    envs=envs, sandbox=cfg)
    assert first.scored["reward"].tolist() == [1.0] and second.scored["reward"].tolist() == [1.0, 0.0]
    assert second.metrics["sandbox/runs"] == 2
    assert live.live_sandbox() is box and slots <= slot_processes(box)  # no slot stopped between the tasks

    release_engines(cfg=LoopConfig())
    assert live.live_sandbox() is None
    assert all(proc.wait(timeout=10) is not None for proc in slot_processes(box) | slots)
