"""The host's side of a warm slot's verdict: whatever a slot sends back that is no verdict (not JSON, nested past the
parser's recursion limit, not a verdict's shape) is that execution's infra error and retires the slot, never an
exception out of the batch. The slot's zygote is played by a thread: no bwrap runs."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from posttrain.sandbox.warm import Slot, WarmBwrapSandbox
from tests.sandbox.cases import py

pytestmark = pytest.mark.unit

NO_VERDICTS = {
    "nested past the recursion limit": b"[" * 60_000,
    "not JSON": b'{"exit_code": 0,',
    "not a mapping": b"[0, false]",
    "an exit code that is no number": b'{"exit_code": "0", "timed_out": false, "setup_error": ""}',
    "a setup error that is no text": b'{"exit_code": null, "timed_out": false, "setup_error": [1]}',
}


class RunningProcess:
    """The slot's bwrap process, as far as the host asks: running, and it exits when asked to."""

    def poll(self):
        return None

    def wait(self, timeout=None):
        return 0


def zygote(sock: socket.socket, reply: bytes) -> None:
    """One execution: take its fds and close them (the program ends with no output), then send ``reply``."""
    with sock:
        _, fds, _, _ = socket.recv_fds(sock, 64, 16)
        for fd in fds:
            os.close(fd)
        sock.send(reply)


@pytest.fixture
def replying(monkeypatch):
    """Slots whose zygote sends the given reply; returns the slots started."""
    slots: list[Slot] = []

    def use(reply: bytes) -> list[Slot]:
        def start(cls, box):
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            threading.Thread(target=zygote, args=(theirs, reply), daemon=True).start()
            slots.append(cls(box, RunningProcess(), ours, None, zygote_pid=0))
            return slots[-1]

        monkeypatch.setattr(Slot, "start", classmethod(start))
        return slots

    return use


@pytest.mark.parametrize("reply", NO_VERDICTS.values(), ids=list(NO_VERDICTS))
def test_a_reply_that_is_no_verdict_is_the_executions_infra_error(replying, reply):
    slots = replying(reply)
    with WarmBwrapSandbox(slots=1, use_seccomp=False, aggregate_limits=False) as box:
        results = [box.run(py("print(1)")), box.run(py("print(2)"))]  # never raises: the result says why
    assert [r.exit_code for r in results] == [None, None]
    assert all(r.infra_error.startswith("warm bwrap slot failed: no verdict from the slot") for r in results)
    assert len(slots) == 2
    assert all(slot.broken for slot in slots)  # each broken slot retired, a fresh one started


def test_a_verdict_is_the_programs_outcome(replying):
    slots = replying(b'{"exit_code": 3, "timed_out": false, "setup_error": ""}')
    with WarmBwrapSandbox(slots=1, use_seccomp=False, aggregate_limits=False) as box:
        result = box.run(py("print(1)"))
    assert (result.exit_code, result.infra_error) == (3, "")
    assert not slots[0].broken
