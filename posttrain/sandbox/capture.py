"""Bounded stream capture: keep the first N bytes of a program's output, count and discard the rest.

A program printing 100 MB must not cost us 100 MB: a ``CappedBuffer`` holds at most ``limit + 1`` bytes.
``pump_pipes`` feeds a program's stdin and drains its pipes in the calling thread (bwrap), enforcing a deadline;
``pump_socket``/``feed`` do the same for a Docker attach socket in daemon threads, so a stream that never ends (or a
program that never reads its stdin) cannot block the caller. ``FrameDemux`` splits Docker's multiplexed streams;
``RawRun`` is what a backend saw before decoding.

Example:
    >>> buf = CappedBuffer(4)
    >>> buf.write(b"abc"); buf.write(b"defgh")
    >>> buf.total, buf.result()
    (8, ('abcd\\n[... output truncated at 4 bytes ...]', True))
"""

from __future__ import annotations

import os
import selectors
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from posttrain.sandbox.base import ExecutionResult, Usage, truncate

CHUNK = 1 << 16
PIPE_CHUNK = 1 << 16  # bytes written to a program's stdin per wakeup


class CappedBuffer:
    """Accumulates bytes up to ``limit`` (plus one byte, to know a cut happened); fed by one thread."""

    def __init__(self, limit: int):
        self.limit = limit
        self.total = 0  # every byte seen, kept or not
        self.first_byte_at: float | None = None  # time.monotonic() when the first byte came
        self._chunks: list[bytes] = []
        self._kept = 0

    def write(self, data: bytes) -> None:
        if data and self.first_byte_at is None:
            self.first_byte_at = time.monotonic()
        self.total += len(data)
        room = self.limit + 1 - self._kept
        if room > 0:
            piece = data[:room]
            self._chunks.append(piece)
            self._kept += len(piece)

    def getvalue(self) -> bytes:
        return b"".join(self._chunks)

    def result(self) -> tuple[str, bool]:
        """(decoded text, truncated?) exactly as ``base.truncate`` reports it."""
        return truncate(self.getvalue(), self.limit)


def feed(write: Callable[[bytes], object], close: Callable[[], object], data: bytes) -> threading.Thread:
    """Write ``data`` then ``close()`` in a daemon thread; a program that exits or never reads is not an error."""

    def send() -> None:
        try:
            if data:
                write(data)
        except OSError:
            pass  # the program closed its stdin or exited
        finally:
            try:
                close()
            except OSError:
                pass

    return _start(send)


def _start(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


@dataclass
class RawRun:
    """What a backend saw of one program run, before decoding: capped streams, exit, timings, resources used."""

    exit_code: int | None
    stdout: CappedBuffer
    stderr: CappedBuffer
    timed_out: bool = False
    infra_error: str = ""
    start_ms: float = 0.0
    run_ms: float = 0.0
    extra: dict = field(default_factory=dict)
    usage: Usage = Usage()  # read from the execution's cgroup before it is gone (``cgroup.Cgroup.usage``)

    def result(self) -> ExecutionResult:
        """The decoded ``ExecutionResult`` (streams cut at their buffers' limits, with the marker)."""
        stdout, out_cut = self.stdout.result()
        stderr, err_cut = self.stderr.result()
        return ExecutionResult(exit_code=None if (self.timed_out or self.infra_error) else self.exit_code,
                               stdout=stdout, stderr=stderr, timed_out=self.timed_out, infra_error=self.infra_error,
                               output_truncated=out_cut or err_cut, start_ms=self.start_ms, run_ms=self.run_ms,
                               extra=dict(self.extra), cpu_s=self.usage.cpu_s,
                               memory_peak_mb=self.usage.memory_peak_mb)


FRAME_HEADER = struct.Struct(">BxxxL")  # docker stream frames: stream id (1 stdout, 2 stderr), 3 pad, length
STDERR_STREAM = 2


class FrameDemux:
    """Splits Docker's multiplexed stream into capped stdout/stderr buffers.

    With ``marker``, the first ``len(marker)`` bytes of stdout are held back and compared with it: a launcher prints
    the marker before it hands over to the program, so its presence proves the program was started (the program
    cannot write to stdout before it exists). ``ready`` says whether it matched; a mismatch is program output.

    >>> out, err = CappedBuffer(100), CappedBuffer(100)
    >>> demux = FrameDemux(out, err, marker=b"GO\\n")
    >>> demux.feed(FRAME_HEADER.pack(1, 4) + b"GO\\nh" + FRAME_HEADER.pack(2, 1) + b"!" + FRAME_HEADER.pack(1, 2))
    >>> demux.feed(b"i\\n")
    >>> demux.ready, out.getvalue(), err.getvalue()
    (True, b'hi\\n', b'!')
    """

    def __init__(self, out: CappedBuffer, err: CappedBuffer, marker: bytes = b""):
        self.out, self.err, self.marker = out, err, marker
        self.ready = not marker
        self.last_data = time.monotonic()  # when the stream last delivered anything
        self._head = bytearray()
        self._pending = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.last_data = time.monotonic()
        self._pending += chunk
        while len(self._pending) >= FRAME_HEADER.size:
            stream_id, size = FRAME_HEADER.unpack_from(self._pending)
            end = FRAME_HEADER.size + size
            if len(self._pending) < end:
                return
            data = bytes(self._pending[FRAME_HEADER.size:end])
            del self._pending[:end]
            if stream_id == STDERR_STREAM:
                self.err.write(data)
            else:
                self._stdout(data)

    def _stdout(self, data: bytes) -> None:
        need = len(self.marker) - len(self._head)
        if need > 0 and self.marker:
            self._head += data[:need]
            data = data[need:]
            if len(self._head) < len(self.marker):
                return
            self.ready = bytes(self._head) == self.marker
            if not self.ready:
                self.out.write(bytes(self._head))
        if data:
            self.out.write(data)

    def finish(self) -> None:
        """End of stream: a partial marker is program output after all."""
        if self.marker and len(self._head) < len(self.marker) and self._head:
            self.out.write(bytes(self._head))
            self._head = bytearray(self.marker)  # do not emit it twice


def pump_socket(sock, demux: FrameDemux) -> threading.Thread:
    """Read a Docker stream socket to EOF (or until it is closed or times out) into ``demux``, in a daemon thread."""

    def loop() -> None:
        try:
            while chunk := sock.recv(CHUNK):
                demux.feed(chunk)
        except OSError:
            pass  # closed under us or timed out: what was read is kept
        finally:
            demux.finish()

    return _start(loop)


def pump_pipes(readers: list[tuple[int, CappedBuffer]], stdin_fd: int | None, stdin: bytes,
               deadline: Callable[[], float], on_deadline: Callable[[], None], drain_s: float = 5.0) -> bool:
    """Feed ``stdin`` to ``stdin_fd`` and read every reader fd to EOF into its buffer, all in this thread.

    At ``deadline()`` (a ``time.monotonic()`` value, asked again after every read: what a reader delivers may move
    it) ``on_deadline()`` is called once (it kills the writers) and the readers are drained for up to ``drain_s``
    more. Every fd is closed on return. Returns whether the deadline hit.
    """
    sel = selectors.DefaultSelector()
    open_fds = {fd for fd, _ in readers}
    buffers = dict(readers)
    for fd in open_fds:
        sel.register(fd, selectors.EVENT_READ)
    view = memoryview(stdin)
    if stdin_fd is not None:
        if view:
            os.set_blocking(stdin_fd, False)
            sel.register(stdin_fd, selectors.EVENT_WRITE)
        else:
            os.close(stdin_fd)
            stdin_fd = None
    hit, drained_by = False, 0.0
    try:
        while open_fds:
            left = (drained_by if hit else deadline()) - time.monotonic()
            if left <= 0:
                if hit:
                    break  # drained as long as we wait
                hit, drained_by = True, time.monotonic() + drain_s
                on_deadline()
                continue
            for key, _ in sel.select(left):
                fd = key.fd
                if fd == stdin_fd:
                    try:
                        view = view[os.write(fd, view[:PIPE_CHUNK]):]
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:  # the program closed its stdin or exited
                        view = view[:0]
                    if not view:
                        sel.unregister(fd)
                        os.close(fd)
                        stdin_fd = None
                    continue
                try:
                    chunk = os.read(fd, CHUNK)
                except OSError:
                    chunk = b""
                if chunk:
                    buffers[fd].write(chunk)
                else:
                    sel.unregister(fd)
                    os.close(fd)
                    open_fds.discard(fd)
    finally:
        for fd in open_fds:
            os.close(fd)
        if stdin_fd is not None:
            os.close(stdin_fd)
        sel.close()
    return hit
