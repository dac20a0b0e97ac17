"""Flyte task: resolve the starting policy (v0), building the demo policy when the default one is missing."""

from __future__ import annotations

from typing import Annotated

from flytekit import HashMethod, task
from flytekit.types.directory import FlyteDirectory

from posttrain.config import default_policy_dir
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
    """The policy directory to start from; the default demo policy is built (seeded, cached on disk) if absent."""
    from posttrain.training.demo_policy import main_demo_policy

    if policy == default_policy_dir():
        main_demo_policy(policy)
    return FlyteDirectory(str(check_policy_dir(policy)))
