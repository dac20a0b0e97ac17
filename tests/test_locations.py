"""Suites and policies named by reference: a URI of an fsspec filesystem (here ``memory://``, in-process, standing
in for a blob store), a folder of the package, or a local directory. The tasks fetch what they need; a remote policy
is handed on as a reference (not copied) and hashed by content like a local one."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from posttrain.config import DEMO_SUITE, DEMO_SUITE_REF, ConfigError, LoopConfig
from posttrain.envs.suite import suite_digest
from posttrain.training.checkpoints import dir_digest



def upload(local: Path, uri: str) -> str:
    """Copy a local folder into the in-memory filesystem, file by file."""
    fs = fsspec.filesystem("memory")
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        fs.pipe(uri.removeprefix("memory://") + "/" + path.relative_to(local).as_posix(), path.read_bytes())
    return uri


@pytest.mark.unit
def test_a_suite_in_a_blob_store_is_fetched_and_fingerprinted_by_content():
    from tasks.admit import fingerprint_suite
    from tasks.standalone_eval import load_suite_envs

    uri = upload(Path(DEMO_SUITE), "memory://bucket/suites/demo_python")
    assert fingerprint_suite(suite=uri) == fingerprint_suite(suite=DEMO_SUITE_REF) == suite_digest(DEMO_SUITE)
    loaded = load_suite_envs(suite=uri)
    assert loaded.digest == suite_digest(DEMO_SUITE)
    assert len(loaded.envs) == len(load_suite_envs(DEMO_SUITE).envs)


@pytest.mark.integration
def test_a_policy_in_a_blob_store_is_referenced_not_copied(tiny_policy):
    from tasks.policy import policy_digest, prepare_policy

    uri = upload(Path(tiny_policy), "memory://bucket/policies/tiny")
    policy = prepare_policy(policy=uri)
    assert policy.remote_source == uri  # the output literal is the URI itself
    assert policy_digest(policy) == dir_digest(tiny_policy)  # fetched to hash: the same key as the local copy


@pytest.mark.unit
def test_config_names_a_bad_reference_with_its_field():
    with pytest.raises(ConfigError, match=r"suite='posttrain:envs/suites/nope': no folder envs/suites/nope in the "
                                          r"posttrain package"):
        LoopConfig(suite="posttrain:envs/suites/nope")
    with pytest.raises(ConfigError, match=r"policy='nosuchfs://b/p': unknown filesystem 'nosuchfs'"):
        LoopConfig(policy="nosuchfs://b/p")
    with pytest.raises(ConfigError, match=r"suite='/no/such/suite': no such directory"):
        LoopConfig(suite="/no/such/suite")
    assert LoopConfig(suite="s3://bucket/suite", policy="models:/posttrain-policy@champion").suite == "s3://bucket/suite"
