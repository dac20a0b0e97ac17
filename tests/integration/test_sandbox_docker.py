"""The docker backend against the shared sandbox cases, plus its own failure modes (image missing, daemon gone).

Skipped only when dockerd is unreachable or the sandbox image is absent (build it: containers/build-sandbox-image.sh).
"""

from __future__ import annotations

import os

import docker
import pytest
from sandbox_cases import SandboxCases, processes_with, py

from posttrain.config import SandboxConfig
from posttrain.sandbox import make_sandbox
from posttrain.sandbox.docker_backend import DockerSandbox

IMAGE = SandboxConfig().docker_image


def _why_unavailable() -> str:
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except docker.errors.DockerException as exc:
        return f"dockerd unreachable: {exc}"
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        return f"docker image {IMAGE} absent: run containers/build-sandbox-image.sh"
    finally:
        client.close()
    return ""


REASON = _why_unavailable()
pytestmark = pytest.mark.skipif(bool(REASON), reason=REASON)


def our_containers() -> list[str]:
    client = docker.from_env()
    try:
        return [c.id for c in client.containers.list(all=True, filters={"label": f"posttrain.owner={os.getpid()}"})]
    finally:
        client.close()


@pytest.fixture(scope="module")
def sandbox():
    box = make_sandbox(SandboxConfig(backend="docker"))
    yield box
    box.close()
    assert our_containers() == []


@pytest.fixture(scope="module")
def broken_sandbox():
    return DockerSandbox("posttrain-no-such-image:absent")


class TestDocker(SandboxCases):
    def leftovers(self, token: str) -> list[str]:
        return processes_with(token) + our_containers()


def test_missing_image_is_infra_error():
    r = DockerSandbox("posttrain-no-such-image:absent").run(py("print(1)"))
    assert r.exit_code is None and "No such image" in r.infra_error
    assert our_containers() == []


def test_unreachable_daemon_is_infra_error(tmp_path):
    r = DockerSandbox(base_url=f"unix://{tmp_path}/no-docker.sock").run(py("print(1)"))
    assert r.exit_code is None and "unreachable" in r.infra_error


def test_container_is_hardened():
    code = "import os\nprint(os.getuid(), open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n"
    r = DockerSandbox(IMAGE).run(py(code))
    assert r.stdout == "10001 0000000000000000\n", r
    assert r.extra["oom_killed"] is False


def test_memory_bomb_is_oom_killed():
    r = DockerSandbox(IMAGE).run(py("x = [b'x' * 10_000_000 for _ in range(100)]", memory_mb=64))
    assert r.exit_code == 137 and r.extra["oom_killed"] is True
