"""A version saved without its training state is rebuilt by replaying its updates, bit for bit, or not at all.

``train.state_every``: a version that does not write its state (~7x the bf16 weights) records the samples its update
trained on, the RNG it continued with and its master weights' digest. ``replay.rebuild`` starts from the newest
written state (or the loop's start) and replays every update after it; the trainer it returns must hold what a
trainer that never stopped holds -- weights, Adam moments, step counts, RNG -- and the next update must end where
that trainer's ends. A record that does not reproduce, a missing ancestor or a pruned starting state give a fresh
optimizer on the version's exported weights, logged: never weights other than the version's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import fsspec
import pytest
import torch

from posttrain.config import TrainConfig
from posttrain.locations import local_copy
from posttrain.training.checkpoints import (
    PARENT,
    POLICY_META,
    PRUNED,
    REPLAY,
    STATE_META,
    TRAIN_STATE,
    WRITTEN,
    prune_train_states,
    read_state_meta,
    state_written,
)
from posttrain.training.replay import ReplayError, rebuild, replay_chain
from tests.training.test_checkpoints import _assert_same, _chain, _files, _optimizer_state, _samples

CFG = TrainConfig(micro_batch_size=4, learning_rate=1e-3, lr_warmup_steps=4)


def _unwritten(root, versions: range, written: set[int]) -> list:
    """``_chain``'s versions, those not in ``written`` turned into replay records (no state, a ``REPLAY`` file)."""
    dirs = _chain(root, versions)
    for n in versions:
        if n and n not in written:
            state = root / f"v{n}" / TRAIN_STATE
            for path in sorted(state.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            (state / REPLAY).write_bytes(b"samples")
            (state / STATE_META).write_text(json.dumps({"optimizer_steps": n, WRITTEN: False}))
    return dirs


@pytest.mark.unit
def test_pruning_passes_over_replay_records_and_keeps_the_written_states_a_replay_starts_from(tmp_path):
    dirs = _unwritten(tmp_path, range(8), written={3, 6})
    assert prune_train_states(dirs[5], keep=2) == []  # written: v3 only
    assert prune_train_states(dirs[7], keep=2) == []  # v6, v3: the two newest written states
    assert prune_train_states(dirs[7], keep=1) == [dirs[3]]
    assert PRUNED in read_state_meta(dirs[3])
    for n in (1, 2, 4, 5, 7):  # every replay record stays
        assert _files(dirs[n]) == {"model.safetensors", POLICY_META, f"{TRAIN_STATE}/{STATE_META}",
                                   f"{TRAIN_STATE}/{REPLAY}"}
        assert not state_written(read_state_meta(dirs[n]))


@pytest.mark.unit
def test_the_chain_runs_back_to_the_newest_written_state_or_the_start(tmp_path):
    dirs = _unwritten(tmp_path, range(7), written={2, 4})
    assert replay_chain(dirs[6]) == (dirs[4], [(dirs[5], read_state_meta(dirs[5])),
                                               (dirs[6], read_state_meta(dirs[6]))])
    assert replay_chain(dirs[4]) == (dirs[4], [])
    assert replay_chain(dirs[3])[0] == dirs[2]
    assert replay_chain(dirs[1]) == (dirs[0], [(dirs[1], read_state_meta(dirs[1]))])  # v0: a fresh optimizer
    assert prune_train_states(dirs[6], keep=1) == [dirs[2]]  # v2's state pruned: nothing to start v3's replay from
    with pytest.raises(ReplayError, match=r"the training state of .*v2, which the replay of .*v3 starts from, was "
                                          r"pruned \(keep_states=1 when v6 was saved\)"):
        replay_chain(dirs[3])
    for path in sorted((tmp_path / "v0").rglob("*"), reverse=True):  # the start of v1's replay is gone
        path.unlink() if path.is_file() else path.rmdir()
    with pytest.raises(ReplayError, match=r"the parent of .*v1, .*v0, is gone"):
        replay_chain(dirs[1])
    meta = json.loads((tmp_path / "v1" / POLICY_META).read_text())
    (tmp_path / "v1" / POLICY_META).write_text(json.dumps({**meta, PARENT: ""}))
    with pytest.raises(ReplayError, match=r"v1 records no parent"):
        replay_chain(dirs[1])


@pytest.mark.unit
def test_a_remote_versions_record_and_base_are_fetched_and_a_local_one_read_where_it_is(tmp_path):
    fs = fsspec.filesystem("memory")
    fs.pipe_file(f"/replay-{tmp_path.name}/v1/{TRAIN_STATE}/{REPLAY}", b"record")
    fs.pipe_file(f"/replay-{tmp_path.name}/v1/model.safetensors", b"weights")
    remote = f"memory:///replay-{tmp_path.name}/v1"
    assert (Path(local_copy(f"{remote}/{TRAIN_STATE}")) / REPLAY).read_bytes() == b"record"  # as _replay reads it
    whole = Path(local_copy(remote))  # as rebuild fetches its base
    assert sorted(p.relative_to(whole).as_posix() for p in whole.rglob("*") if p.is_file()) == \
        ["model.safetensors", f"{TRAIN_STATE}/{REPLAY}"]
    assert local_copy(str(tmp_path)) == str(tmp_path)


@pytest.fixture(params=["full", "lora"])
def cfg(request):
    return CFG if request.param == "full" else dataclasses.replace(CFG, lora_rank=4)


@pytest.fixture
def unwritten_versions(tiny_policy, tmp_path, cfg):
    """v1 and v2 saved by one trainer without their state, as a local run's live trainer saves them; v3 trained on
    by that trainer too: ``(v1, v2, what the trainer held before v3's update, v3's master weights)``."""
    from posttrain.training.trainer import PolicyTrainer

    trainer = PolicyTrainer(tiny_policy, cfg, reference_dir=tiny_policy if cfg.lora_rank else None)
    try:
        trainer.train_on(_samples(0))
        v1 = trainer.save(tmp_path / "v1", metadata={"version": 1, PARENT: str(tiny_policy)}, write_state=False)
        trainer.resume_from_memory()
        trainer.train_on(_samples(1))
        v2 = trainer.save(tmp_path / "v2", metadata={"version": 2, PARENT: str(v1)}, write_state=False)
        trainer.resume_from_memory()
        before_v3 = _optimizer_state(trainer)
        trainer.train_on(_samples(2))
        v3 = trainer.master_weights()
    finally:
        trainer.close()
    return v1, v2, before_v3, v3


@pytest.mark.integration
def test_a_version_without_its_state_is_replayed_to_the_state_of_a_trainer_that_never_stopped(unwritten_versions,
                                                                                              tiny_policy, cfg):
    v1, v2, before_v3, v3 = unwritten_versions
    for version in (v1, v2):
        assert not (version / TRAIN_STATE / "state").exists()  # no optimizer written, only the replay record
        assert sum(p.stat().st_size for p in (version / TRAIN_STATE).rglob("*") if p.is_file()) < 50_000
    assert read_state_meta(v2)["optimizer_steps"] == before_v3["global_steps"] > 0

    torch.rand(11)  # the process's RNG moved on: the replay puts back the one the trainer continued with
    rebuilt = rebuild(v2, cfg, reference_dir=tiny_policy if cfg.lora_rank else None)
    try:
        _assert_same(_optimizer_state(rebuilt), before_v3)
        rebuilt.train_on(_samples(2))
        assert all(torch.equal(w, v3[n]) for n, w in rebuilt.master_weights().items())
    finally:
        rebuilt.close()


@pytest.mark.integration
@pytest.mark.parametrize("cfg", [CFG], ids=["full"])
def test_a_record_that_does_not_reproduce_gives_a_fresh_optimizer_on_the_versions_weights(unwritten_versions,
                                                                                          cfg, caplog):
    from safetensors.torch import load_file

    v1, v2, _, _ = unwritten_versions
    record = torch.load(v1 / TRAIN_STATE / REPLAY, weights_only=True)
    record["samples"]["advantage"][0] *= 2  # the update it replays is not the one that wrote v1
    torch.save(record, v1 / TRAIN_STATE / REPLAY)
    caplog.set_level(logging.INFO)
    rebuilt = rebuild(v2, cfg)
    try:
        state = _optimizer_state(rebuilt)
        weights = rebuilt.master_weights()
    finally:
        rebuilt.close()
    assert "replaying the update that wrote" in caplog.text
    assert "reached other weights" in caplog.text
    assert f"fresh optimizer from the exported weights of {v2}" in caplog.text
    assert state["global_steps"] == 0
    exported = load_file(v2 / "model.safetensors")
    assert all(torch.equal(weights[n], t.float()) for n, t in exported.items())


@pytest.mark.unit
def test_a_local_single_process_run_writes_no_state_and_every_other_update_does():
    from tasks.update import writes_state

    assert [writes_state(TrainConfig(state_every=3), v, 1) for v in range(1, 7)] == [False, False, True] * 2
    assert writes_state(TrainConfig(), 1, world_size=1)  # outside a local Flyte execution: as a task pod
    assert writes_state(TrainConfig(), 1, world_size=2)  # data parallel: ranks are started anew per update
    from flytekit import FlyteContextManager
    from flytekit.core.context_manager import ExecutionState

    context = FlyteContextManager.current_context()
    local = context.with_execution_state(context.execution_state.with_params(
        mode=ExecutionState.Mode.LOCAL_WORKFLOW_EXECUTION))
    with FlyteContextManager.with_context(local):
        assert not writes_state(TrainConfig(), 1, world_size=1)  # the live trainer carries it
        assert writes_state(TrainConfig(), 1, world_size=2)
        assert writes_state(TrainConfig(state_every=1), 1, world_size=1)
