"""The live trainer continues from memory exactly where a trainer rebuilt from the saved version would."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posttrain.config import TrainConfig
from posttrain.training import live
from posttrain.training.trainer import PolicyTrainer
from tests.training.test_checkpoints import _optimizer_state, _samples

pytestmark = pytest.mark.integration

CFG = TrainConfig(micro_batch_size=4, learning_rate=1e-3, lr_warmup_steps=4)


@pytest.fixture(autouse=True)
def _no_live_trainer_left():
    live.shutdown()
    yield
    live.shutdown()


def test_the_next_update_reuses_the_trainer_and_ends_where_a_rebuilt_one_ends(tiny_policy, tmp_path):
    first = live.acquire(tiny_policy, CFG)
    first.train_on(_samples(0))
    v1 = first.save(tmp_path / "live-v1", metadata={"version": 1})
    torch.rand(7)  # other work in the process moves the global RNG between updates
    second = live.acquire(v1, CFG)
    assert second is first
    from_memory = _optimizer_state(second)
    second.train_on(_samples(1))
    live_weights = second.master_weights()

    rebuilt = PolicyTrainer(v1, CFG)
    try:
        from_disk = _optimizer_state(rebuilt)
        rebuilt.train_on(_samples(1))
        rebuilt_weights = rebuilt.master_weights()
    finally:
        rebuilt.close()
    assert torch.equal(from_memory["rng"], from_disk["rng"])
    assert from_memory["epoch_seed"] == from_disk["epoch_seed"]
    assert from_memory["global_steps"] == from_disk["global_steps"] == 2
    assert all(torch.equal(w, rebuilt_weights[n]) for n, w in live_weights.items())


def test_any_other_start_builds_a_new_trainer(tiny_policy, tmp_path):
    first = live.acquire(tiny_policy, CFG)
    assert live.acquire(tiny_policy, CFG) is not first  # v0 was not saved by it: rebuilt from disk
    second = live.acquire(tiny_policy, CFG)
    v1 = second.save(tmp_path / "v1")
    assert live.acquire(v1, dataclasses.replace(CFG, learning_rate=2e-3)) is not second  # other settings
    third = live.acquire(tiny_policy, CFG)
    v1 = third.save(tmp_path / "v1-again")
    assert live.acquire(v1, dataclasses.replace(CFG, carry_train_state=False)) is not third


def test_a_discarded_trainer_is_not_reused(tiny_policy, tmp_path):
    trainer = live.acquire(tiny_policy, CFG)
    v1 = trainer.save(tmp_path / "v1")
    live.discard(trainer)
    assert live.acquire(v1, CFG) is not trainer


def test_a_trainer_built_in_the_background_makes_the_update_a_trainer_built_there_would(tiny_policy):
    live.prestart(tiny_policy, CFG).join()
    built = live._prestarted[1]
    torch.rand(7)  # the process draws from torch's global RNG while the build waits for its update
    prestarted = live.acquire(tiny_policy, CFG)
    assert prestarted is built and live._prestarted is None  # taken: it serves one update
    rng_after = torch.get_rng_state()
    prestarted.train_on(_samples(0))
    background = prestarted.master_weights()

    built_here = PolicyTrainer(tiny_policy, CFG)
    try:
        assert torch.equal(torch.get_rng_state(), rng_after)
        built_here.train_on(_samples(0))
        assert all(torch.equal(w, built_here.master_weights()[n]) for n, w in background.items())
    finally:
        built_here.close()


def test_a_trainer_built_in_the_background_for_another_start_is_closed_not_used(tiny_policy, tmp_path):
    live.prestart(tiny_policy, CFG)
    other = live.acquire(tiny_policy, dataclasses.replace(CFG, learning_rate=2e-3))  # waits for the build
    assert other.cfg.learning_rate == 2e-3
    v1 = other.save(tmp_path / "v1")
    live.prestart(v1, CFG)
    live.shutdown()  # waits for the build, then closes it: nothing is left for a later update
    assert live.acquire(v1, CFG) is not other
    assert live._prestarted is None and not live._building.is_alive()


def test_a_failed_background_build_leaves_the_update_to_build_and_raise(tmp_path, caplog):
    live.prestart(tmp_path / "no-such-policy", CFG).join()
    assert "background trainer build failed" in caplog.text
    with pytest.raises(OSError):
        live.acquire(tmp_path / "no-such-policy", CFG)
