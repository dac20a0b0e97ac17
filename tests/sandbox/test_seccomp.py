"""The one seccomp policy: its contents (unit), and the same verdicts from a throwaway process that loads the BPF,
from real bwrap (``--seccomp``) and from a Docker container given ``docker_security_opt()`` (integration)."""

from __future__ import annotations

import errno
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import textwrap

import pytest

from posttrain.sandbox import seccomp

X86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="the probes' syscall numbers are x86-64's")
BWRAP = shutil.which("bwrap")
NEEDS_BWRAP = pytest.mark.skipif(BWRAP is None, reason="bubblewrap (bwrap) is not installed")

# One line of name=verdict; the numbers are x86-64's. A clone that goes through exits in the child at once.
PROBE = textwrap.dedent("""
    import ctypes, errno, os, subprocess, sys, termios, threading
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    def call(nr, *args):
        rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a) for a in args])
        if rc == 0 and nr == 56:
            os._exit(0)  # the child of a clone that went through
        return "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    out = {}
    for name, nr in [("keyctl", 250), ("bpf", 321), ("unshare", 272), ("mount", 165), ("setns", 308),
                     ("perf_event_open", 298), ("io_uring_setup", 425), ("io_uring_enter", 426), ("clone3", 435),
                     ("pidfd_getfd", 438), ("nr500", 500)]:
        out[name] = call(nr, 0, 0, 0, 0, 0)
    if "control" not in sys.argv:  # unfiltered, the clone would go through
        out["clone_newuser"] = call(56, 0x10000000 | 17, 0, 0, 0, 0)  # CLONE_NEWUSER | SIGCHLD
        out["setpriority_user"] = call(141, 2, 0, os.getpriority(os.PRIO_PROCESS, 0))  # every process of the uid
    other = subprocess.Popen(["sleep", "30"])  # another process of the same uid: no ptrace, prlimit, renice
    out["ptrace_other"] = call(101, 0x4206, other.pid, 0, 0)  # PTRACE_SEIZE
    out["ptrace_self"] = call(101, 0x4206, 0, 0, 0)  # the kernel's own answer is ESRCH
    out["prlimit_other"] = call(302, other.pid, 7, 0, 0)  # RLIMIT_NOFILE, nothing read or written
    out["prlimit_self"] = call(302, 0, 7, 0, 0)
    out["prlimit_self_high_bits"] = call(302, 1 << 32, 7, 0, 0)  # the kernel reads pid 0: refused all the same
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    out["setpriority_other"] = call(141, 0, other.pid, nice)  # the same value: no change even where allowed
    out["setpriority_self"] = call(141, 0, 0, nice)
    other.kill()
    other.wait()
    out["vsock"] = call(41, 40, 1, 0)
    out["vsock_high_bits"] = call(41, (1 << 32) | 40, 1, 0)  # the kernel reads an int: still AF_VSOCK
    out["unix"] = call(41, 1, 1, 0)
    master, slave = os.openpty()
    char, buf = ctypes.c_char(b"x"), ctypes.create_string_buffer(64)
    out["TIOCSTI"] = call(16, slave, termios.TIOCSTI, ctypes.addressof(char))
    out["TIOCSTI_high_bits"] = call(16, slave, (1 << 32) | termios.TIOCSTI, ctypes.addressof(char))
    out["TIOCLINUX"] = call(16, slave, 0x541C, ctypes.addressof(char))
    out["TCGETS"] = call(16, slave, termios.TCGETS, ctypes.addressof(buf))
    worker = threading.Thread(target=lambda: out.__setitem__("thread", "ok"))
    worker.start()
    worker.join()
    out["subprocess"] = subprocess.run(["/bin/echo", "ok"], capture_output=True, text=True).stdout.strip()
    print(" ".join(f"{k}={v}" for k, v in out.items()))
""")
EXPECTED = {"keyctl": "EPERM", "bpf": "EPERM", "unshare": "EPERM", "mount": "EPERM", "setns": "EPERM",
            "perf_event_open": "EPERM", "io_uring_setup": "EPERM", "io_uring_enter": "EPERM", "clone3": "ENOSYS",
            "pidfd_getfd": "EPERM", "nr500": "ENOSYS", "clone_newuser": "EPERM", "vsock": "EPERM",
            "vsock_high_bits": "EPERM", "unix": "ok", "TIOCSTI": "EPERM", "TIOCSTI_high_bits": "EPERM",
            "TIOCLINUX": "EPERM", "TCGETS": "ok", "thread": "ok", "subprocess": "ok", "setpriority_user": "EPERM",
            "ptrace_other": "EPERM", "ptrace_self": "EPERM", "prlimit_other": "EPERM", "prlimit_self": "ok",
            "prlimit_self_high_bits": "EPERM", "setpriority_other": "EPERM", "setpriority_self": "ok"}
# getpid through the other syscall tables of an x86-64 kernel: x32 (bit 30 of the number) and i386 (int 0x80)
FOREIGN_ABI = {"x32": "libc = ctypes.CDLL(None)\nlibc.syscall.restype = ctypes.c_long\n"
                      "print(libc.syscall(ctypes.c_long(0x40000000 | 39)))\n",
               "i386": "page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
                       "page.write(bytes.fromhex('b814000000cd80c3'))  # mov eax, 20; int 0x80; ret\n"
                       "print(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))())\n"}
SIGSYS_EXIT = 128 + 31


def verdicts(stdout: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in stdout.split())


def allows(policy: dict, name: str, args: list[int]) -> str | None:
    """What the profile's rules decide for ``name(*args)`` (first match, as the rules are disjoint), None: default."""
    def matches(cmp: dict) -> bool:
        value = args[cmp["index"]]
        if cmp["op"] == "SCMP_CMP_MASKED_EQ":
            return value & cmp["value"] == cmp.get("valueTwo", 0)
        return {"SCMP_CMP_EQ": value == cmp["value"], "SCMP_CMP_NE": value != cmp["value"]}[cmp["op"]]
    hits = {(r["action"], r.get("errnoRet")) for r in policy["syscalls"]
            if name in r["names"] and not r["includes"].get("arches") and all(matches(c) for c in r["args"])}
    assert len(hits) <= 1, f"{name}{args}: rules disagree: {hits}"
    return next(iter(hits), (None,))[0]


@pytest.mark.unit
def test_profile_is_the_maintained_allow_list_narrowed_for_no_capabilities():
    policy = seccomp.profile()
    allowed = {n for r in policy["syscalls"] if r["action"] == "SCMP_ACT_ALLOW" for n in r["names"]}
    source = json.loads(seccomp.PROFILE_PATH.read_text())
    assert policy["defaultAction"] == "SCMP_ACT_ERRNO"
    assert policy["defaultErrnoRet"] == errno.ENOSYS
    assert {"read", "write", "openat", "execve", "clone", "futex", "wait4"} <= allowed
    assert allowed <= {n for r in source["syscalls"] if r["action"] == "SCMP_ACT_ALLOW" for n in r["names"]}
    assert not allowed & {*seccomp.DENIED, "clone3", "chroot", "iopl", "init_module"}  # ours, and cap-gated ones
    eperm = {n for r in policy["syscalls"] if r.get("errnoRet") == errno.EPERM and not r["args"] for n in r["names"]}
    assert set(seccomp.DENIED) <= eperm
    assert all(not r["includes"].get("caps") and not r["excludes"].get("caps") for r in policy["syscalls"])
    assert [a["subArchitectures"] for a in policy["archMap"]] == [[], []]  # no i386, x32 or arm32


@pytest.mark.unit
@pytest.mark.parametrize("name, args, verdict", [
    ("ioctl", [0, seccomp.TIOCSTI], "SCMP_ACT_ERRNO"), ("ioctl", [0, (7 << 32) | seccomp.TIOCSTI], "SCMP_ACT_ERRNO"),
    ("ioctl", [0, seccomp.TIOCLINUX], "SCMP_ACT_ERRNO"), ("ioctl", [0, 0x5401], "SCMP_ACT_ALLOW"),  # TCGETS
    ("ioctl", [0, 0x80045430], "SCMP_ACT_ALLOW"), ("ioctl", [0, 1 << 32], "SCMP_ACT_ALLOW"),
    ("socket", [40, 1, 0], "SCMP_ACT_ERRNO"), ("socket", [(1 << 32) | 40, 1, 0], "SCMP_ACT_ERRNO"),
    ("socket", [1, 1, 0], "SCMP_ACT_ALLOW"), ("socket", [2, 2, 17], "SCMP_ACT_ALLOW"),
    ("socket", [16, 3, 9], "SCMP_ACT_ERRNO"),  # the profile's own rule: no audit netlink without CAP_AUDIT_WRITE
    ("clone", [0x10000000 | 17], "SCMP_ACT_ERRNO"), ("clone", [0x00020000], "SCMP_ACT_ERRNO"),
    ("clone", [0x003D0F00], "SCMP_ACT_ALLOW"),  # the flags of pthread_create
    ("prlimit64", [0, 7, 1], "SCMP_ACT_ALLOW"), ("prlimit64", [12, 7, 1], "SCMP_ACT_ERRNO"),
    ("prlimit64", [1 << 32, 7, 0], "SCMP_ACT_ERRNO"), ("setpriority", [0, 0, 19], "SCMP_ACT_ALLOW"),
    ("setpriority", [0, 12, 19], "SCMP_ACT_ERRNO"), ("setpriority", [1, 0, 19], "SCMP_ACT_ERRNO"),
    ("setpriority", [2, 0, 19], "SCMP_ACT_ERRNO"), ("ptrace", [0x4206, 12], "SCMP_ACT_ERRNO"),
])
def test_argument_rules_split_exactly_at_the_denied_values(name, args, verdict):
    assert allows(seccomp.profile(), name, args + [0] * (6 - len(args))) == verdict


@pytest.mark.unit
def test_complement_matches_every_number_but_the_denied_ones_exactly_once():
    rng = random.Random(8)
    for values in [set(), {0}, {255}, {0x12, 0x1C}, set(rng.sample(range(256), 9))]:
        pieces = seccomp.complement(values, width=8)
        for x in range(256):
            assert sum(x & mask == v for mask, v in pieces) == (x not in values), (values, x)


@pytest.mark.unit
def test_missing_profile_names_the_package(monkeypatch, tmp_path):
    monkeypatch.setattr(seccomp, "PROFILE_PATH", tmp_path / "seccomp.json")
    with pytest.raises(FileNotFoundError, match=seccomp.PROFILE_PACKAGE):
        seccomp.profile()


@pytest.mark.unit
def test_docker_security_opt_carries_the_profile():
    opt = seccomp.docker_security_opt()
    assert opt.startswith("seccomp=")
    assert json.loads(opt.removeprefix("seccomp=")) == seccomp.profile()


@pytest.mark.unit
def test_program_is_well_formed_for_the_known_machines_only():
    for machine in ("x86_64", "aarch64"):
        prog = seccomp.program(machine)
        assert len(prog) % 8 == 0
        assert 100 < len(prog) // 8 < 4096  # BPF_MAXINSNS
    assert seccomp.program("x86_64") != seccomp.program("aarch64")
    assert seccomp.program("mips") is None


@pytest.mark.unit
@X86_64
def test_filter_loaded_in_a_throwaway_process_gives_the_expected_verdicts():
    loader = textwrap.dedent("""
        import ctypes, sys
        prog = sys.stdin.buffer.read()
        libc = ctypes.CDLL(None, use_errno=True)
        class Fprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
        assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
        assert libc.prctl(22, 2, ctypes.byref(Fprog(len(prog) // 8, prog)), 0, 0) == 0  # PR_SET_SECCOMP, FILTER
    """) + PROBE
    done = subprocess.run([sys.executable, "-c", loader], input=seccomp.program(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert verdicts(done.stdout.decode()) == EXPECTED


def bwrap(argv: list[str], prog: bytes | None, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """``argv`` in a minimal bwrap sandbox (host /usr, new namespaces), under ``prog`` if given."""
    cmd = [BWRAP, "--ro-bind", "/usr", "/usr"]
    for path in ("/bin", "/sbin", "/lib", "/lib64"):
        if os.path.islink(path):
            cmd += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            cmd += ["--ro-bind", path, path]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--unshare-all", "--die-with-parent",
            "--new-session"]
    fds: tuple[int, ...] = ()
    if prog is not None:
        fds = (os.memfd_create("seccomp"),)
        os.write(fds[0], prog)
        os.lseek(fds[0], 0, os.SEEK_SET)
        cmd += ["--seccomp", str(fds[0])]
    try:
        return subprocess.run(cmd + ["--", *argv], input=stdin, capture_output=True, pass_fds=fds, timeout=120)
    finally:
        for fd in fds:
            os.close(fd)


@pytest.mark.integration
@NEEDS_BWRAP
@X86_64
def test_bwrap_enforces_the_policy():
    done = bwrap(["/usr/bin/python3", "-c", PROBE], seccomp.program())
    assert done.returncode == 0, done.stderr.decode()
    assert verdicts(done.stdout.decode()) == EXPECTED


@pytest.mark.integration
@NEEDS_BWRAP
@X86_64
def test_without_the_filter_the_same_calls_reach_the_kernel():
    """The control: the verdicts above come from the filter, not from bwrap's namespaces."""
    got = verdicts(bwrap(["/usr/bin/python3", "-c", PROBE, "control"], None).stdout.decode())
    assert [got[name] == "EPERM" for name in ("io_uring_setup", "vsock", "TIOCLINUX")] == [False] * 3, got
    assert [got[name] for name in ("ptrace_other", "prlimit_other", "setpriority_other")] == ["ok"] * 3, got


@pytest.mark.integration
@NEEDS_BWRAP
@X86_64
@pytest.mark.parametrize("abi", sorted(FOREIGN_ABI))
def test_bwrap_kills_a_process_that_uses_another_syscall_table(abi):
    code = "import ctypes, mmap\n" + FOREIGN_ABI[abi]
    assert bwrap(["/usr/bin/python3", "-c", code], seccomp.program()).returncode == SIGSYS_EXIT


@pytest.mark.integration
@NEEDS_BWRAP
def test_ordinary_programs_still_run():
    code = ("import asyncio, concurrent.futures, hashlib, multiprocessing, subprocess, tempfile\n"
            "with concurrent.futures.ThreadPoolExecutor(4) as pool:\n"
            "    assert sum(pool.map(lambda i: i * i, range(100))) == 328350\n"
            "with multiprocessing.get_context('fork').Pool(2) as pool:\n"
            "    assert pool.map(abs, [-1, -2]) == [1, 2]\n"
            "assert subprocess.run(['/bin/sh', '-c', 'echo $((6 * 7))'], capture_output=True).stdout == b'42\\n'\n"
            "async def main():\n    await asyncio.sleep(0.01)\n    return 'async'\n"
            "with tempfile.NamedTemporaryFile() as f:\n    f.write(b'x')\n"
            "print(asyncio.run(main()), hashlib.sha256(b'').hexdigest()[:8])\n")
    done = bwrap(["/usr/bin/python3", "-c", code], seccomp.program())
    assert (done.returncode, done.stdout) == (0, b"async e3b0c442\n"), done.stderr.decode()


@pytest.mark.integration
@NEEDS_BWRAP
@pytest.mark.skipif(not os.path.exists("/usr/bin/node"), reason="node is not installed")
def test_node_still_runs():
    code = ("const {Worker} = require('worker_threads'); const cp = require('child_process');"
            "const fs = require('fs'); fs.writeFileSync('/tmp/x', 'y'); fs.promises.readFile('/tmp/x', 'utf8')"
            ".then(text => new Promise(done => new Worker('require(\"worker_threads\").parentPort.postMessage(6*7)',"
            " {eval: true}).on('message', n => done(text + n)))).then(out => console.log(out,"
            " cp.execFileSync('/bin/echo', ['child']).toString().trim()));")
    done = bwrap(["/usr/bin/node", "-e", code], seccomp.program())
    assert (done.returncode, done.stdout) == (0, b"y42 child\n"), done.stderr.decode()


def docker_client():
    """A client of a running dockerd that has the sandbox image, or a skip saying what is missing."""
    docker = pytest.importorskip("docker")
    from posttrain.config import DockerPoolConfig

    try:
        client = docker.from_env(timeout=30)
        client.ping()
        client.images.get(DockerPoolConfig().image)
    except docker.errors.DockerException as exc:
        pytest.skip(f"dockerd or the sandbox image is unavailable: {exc}")
    return client


def in_docker(client, code: str) -> tuple[int, str]:
    from posttrain.config import DockerPoolConfig

    box = client.containers.run(DockerPoolConfig().image, ["python3", "-c", code], detach=True, network_mode="none",
                                cap_drop=["ALL"], user="10001:10001",
                                security_opt=["no-new-privileges", seccomp.docker_security_opt()])
    try:
        return box.wait(timeout=120)["StatusCode"], box.logs(stderr=False).decode()
    finally:
        box.remove(force=True)


@pytest.mark.integration
@X86_64
def test_docker_enforces_the_same_policy():
    client = docker_client()
    try:
        status, out = in_docker(client, PROBE)
        assert status == 0, out
        assert verdicts(out) == EXPECTED, out
        for abi in sorted(FOREIGN_ABI):
            assert in_docker(client, "import ctypes, mmap\n" + FOREIGN_ABI[abi])[0] == SIGSYS_EXIT, abi
    finally:
        client.close()
