"""The seccomp filter, loaded into a throwaway process: listed calls denied, the rest allowed."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

from posttrain.sandbox import seccomp

pytestmark = pytest.mark.unit


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
