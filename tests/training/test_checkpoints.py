"""Training state is carried, not rebuilt: each ZeRO stage (0-3) trains, saves its state beside the HF weights, and
an update resumed from that version continues the optimizer bitwise (Adam moments, step count, LR warmup, RNG).

An update resumed from v1 must end exactly where one trainer running both updates in one process ends. The weights
are exported in the checkpoint's own dtype (a bf16 model's versions are bf16 files), and that loses nothing between
updates: the fp32 master copy comes back from the state. Only the newest states are kept (``prune_train_states``):
older versions keep their weights, and an update from one of them starts a fresh optimizer.
"""

from __future__ import annotations

import json
import logging
import shutil

import fsspec
import pytest
import torch

from posttrain.config import TrainConfig
from posttrain.training.checkpoints import (
    PARENT,
    POLICY_META,
    PRUNED,
    STATE_META,
    TRAIN_STATE,
    CheckpointError,
    checkpoint_dtype,
    load_train_state,
    prune_train_states,
    read_state_meta,
)
from posttrain.training.samples import TrainSample

LR, WARMUP = 1e-3, 4


def _samples(seed: int) -> list[TrainSample]:
    """Eight token sequences of varied lengths in two reward groups (every advantage nonzero)."""
    gen = torch.Generator().manual_seed(seed)
    samples = []
    for i in range(8):
        prompt = [1] + torch.randint(3, 300, (3 + i % 3,), generator=gen).tolist()
        completion = torch.randint(3, 300, (2 + i % 4,), generator=gen).tolist()
        samples.append(TrainSample(prompt, completion, [-6.0] * len(completion), (-1.0) ** i, f"g{i // 4}"))
    return samples


def _optimizer_state(trainer) -> dict:
    """Everything an optimizer run continues from, cloned: the torch optimizer's params (the fp32 master copy under
    bf16 / ZeRO) and per-param state, its LR, DeepSpeed's and the scheduler's step counts, shuffle seed, torch RNG."""
    engine = trainer.engine
    inner = getattr(engine.optimizer, "optimizer", engine.optimizer)  # the torch AdamW under any ZeRO wrapper
    params = [p for group in inner.param_groups for p in group["params"]] or \
        engine.optimizer.fp32_partitioned_groups_flat  # ZeRO-3 hands its flat fp32 groups to AdamW only to step
    return {"params": [p.detach().clone() for p in params],
            "state": [{k: v.clone() for k, v in inner.state[p].items()} for p in params],
            "lr": [group["lr"] for group in inner.param_groups],
            "global_steps": engine.global_steps, "scheduler_step": engine.lr_scheduler.last_epoch,
            "epoch_seed": trainer._epoch_seed, "rng": torch.get_rng_state()}


def _assert_same(a: dict, b: dict) -> None:
    assert len(a["params"]) == len(b["params"]) > 0
    assert all(torch.equal(x, y) for x, y in zip(a["params"], b["params"]))
    for x, y in zip(a["state"], b["state"]):
        assert x.keys() == y.keys() == {"step", "exp_avg", "exp_avg_sq"}
        assert all(torch.equal(x[k], y[k]) for k in x)
    assert {k: v for k, v in a.items() if k not in ("params", "state", "rng")} == \
        {k: v for k, v in b.items() if k not in ("params", "state", "rng")}
    assert torch.equal(a["rng"], b["rng"])


@pytest.mark.integration
@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_an_update_resumed_from_a_saved_version_continues_the_optimizer_bitwise(tiny_policy, tmp_path, zero_stage):
    from transformers import AutoModelForCausalLM

    from posttrain.training.trainer import PolicyTrainer

    cfg = TrainConfig(micro_batch_size=4, learning_rate=LR, zero_stage=zero_stage, lr_warmup_steps=WARMUP)
    continuous = PolicyTrainer(tiny_policy, cfg)  # v0 carries no state: a fresh optimizer
    try:
        assert continuous.engine.global_steps == 0
        assert continuous.engine.get_lr() == [LR / WARMUP]
        continuous.train_on(_samples(0))  # 2 micro batches: 2 optimizer steps
        saved = _optimizer_state(continuous)
        v1 = continuous.save(tmp_path / "v1", metadata={"version": 1})
        continuous.train_on(_samples(1))
        both = continuous.master_weights()
        lr_after_both = continuous.engine.get_lr()
    finally:
        continuous.close()
    exported = AutoModelForCausalLM.from_pretrained(v1, dtype=torch.float32).state_dict()
    assert saved["global_steps"] == 2
    assert saved["lr"] == [pytest.approx(3 * LR / WARMUP)]  # warmup step 3 is next

    resumed = PolicyTrainer(v1, cfg)
    try:
        restored = _optimizer_state(resumed)
        weights_v1 = resumed.master_weights()
        resumed.train_on(_samples(1))
        again = resumed.master_weights()
        lr_after_again = resumed.engine.get_lr()
    finally:
        resumed.close()
    _assert_same(saved, restored)
    assert all(torch.equal(w, exported[n]) for n, w in weights_v1.items())  # the HF export is the master copy
    assert all(torch.equal(w, both[n]) for n, w in again.items())  # save + resume == one uninterrupted trainer
    assert lr_after_again == lr_after_both == [LR]  # the warmup continued past its 4 steps instead of restarting


@pytest.mark.integration
def test_without_carry_no_state_is_written_or_read(tiny_policy, tmp_path):
    from posttrain.training.trainer import PolicyTrainer

    trainer = PolicyTrainer(tiny_policy, TrainConfig(micro_batch_size=4, carry_train_state=False))
    try:
        out = trainer.save(tmp_path / "v1")
    finally:
        trainer.close()
    assert (out / "model.safetensors").is_file()
    assert not (out / TRAIN_STATE).exists()


def _version_with_state(tmp_path, **saved) -> str:
    d = tmp_path / "v1"
    (d / TRAIN_STATE).mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"weights")
    (d / TRAIN_STATE / STATE_META).write_text(json.dumps(saved))
    return str(d)


@pytest.mark.unit
def test_state_saved_under_other_settings_or_for_other_weights_is_not_restored(tmp_path, caplog):
    from posttrain.training.checkpoints import weights_digest

    d = _version_with_state(tmp_path, zero_stage=2, learning_rate=1e-4, weights_sha256="not these weights")
    caplog.set_level(logging.INFO, logger="posttrain.training.checkpoints")
    assert load_train_state(None, d, {"zero_stage": 2, "learning_rate": 1e-3}) is None  # the engine is not touched
    assert "learning_rate: saved 0.0001, now 0.001" in caplog.text
    assert "weights_sha256: saved not these" in caplog.text
    assert weights_digest(d) != "not these weights"
    assert read_state_meta(d)["zero_stage"] == 2

    caplog.clear()
    assert load_train_state(None, tmp_path, {"zero_stage": 2}) is None
    assert "carries no training state: fresh optimizer" in caplog.text


@pytest.mark.unit
def test_the_export_dtype_is_the_one_the_checkpoints_config_records(tmp_path):
    for config, dtype in (({"dtype": "bfloat16"}, "bfloat16"), ({"torch_dtype": "float16"}, "float16"),
                          ({"hidden_size": 8}, "float32")):
        (tmp_path / "config.json").write_text(json.dumps(config))
        assert checkpoint_dtype(tmp_path) == dtype
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "int8"}))
    with pytest.raises(CheckpointError, match=r"config.json: dtype 'int8' is not one of float32, bfloat16"):
        checkpoint_dtype(tmp_path)


@pytest.fixture(scope="module")
def bf16_policy(tiny_policy, tmp_path_factory):
    """The tiny policy stored in bf16, as a bf16 model's checkpoint is (its config says so)."""
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("bf16") / "policy"
    shutil.copytree(tiny_policy, out)
    AutoModelForCausalLM.from_pretrained(tiny_policy, dtype=torch.bfloat16).save_pretrained(out)
    assert checkpoint_dtype(out) == "bfloat16"
    return out


@pytest.mark.integration
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_bf16_model_is_exported_bf16_and_resumes_bitwise_under_either_precision(bf16_policy, tiny_policy, tmp_path,
                                                                                  precision):
    from safetensors.torch import load_file

    from posttrain.training.trainer import PolicyTrainer

    cfg = TrainConfig(micro_batch_size=4, learning_rate=LR, precision=precision)
    continuous = PolicyTrainer(bf16_policy, cfg)
    try:
        continuous.train_on(_samples(0))
        v1 = continuous.save(tmp_path / "v1", metadata={"version": 1})
        masters_v1 = continuous.master_weights()
        continuous.train_on(_samples(1))
        both = continuous.master_weights()
    finally:
        continuous.close()
    exported = load_file(v1 / "model.safetensors")
    assert {t.dtype for t in exported.values()} == {torch.bfloat16}
    assert checkpoint_dtype(v1) == "bfloat16"
    assert (v1 / "model.safetensors").stat().st_size < 0.6 * (tiny_policy / "model.safetensors").stat().st_size
    assert all(torch.equal(t, masters_v1[n].to(torch.bfloat16)) for n, t in exported.items())
    assert any(not torch.equal(w, w.to(torch.bfloat16).float()) for w in masters_v1.values())  # fp32 detail to lose

    resumed = PolicyTrainer(v1, cfg)
    try:
        assert all(torch.equal(w, masters_v1[n]) for n, w in resumed.master_weights().items())  # from the state
        resumed.train_on(_samples(1))
        again = resumed.master_weights()
    finally:
        resumed.close()
    assert all(torch.equal(w, both[n]) for n, w in again.items())


def _chain(root, versions: range, start_with_state: bool = False) -> list:
    """Policy dirs v0.. under ``root`` (a local path or fsspec URI), each naming its parent; v1.. carry a state, v0
    only if ``start_with_state`` (a version another run wrote, used as this loop's start)."""
    fs, base = fsspec.core.url_to_fs(str(root))
    dirs = []
    for n in versions:
        d = f"{str(root).rstrip('/')}/v{n}"
        path = f"{base.rstrip('/')}/v{n}"
        fs.makedirs(f"{path}/{TRAIN_STATE}", exist_ok=True)
        fs.pipe_file(f"{path}/model.safetensors", b"weights")
        fs.pipe_file(f"{path}/{POLICY_META}", json.dumps({"version": n, PARENT: dirs[-1] if dirs else ""}).encode())
        if n or start_with_state:
            fs.pipe_file(f"{path}/{TRAIN_STATE}/{STATE_META}", json.dumps({"optimizer_steps": n}).encode())
            fs.makedirs(f"{path}/{TRAIN_STATE}/state", exist_ok=True)  # DeepSpeed's layout: one folder per tag
            fs.pipe_file(f"{path}/{TRAIN_STATE}/state/mp_rank_00_model_states.pt", b"state")
        dirs.append(d)
    return dirs


def _files(uri) -> set[str]:
    fs, base = fsspec.core.url_to_fs(uri)
    return {p.removeprefix(base.rstrip("/") + "/") for p in fs.find(base)}


@pytest.mark.unit
@pytest.mark.parametrize("where", ["local", "memory"])
def test_each_update_prunes_the_states_older_than_the_newest_keep(tmp_path, where):
    root = tmp_path if where == "local" else f"memory://prune-{tmp_path.name}"
    dirs = _chain(root, range(6))
    everything = _files(dirs[1])
    assert prune_train_states(dirs[2], keep=2) == []  # v2's update: v1's state is v2's parent's: kept
    assert prune_train_states(dirs[3], keep=2) == [dirs[1]]
    assert _files(dirs[1]) == {"model.safetensors", POLICY_META, f"{TRAIN_STATE}/{STATE_META}"}
    with fsspec.open(f"{dirs[1]}/{TRAIN_STATE}/{STATE_META}") as f:
        meta = json.loads(f.read())
    assert meta == {"optimizer_steps": 1, PRUNED: "keep_states=2 when v3 was saved"}
    assert prune_train_states(dirs[5], keep=3) == [dirs[2]]  # stops at v1, pruned before
    assert all(_files(d) == everything for d in dirs[3:])
    assert _files(dirs[0]) == {"model.safetensors", POLICY_META}  # v0 was never touched
    assert prune_train_states(dirs[5], keep=0) == []
    assert prune_train_states(dirs[5], keep=2) == [dirs[3]]  # keep_states lowered: one more pruned


@pytest.mark.unit
def test_the_loops_starting_checkpoint_is_never_pruned_and_an_interrupted_pruning_is_finished(tmp_path):
    dirs = _chain(tmp_path, range(5), start_with_state=True)  # v0: another run's version, with its state
    assert prune_train_states(dirs[1], keep=1) == []
    assert prune_train_states(dirs[2], keep=1) == [dirs[1]]
    assert f"{TRAIN_STATE}/state/mp_rank_00_model_states.pt" in _files(dirs[0])
    leftover = tmp_path / "v1" / TRAIN_STATE / "state" / "mp_rank_00_model_states.pt"  # killed while deleting
    leftover.parent.mkdir()
    leftover.write_bytes(b"state")
    assert prune_train_states(dirs[4], keep=2) == [dirs[2]]  # then v1: marked before, its leftover deleted
    assert not leftover.parent.exists()
    assert f"{TRAIN_STATE}/state/mp_rank_00_model_states.pt" in _files(dirs[0])


@pytest.mark.unit
def test_a_pruned_state_is_not_restored_and_says_why(tmp_path, caplog):
    dirs = _chain(tmp_path, range(4))
    prune_train_states(dirs[3], keep=2)
    caplog.set_level(logging.INFO, logger="posttrain.training.checkpoints")
    assert load_train_state(None, dirs[1], {"zero_stage": 0}) is None  # the engine is not touched
    assert "training state of" in caplog.text
    assert "was pruned (keep_states=2 when v3 was saved): fresh optimizer from its exported weights" in caplog.text


@pytest.mark.integration
def test_an_update_from_a_kept_state_continues_and_one_from_a_pruned_state_starts_fresh(tiny_policy, tmp_path):
    from posttrain.training.trainer import PolicyTrainer

    cfg = TrainConfig(micro_batch_size=4, learning_rate=LR)
    trainer = PolicyTrainer(tiny_policy, cfg)
    versions = [str(tiny_policy)]
    try:
        for n in (1, 2, 3):
            trainer.train_on(_samples(n))
            versions.append(str(trainer.save(tmp_path / f"v{n}", metadata={"version": n, PARENT: versions[-1]})))
    finally:
        trainer.close()
    assert prune_train_states(versions[3], keep=2) == [versions[1]]
    assert sorted(p.name for p in (tmp_path / "v1" / TRAIN_STATE).iterdir()) == [STATE_META]  # DeepSpeed's folder too
    for version, steps in ((versions[1], 0), (versions[2], 4)):
        resumed = PolicyTrainer(version, cfg)
        try:
            assert resumed.engine.global_steps == steps
        finally:
            resumed.close()
