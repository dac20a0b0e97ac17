"""Trusted driver of the ``workspace_tests`` verifier, run in the sandbox as ``python3 -I -c <its shipped text>``.

It is never a file in the workspace, so the solution cannot edit it. It reads one JSON request from stdin::

    {"nonce", "solution": <bash script or null>, "solution_timeout_s", "test_timeout_s",
     "tests_dir": <where the trusted test files are>, "tests": [{"name", "argv": [...]}], "env": {...}}

The trusted test files are ``Execution.trusted_files`` under ``/trusted/<random name>``: read-only for every
process of the sandbox, and ``/trusted`` cannot be listed, so only a process told the name (a test's argv) finds
them; the solution phase does not.

1. Runs as the sandbox's pid 1 on bwrap (nothing of the sandbox sits above it), makes itself non-dumpable (no same-uid
   process can ptrace it or open its ``/proc`` entries: fds, memory, environ), keeps the original stdout for
   results and points its own fd 1 at stderr.
2. Solution phase (when ``solution`` is a script): checks it with ``bash -n``, runs it with cwd ``/work`` in its own
   session with stdin from ``/dev/null`` and its output on stderr, under a deadline; then kills every process left in
   the sandbox except itself and its ancestors (a background process left behind cannot touch the tests).
3. Test phase: for each test, substitutes ``{tests}`` in the argv with the tests' directory, runs it with cwd
   ``/work``, a clean environment (``HOME`` is a fresh private dir per test) and a deadline, then kills every
   leftover process again and reaps them.
4. Emits one nonce-prefixed JSON record per phase and per test: exit code, timeout flag, captured stdout (capped)
   and the tail of stderr. The host compares exit codes and stdout with the expectations it kept to itself.

Shipped with the prelude (``posttrain.trusted.source("workspace_driver")``); standard library only, plain syntax
(it runs under the sandbox's Python).
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time

from posttrain.trusted.prelude import reap_orphans, start

WORKDIR = "/work"
MAX_STDOUT = 64 * 1024
MAX_STDERR_TAIL = 2000


def ancestors():
    """This process and every ancestor (their pids) in this pid namespace, read from /proc."""
    pids, pid = set(), os.getpid()
    while pid > 0 and pid not in pids:
        pids.add(pid)
        try:
            with open("/proc/%d/stat" % pid) as handle:
                stat = handle.read()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def live_others(keep):
    """Pids of every other live (not zombie) process this driver can see."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in keep:
            continue
        try:
            with open("/proc/%s/stat" % entry) as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            found.append(int(entry))
    return found


def kill_others():
    """SIGKILL every other process until none is left (or 2 s passed), reap them; returns how many were killed."""
    keep, killed, deadline = ancestors(), set(), time.monotonic() + 2.0
    while time.monotonic() < deadline:
        others = live_others(keep)
        if not others:
            break
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.005)
    reap_orphans()
    return len(killed)


def run(argv, timeout_s, env, stdout=None):
    """Run ``argv`` in /work in a new session; (exit code or None, timed_out, stdout bytes, stderr tail bytes)."""
    out_file = tempfile.TemporaryFile()
    err_file = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen(argv, cwd=WORKDIR, env=env, stdin=subprocess.DEVNULL,
                                stdout=out_file if stdout is None else stdout, stderr=err_file,
                                start_new_session=True, close_fds=True)
    except OSError as error:
        return None, False, b"", ("cannot start %s: %s" % (argv[0], error)).encode()
    timed_out = False
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out, code = True, None
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()
    out_file.seek(0)
    data = out_file.read(MAX_STDOUT + 1)
    err_file.seek(0, 2)
    size = err_file.tell()
    err_file.seek(max(0, size - MAX_STDERR_TAIL))
    return code, timed_out, data, err_file.read()


def main():
    request, results = start(non_dumpable=True)
    base_env = dict(request.get("env") or {})
    private = tempfile.mkdtemp(prefix="driver-")
    solution = request.get("solution")
    if solution is not None:
        script = os.path.join(private, "solution.sh")
        with open(script, "w", encoding="utf-8") as handle:
            handle.write(solution)
        code, _, _, err = run(["bash", "-n", script], 5, dict(base_env, HOME=private))
        results.emit({"phase": "syntax", "ok": code == 0, "error": err.decode("utf-8", "replace")[-300:]})
        if code == 0:
            code, timed_out, _, _ = run(["bash", script], float(request["solution_timeout_s"]),
                                        dict(base_env, HOME=private), stdout=2)
            killed = kill_others()
            results.emit({"phase": "solution", "exit": code, "timed_out": timed_out, "killed": killed})
    for index, test in enumerate(request["tests"]):
        kill_others()
        home = tempfile.mkdtemp(prefix="home-")
        argv = [arg.replace("{tests}", request["tests_dir"]) for arg in test["argv"]]
        code, timed_out, out, err = run(argv, float(request["test_timeout_s"]), dict(base_env, HOME=home))
        kill_others()
        results.emit({"test": index, "exit": code, "timed_out": timed_out,
              "stdout": out[:MAX_STDOUT].decode("utf-8", "replace"), "truncated": len(out) > MAX_STDOUT,
              "stderr": err.decode("utf-8", "replace")})
        shutil.rmtree(home, ignore_errors=True)
    results.emit({"phase": "done"})


if __name__ == "__main__":
    main()
