"""The prelude of the trusted programs: what they share, shipped in place of their ``prelude`` import line.

Each trusted program imports its helpers with one line, ``from posttrain.trusted.prelude import ...``;
``posttrain.trusted.source`` ships the program with that line replaced by this file's text, so the sandbox runs
one self-contained file and the preamble is written once. Standard library only, plain syntax: it runs under the
sandbox's ``python3``, which may be older than ours.

- ``start(non_dumpable)``: read the host's one JSON request (all of stdin), make this process non-dumpable if
  asked, give SIGINT back its default action (on bwrap the harness is the sandbox's pid 1, which then ignores
  every signal its programs send it), open the ``Results``: the original stdout (``fd``) is kept for results and fd 1
  (so ``print``) points at stderr; ``emit`` writes one JSON record on a line of its own, prefixed with the nonce the
  host chose for this run, so no line printed by the program under test can pass for a result.
- ``make_non_dumpable()`` (best effort) and ``set_dumpable(libc, flag)``: ``prctl(PR_SET_DUMPABLE)``; a
  non-dumpable process cannot be ptraced by, nor have its ``/proc`` entries (fds, memory, environ) opened by,
  the same-uid programs it runs.
- ``reap_orphans()``: wait for every child that already exited (orphans of the program are re-parented to pid 1).
- ``compile_solution(path, results)``: compile the solution (never run it) and report whether it compiled.

Example:
    >>> describe(ValueError("bad"))
    'ValueError: bad'
    >>> len(describe(RuntimeError("x" * 1000)))
    300
"""

import json
import os
import signal
import sys

PR_SET_DUMPABLE = 4


class Results:
    """The channel to the host: the original stdout, kept as ``fd``; fd 1 is stderr once this exists."""

    def __init__(self, nonce):
        self.nonce = nonce
        self.fd = os.dup(1)
        os.dup2(2, 1)  # from here on, fd 1 (and so print()) is stderr

    def emit_json(self, line_json):
        """Write one record, already serialized, on its own line after the nonce."""
        os.write(self.fd, ("\n%s %s\n" % (self.nonce, line_json)).encode("utf-8"))

    def emit(self, record):
        self.emit_json(json.dumps(record))


def load_libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def set_dumpable(libc, dumpable):
    """``prctl(PR_SET_DUMPABLE, dumpable)`` through ``libc`` (``load_libc()``)."""
    libc.prctl(PR_SET_DUMPABLE, 1 if dumpable else 0, 0, 0, 0)


def make_non_dumpable():
    """``set_dumpable(False)``, best effort: without ctypes the sandbox still isolates the run."""
    try:
        set_dumpable(load_libc(), False)
    except Exception:  # noqa: BLE001
        pass


def start(non_dumpable):
    """A harness's first step: (the host's request, the ``Results`` channel), non-dumpable first if asked."""
    request = json.loads(sys.stdin.read())
    if non_dumpable:
        make_non_dumpable()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    return request, Results(request["nonce"])


def reap_orphans():
    """Reap every exited child without waiting for live ones."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def describe(error):
    """``Type: message`` of an exception, cut short."""
    return ("%s: %s" % (type(error).__name__, error))[:300]


def compile_solution(path, results):
    """The solution at ``path`` compiled (not run), reported as ``{"compiled": ...}``; None if it does not compile."""
    try:
        with open(path, encoding="utf-8") as handle:
            code = compile(handle.read(), "solution.py", "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError) as error:
        results.emit({"compiled": False, "error": describe(error)})
        return None
    results.emit({"compiled": True})
    return code
