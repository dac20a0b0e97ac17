"""Trusted harness of the ``python_asserts`` verifier: copied into the sandbox as ``asserts_harness.py``.

It reads ``{"nonce", "entry_point", "setup", "tests": [code, ...], "plain_values", "test_timeout_s"}`` from
stdin. The parent process never runs untrusted code: it only compiles ``solution.py`` (no execution) and then,
for each test, forks a child that loads the solution, runs the setup code and the one test (an ``assert``
statement, or a few statements ending in one) in a namespace whose ``__builtins__`` were copied before the
solution ran. A child passes only if it writes its per-test random token to its private pipe *after* the test
code returned and then exits 0; an early ``exit(0)``, a crash, a timeout or a failed assert are failures. The
parent reports ``{"test": i, "ok": ...}`` on the original stdout, prefixed with the nonce; children close that
descriptor before loading the solution, and the parent makes itself non-dumpable so no child can reopen it
through ``/proc``. With ``plain_values`` the entry point is wrapped so it may only return plain data (numbers,
strings, bytes, None and lists/tuples/dicts/sets of them): an object whose ``__eq__`` always says True fails.

Residual risk, documented in ``docs/env-spec.md``: the solution runs in the same process as the test, so a
deliberate attack (patching modules the test uses, digging the token out of the harness's frames) can still pass
an assert; value-comparison cases (``python_tests``) do not have this weakness.

Shipped with the prelude (``posttrain.trusted.source("python_asserts_harness")``); standard library only, plain
syntax (it runs under the sandbox's Python).

Example (run by hand):
    $ printf 'def f(x):\\n    return x + 1\\n' > solution.py
    $ echo '{"nonce": "N", "entry_point": "f", "setup": "", "tests": ["assert f(1) == 2", "assert f(1) == 3"],
    ...      "plain_values": true, "test_timeout_s": 5}' | python3 -I asserts_harness.py
    N {"compiled": true}
    N {"test": 0, "ok": true}
    N {"test": 1, "ok": false, "error": "AssertionError: assert f(1) == 3"}
"""

import os
import select
import signal
import sys
import time
import types

from posttrain.trusted.prelude import compile_solution, reap_orphans, start

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_REPORT = 4096  # bytes read from a child's pipe


def run_child(code, request, token, write_fd, results_fd):
    """In the forked child: load the solution, run setup + one test, write ``token`` if it returned; never returns."""
    _write, _exit, _type, _repr = os.write, os._exit, type, repr
    os.close(results_fd)
    os.dup2(2, 1)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    import builtins

    clean_builtins = dict(builtins.__dict__)  # taken before the solution can patch anything
    plain = (int, float, complex, str, bytes, bool, type(None), list, tuple, dict, set, frozenset)

    def check_plain(value, depth):
        kind = _type(value)
        if kind not in plain or depth > 50:
            raise TypeError("returned a non-plain value of type %s" % kind.__name__)
        if kind is dict:
            for key, item in dict.items(value):
                check_plain(key, depth + 1)
                check_plain(item, depth + 1)
        elif kind in (list, tuple, set, frozenset):
            for item in value:
                check_plain(item, depth + 1)

    def report(text):
        try:
            _write(write_fd, text.encode("utf-8", "replace")[:MAX_REPORT])
        except OSError:
            pass

    try:
        module = types.ModuleType("solution")
        module.__file__ = os.path.join(HERE, "solution.py")
        sys.modules["solution"] = module
        sys.path.append(HERE)
        exec(code, module.__dict__)
        function = module.__dict__.get(request["entry_point"])
        if not callable(function):
            raise NameError("no function %r defined" % request["entry_point"])
        if request.get("plain_values", True):
            inner = function

            def function(*args, **kwargs):
                value = inner(*args, **kwargs)
                check_plain(value, 0)
                return value

        namespace = dict(module.__dict__)
        namespace.update({"__builtins__": clean_builtins, "__name__": "__test__",
                          request["entry_point"]: function, "candidate": function})
        exec(compile(request["setup"], "<setup>", "exec"), namespace)
        exec(compile(request["test"], "<test>", "exec"), namespace)
    except AssertionError as error:
        report("F AssertionError: %s" % (str(error) or request["test"].strip().splitlines()[-1])[:300])
        _exit(1)
    except BaseException as error:  # noqa: B036 - SystemExit, SkipTest... are failures too
        report("E %s: %s" % (_type(error).__name__, str(error)[:300]))
        _exit(2)
    report(token)
    _exit(0)


def run_test(code, request, index, results):
    """Fork one child for test ``index`` and report its outcome, decided here from its exit status and token."""
    token = os.urandom(16).hex()
    read_fd, write_fd = os.pipe()
    child_request = {"entry_point": request["entry_point"], "setup": request["setup"],
                     "plain_values": request.get("plain_values", True), "test": request["tests"][index]}
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        run_child(code, child_request, token, write_fd, results.fd)
    os.close(write_fd)
    deadline = time.monotonic() + float(request.get("test_timeout_s", 5))
    data, status, timed_out, eof = b"", None, False, False
    while status is None:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if eof:
            time.sleep(min(left, 0.01))
        elif select.select([read_fd], [], [], min(left, 0.05))[0]:
            chunk = os.read(read_fd, MAX_REPORT)
            data += chunk[:MAX_REPORT - len(data)]
            eof = not chunk
            if chunk:
                continue
        done, child_status = os.waitpid(pid, os.WNOHANG)
        if done:
            status = child_status
    while not eof and select.select([read_fd], [], [], 0)[0]:  # what the child wrote before it exited
        chunk = os.read(read_fd, MAX_REPORT)
        if not chunk:
            break
        data += chunk[:MAX_REPORT - len(data)]
    os.close(read_fd)
    for target in (-pid, pid):  # the child's process group (anything it started), then the child itself
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
    if status is None:
        _, status = os.waitpid(pid, 0)
    reap_orphans()
    exit_code = os.waitstatus_to_exitcode(status)
    text = data.decode("utf-8", "replace")
    ok = (not timed_out) and text == token and exit_code == 0
    record = {"test": index, "ok": ok}
    if not ok:
        if timed_out:
            record["error"] = "timed out"
        elif text[:2] in ("F ", "E "):
            record["error"] = text[2:]
        else:
            record["error"] = "exited with code %s before the test finished" % exit_code
    results.emit(record)


def main():
    request, results = start(non_dumpable=True)
    code = compile_solution(os.path.join(HERE, "solution.py"), results)
    if code is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    for index in range(len(request["tests"])):
        run_test(code, request, index, results)


if __name__ == "__main__":
    main()
