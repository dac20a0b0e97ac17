"""``agent_run``: where the line between an infra error and the program's outcome falls, against a scripted agent.

Until the agent says the program started, a failure is the sandbox's (``AgentClosed``: an infra error, retried);
from then on it is the program's outcome (scored, never excluded), and the container is marked for discard."""

from __future__ import annotations

import json
import queue

import pytest

from posttrain.sandbox.base import Execution
from posttrain.sandbox.docker.agent_client import AgentChannel, AgentClosed, agent_run

pytestmark = pytest.mark.unit

pytest.importorskip("docker")


class ScriptedChannel(AgentChannel):
    """An agent channel that answers every request with ``replies`` (kind, payload), then ends."""

    def __init__(self, replies):
        self.messages, self.closed, self.stderr_tail, self.sent = queue.Queue(), False, b"", []
        for kind, payload in replies:
            self.messages.put((kind, 1, payload))
        self.messages.put(None)

    def send(self, header, payload=b""):
        self.sent.append((header, payload))


def run(replies, **kw):
    channel = ScriptedChannel(replies)
    raw = agent_run(channel, 1, Execution(files={}, command=["x"], timeout_s=5, **kw), ["x"], {}, b"A", b"T",
                    b"S", {}, 0.0)
    return raw, channel


EXIT = json.dumps({"exit": 1, "timed_out": False, "clean": True, "stdout_bytes": 3, "stderr_bytes": 0}).encode()


def test_a_program_that_ran_reports_its_exit_and_the_payloads_go_in_order():
    raw, channel = run([(b"R", b""), (b"O", b"hi\n"), (b"X", EXIT)])
    assert (raw.exit_code, raw.stdout.getvalue(), raw.infra_error, raw.extra["discard"]) == (1, b"hi\n", "", "")
    [(header, payload)] = channel.sent
    assert (header["archive"], header["trusted"], header["stdin"], payload) == (1, 1, 1, b"ATS")


@pytest.mark.parametrize("replies", [[(b"F", b"tainted container: nice changed")], []])
def test_a_failure_before_the_program_started_is_the_sandboxs(replies):
    with pytest.raises(AgentClosed):
        run(replies)


@pytest.mark.parametrize("replies, why", [
    ([(b"R", b""), (b"O", b"partial"), (b"F", b"agent error: boom")], "agent error: boom"),
    ([(b"R", b""), (b"O", b"partial")], "agent is gone"),  # the channel ends: the container died
    ([(b"R", b""), (b"O", b"partial"), (b"X", b"{not json")], "malformed exit report"),
])
def test_a_failure_after_the_program_started_is_its_outcome(replies, why):
    raw, _ = run(replies)
    result = raw.result()
    assert (result.infra_error, result.exit_code, result.timed_out, result.stdout) == ("", None, False, "partial")
    assert "after its program started" in raw.extra["discard"]
    assert why in raw.extra["discard"]


def test_a_program_whose_leftovers_survive_is_scored_and_its_container_discarded():
    unclean = json.dumps({"exit": 0, "timed_out": False, "clean": False, "stdout_bytes": 0, "stderr_bytes": 0})
    raw, _ = run([(b"R", b""), (b"X", unclean.encode())])
    assert raw.exit_code == 0
    assert not raw.infra_error
    assert "could not kill" in raw.extra["discard"]
