"""The pure mutation operators (``posttrain.envs.mutation``); its doctests run in ``tests/test_doctests.py``."""

from __future__ import annotations

import ast

import pytest

from posttrain.envs.mutation import python_mutants, thin, token_mutants

pytestmark = pytest.mark.unit

SOURCE = '''def clamp(x, lo, hi):
    """Clamp x into [lo, hi] (docstring 0 is never mutated)."""
    if x < lo:
        return lo
    if x > hi and not lo == hi:
        return hi
    return x * 1
'''


def test_python_mutants_cover_each_operator_family_once_per_site():
    mutants = python_mutants(SOURCE, limit=None)
    assert len(mutants) == len(set(mutants))
    assert ast.unparse(ast.parse(SOURCE)) not in mutants
    for mutant in mutants:
        ast.parse(mutant)  # every mutant is a valid program
        assert "docstring 0 is never mutated" in mutant
    text = "\n".join(mutants)
    for expected in ("if x <= lo:", "if x > lo:", "if x >= hi", "x > hi or", "lo != hi", "return x * 2",
                     "return x * 0", "return x // 1", "return None", "if not x < lo:", "if x > hi and lo == hi:"):
        assert expected in text, expected


def test_python_mutants_of_broken_source_and_limits():
    assert python_mutants("def f(:\n") == []
    assert len(python_mutants(SOURCE, limit=5)) == 5
    assert python_mutants(SOURCE, limit=5) == thin(python_mutants(SOURCE, limit=None), 5)


def test_token_mutants_skip_strings_comments_and_keep_one_change():
    source = 'const s = "a < b"; // x + 1\nif (n <= 10 && ok) { total += n * 2; }\n'
    mutants = token_mutants(source, limit=None)
    assert all('"a < b"' in m and "// x + 1" in m for m in mutants)
    for expected in ("n < 10", "n >= 10", "n <= 11", "n <= 9", "|| ok", "total -= n", "n / 2", "n * 3"):
        assert any(expected in m for m in mutants), expected
    assert len(mutants) == len(set(mutants))
    assert source not in mutants
