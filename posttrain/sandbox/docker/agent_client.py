"""The host side of the container agent (``posttrain/trusted/container_agent.py``): one channel per pooled container.

A ``docker exec`` costs a runc start (tens of milliseconds) per program; the pool instead starts every container
with the agent as its pid 1 and keeps the container's stdin/stdout attached. Running a program is then one request
on that channel (header + workspace tar + stdin) and a stream of messages back (started, output chunks, exit), and
a reset is one more request. The channel is the container's own stdio, so it dies with our process: the agent sees
end-of-file and exits, and the container (``auto_remove``) disappears.

Everything the agent says is parsed defensively (sizes capped, unknown messages end the channel): the agent is
protected from the programs (see ``container_agent``), but the host never has to trust it beyond one execution's
result.

Where the line between infra and program falls: a run fails as infrastructure (``AgentClosed``, an ``infra_error``
upstream) only until the agent says the program started. Whatever goes wrong after that (the agent fails or
vanishes, misses its deadline, cannot kill what the program left) is the program's outcome, as observed: the
result is never an ``infra_error``, and ``extra["discard"]`` says why the container must not serve again.

Example:
    >>> agent_command(1900000000)[:4], agent_command(1900000000)[-2:]
    (['python3', '-I', '-S', '-c'], ['1900000000', '1900000000'])
    >>> channel = AgentChannel.attach(api, container_id)                  # doctest: +SKIP
    >>> raw = agent_run(channel, 1, execution, argv, env, archive, b"", b"", limits, t0)   # doctest: +SKIP
"""

from __future__ import annotations

import json
import queue
import socket
import struct
import threading
import time

from posttrain import trusted
from posttrain.sandbox.base import Execution, SandboxStartError
from posttrain.sandbox.capture import CHUNK, FRAME_HEADER, CappedBuffer, RawRun

MSG = struct.Struct(">cII")  # kind, execution id, payload length
HEADER = struct.Struct(">I")
MAX_MESSAGE = 8 << 20  # the agent sends output in chunks of at most 64 KiB; anything larger is a broken channel
KINDS = {b"H", b"R", b"O", b"E", b"X", b"C", b"F"}
HELLO_TIMEOUT_S = 60.0
SLACK_S = 5.0  # the host's deadline: the agent's own deadline plus this


def agent_command(uid: int) -> list[str]:
    """The pid 1 of a pooled container: the agent, running every program as ``uid`` and the gid of that number."""
    return ["python3", "-I", "-S", "-c", trusted.source("container_agent"), str(uid), str(uid)]


class AgentClosed(SandboxStartError):
    """The agent's channel ended (container gone) or broke its protocol."""


class AgentChannel:
    """Requests to one container's agent and the messages it sends back (a reader thread fills ``messages``)."""

    def __init__(self, stream):
        self._stream = stream
        self.sock = getattr(stream, "_sock", stream)
        self.sock.settimeout(None)
        self.messages: queue.Queue = queue.Queue()
        self.closed = False
        self.stderr_tail = b""  # the agent's own diagnostics, for error messages
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="docker-agent-reader", daemon=True)
        self._reader.start()

    @classmethod
    def attach(cls, api, cid: str) -> "AgentChannel":
        """Attach to a created (not yet started) container, so the agent's hello is not missed."""
        return cls(api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}))

    def hello(self, timeout_s: float = HELLO_TIMEOUT_S) -> None:
        kind, _, payload = self.get(timeout_s)
        if kind != b"H":
            raise AgentClosed(f"the agent did not say hello: {kind!r} {payload[:200]!r}")

    def send(self, header: dict, payload: bytes = b"") -> None:
        data = json.dumps(header).encode()
        try:
            with self._send_lock:
                self.sock.sendall(HEADER.pack(len(data)) + data + payload)
        except OSError as exc:
            self.close()
            raise AgentClosed(f"cannot reach the agent: {exc}") from exc

    def get(self, timeout_s: float) -> tuple[bytes, int, bytes]:
        """The next message; ``TimeoutError`` after ``timeout_s``; ``AgentClosed`` when the channel ended."""
        try:
            message = self.messages.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            raise TimeoutError from None
        if message is None:
            self.messages.put(None)  # stays closed for every later reader
            tail = self.stderr_tail.decode(errors="replace").strip()[-500:]
            raise AgentClosed("the sandbox container's agent is gone" + (f": {tail}" if tail else ""))
        return message

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._stream.close()
            self.sock.close()
        except OSError:
            pass

    def _read(self) -> None:
        frames, agent = bytearray(), bytearray()
        try:
            while chunk := self.sock.recv(CHUNK):
                frames += chunk
                while len(frames) >= FRAME_HEADER.size:
                    stream_id, size = FRAME_HEADER.unpack_from(frames)
                    if len(frames) < FRAME_HEADER.size + size:
                        break
                    data = bytes(frames[FRAME_HEADER.size:FRAME_HEADER.size + size])
                    del frames[:FRAME_HEADER.size + size]
                    if stream_id == 2:
                        self.stderr_tail = (self.stderr_tail + data)[-4096:]
                        continue
                    agent += data
                    while len(agent) >= MSG.size:
                        kind, xid, length = MSG.unpack_from(agent)
                        if kind not in KINDS or length > MAX_MESSAGE:
                            raise ValueError(f"protocol error: message {kind!r} of {length} bytes")
                        if len(agent) < MSG.size + length:
                            break
                        self.messages.put((kind, xid, bytes(agent[MSG.size:MSG.size + length])))
                        del agent[:MSG.size + length]
        except (OSError, ValueError) as exc:
            self.stderr_tail += f"\n[channel: {exc}]".encode()
        finally:
            self.closed = True
            self.messages.put(None)


def agent_run(channel: AgentChannel, xid: int, execution: Execution, argv: list[str], env: dict[str, str],
              archive: bytes, trusted: bytes, stdin: bytes, limits: dict, t0: float, on_overdue=None) -> RawRun:
    """Run ``argv`` through the agent (``archive`` unpacked into /work, ``trusted`` into /trusted); the result, or
    ``AgentClosed`` if the container fails before the program started.

    ``on_overdue()`` is called if the agent misses its own deadline by ``SLACK_S`` (it kills the program from the
    host); the run is then reported timed out. ``extra["discard"]``: why the container must not be reused ("")."""
    out, err = CappedBuffer(execution.max_output_bytes), CappedBuffer(execution.max_output_bytes)
    header = {"op": "run", "id": xid, "argv": argv, "env": env, "cwd": "/work", "archive": len(archive),
              "trusted": len(trusted), "stdin": len(stdin), "timeout_s": execution.timeout_s,
              "max_output": execution.max_output_bytes, "limits": limits}
    channel.send(header, archive + trusted + stdin)
    t_start, deadline, overdue = None, None, False
    sent = time.monotonic()

    def finished(exit_code: int | None, timed_out: bool, discard: str) -> RawRun:
        started = t_start or time.monotonic()
        return RawRun(exit_code=None if overdue else exit_code, stdout=out, stderr=err, timed_out=timed_out or overdue,
                      start_ms=(started - t0) * 1000, run_ms=(time.monotonic() - started) * 1000,
                      extra={"backend": "docker", "discard": discard})

    try:
        while True:
            try:
                kind, mid, payload = channel.get((deadline or sent + execution.timeout_s + SLACK_S + 30.0)
                                                 - time.monotonic())
            except TimeoutError:
                if overdue:
                    raise AgentClosed("the agent does not answer after its program was killed") from None
                overdue = True
                if on_overdue is not None:
                    on_overdue()
                deadline = time.monotonic() + SLACK_S
                continue
            if mid != xid:
                continue  # a late message of an earlier request
            if kind == b"R":
                t_start = time.monotonic()
                deadline = t_start + execution.timeout_s + SLACK_S
            elif kind == b"O":
                out.write(payload)
            elif kind == b"E":
                err.write(payload)
            elif kind == b"F":
                raise AgentClosed(payload.decode(errors="replace")[:2000])
            elif kind == b"X":
                try:
                    info = json.loads(payload)
                    out.total, err.total = int(info["stdout_bytes"]), int(info["stderr_bytes"])
                    exit_code, timed_out, clean = info["exit"], bool(info["timed_out"]), bool(info["clean"])
                except (ValueError, KeyError, TypeError, RecursionError) as exc:  # any unreadable report
                    raise AgentClosed(f"malformed exit report: {payload[:200]!r}") from exc
                discard = ("the agent missed its deadline" if overdue else
                           "" if clean else "the agent could not kill what its program left")
                return finished(exit_code, timed_out, discard)
    except AgentClosed as exc:
        if t_start is None:
            raise  # nothing ran: the sandbox failed
        return finished(None, False, f"the agent failed after its program started: {exc}")


def agent_reset(channel: AgentChannel, xid: int, keep_work: bool, timeout_s: float = 30.0) -> tuple[bool, str]:
    """Ask the agent to kill everything and empty the container (keeping ``/work`` if asked); (clean?, detail)."""
    channel.send({"op": "reset", "id": xid, "keep_work": keep_work})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            kind, mid, payload = channel.get(deadline - time.monotonic())
        except TimeoutError:
            return False, "reset timed out"
        if mid == xid and kind in (b"C", b"F"):
            return kind == b"C", payload.decode(errors="replace")[:500]

