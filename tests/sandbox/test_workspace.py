"""Workspace preparation without a sandbox: rlimit arguments follow the execution."""

from __future__ import annotations

import pytest

from posttrain.sandbox.base import Execution
from posttrain.sandbox.workspace import prlimit_args

pytestmark = pytest.mark.unit


def test_prlimit_arguments_follow_the_execution():
    args = prlimit_args("/p", Execution({}, ["x"], timeout_s=0.2), max_open_files=8, max_file_mb=2,
                        address_space=1 << 30, max_processes=16)
    assert args == ["/p", "--as=1073741824", "--cpu=2:3", "--fsize=2097152", "--nofile=8", "--core=0", "--nproc=16"]
