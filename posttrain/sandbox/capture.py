"""Bounded stream capture: keep the first N bytes of a program's output, count and discard the rest.

A program printing 100 MB must not cost us 100 MB: a ``CappedBuffer`` holds at most ``limit + 1`` bytes, and the
pumps below run in daemon threads so a stream that never ends (or never reads its stdin) cannot block the caller.

Example:
    >>> buf = CappedBuffer(4)
    >>> buf.write(b"abc"); buf.write(b"defgh")
    >>> buf.total, buf.result()
    (8, ('abcd\\n[... output truncated at 4 bytes ...]', True))
"""

from __future__ import annotations

import os
import threading
from typing import Callable

from posttrain.sandbox.base import truncate

CHUNK = 1 << 16


class CappedBuffer:
    """Accumulates bytes up to ``limit`` (plus one byte, to know a cut happened); fed by one thread."""

    def __init__(self, limit: int):
        self.limit = limit
        self.total = 0  # every byte seen, kept or not
        self._chunks: list[bytes] = []
        self._kept = 0

    def write(self, data: bytes) -> None:
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


def pump_fd(fd: int, buffer: CappedBuffer) -> threading.Thread:
    """Read ``fd`` to EOF into ``buffer`` in a daemon thread, then close ``fd``."""

    def loop() -> None:
        try:
            while chunk := os.read(fd, CHUNK):
                buffer.write(chunk)
        except OSError:
            pass  # the other end vanished: EOF for our purposes
        finally:
            os.close(fd)

    return _start(loop)


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
