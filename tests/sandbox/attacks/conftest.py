"""Fixtures of the attack suite: one sandbox per backend (bwrap, its warm slots, the docker warm pool), and a ``host``
guard that sets up what attacks aim at (a canary file and a secret environment variable on the host, a listening TCP
port, an innocent host process) and checks afterwards that none of it was touched, that nothing of the attack still
runs on the host, and that the next execution in the same backend (every container of the pool) starts clean."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from posttrain.config import DockerPoolConfig, SandboxConfig
from posttrain.sandbox import Execution, make_sandbox, run_many
from tests.sandbox.cases import assert_never_connected, docker_reason, processes_with


@pytest.fixture(scope="module", params=["bwrap", "bwrap-warm", "docker"])
def box(request):
    if request.param.startswith("bwrap") and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    if request.param == "docker" and (why := docker_reason()):
        pytest.skip(why)
    cfg = SandboxConfig(backend=request.param, docker=DockerPoolConfig(size=2, max_size=2), memory_mb=256)
    sandbox = make_sandbox(cfg)
    if request.param == "docker":
        assert sandbox.wait_ready(2, timeout_s=120)
    yield sandbox
    sandbox.close()


# Runs concurrently on every container of the pool (both busy at once): what a fresh execution sees.
PROBE = ("sleep 0.3; ls -A /work /tmp /dev/shm; "
         "for d in /proc/[0-9]*; do p=${d#/proc/}; [ \"$p\" = \"$$\" ] || [ \"$p\" = 1 ] && continue; "
         "u=$(awk '/^Uid:/ {print $2}' \"$d/status\" 2>/dev/null); "
         "[ \"$u\" = \"$(id -u)\" ] && echo \"process $p: $(tr '\\0' ' ' < $d/cmdline)\"; done; "
         "ipcs -m | grep -c '^0x' || true")
CLEAN = "/dev/shm:\n\n/tmp:\n\n/work:\n0\n"


@dataclass
class Host:
    """What an attack aims at on the host, and the checks that it was not reached."""

    token: str  # every attack process carries it in its argv, so survivors are found on the host
    canary_dir: Path
    canary: Path
    secret: str  # in the canary file and in our environment
    listener: socket.socket
    innocent: subprocess.Popen
    disk_free: dict = field(default_factory=dict)

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def argv(self, *extra: str) -> list[str]:
        return [self.token, str(self.canary), str(self.canary_dir), str(self.port), str(os.getpid()),
                str(self.innocent.pid), *extra]

    def execution(self, code: str, **kw) -> Execution:
        """``code`` as main.py; argv: token, canary file, canary dir, port, our pid, innocent pid."""
        return Execution(files={"main.py": code}, command=["python3", "main.py", *self.argv()], **kw)


def _free_mb(path: str) -> float:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / 2**20


@pytest.fixture
def host(box, monkeypatch):
    secret = f"PT-SECRET-{secrets.token_hex(12)}"
    canary_dir = Path(tempfile.mkdtemp(prefix="pt-attack-canary-"))
    canary = canary_dir / "canary.txt"
    canary.write_text(secret)
    monkeypatch.setenv("POSTTRAIN_ATTACK_SECRET", secret)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    innocent = subprocess.Popen(["sleep", "300"])
    h = Host(token=f"pt-attack-{secrets.token_hex(8)}", canary_dir=canary_dir, canary=canary, secret=secret,
             listener=listener, innocent=innocent, disk_free={p: _free_mb(p) for p in ("/", tempfile.gettempdir())})
    try:
        yield h
        # --- nothing of the attack reached the host ---
        deadline = time.monotonic() + 5
        while (left := processes_with(h.token)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == [], f"attack processes survive on the host: {left}"
        assert canary.read_text() == secret
        assert sorted(os.listdir(canary_dir)) == ["canary.txt"]
        assert_never_connected(listener, "an attack reached a host TCP listener")
        assert innocent.poll() is None, "an attack killed a host process"
        for path, before in h.disk_free.items():
            assert _free_mb(path) > before - 200, f"an attack filled the host disk at {path}"
        # --- the next executions start clean: every container of the pool, or a fresh bwrap ---
        probes = run_many(box, [Execution(files={}, command=["bash", "-c", PROBE], runtime="bash")] * 2,
                          concurrency=2)
        for probe in probes:
            assert (probe.exit_code, probe.stdout) == (0, CLEAN), probe
    finally:
        innocent.kill()
        innocent.wait()
        listener.close()
        shutil.rmtree(canary_dir, ignore_errors=True)
