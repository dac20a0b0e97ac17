"""Flyte task: resolve the starting policy (v0) from its reference, building the demo policy when it is asked for."""

from __future__ import annotations

import tempfile
from typing import Annotated

from flytekit import HashMethod, task
from flytekit.types.directory import FlyteDirectory

from posttrain.config import (
    DEMO_AGENT_POLICY,
    DEMO_POLICY,
    default_agent_policy_dir,
    default_policy_dir,
)
from posttrain.locations import is_remote, local_copy
from posttrain.training.checkpoints import check_policy_dir, dir_digest
from tasks.resources import stage


# Policies are content-addressed, so cached downstream tasks re-run exactly when the weights change (hashed after
# download: a remote directory's local path is empty until then).
def policy_digest(policy: FlyteDirectory) -> str:
    """The content digest of a policy directory (a named function: the data-parallel update pickles its inputs)."""
    return dir_digest(policy.download())


PolicyDir = Annotated[FlyteDirectory, HashMethod(policy_digest)]


@task(**stage("policy"))
def prepare_policy(policy: str) -> PolicyDir:
    """The policy directory to start from (``LoopConfig.policy``: see ``policy_folder``)."""
    return policy_folder(policy)


def policy_folder(ref: str) -> FlyteDirectory:
    """The policy a reference names: ``demo`` / ``demo-agent``, the demo (agent) policy (built, seeded and cached on
    disk, if absent); a
    registered version or alias (``models:/posttrain-policy@champion``), downloaded from the MLflow registry; a URI
    (``s3://...``), referenced as it is (not copied; ``PolicyDir`` fetches it to hash it); a local or packaged
    folder, checked (config.json, weights, tokenizer)."""
    from posttrain.tracking import registry
    from posttrain.training.demo_policy import main_demo_policy

    if ref == DEMO_POLICY:
        return FlyteDirectory(str(check_policy_dir(main_demo_policy(default_policy_dir()))))
    if ref == DEMO_AGENT_POLICY:
        from posttrain.agent.warm_start import main_agent_policy

        return FlyteDirectory(str(check_policy_dir(main_agent_policy(default_agent_policy_dir()))))
    if registry.parse_model_uri(ref):
        return FlyteDirectory(str(check_policy_dir(registry.download_policy(
            ref, tempfile.mkdtemp(prefix="posttrain-policy-")))))
    if is_remote(ref):
        return FlyteDirectory(ref.rstrip("/"))
    return FlyteDirectory(str(check_policy_dir(local_copy(ref))))
