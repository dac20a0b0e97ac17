"""Small parts of the sandbox layer, without a sandbox: the seccomp filter (loaded into a throwaway process), the
single-thread pipe pump, Docker stream demultiplexing, rlimit arguments, owner labels."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
import time

import pytest

from posttrain.sandbox import lifecycle, seccomp
from posttrain.sandbox.base import Execution
from posttrain.sandbox.capture import FRAME_HEADER, CappedBuffer, FrameDemux, pump_pipes
from posttrain.sandbox.workspace import prlimit_args

LOADER = textwrap.dedent("""
    import ctypes, errno, os, sys, termios, fcntl
    prog = sys.stdin.buffer.read()
    libc = ctypes.CDLL(None, use_errno=True)
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
    fprog = Fprog(len(prog) // 8, prog)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0, ctypes.get_errno()  # PR_SET_SECCOMP, FILTER
    out = []
    for name, nr in [("keyctl", 250), ("bpf", 321), ("unshare", 272), ("mount", 165), ("io_uring_setup", 425)]:
        rc = libc.syscall(nr, 0, 0, 0, 0, 0)
        out.append(f"{name}={rc}/{ctypes.get_errno()}")
    master, slave = os.openpty()
    for name, request in [("TIOCSTI", termios.TIOCSTI), ("TCGETS", termios.TCGETS)]:
        try:
            fcntl.ioctl(slave, request, b"x" if name == "TIOCSTI" else bytes(64))
            out.append(f"{name}=ok")
        except OSError as e:
            out.append(f"{name}={e.errno}")
    out.append(f"getpid={os.getpid() > 0}")
    print(" ".join(out))
""")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the loader's syscall numbers are x86-64's")
def test_seccomp_filter_denies_the_listed_calls_and_allows_the_rest():
    done = subprocess.run([sys.executable, "-c", LOADER], input=seccomp.program(), capture_output=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["keyctl=-1/1", "bpf=-1/1", "unshare=-1/1", "mount=-1/1",
                                            "io_uring_setup=-1/1", "TIOCSTI=1", "TCGETS=ok", "getpid=True"]


def test_seccomp_program_is_well_formed():
    prog = seccomp.program("x86_64")
    assert len(prog) % 8 == 0 and len(prog) // 8 < 255  # jump offsets fit in a byte
    assert seccomp.program("aarch64") and seccomp.program("mips") is None


def test_pump_pipes_feeds_reads_and_stops_at_the_deadline():
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    proc = subprocess.Popen(["cat"], stdin=in_r, stdout=out_w)
    os.close(in_r)
    os.close(out_w)
    out = CappedBuffer(1 << 20)
    data = b"x" * 300_000  # larger than a pipe buffer: writes and reads must interleave
    hit = pump_pipes([(out_r, out)], in_w, data, time.monotonic() + 10, proc.kill)
    proc.wait()
    assert not hit and out.getvalue() == data

    out_r, out_w = os.pipe()
    proc = subprocess.Popen(["sleep", "30"], stdout=out_w)
    os.close(out_w)
    t0 = time.monotonic()
    hit = pump_pipes([(out_r, CappedBuffer(10))], None, b"", time.monotonic() + 0.3, proc.kill)
    proc.wait()
    assert hit and time.monotonic() - t0 < 3


def test_frame_demux_holds_back_the_marker_and_splits_streams():
    out, err = CappedBuffer(100), CappedBuffer(100)
    demux = FrameDemux(out, err, marker=b"READY\n")
    stream = FRAME_HEADER.pack(1, 3) + b"REA" + FRAME_HEADER.pack(2, 2) + b"e!" + FRAME_HEADER.pack(1, 6) + b"DY\nhi\n"
    for i in range(0, len(stream), 5):  # arbitrary chunking
        demux.feed(stream[i:i + 5])
    assert demux.ready and (out.getvalue(), err.getvalue()) == (b"hi\n", b"e!")
    out = CappedBuffer(100)
    forged = FrameDemux(out, CappedBuffer(10), marker=b"READY\n")
    forged.feed(FRAME_HEADER.pack(1, 4) + b"RE\nx")
    forged.finish()
    assert not forged.ready and out.getvalue() == b"RE\nx"


def test_prlimit_arguments_follow_the_execution():
    args = prlimit_args("/p", Execution({}, ["x"], timeout_s=0.2), max_open_files=8, max_file_mb=2,
                        address_space=1 << 30, max_processes=16)
    assert args == ["/p", "--as=1073741824", "--cpu=2:3", "--fsize=2097152", "--nofile=8", "--core=0", "--nproc=16"]


def test_owner_labels_identify_this_process():
    labels = lifecycle.owner_labels()
    assert lifecycle.owner_alive(labels)
    assert not lifecycle.owner_alive({**labels, lifecycle.OWNER: "0"})
    assert lifecycle.once("test-key") and not lifecycle.once("test-key")
