"""Output capture without a sandbox: the single-thread pipe pump and Docker stream demultiplexing."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from posttrain.sandbox.capture import FRAME_HEADER, CappedBuffer, FrameDemux, pump_pipes

pytestmark = pytest.mark.unit


def test_pump_pipes_feeds_reads_and_stops_at_the_deadline():
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    proc = subprocess.Popen(["cat"], stdin=in_r, stdout=out_w)
    os.close(in_r)
    os.close(out_w)
    out = CappedBuffer(1 << 20)
    t0 = time.monotonic()
    data = b"x" * 300_000  # larger than a pipe buffer: writes and reads must interleave
    hit = pump_pipes([(out_r, out)], in_w, data, lambda: t0 + 10, proc.kill)
    proc.wait()
    assert not hit
    assert out.getvalue() == data

    out_r, out_w = os.pipe()
    proc = subprocess.Popen(["sleep", "30"], stdout=out_w)
    os.close(out_w)
    t0 = time.monotonic()
    hit = pump_pipes([(out_r, CappedBuffer(10))], None, b"", lambda: t0 + 0.3, proc.kill)
    proc.wait()
    assert hit
    assert time.monotonic() - t0 < 3


def test_pump_pipes_asks_for_the_deadline_again_after_each_read():
    """A deadline that counts from a signal (bwrap's: the program started) moves when the signal is read."""
    out_r, out_w = os.pipe()
    proc = subprocess.Popen(["sh", "-c", "sleep 0.4; echo go; exec sleep 30"], stdout=out_w)
    os.close(out_w)
    signal = CappedBuffer(10)
    t0 = time.monotonic()
    hit = pump_pipes([(out_r, signal)], None, b"", lambda: signal.first_byte_at + 0.3 if signal.total else t0 + 20,
                     proc.kill)
    proc.wait()
    elapsed = time.monotonic() - t0
    assert hit
    assert signal.getvalue() == b"go\n"
    assert 0.6 < elapsed < 5, elapsed


def test_frame_demux_holds_back_the_marker_and_splits_streams():
    out, err = CappedBuffer(100), CappedBuffer(100)
    demux = FrameDemux(out, err, marker=b"READY\n")
    stream = FRAME_HEADER.pack(1, 3) + b"REA" + FRAME_HEADER.pack(2, 2) + b"e!" + FRAME_HEADER.pack(1, 6) + b"DY\nhi\n"
    for i in range(0, len(stream), 5):  # arbitrary chunking
        demux.feed(stream[i:i + 5])
    assert demux.ready
    assert (out.getvalue(), err.getvalue()) == (b"hi\n", b"e!")
    out = CappedBuffer(100)
    forged = FrameDemux(out, CappedBuffer(10), marker=b"READY\n")
    forged.feed(FRAME_HEADER.pack(1, 4) + b"RE\nx")
    forged.finish()
    assert not forged.ready
    assert out.getvalue() == b"RE\nx"
