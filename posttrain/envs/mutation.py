"""Mutation operators for coverage checks: wrong-but-plausible variants of a reference solution.

Pure functions on source text, no I/O. ``python_mutants`` mutates a Python AST (arithmetic operators, comparisons,
boolean operators, constants +-1, negated conditions, ``return`` values replaced by ``None``) and unparses each
mutant; ``token_mutants`` does the same for C-like sources (JavaScript, shell arithmetic) at the token level,
skipping strings and comments. Each mutant differs from the original in exactly one place; the lists are
deterministic, deduplicated, and thinned evenly to ``limit``.

Admission's coverage check runs the mutants through the env's verifier: a good test suite *kills* (fails) most of
them; survivors point at behaviour no test pins down.

Example:
    >>> ms = python_mutants("def f(x):\\n    return x + 1\\n")
    >>> 'def f(x):\\n    return x - 1' in ms, 'def f(x):\\n    return x + 2' in ms, 'def f(x):\\n    return None' in ms
    (True, True, True)
    >>> token_mutants("const f = (a, b) => a < b ? 1 : 0;")[:2]
    ['const f = (a, b) => a <= b ? 1 : 0;', 'const f = (a, b) => a > b ? 1 : 0;']
"""

from __future__ import annotations

import ast
import copy
import re
from typing import Iterator

DEFAULT_LIMIT = 24

# Each operator is replaced by each of its plausible confusions.
BINOPS: dict[type, tuple[type, ...]] = {
    ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.FloorDiv, ast.Add), ast.Div: (ast.Mult, ast.FloorDiv),
    ast.FloorDiv: (ast.Div, ast.Mult), ast.Mod: (ast.FloorDiv,), ast.Pow: (ast.Mult,),
    ast.BitAnd: (ast.BitOr,), ast.BitOr: (ast.BitAnd,), ast.LShift: (ast.RShift,), ast.RShift: (ast.LShift,),
}
CMPOPS: dict[type, tuple[type, ...]] = {
    ast.Lt: (ast.LtE, ast.Gt), ast.LtE: (ast.Lt, ast.GtE), ast.Gt: (ast.GtE, ast.Lt), ast.GtE: (ast.Gt, ast.LtE),
    ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,), ast.In: (ast.NotIn,), ast.NotIn: (ast.In,),
    ast.Is: (ast.IsNot,), ast.IsNot: (ast.Is,),
}
BOOLOPS: dict[type, tuple[type, ...]] = {ast.And: (ast.Or,), ast.Or: (ast.And,)}


def _docstring_nodes(tree: ast.AST) -> set[int]:
    """ids of docstring constants (never mutated)."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _sites(tree: ast.AST) -> Iterator[tuple[int, int]]:
    """(node index in ``ast.walk`` order, variant number) for every single-point mutation of ``tree``."""
    skip = _docstring_nodes(tree)
    for index, node in enumerate(ast.walk(tree)):
        for variant in range(len(_variants(node, skip))):
            yield index, variant


def _variants(node: ast.AST, skip: set[int]) -> list:
    """The replacements one node admits (an operator class, a constant, or a marker for structural edits)."""
    if isinstance(node, ast.BinOp):
        return list(BINOPS.get(type(node.op), ()))
    if isinstance(node, ast.AugAssign):
        return list(BINOPS.get(type(node.op), ()))
    if isinstance(node, ast.Compare):
        return [(i, op) for i, cmp in enumerate(node.ops) for op in CMPOPS.get(type(cmp), ())]
    if isinstance(node, ast.BoolOp):
        return list(BOOLOPS.get(type(node.op), ()))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        return ["drop"]
    if isinstance(node, ast.Constant) and id(node) not in skip:
        value = node.value
        if isinstance(value, bool):
            return [not value]
        if isinstance(value, (int, float)):
            return [value + 1, value - 1] if value != 0 else [1, -1]
        return []
    if isinstance(node, (ast.If, ast.While, ast.IfExp)):
        return ["negate"]
    if isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None):
        return ["none"]
    return []


class _Apply(ast.NodeTransformer):
    """Apply variant ``variant`` at the node with ``ast.walk`` index ``target``."""

    def __init__(self, tree: ast.AST, target: int, variant: int):
        self.skip = _docstring_nodes(tree)
        self.target_node = next(n for i, n in enumerate(ast.walk(tree)) if i == target)
        self.choice = _variants(self.target_node, self.skip)[variant]

    def visit(self, node):
        if node is not self.target_node:
            return self.generic_visit(node)
        choice = self.choice
        if isinstance(node, (ast.BinOp, ast.AugAssign, ast.BoolOp)):
            node.op = choice()
        elif isinstance(node, ast.Compare):
            i, op = choice
            node.ops[i] = op()
        elif isinstance(node, ast.UnaryOp):
            return node.operand
        elif isinstance(node, ast.Constant):
            return ast.copy_location(ast.Constant(value=choice), node)
        elif isinstance(node, (ast.If, ast.While, ast.IfExp)):
            node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
        elif isinstance(node, ast.Return):
            node.value = ast.Constant(value=None)
        return node


def thin(items: list[str], limit: int | None) -> list[str]:
    """At most ``limit`` items, spread evenly over the list (deterministic).

    >>> thin(list("abcdefgh"), 3)
    ['a', 'c', 'f']
    """
    if limit is None or len(items) <= limit:
        return list(items)
    if limit <= 0:
        return []
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def python_mutants(source: str, limit: int | None = DEFAULT_LIMIT) -> list[str]:
    """Single-point AST mutants of Python ``source`` as unparsed programs; ``[]`` if it does not parse."""
    try:
        tree = ast.parse(source)
        original = ast.unparse(tree)
    except (SyntaxError, ValueError, RecursionError):
        return []
    seen, out = {original}, []
    for target, variant in _sites(tree):
        clone = copy.deepcopy(tree)
        mutated = _Apply(clone, target, variant).visit(clone)
        try:
            text = ast.unparse(ast.fix_missing_locations(mutated))
        except (ValueError, RecursionError):  # pragma: no cover - unparse of a valid tree edit
            continue
        if text not in seen:
            seen.add(text)
            out.append(text)
    return thin(out, limit)


# --- token-level mutants for C-like sources (JavaScript) -------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<skip>//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|`(?:\\.|[^`\\])*`)
  | (?P<num>(?<![\w.$])\d+(?:\.\d+)?(?![\w.]))
  | (?P<op>===|!==|==|!=|<=|>=|&&|\|\||\+\+|--|\+=|-=|=>|[<>+\-*/%])
""", re.VERBOSE | re.DOTALL)

TOKEN_SWAPS = {
    "===": ("!==",), "!==": ("===",), "==": ("!=",), "!=": ("==",), "<": ("<=", ">"), "<=": ("<", ">="),
    ">": (">=", "<"), ">=": (">", "<="), "&&": ("||",), "||": ("&&",), "+": ("-",), "-": ("+",), "*": ("/",),
    "/": ("*",), "%": ("/",), "++": ("--",), "--": ("++",), "+=": ("-=",), "-=": ("+=",),
}


def token_mutants(source: str, limit: int | None = DEFAULT_LIMIT) -> list[str]:
    """Single-token mutants of a C-like source: operator swaps and integer constants +-1, outside strings/comments.

    >>> token_mutants("x = 'a<b' + 2; // 1 < 2", limit=None)
    ["x = 'a<b' - 2; // 1 < 2", "x = 'a<b' + 3; // 1 < 2", "x = 'a<b' + 1; // 1 < 2"]
    """
    out, seen = [], {source}
    for match in _TOKEN.finditer(source):
        if match.group("skip"):
            continue
        start, end = match.span()
        token = match.group()
        if match.group("num"):
            if "." in token:
                replacements = [repr(float(token) + 1), repr(float(token) - 1)]
            else:
                replacements = [str(int(token) + 1), str(int(token) - 1)]
        else:
            if token == "/" and _looks_like_regex(source, start):
                continue
            replacements = list(TOKEN_SWAPS.get(token, ()))
        for replacement in replacements:
            text = source[:start] + replacement + source[end:]
            if text not in seen:
                seen.add(text)
                out.append(text)
    return thin(out, limit)


def _looks_like_regex(source: str, slash: int) -> bool:
    """Whether a ``/`` starts a regex literal (after an operator or bracket) rather than dividing."""
    before = source[:slash].rstrip()
    return not before or before[-1] in "(,=:[!&|?{};"
