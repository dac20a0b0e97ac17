"""``DockerPoolConfig``: the Docker pool's settings, nested once in ``SandboxConfig`` and handed to the pool whole.

Needs the docker SDK, not a daemon: the pools here point at a socket that does not exist."""

from __future__ import annotations

from dataclasses import fields

import pytest

from posttrain.config import DockerPoolConfig, SandboxConfig
from posttrain.sandbox import Execution, make_sandbox
from posttrain.sandbox.scheduler import Scheduler, configure_from

pytestmark = pytest.mark.unit

pytest.importorskip("docker")


def test_sandbox_config_nests_the_pool_settings_once():
    cfg = SandboxConfig()
    assert cfg.docker == DockerPoolConfig()
    assert cfg.docker.image == "posttrain-sandbox:latest"
    assert not [f.name for f in fields(SandboxConfig) if f.name.startswith("docker_")]
    assert SandboxConfig().docker is not cfg.docker  # a fresh one per config


def test_make_sandbox_hands_the_pool_its_config_and_the_shared_limits(tmp_path):
    pool_cfg = DockerPoolConfig(size=1, max_size=3, max_uses=7, base_url=f"unix://{tmp_path}/none.sock")
    with make_sandbox(SandboxConfig(backend="docker", docker=pool_cfg, memory_mb=300, workspace_mb=32, tmp_mb=16,
                                    max_processes=20, session_output_bytes=99)) as pool:
        assert pool.config == pool_cfg
        assert (pool.memory_mb, pool.workspace_mb, pool.tmp_mb, pool.max_processes, pool.session_output_bytes) == \
               (300, 32, 16, 20, 99)
        r = pool.run(Execution(files={}, command=["true"], runtime="bash"))
        assert r.exit_code is None
        assert "unreachable" in r.infra_error


def test_the_pool_normalizes_impossible_sizes(tmp_path):
    from posttrain.sandbox.docker import DockerPool

    with DockerPool(DockerPoolConfig(size=3, max_size=1, min_idle=5, parallel_starts=0,
                                     base_url=f"unix://{tmp_path}/none.sock")) as pool:
        assert (pool.config.size, pool.config.max_size, pool.config.min_idle, pool.config.parallel_starts) == \
               (3, 3, 3, 1)


def test_batch_and_global_concurrency_are_separate_settings():
    cfg = SandboxConfig(batch_concurrency=3, global_concurrency=5)
    assert configure_from(Scheduler(), cfg).max_concurrency == 5
    assert cfg.batch_concurrency == 3
