"""Data parallel update through Flyte's PyTorch plugin: 2 processes train the weights 1 process trains.

``update_parallel`` runs as a torch elastic task (locally the plugin starts the worker processes; DeepSpeed joins
the gloo group they form). With the same global batch per optimizer step (2 ranks x 1 accumulation step vs 1 rank
x 2), the new version's weights equal the single-process ones up to float summation order, under ZeRO 2 and 3; the
published version holds every rank's optimizer partition (each rank wrote its own, in its own working directory, as
on a node of its own), resumes in the next parallel update and loads in vLLM.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os

import pandas as pd
import pytest
import torch

from posttrain.config import TrainConfig
from posttrain.schemas import Scored
from posttrain.training.batching import lockstep, shard_steps

pytestmark = pytest.mark.integration


def scored_table(groups: int = 6, per_group: int = 4, seed: int = 0) -> pd.DataFrame:
    """A Scored table of random token sequences (vocab of the tiny policy), rewards varying within each group."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for g in range(groups):
        prompt = [1] + torch.randint(3, 300, (4 + g % 3,), generator=gen).tolist()
        for i in range(per_group):
            completion = torch.randint(3, 300, (3 + (g + i) % 5,), generator=gen).tolist()
            rows.append({"env_id": f"e{g}", "group_id": f"g{g}", "sample_idx": i, "policy_version": 0, "prompt": "",
                         "completion": "", "prompt_token_ids": json.dumps(prompt),
                         "completion_token_ids": json.dumps(completion),
                         "behavior_logprobs": json.dumps([-5.5] * len(completion)), "temperature": 1.0, "steps": 1, "tool_calls": 0,
                         "finish_reason": "length", "tokens": len(completion), "reward": float((g + i) % 2),
                         "compiled": True, "tests_passed": 0, "tests_total": 1, "exit_code": 0, "timed_out": False,
                         "infra_error": "", "sandbox_ms": 1.0, "sandbox_cpu_s": 0.01, "sandbox_memory_peak_mb": 3.0,
                         "signals": "{}"})
    return Scored.validate(pd.DataFrame(rows))


def test_every_rank_runs_as_many_passes_per_step_and_the_steps_are_one_process_steps():
    steps = shard_steps(7, 2, 2)  # 7 micro batches, 2 accumulation steps, 2 ranks: 4 per step
    assert steps == [[[0, 2], [1, 3]], [[4, 6], [5]]]
    assert [sorted(i for shard in step for i in shard) for step in steps] == \
        [[i for shard in step for i in shard] for step in shard_steps(7, 4, 1)]
    assert lockstep(steps[1], 1) == [(5, True), (4, False)]  # padded with a pass that counts for nothing


@pytest.mark.slow
@pytest.mark.parametrize("zero_stage", [2, 3])
def test_two_processes_train_the_weights_one_process_trains(tiny_policy, monkeypatch, zero_stage):
    from flytekit.types.directory import FlyteDirectory
    from safetensors.torch import load_file

    from tasks.update import update, update_parallel

    monkeypatch.setenv("FLYTE_LOCAL_CACHE_ENABLED", "false")  # compute both, never a cached result
    scored = scored_table()
    one = TrainConfig(micro_batch_size=4, grad_accum_steps=2, zero_stage=zero_stage, learning_rate=1e-3)
    two = dataclasses.replace(one, grad_accum_steps=1, nproc_per_node=2)
    policy = FlyteDirectory(str(tiny_policy))
    single = update(policy=policy, scored=scored, cfg=one, policy_version=1, reference=policy)
    parallel = update_parallel(policy=policy, scored=scored, cfg=two, policy_version=1, reference=policy)

    # 24 samples, 6 micro batches, 2 per step
    assert parallel.metrics["train/steps"] == single.metrics["train/steps"] == 3
    assert parallel.metrics["train/num_tokens"] == single.metrics["train/num_tokens"]
    assert parallel.metrics["train/loss"] == pytest.approx(single.metrics["train/loss"], rel=1e-3, abs=1e-5)
    start = load_file(str(tiny_policy / "model.safetensors"))
    a = load_file(str(single.policy.download()) + "/model.safetensors")
    b = load_file(str(parallel.policy.download()) + "/model.safetensors")
    moved = max(float((a[name] - start[name]).abs().max()) for name in a)
    apart = max(float((a[name] - b[name]).abs().max()) for name in a)
    assert moved > 1e-4, (moved, apart)
    assert apart <= 1e-3 * moved, (moved, apart)  # measured here: bit-identical (apart == 0)
    state = parallel.policy.download() + "/train_state"
    meta = json.loads(open(state + "/posttrain_state.json").read())
    assert meta["world_size"] == 2
    assert meta["optimizer_steps"] == 3
    assert len(glob.glob(state + "/state/*optim_states.pt")) == 2  # both ranks' optimizer partitions
    # each rank wrote in its own working directory (as on a node of its own) and uploaded its files into one output
    # directory of the raw store; the next parallel update's ranks resume their optimizer partitions from it
    assert "policy-v1" not in str(parallel.policy.path)
    if zero_stage == 2:
        resumed = update_parallel(policy=parallel.policy, scored=scored, cfg=two, policy_version=2, reference=policy)
        meta = json.loads(open(resumed.policy.download() + "/train_state/posttrain_state.json").read())
        assert meta["optimizer_steps"] == 6  # 3 restored + 3 new: the partitions were found, not a fresh optimizer
    if zero_stage == 3:  # the version rank 0 wrote serves in vLLM
        from posttrain.config import RolloutConfig
        from posttrain.rollout import live

        engine = live.acquire(parallel.policy.download(), RolloutConfig(replicas=1), version=1)
        [[sample]] = engine.generate(["def add(a, b):"], n=1, temperature=0.0, max_tokens=4)
        assert 1 <= len(sample.token_ids) <= 4
        assert engine.version == 1


def test_the_registered_task_starts_torch_elastic_in_one_pod_with_shared_memory_and_the_update_resources():
    from collections import OrderedDict

    from flytekit.configuration import Image, ImageConfig, SerializationSettings
    from flytekit.models.task import Resources
    from flytekit.tools.translator import get_serializable

    from tasks.resources import stage
    from tasks.update import REGISTERED_NPROC, update_parallel

    settings = SerializationSettings(image_config=ImageConfig(default_image=Image(name="default", fqn="x", tag="y")))
    template = get_serializable(OrderedDict(), settings, update_parallel).template
    assert template.type == "python-task"
    assert template.custom is None  # one node: no PyTorchJob, torch elastic in-pod
    assert update_parallel.task_config.nproc_per_node == REGISTERED_NPROC == 2
    assert template.container.args[-4:] == ["task-module", "tasks.update", "task-name", "update_parallel"]
    requests = {r.name: r.value for r in template.container.resources.requests}
    assert requests[Resources.ResourceName.CPU] == str(stage("update")["requests"].cpu)
    assert template.extended_resources.shared_memory.mount_path == "/dev/shm"  # the ranks' shared memory


def test_a_pod_started_with_another_process_count_than_the_config_says_fails_clearly(monkeypatch):
    from tasks.update import update_parallel

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="train.nnodes=1 x train.nproc_per_node=3 but the update runs on 2 processes: "
                                         "register .*POSTTRAIN_UPDATE_NPROC=3"):
        update_parallel.task_function(policy=None, scored=None, cfg=TrainConfig(nproc_per_node=3), policy_version=1,
                                      reference=None)


def test_a_multi_node_update_registers_as_a_pytorch_job_of_that_shape():
    """What ``pyflyte register`` sends with POSTTRAIN_UPDATE_NNODES=2 POSTTRAIN_UPDATE_NPROC=4 (read when the module
    is imported, so in a fresh interpreter): a PyTorchJob task of 2 worker replicas x 4 processes, elastic c10d."""
    import subprocess
    import sys

    script = """
import json
from collections import OrderedDict
from flytekit.configuration import Image, ImageConfig, SerializationSettings
from flytekit.tools.translator import get_serializable
from tasks.update import update_parallel
settings = SerializationSettings(image_config=ImageConfig(default_image=Image(name="d", fqn="x", tag="y")))
template = get_serializable(OrderedDict(), settings, update_parallel).template
print(json.dumps({"type": template.type, "custom": template.custom}))
"""
    env = {**os.environ, "POSTTRAIN_UPDATE_NNODES": "2", "POSTTRAIN_UPDATE_NPROC": "4"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    task = json.loads(done.stdout.strip().splitlines()[-1])
    assert task["type"] == "pytorch"
    assert task["custom"] == {"workerReplicas": {"replicas": 2}, "elasticConfig": {
        "rdzvBackend": "c10d", "minReplicas": 2, "maxReplicas": 2, "nprocPerNode": 4}}


def test_a_multi_node_config_the_task_was_not_registered_for_fails_when_the_dag_is_built():
    from tasks.update import update_node

    with pytest.raises(ValueError, match="train.nnodes=2, train.nproc_per_node=2: the update task is registered for "
                                         "1 x 2; set POSTTRAIN_UPDATE_NNODES=2"):
        update_node(policy=None, scored=None, cfg=TrainConfig(nnodes=2, nproc_per_node=2), policy_version=1,
                    reference=None)
