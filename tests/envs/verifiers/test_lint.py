"""The ``lint`` signal: real pyflakes on the text, clean programs 1, every kind of finding 0, hostile text 0 without
raising, and nothing of the program ever runs."""

from __future__ import annotations

import pytest

from posttrain.envs.verifiers.lint import MAX_CHARS, pyflakes_signal

pytestmark = pytest.mark.unit


def test_a_clean_program_is_1():
    assert pyflakes_signal("import math\n\n\ndef area(r):\n    return math.pi * r ** 2\n") == (1.0, "")
    assert pyflakes_signal("") == (1.0, "")  # nothing to find: what the empty program earns (admission bounds it)


@pytest.mark.parametrize("program, finding", [
    ("import os\n\ndef f(x):\n    return x\n", "'os' imported but unused"),
    ("def f(x):\n    return y\n", "undefined name 'y'"),
    ("def f(x):\n    z = 1\n    return x\n", "local variable 'z' is assigned to but never used"),
    ("def f(x):\n    return x\n\n\ndef f(x):\n    return 2 * x\n", "redefinition of unused 'f'"),
    ("def f(x):\n    return f'{1}' + f'x'\n", "f-string is missing placeholders"),
    ("def f(x):\n    return x is 1\n", "use ==/!= to compare constant literals"),
])
def test_each_kind_of_finding_is_0_and_named(program, finding):
    value, note = pyflakes_signal(program)
    assert value == 0.0
    assert finding in note, note


def test_the_program_is_parsed_never_run(tmp_path):
    marker = tmp_path / "ran"
    program = f"open({str(marker)!r}, 'w').write('x')\nimport os\nos._exit(3)\n"
    assert pyflakes_signal(program) == (1.0, "")
    assert not marker.exists()


@pytest.mark.parametrize("program", [
    "def f(x) return x\n",  # a syntax error
    "(" * 100_000 + ")" * 100_000,  # too many nested parentheses for the parser
    "-" * 200_000 + "1",  # the parser gives up (MemoryError)
    "1" + "+1" * 900,  # parses, but the walk recurses too deep
    "x = 1\n" * (MAX_CHARS // 6 + 1),  # too long to lint
    "x = '\0'\n",  # a NUL byte
])
def test_hostile_text_is_not_clean_and_never_raises(program):
    value, note = pyflakes_signal(program)
    assert value == 0.0
    assert note
