"""Trusted driver of the ``workspace_tests`` verifier, run in the sandbox as ``python3 -I -c <its shipped text>``.

It is never a file in the workspace, so the solution cannot edit it. It reads one JSON request from stdin::

    {"nonce", "setup": <bash script or null>, "solution": <bash script or null>, "solution_timeout_s",
     "test_timeout_s", "tests_dir": <where the trusted test files are>, "tests": [{"name", "argv": [...]}],
     "env": {...}}

The trusted test files are ``Execution.trusted_files`` under ``/trusted/<random name>``: read-only for every
process of the sandbox, and ``/trusted`` cannot be listed, so only a process told the name (a test's argv) finds
them; the solution phase is never told it, and none of its processes is left when the first test starts.

1. Reads its own rlimits, nice value and CPU affinity first (the sandbox's, before any program could change them:
   a program of the same uid may ``prlimit`` or renice it where the seccomp policy does not stop that), makes
   itself non-dumpable (no same-uid process can open its ``/proc`` entries: fds, memory, environ), keeps the original
   stdout for results and points its own fd 1 at stderr. It runs only where ``kill(-1)`` reaches the sandbox's
   programs and nothing else: as the sandbox's pid 1 (bwrap, warm slots) or as the programs' uid that the host chose
   for this container (a Docker container, where it becomes a child subreaper so that every orphan comes back to it):
   the uid of the ``sandbox`` account, which the container's root process writes at its start from the host's lease,
   never root; elsewhere (outside a sandbox, as root, as any other uid) it refuses.
2. Setup phase (when the env has a ``setup`` script): runs it like the solution below (cwd ``/work``, under the
   solution's deadline, then every other process ended); if it fails, neither the solution nor any test runs: the
   env's workspace could not be made, which the host reports as infra, never as the solution's outcome.
3. Solution phase (when ``solution`` is a script): checks it with ``bash -n``, runs it with cwd ``/work`` in its own
   session with stdin from ``/dev/null`` and its output on stderr, under a deadline; then ends every other process
   (``kill(-1, SIGKILL)``, never a choice made by reading process states, which a program controls) and reaps them
   all. If one cannot be reaped within a grace period, no test runs.
4. Test phase: for each test, substitutes ``{tests}`` in the argv with the tests' directory, runs it with cwd
   ``/work``, a clean environment (``HOME`` is a fresh private dir per test), the start limits, nice value and
   affinity set again in the test's process, and a deadline; then ends every other process again.
5. Emits one nonce-prefixed JSON record per phase and per test: exit code, timeout flag, captured stdout (capped)
   and the tail of stderr. The host compares exit codes and stdout with the expectations it kept to itself.

Never run it outside a sandbox: it SIGKILLs every process its uid may signal.

Shipped with the prelude (``posttrain.trusted.source("workspace_driver")``); standard library only, plain syntax
(it runs under the sandbox's Python).
"""

import os
import pwd
import resource
import shutil
import signal
import subprocess
import tempfile
import time

from posttrain.trusted.prelude import load_libc, start

WORKDIR = "/work"
MAX_STDOUT = 64 * 1024
MAX_STDERR_TAIL = 2000
PR_SET_CHILD_SUBREAPER = 36
SANDBOX_USER = "sandbox"  # the programs' account: in a container, its root process writes it with the leased uid


def may_end_all():
    """Whether ``kill(-1)`` ends only the sandbox's programs: as the pid 1 of the sandbox's pid namespace (bwrap,
    warm slots), or as the uid the host chose for the programs of a container (the ``sandbox`` account's, which
    only the container's root process writes), whose other processes are root's."""
    if os.getpid() == 1:
        return True
    try:
        chosen = pwd.getpwnam(SANDBOX_USER).pw_uid
    except KeyError:
        return False
    return os.getuid() != 0 and os.getuid() == chosen


def become_subreaper():
    """Orphans of the programs come back to this process (not to a pid 1 above it), so it can wait for them."""
    if os.getpid() != 1:
        load_libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def end_all_others(grace_s=5.0):
    """SIGKILL every other process this driver may signal, ``kill(-1)``, and reap until it has no child left.

    ``kill(-1)`` signals every process of the pid namespace but pid 1 and the caller in one pass that a concurrent
    ``fork`` cannot slip past, whatever state the process is in (a thread group whose leader exited is killed with
    its other threads); every one of them is a descendant, re-parented here, so ``ECHILD`` means none is left.
    True once none is left; False if some were still dying after ``grace_s``."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass  # ESRCH: nothing left to signal
        try:
            while os.waitpid(-1, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)


def start_state():
    """What every program of this run starts with: this driver's rlimits, nice value and CPU affinity, read before
    any program ran. A program may change the driver's (same uid); the driver gives each program these again."""
    limits = []
    for name in sorted(dir(resource)):
        if name.startswith("RLIMIT_"):
            try:
                limits.append((getattr(resource, name), resource.getrlimit(getattr(resource, name))))
            except (OSError, ValueError):
                pass
    return {"limits": limits, "nice": os.getpriority(os.PRIO_PROCESS, 0), "affinity": os.sched_getaffinity(0)}


def apply_state(state):
    """In a program's process before it execs: the start state, exactly; raises if it cannot be had (a hard limit
    or the nice value can only be restored by a process that was never lowered)."""
    for which, limit in state["limits"]:
        if resource.getrlimit(which) != limit:
            resource.setrlimit(which, limit)
    if os.getpriority(os.PRIO_PROCESS, 0) != state["nice"]:
        os.setpriority(os.PRIO_PROCESS, 0, state["nice"])
    os.sched_setaffinity(0, state["affinity"])


def run(argv, timeout_s, env, state, stdout=None):
    """Run ``argv`` in /work in a new session with the start ``state``, then end every process left;
    (exit code or None, timed_out, stdout bytes, stderr tail bytes, whether every process ended)."""
    out_file = tempfile.TemporaryFile()
    err_file = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen(argv, cwd=WORKDIR, env=env, stdin=subprocess.DEVNULL,
                                stdout=out_file if stdout is None else stdout, stderr=err_file,
                                start_new_session=True, close_fds=True, preexec_fn=lambda: apply_state(state))
    except (OSError, subprocess.SubprocessError) as error:
        return None, False, b"", ("cannot start %s: %s" % (argv[0], error)).encode(), end_all_others()
    timed_out = False
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out, code = True, None
    ended = end_all_others()  # it, and everything it left behind (reaped here: its status is already known)
    if code is None:
        proc.returncode = -signal.SIGKILL  # reaped above; Popen need not wait for it
    out_file.seek(0)
    data = out_file.read(MAX_STDOUT + 1)
    err_file.seek(0, 2)
    size = err_file.tell()
    err_file.seek(max(0, size - MAX_STDERR_TAIL))
    return code, timed_out, data, err_file.read(), ended


def main():
    state = start_state()  # before anything else runs
    request, results = start(non_dumpable=True)
    if not may_end_all():
        results.emit({"phase": "refused", "error": "runs only as a sandbox's pid 1 or its program uid"})
        return
    become_subreaper()
    base_env = dict(request.get("env") or {})
    private = tempfile.mkdtemp(prefix="driver-")
    setup = request.get("setup")
    if setup is not None:
        code, timed_out, _, err, ended = run(["bash", "-c", setup], float(request["solution_timeout_s"]),
                                             dict(base_env, HOME=private), state, stdout=2)
        results.emit({"phase": "setup", "exit": code, "timed_out": timed_out, "ended": ended,
                      "error": err.decode("utf-8", "replace")[-300:]})
        if code != 0 or not ended:
            results.emit({"phase": "done"})
            return
    solution = request.get("solution")
    if solution is not None:
        script = os.path.join(private, "solution.sh")
        with open(script, "w", encoding="utf-8") as handle:
            handle.write(solution)
        code, _, _, err, ended = run(["bash", "-n", script], 5, dict(base_env, HOME=private), state)
        results.emit({"phase": "syntax", "ok": code == 0, "error": err.decode("utf-8", "replace")[-300:]})
        if code == 0:
            code, timed_out, _, _, ended = run(["bash", script], float(request["solution_timeout_s"]),
                                               dict(base_env, HOME=private), state, stdout=2)
            results.emit({"phase": "solution", "exit": code, "timed_out": timed_out, "ended": ended})
        if not ended:  # something of the solution still runs: no test may run beside it
            results.emit({"phase": "done"})
            return
    for index, test in enumerate(request["tests"]):
        home = tempfile.mkdtemp(prefix="home-")
        argv = [arg.replace("{tests}", request["tests_dir"]) for arg in test["argv"]]
        code, timed_out, out, err, ended = run(argv, float(request["test_timeout_s"]), dict(base_env, HOME=home),
                                               state)
        results.emit({"test": index, "exit": code, "timed_out": timed_out,
                      "stdout": out[:MAX_STDOUT].decode("utf-8", "replace"), "truncated": len(out) > MAX_STDOUT,
                      "stderr": err.decode("utf-8", "replace")})
        shutil.rmtree(home, ignore_errors=True)
        if not ended:
            break
    results.emit({"phase": "done"})


if __name__ == "__main__":
    main()
