"""Flyte task: resolve the starting policy (v0) from its reference, building the demo policy when it is asked for."""

from __future__ import annotations

from typing import Annotated

from flytekit import HashMethod, task
from flytekit.types.directory import FlyteDirectory

from posttrain.locations import is_remote
from posttrain.tracking.policies import policy_dir
from posttrain.training.checkpoints import dir_digest
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
    """The policy a reference names: a URI (``s3://...``), referenced as it is (not copied; ``PolicyDir`` fetches it
    to hash it); any other reference (``demo``, ``demo-agent``, ``models:/posttrain-policy@champion``, a local or
    packaged folder), its checked local directory (``posttrain.tracking.policies.policy_dir``)."""
    if is_remote(ref):
        return FlyteDirectory(ref.rstrip("/"))
    return FlyteDirectory(policy_dir(ref))
