"""Per-stage resources and images for cluster runs (ignored by local ``pyflyte run``).

On a Flyte cluster set ``POSTTRAIN_IMAGE`` (CPU task image), ``POSTTRAIN_GPU_IMAGE`` and ``POSTTRAIN_GPUS`` (GPUs per
rollout/update pod) before ``pyflyte run --remote`` / ``pyflyte register``; the values are read at import time. The
images default to the names of the task images (``containers/task/Dockerfile``; ``make images`` builds the CPU one).
Tasks that run sandboxes carry the pod template bubblewrap needs (``tasks/pods.py``).

Example:
    >>> stage("reward")["requests"].cpu
    '2'
"""

from __future__ import annotations

import os

from flytekit import Resources

from tasks.pods import sandbox_pod_template

CACHE_VERSION = "posttrain-10"  # bump when a cached task's behaviour changes without its inputs changing

_CPU_STAGES = {"admit": ("2", "4Gi"), "reward": ("2", "4Gi"), "track": ("1", "1Gi")}
_ACCEL_STAGES = {"rollout": ("2", "16Gi"), "update": ("2", "16Gi"), "evaluate": ("2", "16Gi"), "policy": ("2", "8Gi")}
_SANDBOX_STAGES = {"admit", "reward", "evaluate"}  # their tasks run bwrap sandboxes
CPU_IMAGE, GPU_IMAGE = "posttrain-cpu:latest", "posttrain-gpu:latest"  # containers/task/Dockerfile, EXTRA=cpu|gpu


def stage(name: str) -> dict:
    """``@task`` keyword arguments (requests, container_image) for one pipeline stage."""
    gpus = os.environ.get("POSTTRAIN_GPUS", "0")
    if name in _ACCEL_STAGES:
        cpu, mem = _ACCEL_STAGES[name]
        uses_gpu = gpus != "0"
        kwargs = {"requests": Resources(cpu=cpu, mem=mem, gpu=gpus) if uses_gpu else Resources(cpu=cpu, mem=mem)}
        image = os.environ.get("POSTTRAIN_GPU_IMAGE", GPU_IMAGE) if uses_gpu else os.environ.get("POSTTRAIN_IMAGE",
                                                                                                 CPU_IMAGE)
    else:
        cpu, mem = _CPU_STAGES[name]
        kwargs = {"requests": Resources(cpu=cpu, mem=mem)}
        image = os.environ.get("POSTTRAIN_IMAGE", CPU_IMAGE)
    if name in _SANDBOX_STAGES:
        kwargs["pod_template"] = sandbox_pod_template()
    kwargs["container_image"] = image
    return kwargs
