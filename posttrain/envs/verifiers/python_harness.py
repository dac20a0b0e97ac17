"""Trusted harness for the ``python_tests`` verifier: copied into the sandbox as ``harness.py`` next to ``solution.py``.

It reads ``{"nonce", "entry_point", "cases": [args, ...]}`` from stdin (expected values are never sent), compiles
and loads the solution, calls ``entry_point(*args)`` for each case and writes one JSON record per event to the
original stdout, each on its own line prefixed with the nonce. The solution's own prints go to stderr. The host
(``python_tests.score``) compares the reported values with the expected ones; nothing here decides a verdict.

This file runs under the sandbox's Python, so it uses only the standard library and plain syntax.

Example (run by hand):
    $ printf 'def f(x):\\n    return x + 1\\n' > solution.py
    $ echo '{"nonce": "N", "entry_point": "f", "cases": [[1], [2]]}' | python3 -I python_harness.py
    N {"compiled": true}
    N {"case": 0, "value": 2}
    N {"case": 1, "value": 3}
"""

import json
import os
import sys
import types

MAX_VALUE_CHARS = 10000  # a longer serialized return value is reported as an error, keeping stdout small
HERE = os.path.dirname(os.path.abspath(__file__))  # the workspace


def describe(error):
    """``Type: message`` of an exception, cut short."""
    return ("%s: %s" % (type(error).__name__, error))[:300]


def main():
    request = json.loads(sys.stdin.read())
    nonce = request["nonce"]
    results_fd = os.dup(1)
    os.dup2(2, 1)  # from here on, fd 1 (and so print()) is stderr

    def emit(line_json):
        os.write(results_fd, ("\n%s %s\n" % (nonce, line_json)).encode("utf-8"))

    try:
        with open(os.path.join(HERE, "solution.py"), encoding="utf-8") as handle:
            code = compile(handle.read(), "solution.py", "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError) as error:
        emit(json.dumps({"compiled": False, "error": describe(error)}))
        return
    emit(json.dumps({"compiled": True}))

    sys.path.insert(0, HERE)  # workspace files are importable
    module = types.ModuleType("solution")
    module.__file__ = os.path.join(HERE, "solution.py")
    sys.modules["solution"] = module
    try:
        exec(code, module.__dict__)
    except BaseException as error:  # noqa: B036 - SystemExit and friends are the solution's failure too
        emit(json.dumps({"loaded": False, "error": describe(error)}))
        return
    function = module.__dict__.get(request["entry_point"])
    if not callable(function):
        emit(json.dumps({"loaded": False, "error": "no function %r defined" % request["entry_point"]}))
        return

    for index, args in enumerate(request["cases"]):
        try:
            value_json = json.dumps(function(*args))
        except BaseException as error:  # noqa: B036
            emit(json.dumps({"case": index, "error": describe(error)}))
            continue
        if len(value_json) > MAX_VALUE_CHARS:
            emit(json.dumps({"case": index, "error": "ValueTooLarge: %d characters" % len(value_json)}))
        else:
            emit('{"case": %d, "value": %s}' % (index, value_json))


if __name__ == "__main__":
    main()
