"""The bubblewrap backend against the shared sandbox cases, plus what only bwrap has (setup failures, limits)."""

from __future__ import annotations

import os
import shutil

import pytest
from sandbox_cases import SandboxCases, py

from posttrain.sandbox import make_sandbox
from posttrain.sandbox.bwrap import BwrapSandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


@pytest.fixture(scope="module")
def sandbox():
    box = make_sandbox("bwrap")
    yield box
    box.close()


@pytest.fixture(scope="module")
def broken_sandbox():
    """bwrap fails its own setup (a bind source that does not exist) after it has forked."""
    return BwrapSandbox(extra_ro_binds=[("/nonexistent-posttrain-path", "/x")])


class TestBwrap(SandboxCases):
    pass


def test_missing_bwrap_binary_is_infra_error():
    r = BwrapSandbox(bwrap="/nonexistent/bwrap").run(py("print(1)"))
    assert r.exit_code is None and "/nonexistent/bwrap" in r.infra_error


def test_program_printing_like_bwrap_is_not_infra_error():
    r = BwrapSandbox().run(py("import sys\nprint('bwrap: Can\\'t find source path', file=sys.stderr)\nsys.exit(1)"))
    assert (r.exit_code, r.infra_error) == (1, "")


def test_limits_and_isolation_inside():
    code = ("import os, resource as r\n"
            "print(r.getrlimit(r.RLIMIT_AS)[0] >> 20, r.getrlimit(r.RLIMIT_NPROC)[0], r.getrlimit(r.RLIMIT_CORE)[0],"
            " r.getrlimit(r.RLIMIT_CPU)[0], os.getpid())\n"
            "print(sorted(os.listdir('/etc')), os.path.exists('/root'), os.path.exists('/home'))\n"
            "open('/usr/lib/x', 'w')\n")
    r = BwrapSandbox(max_processes=32).run(py(code, memory_mb=300, timeout_s=4))
    limits, visible, _ = r.stdout.split("\n")
    assert limits.split()[:4] == ["300", "32", "0", "5"]
    assert int(limits.split()[4]) < 10  # a fresh pid namespace
    assert visible == "['group', 'hosts', 'passwd'] False False"
    assert r.exit_code == 1 and "Read-only file system" in r.stderr


def test_workspace_is_always_removed(tmp_path):
    box = BwrapSandbox(workspace_root=str(tmp_path))
    box.run(py("import os\nos.makedirs('a/b')\nos.chmod('a', 0)\n"))
    box.run(py("import time; time.sleep(10)", timeout_s=0.5))
    assert os.listdir(tmp_path) == []
