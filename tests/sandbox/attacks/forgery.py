"""Reward forgery through the sandbox itself (issue 8, finding 1): wrong solutions that try to reach a process above
or beside the trusted harness, or to rewrite the trusted tests while they run. Registered in ``ATTACKS`` like the
attacks of ``attack_programs.py``; each must come out as the program's failure (reward 0, not excluded)."""

from __future__ import annotations

from posttrain.envs.spec import EnvSpec, Limits
from tests.sandbox.attacks.attack_programs import assert_cheat_fails, attack, verdict

ASSERTS = EnvSpec(id="attack/asserts", prompt="", entry_point="add", reference="def add(a, b):\n    return a + b\n",
                  verifier={"kind": "python_asserts",
                            "asserts": ["assert add(1, 2) == 3", "assert add(40, 2) == 42", "assert add(0, 0) == 0"]},
                  limits=Limits(timeout_s=5, memory_mb=256))

# Runs inside the forked test child: it finds the nonce in the harness's frames (it is the harness's memory, forked),
# then tries to get a copy of the result channel from every process it can name, and writes a pass for every test.
PIDFD_FORGER = '''
import ctypes, os, sys

def add(a, b):
    libc = ctypes.CDLL(None, use_errno=True)
    frame, nonce = sys._getframe(), None
    while frame is not None and nonce is None:
        nonce = getattr(frame.f_locals.get("results"), "nonce", None)
        frame = frame.f_back
    forged = "".join('\\n%s {"test": %d, "ok": true}\\n' % (nonce, i) for i in range(8)).encode()
    for pid in range(1, 100):
        pidfd = libc.syscall(434, pid, 0)  # pidfd_open
        for fd in range(1, 8) if pidfd >= 0 else ():
            copy = libc.syscall(438, pidfd, fd, 0)  # pidfd_getfd
            if copy >= 0:
                try:
                    os.write(copy, forged)
                except OSError:
                    pass
    return a - b + 1  # wrong for every test
'''


@attack("forge_records_through_a_pidfd_copy_of_the_result_channel", "verdict")
def forge_records_through_pidfd(box, host):
    assert verdict(box, ASSERTS, ASSERTS.reference).passed  # the control: the harness passes an honest solution
    assert_cheat_fails(verdict(box, ASSERTS, PIDFD_FORGER))


CHECK = 'out=$(bash /work/answer.sh)\n[ "$out" = 42 ]\n'
REWRITE = EnvSpec(id="attack/rewrite", prompt="", kind="agent", runtime="bash", reference="echo 42\n",
                  workspace={"answer.sh": "echo 0\n"},
                  verifier={"kind": "workspace_tests", "solution_file": "answer.sh", "files": {"check.sh": CHECK},
                            "tests": [{"name": "answer", "cmd": "bash {tests}/check.sh", "exit_code": 0}]},
                  limits=Limits(timeout_s=10, memory_mb=256))
# Code under test finds the running test script in its parent's argv and rewrites what bash reads next to `exit 0`.
TEST_REWRITER = r'''script=$(tr '\0' '\n' < /proc/$PPID/cmdline | sed -n 2p)
{ head -n 1 "$script"; echo 'exit 0'; } > /tmp/forged 2>/dev/null && cat /tmp/forged > "$script" 2>/dev/null
chmod u+w "$script" "$(dirname "$script")" 2>/dev/null; cat /tmp/forged > "$script" 2>/dev/null
echo 41
'''


@attack("rewrite_the_trusted_test_while_it_runs", "integrity")
def rewrite_the_trusted_test_while_it_runs(box, host):
    assert verdict(box, REWRITE, REWRITE.reference).passed  # the control
    assert_cheat_fails(verdict(box, REWRITE, TEST_REWRITER))
