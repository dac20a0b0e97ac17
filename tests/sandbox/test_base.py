"""Pure parts of the sandbox layer: output truncation, capped capture, workspace file checks and packing."""

from __future__ import annotations

import io
import tarfile

import pytest

from posttrain.sandbox import Execution, make_sandbox, truncate
from posttrain.sandbox.capture import CappedBuffer
from posttrain.sandbox.workspace import checked_files, resolve_command, tar_archive

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("data, limit, expected", [
    (b"", 4, ("", False)),
    (b"abcd", 4, ("abcd", False)),
    (b"abcde", 4, ("abcd\n[... output truncated at 4 bytes ...]", True)),
    (b"\xc3\xa9t\xc3\xa9", 3, ("\u00e9t\n[... output truncated at 3 bytes ...]", True)),
    (b"\xff ok", 10, ("\ufffd ok", False)),
])
def test_truncate(data, limit, expected):
    assert truncate(data, limit) == expected


def test_capped_buffer_keeps_the_head_and_counts_everything():
    buf = CappedBuffer(5)
    for chunk in (b"ab", b"cd", b"efgh", b"ijkl"):
        buf.write(chunk)
    assert buf.total == 12
    assert buf.getvalue() == b"abcdef"
    assert buf.result() == truncate(b"abcdefghijkl", 5)


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/../../x", "", ".", "a/\0"])
def test_file_names_must_stay_inside_the_workspace(name):
    with pytest.raises(ValueError, match="files\\["):
        checked_files({name: ""})


def test_tar_archive_holds_files_and_parents_owned_by_the_sandbox_user():
    with tarfile.open(fileobj=io.BytesIO(tar_archive(checked_files({"a/b/c.py": "é", "d.txt": ""})))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["a", "a/b", "a/b/c.py", "d.txt"]
        assert members["a/b"].isdir()
        assert {m.uid for m in members.values()} == {10001}
        assert tar.extractfile("a/b/c.py").read() == "é".encode()


def test_runtime_aliases_resolve_to_interpreters():
    assert resolve_command(Execution({}, ["node", "a.js"], runtime="node")) == ["/usr/bin/node", "a.js"]
    assert resolve_command(Execution({}, ["./run.sh"], runtime="bash")) == ["./run.sh"]
    with pytest.raises(ValueError, match="runtime='cobol'"):
        resolve_command(Execution({}, ["x"], runtime="cobol"))


def test_unknown_backend_names_the_field():
    with pytest.raises(ValueError, match="sandbox.backend='vm'"):
        make_sandbox("vm")
