"""Trusted harness of the ``python_tests`` verifier: copied into the sandbox as ``harness.py`` next to ``solution.py``.

It reads ``{"nonce", "entry_point", "cases": [args, ...]}`` from stdin (expected values are never sent), compiles
and loads the solution, calls ``entry_point(*args)`` for each case and writes one JSON record per event to the
original stdout, each on its own line prefixed with the nonce. The solution's own prints go to stderr. The host
(``python_tests.score``) compares the reported values with the expected ones; nothing here decides a verdict.

Shipped with the prelude (``posttrain.trusted.source("python_tests_harness")``); it runs under the sandbox's Python,
so it uses only the standard library and plain syntax.

Example (run by hand):
    $ printf 'def f(x):\\n    return x + 1\\n' > solution.py
    $ echo '{"nonce": "N", "entry_point": "f", "cases": [[1], [2]]}' | python3 -I harness.py
    N {"compiled": true}
    N {"case": 0, "value": 2}
    N {"case": 1, "value": 3}
"""

import json
import os
import sys
import types

from posttrain.trusted.prelude import compile_solution, describe, start

MAX_VALUE_CHARS = 10000  # a longer serialized return value is reported as an error, keeping stdout small
HERE = os.path.dirname(os.path.abspath(__file__))  # the workspace


def main():
    request, results = start(non_dumpable=False)  # the solution runs in this very process: nothing to hide
    code = compile_solution(os.path.join(HERE, "solution.py"), results)
    if code is None:
        return

    sys.path.insert(0, HERE)  # workspace files are importable
    module = types.ModuleType("solution")
    module.__file__ = os.path.join(HERE, "solution.py")
    sys.modules["solution"] = module
    try:
        exec(code, module.__dict__)
    except BaseException as error:  # noqa: B036 - SystemExit and friends are the solution's failure too
        results.emit({"loaded": False, "error": describe(error)})
        return
    function = module.__dict__.get(request["entry_point"])
    if not callable(function):
        results.emit({"loaded": False, "error": "no function %r defined" % request["entry_point"]})
        return

    for index, args in enumerate(request["cases"]):
        try:
            value_json = json.dumps(function(*args))
        except BaseException as error:  # noqa: B036
            results.emit({"case": index, "error": describe(error)})
            continue
        if len(value_json) > MAX_VALUE_CHARS:
            results.emit({"case": index, "error": "ValueTooLarge: %d characters" % len(value_json)})
        else:
            results.emit_json('{"case": %d, "value": %s}' % (index, value_json))


if __name__ == "__main__":
    main()
