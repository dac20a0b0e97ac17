"""What a session does with what a program left in its workspace and with input no program can take, on bwrap, its
warm slots and the docker pool: snapshots survive ordinary ``chmod``s and sparse files, ``write_file`` never blocks
on a planted FIFO, and a refused operation is the caller's failure (``SessionError.infra_error`` empty), never
infrastructure. (The contract every backend's sessions share is ``cases.SessionCases``.)"""

from __future__ import annotations

import time

import pytest

from posttrain.config import DockerPoolConfig, SandboxConfig
from posttrain.sandbox import SessionError, make_sandbox
from tests.sandbox.cases import BWRAP, DOCKER

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=[
    pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP, reason="bwrap missing")),
    pytest.param("bwrap-warm", marks=pytest.mark.skipif(not BWRAP, reason="bwrap missing")),
    pytest.param("docker", marks=pytest.mark.skipif(bool(DOCKER), reason=DOCKER))])
def sandbox(request):
    box = make_sandbox(SandboxConfig(backend=request.param, docker=DockerPoolConfig(size=1, max_size=2)))
    yield box
    box.close()


def test_the_snapshot_survives_locked_files_and_sparse_files(sandbox):
    with sandbox.session(timeout_s=20) as s:
        made = s.run("echo hi > locked && chmod 000 locked && mkdir -p d/e && echo x > d/e/f && chmod 000 d && "
                     "truncate -s 60M s1 s2 s3")
        assert made.ok, made
        snap = s.snapshot()
        assert snap.size < 1 << 20  # sparse files stay sparse: not 180 MB of zeros
        s.run("rm -rf s1 d")
        s.restore(snap)
        back = s.run("cat locked d/e/f && stat -c %s s1 s2 s3")
    assert back.stdout == "hi\nx\n62914560\n62914560\n62914560\n", back


def test_write_file_refuses_a_fifo_at_once_instead_of_blocking(sandbox):
    with sandbox.session(timeout_s=5) as s:
        s.run("mkdir -p .agent && mkfifo .agent/state.md && ln -s .agent/state.md link")
        for path in (".agent/state.md", "link"):
            t0 = time.monotonic()
            with pytest.raises(SessionError, match="not a regular file") as refused:
                s.write_file(path, "state")
            assert time.monotonic() - t0 < 2.5
            assert refused.value.infra_error == ""
        s.write_file("plain.txt", "v1")
        s.write_file("plain.txt", "v2")  # a regular file is still created and replaced
        assert s.read_file("plain.txt") == "v2"


@pytest.mark.parametrize("operation", [
    lambda s: s.run("echo a\0b"),
    lambda s: s.run("echo " + "x" * 200_000),
    lambda s: s.run(["bash", "-c", "true", *["y" * 100_000] * 12]),  # 1.2 MB of arguments in all
    lambda s: s.write_file("a\udc80", "x"),
    lambda s: s.read_file("b\udc80"),
    lambda s: s.write_file("p" * 5000, "x"),
], ids=["nul-in-command", "200KB-argument", "1.2MB-argv", "surrogate-write-path", "surrogate-read-path",
        "5000-byte-path"])
def test_input_no_program_can_take_is_refused_as_the_callers_failure(sandbox, operation):
    with sandbox.session(timeout_s=10) as s:
        with pytest.raises(SessionError) as refused:
            operation(s)
        assert refused.value.infra_error == "", refused.value
        assert s.log == []
        assert s.run("ls").stdout == ""  # refused before any step; nothing was written


def test_a_closed_session_is_infra(sandbox):
    s = sandbox.session(timeout_s=5)
    s.close()
    with pytest.raises(SessionError, match="closed") as refused:
        s.write_file("a.txt", "x")
    assert refused.value.infra_error
