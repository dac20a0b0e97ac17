"""The vLLM general plugin: registered as an entry point, and it sets the idle spin of vLLM's queue readers only
where ``POSTTRAIN_VLLM_BUSY_LOOP_S`` asks for it."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from posttrain.rollout import vllm_plugin

pytestmark = pytest.mark.unit
shm_broadcast = pytest.importorskip("vllm.distributed.device_communicators.shm_broadcast",
                                    reason="vLLM is not installed (the cpu or gpu extra)")


@pytest.fixture
def spin_defaults():
    saved = shm_broadcast.SpinCondition.__init__.__defaults__
    yield
    shm_broadcast.SpinCondition.__init__.__defaults__ = saved


def test_registered_for_every_vllm_process():
    [plugin] = [e for e in entry_points(group="vllm.general_plugins") if e.name == "posttrain_idle_spin"]
    assert plugin.load() is vllm_plugin.configure_idle_spin


def test_sets_the_spin_only_when_asked(monkeypatch, spin_defaults):
    monkeypatch.delenv(vllm_plugin.ENV, raising=False)
    before = shm_broadcast.SpinCondition.__init__.__defaults__
    vllm_plugin.configure_idle_spin()
    assert shm_broadcast.SpinCondition.__init__.__defaults__ == before
    monkeypatch.setenv(vllm_plugin.ENV, "0.01")
    vllm_plugin.configure_idle_spin()
    assert shm_broadcast.SpinCondition.__init__.__defaults__ == (0.01,)
