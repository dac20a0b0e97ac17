"""The ``lint`` signal of reward layers: pyflakes on a Python program's text, on the host.

pyflakes is a passive checker: it parses the program (``ast.parse``) and walks the tree; nothing of the program is
imported or run, so it needs no sandbox. Every pyflakes message is a real defect (an undefined or unused name, a
redefinition, an f-string without placeholders, an import shadowed by a loop variable...; it has no style rules),
so the signal is 1.0 for a program pyflakes finds nothing in and 0.0 otherwise, the first finding being the note.
The text is untrusted and only parsed: a program longer than ``MAX_CHARS``, or one nested so deep that parsing or
the walk gives up (``RecursionError``, ``MemoryError``, a ``SyntaxError`` "too many nested parentheses"), is not
clean (0.0), never an exception.

Computed only when an env's reward layers name ``lint`` (``Verifier.on_demand``): the other signals come with
every verdict.

Example:
    >>> pyflakes_signal("def inc(x):\\n    return x + 1\\n")
    (1.0, '')
    >>> pyflakes_signal("import os\\n\\ndef inc(x):\\n    return y + 1\\n")
    (0.0, "line 1: 'os' imported but unused (and 1 more)")
    >>> pyflakes_signal("def inc(x) return x\\n")[1]
    "line 1: does not parse: expected ':'"
"""

from __future__ import annotations

import ast

from pyflakes.checker import Checker

MAX_CHARS = 200_000  # a completion is far shorter; anything longer is not linted (and not clean)
FILE = "solution.py"  # the name pyflakes reports the program under


def pyflakes_signal(program: str) -> tuple[float, str]:
    """(1.0, "") when pyflakes finds nothing in ``program``, else (0.0, the first finding)."""
    if len(program) > MAX_CHARS:
        return 0.0, f"not linted: longer than {MAX_CHARS} characters"
    try:
        tree = ast.parse(program, filename=FILE)
        messages = sorted(Checker(tree, filename=FILE).messages, key=lambda m: (m.lineno, m.col))
    except SyntaxError as error:  # a NUL byte too: no line then
        return 0.0, (f"line {error.lineno}: " if error.lineno else "") + f"does not parse: {error.msg}"
    except (RecursionError, MemoryError) as error:  # nested too deep to parse or to walk
        return 0.0, f"not linted: {type(error).__name__}"
    if not messages:
        return 1.0, ""
    first = messages[0]
    more = f" (and {len(messages) - 1} more)" if len(messages) > 1 else ""
    return 0.0, f"line {first.lineno}: {first.message % first.message_args}{more}"
