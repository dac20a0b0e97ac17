"""Trusted harness of the ``python_asserts`` verifier: copied into the sandbox as ``asserts_harness.py``.

It reads ``{"nonce", "entry_point", "setup", "tests": [code, ...], "plain_values", "test_timeout_s"}`` from
stdin. The process that reports verdicts (the *parent*) never runs a line of the solution: it evaluates each test
(the setup code, then the one test: an ``assert`` statement, or a few statements ending in one) itself, in a fresh
namespace where the entry point (also bound as ``candidate``) and every other function of the solution the test
names are *proxies*. A proxy sends its arguments to a *worker* process that loaded the solution and gets back the
return value, both as plain data in a tagged JSON encoding (numbers, strings, bytes, None, lists, tuples, dicts,
sets: never ``pickle``, never an object of the solution's): an object whose ``__eq__`` always says True cannot
cross. An exception the function raised comes back as its type name and message (re-raised as that built-in
exception, or as ``SolutionError``). Values the test names that the solution defines at module level (plain data)
are sent once the worker loaded it; a module it imported is imported again in the parent (from the system's paths
only: ``-I`` keeps the workspace out of the parent's ``sys.path``). The arguments are copies: an in-place change
the function makes to one is not seen by the test.

Each test gets a fresh worker, forked by a *spawner* that the parent forks before it reads its request, so no
worker's memory holds a test, the nonce or the result channel (the spawner also points its stdin to
``/dev/null`` and its stdout at stderr). Whatever a worker does (exit, crash, hang, print, walk its frames, kill
the spawner) can only make its own test fail: a test passes iff the parent ran it to the end within
``test_timeout_s`` without an exception. The parent reports ``{"test": i, "ok": ...}`` lines on the original
stdout, prefixed with the nonce; it is non-dumpable, and the seccomp policy refuses ``ptrace``, so no worker
reaches its memory or descriptors.

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

import builtins
import importlib
import json
import os
import signal
import socket
import struct
import sys
import time
import types

from posttrain.trusted.prelude import compile_solution, describe, make_non_dumpable, reap_orphans, start

HERE = os.path.dirname(os.path.abspath(__file__))
SOLUTION = os.path.join(HERE, "solution.py")
MAX_MESSAGE = 32 << 20  # bytes of one encoded message
MAX_DEPTH = 50  # nesting of one value
PLAIN = (bool, int, float, complex, str, bytes, type(None), list, tuple, dict, set, frozenset)
HEADER = struct.Struct(">Q")


class SolutionError(Exception):
    """Raised in a test for what the solution's side did: a non-built-in exception, a crash, a malformed reply."""


class TestTimeout(BaseException):
    """The test's deadline passed (raised in the parent by SIGALRM)."""


# ---- the plain-data encoding both sides speak ----------------------------------------------------------------------
def encode(value, loose=False, depth=0):
    """``value`` as tagged JSON-ready lists; ``TypeError`` for anything but plain data (with ``loose``, instances of
    subclasses of the plain types are taken as their base type)."""
    if depth > MAX_DEPTH:
        raise TypeError("a value nested deeper than %d" % MAX_DEPTH)
    kind = type(value)
    if kind not in PLAIN:
        base = next((t for t in PLAIN[1:] if isinstance(value, t)), None) if loose else None
        if base is None or base is type(None):
            raise TypeError("a non-plain value of type %s" % kind.__name__)
        value, kind = base(value), base
    if value is None:
        return ["n"]
    if kind is bool:
        return ["B", 1 if value else 0]
    if kind is int:
        return ["i", "%x" % value]
    if kind is float:
        return ["f", value.hex()]
    if kind is complex:
        return ["c", value.real.hex(), value.imag.hex()]
    if kind is str:
        return ["s", value]
    if kind is bytes:
        return ["b", value.hex()]
    if kind is dict:
        return ["d", [[encode(k, loose, depth + 1), encode(v, loose, depth + 1)] for k, v in dict.items(value)]]
    return [{list: "l", tuple: "t", set: "S", frozenset: "F"}[kind], [encode(v, loose, depth + 1) for v in value]]


def decode(item, depth=0):
    """The value of one ``encode``d item, checked strictly (it may come from the solution's side)."""
    if depth > MAX_DEPTH + 1 or type(item) is not list or not item or type(item[0]) is not str:
        raise ValueError("malformed value")
    tag, rest = item[0], item[1:]
    if tag == "n" and not rest:
        return None
    if len(rest) == 1 and tag in "BifsblSFtd":
        data = rest[0]
        if tag == "B" and data in (0, 1) and type(data) is int:
            return data == 1
        if type(data) is str and tag in "ifsb":
            if tag == "i":
                return int(data, 16)
            if tag == "f":
                return float.fromhex(data)
            return data if tag == "s" else bytes.fromhex(data)
        if type(data) is list and tag in "lStF":
            items = [decode(v, depth + 1) for v in data]
            return {"l": list, "S": set, "t": tuple, "F": frozenset}[tag](items)
        if type(data) is list and tag == "d":
            out = {}
            for pair in data:
                if type(pair) is not list or len(pair) != 2:
                    raise ValueError("malformed value")
                out[decode(pair[0], depth + 1)] = decode(pair[1], depth + 1)
            return out
    if tag == "c" and len(rest) == 2 and all(type(v) is str for v in rest):
        return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
    raise ValueError("malformed value")


def send(sock, message):
    data = json.dumps(message, ensure_ascii=True, allow_nan=False).encode("ascii")
    sock.sendall(HEADER.pack(len(data)) + data)


def receive(sock):
    """One message, or None at the end of the stream; ``ValueError`` if it is malformed or too long."""
    header = read_exact(sock, HEADER.size)
    if header is None:
        return None
    size = HEADER.unpack(header)[0]
    if size > MAX_MESSAGE:
        raise ValueError("a message of %d bytes" % size)
    data = read_exact(sock, size)
    if data is None:
        return None
    return json.loads(data.decode("ascii"))


def read_exact(sock, size):
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ---- the worker: loads the solution, answers calls (runs only in a process forked by the spawner) -------------------
def serve_solution(sock):
    """Load the solution, then answer ``names`` and ``call`` requests until the parent kills this process."""
    sys.path.append(HERE)
    module = types.ModuleType("solution")
    module.__file__ = SOLUTION
    sys.modules["solution"] = module
    try:
        with open(SOLUTION, encoding="utf-8") as handle:
            exec(compile(handle.read(), "solution.py", "exec"), module.__dict__)
        send(sock, ["ready"])
    except BaseException as error:  # noqa: B036 - SystemExit at load is a failure too
        send(sock, ["raise", type(error).__name__, str(error)[:300]])
        os._exit(1)
    while True:
        request = receive(sock)
        if request is None:
            os._exit(0)
        if request[0] == "names":
            send(sock, ["names", describe_names(module.__dict__, request[1])])
            continue
        _, name, args, kwargs, loose = request
        try:
            value = module.__dict__[name](*decode(args), **decode(kwargs))
        except BaseException as error:  # noqa: B036 - SystemExit, SkipTest... are failures too
            send(sock, ["raise", type(error).__name__, str(error)[:300]])
            continue
        try:
            reply = ["ok", encode(value, loose)]
        except TypeError as error:
            reply = ["raise", "TypeError", "returned %s" % error]
        send(sock, reply)


def describe_names(scope, names):
    """What the solution binds to each of ``names``: ``{"functions": [...], "modules": {...}, "values": {...}}``."""
    out = {"functions": [], "modules": {}, "values": {}}
    for name in names:
        if name not in scope:
            continue
        value = scope[name]
        if isinstance(value, types.ModuleType):
            out["modules"][name] = value.__name__
        elif callable(value):
            out["functions"].append(name)
        else:
            try:
                out["values"][name] = encode(value)
            except TypeError:
                pass
    return out


# ---- the spawner: forked before the request is read, it forks one fresh worker per test -----------------------------
def serve_spawns(sock):
    make_non_dumpable()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the host's request stays the parent's alone
    os.dup2(2, 1)  # so does the result channel: print() goes to stderr
    os.close(null)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    while sock.recv(1):
        mine, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                theirs.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.setpgid(0, 0)
                serve_solution(mine)
            finally:
                os._exit(1)
        mine.close()
        try:
            os.setpgid(pid, pid)  # also here: the parent may kill the group before the worker ran
        except OSError:
            pass
        socket.send_fds(sock, [str(pid).encode()], [theirs.fileno()])
        theirs.close()
    os._exit(0)


class Spawner:
    """The parent's handle on the spawner process."""

    def __init__(self):
        self.sock, theirs = socket.socketpair()
        self.pending = 0  # workers asked for and not received yet (only after a deadline cut a wait short)
        self.workers = []  # handed out and not ended
        pid = os.fork()
        if pid == 0:
            try:
                self.sock.close()
                serve_spawns(theirs)
            finally:
                os._exit(1)
        theirs.close()

    def start(self, deadline):
        """A fresh worker (it loads the solution at once); SIGALRM waits meanwhile, the socket has ``deadline``."""
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        try:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            while self.pending:  # a worker no test will use
                self.receive()
            self.sock.sendall(b"s")
            self.pending += 1
            return self.receive()
        except OSError as error:  # the socket's deadline, or a spawner that ended
            raise SolutionError("the solution's process could not be started: %s" % describe(error)) from None
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})

    def receive(self):
        message, fds, _, _ = socket.recv_fds(self.sock, 32, 1)
        if not message or len(fds) != 1 or not message.isdigit():
            for fd in fds:
                os.close(fd)
            raise SolutionError("the solution's process could not be started")
        self.pending -= 1
        self.workers.append(Worker(int(message), socket.socket(fileno=fds[0])))
        return self.workers[-1]

    def end_workers(self):
        while self.workers:
            self.workers.pop().end()


class Worker:
    """The parent's side of one worker: proxies for the solution's functions."""

    def __init__(self, pid, sock):
        self.pid, self.sock = pid, sock

    def reply(self, request=None):
        """The worker's next message (after sending ``request``, if given): a list whose first item is a string;
        raises what the solution raised, or ``SolutionError`` for a worker that ended or sent something else."""
        try:
            if request is not None:
                send(self.sock, request)
            message = receive(self.sock)
        except OSError:
            message = None
        except (ValueError, RecursionError) as error:
            raise SolutionError("unreadable reply from the solution: %s" % describe(error)[:200]) from None
        if message is None:
            raise SolutionError("the solution's process ended")
        if type(message) is not list or not message or type(message[0]) is not str:
            raise SolutionError("malformed reply from the solution")
        if message[0] == "raise" and len(message) == 3 and all(type(v) is str for v in message[1:]):
            kind = getattr(builtins, message[1], None)
            if isinstance(kind, type) and issubclass(kind, Exception):
                raise kind(message[2][:300])
            raise SolutionError("%s: %s" % (message[1][:100], message[2][:300]))
        return message

    def loaded(self):
        if self.reply() != ["ready"]:
            raise SolutionError("malformed reply from the solution")

    def call(self, name, args, kwargs, loose):
        try:
            request = ["call", name, encode(list(args)), encode(dict(kwargs)), loose]
        except TypeError as error:
            raise TypeError("cannot pass it to the solution: %s" % error) from None
        message = self.reply(request)
        if message[0] != "ok" or len(message) != 2:
            raise SolutionError("malformed reply from the solution")
        try:
            return decode(message[1])
        except (ValueError, TypeError, RecursionError, OverflowError) as error:
            raise SolutionError("unreadable value from the solution: %s" % describe(error)[:200]) from None

    def proxy(self, name, loose):
        def function(*args, **kwargs):
            return self.call(name, args, kwargs, loose)

        function.__name__ = function.__qualname__ = name
        return function

    def names(self, names, loose):
        """The solution's bindings for ``names``, as the test sees them: proxies, plain values, modules."""
        reply = self.reply(["names", sorted(names)])
        message = reply[1] if reply[0] == "names" and len(reply) == 2 else None
        if type(message) is not dict or any(type(message.get(k)) is not t for k, t in
                                            (("functions", list), ("modules", dict), ("values", dict))):
            raise SolutionError("malformed reply from the solution")
        scope = {}
        for name in message["functions"]:
            if type(name) is str and name in names:
                scope[name] = self.proxy(name, loose)
        for name, module in message["modules"].items():
            if name in names and type(module) is str:
                try:
                    scope[name] = importlib.import_module(module)
                except Exception:  # noqa: BLE001 - not importable outside the workspace: left unbound
                    pass
        for name, value in message["values"].items():
            if name in names:
                try:
                    scope[name] = decode(value)
                except (ValueError, TypeError, RecursionError, OverflowError):
                    pass
        return scope

    def end(self):
        for target in (-self.pid, self.pid):  # its process group (anything it started), then the worker itself
            try:
                os.kill(target, signal.SIGKILL)
            except OSError:
                pass
        self.sock.close()


# ---- the parent: evaluates each test itself --------------------------------------------------------------------------
def names_in(code):
    """Every global name ``code`` (and the functions, lambdas and comprehensions in it) may read."""
    found, stack = set(), [code]
    while stack:
        current = stack.pop()
        found.update(current.co_names)
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return found


def evaluate(worker, request, setup, test):
    """Run one test (compiled ``setup`` and ``test``) against a fresh ``worker``; raises what the test raised."""
    entry, loose = request["entry_point"], not request.get("plain_values", True)
    worker.loaded()
    scope = worker.names(names_in(setup) | names_in(test) | {entry}, loose)
    if entry not in scope or not callable(scope[entry]):
        raise NameError("no function %r defined" % entry)
    namespace = {"__builtins__": dict(builtins.__dict__), "__name__": "__test__"}
    namespace.update(scope)
    namespace["candidate"] = scope[entry]
    exec(setup, namespace)
    exec(test, namespace)


def on_alarm(signum, frame):
    raise TestTimeout()


def run_test(spawner, request, index, results):
    """Evaluate test ``index`` under its deadline and report the outcome.

    The deadline is a one-shot timer whose handler raises ``TestTimeout`` wherever the parent is: at most one
    such exception per test, caught by the outer ``try``. A test that swallowed it still fails on the clock."""
    source = request["tests"][index]
    timeout = max(float(request.get("test_timeout_s", 5)), 0.001)
    record, deadline = {"test": index, "ok": False}, time.monotonic() + timeout
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            setup, test = compile(request["setup"], "<setup>", "exec"), compile(source, "<test>", "exec")
            evaluate(spawner.start(deadline), request, setup, test)
            record["ok"] = time.monotonic() <= deadline
            if not record["ok"]:
                record["error"] = "timed out"
        except TestTimeout:
            raise
        except AssertionError as error:
            record["error"] = "AssertionError: %s" % (str(error) or source.strip().splitlines()[-1])[:300]
        except BaseException as error:  # noqa: B036 - whatever the test raised is a failure
            record["error"] = describe(error)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except TestTimeout:
        record = {"test": index, "ok": False, "error": "timed out"}
    signal.setitimer(signal.ITIMER_REAL, 0)
    spawner.end_workers()
    reap_orphans()
    results.emit(record)


def main():
    spawner = Spawner()  # first: it must not hold the request
    request, results = start(non_dumpable=True)
    signal.signal(signal.SIGALRM, on_alarm)
    if compile_solution(SOLUTION, results) is None:
        return
    for index in range(len(request["tests"])):
        run_test(spawner, request, index, results)


if __name__ == "__main__":
    main()
