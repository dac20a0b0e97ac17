"""The ``numeric`` verifier (host-only): values extracted from a document, checked within tolerance and by formulas.

The answer is data, not code, so nothing runs in a sandbox (``needs_sandbox=False``): ``score_on_host`` parses the
answer's JSON object, compares every declared field with its expected value within tolerance, then recomputes each
declared formula *from the extracted values* (``net_margin = net_income / revenue``) and checks that it holds too.
Formulas are evaluated by a small AST-restricted arithmetic evaluator (``evaluate``), never ``eval``.

A formula is credited only when every field it names is itself right: a formula holds for self-consistent garbage
too (every field 7, ``net_margin`` 1), so on its own it would credit an answer that never read the document.

Spec config::

    verifier:
      kind: numeric
      fields:                          # field -> expected value, or {value, rel_tol, abs_tol}
        revenue: 1520.4
        net_income: {value: 182.3, abs_tol: 0.05}
        net_margin: 0.1199
      rel_tol: 0.001                   # optional default tolerances (a value passes if either holds)
      abs_tol: 0.0
      formulas: ["net_margin = net_income / revenue"]   # optional; names are fields
      formula_rel_tol: 0.01            # optional (default: rel_tol), formula_abs_tol likewise
      answer_file: answer.json         # agent envs only (required there): the answer is this workspace file's text

Reward = checks passed / checks (one per field, one per formula whose fields are right); ``detail`` gives the
reason of each failure. ``feedback`` says of the same checks only what an agent may read (the env-bound ``check``
tool, ``posttrain.agent.check``): which fields do not match and which formulas do not reconcile, never a value. Signals (``SIGNALS``, for reward layers): ``fields`` and ``formulas``, the fractions of each
kind of check passed; the reward is their mean weighted by how many checks of each kind there are.

Example:
    >>> from posttrain.envs.spec import EnvSpec
    >>> spec = EnvSpec(id="t/m", prompt="Revenue 200, profit 50.",
    ...                reference='{"revenue": 200, "profit": 50, "margin": 0.25}',
    ...                verifier={"kind": "numeric", "fields": {"revenue": 200, "profit": 50, "margin": 0.25},
    ...                          "formulas": ["margin = profit / revenue"]})
    >>> validate(spec)
    []
    >>> score_on_host(spec, extract_solution('Answer: {"revenue": 200, "profit": 50, "margin": 0.25}')).passed
    True
    >>> v = score_on_host(spec, '{"revenue": 200, "profit": 50, "margin": 0.3}')
    >>> v.tests_passed, v.tests_total, v.detail, v.signals
    (2, 4, 'margin: got 0.3, expected 0.25; formula margin = profit / revenue: 0.3 != 0.25', \
{'fields': 0.6666666666666666, 'formulas': 0.0})
    >>> v = score_on_host(spec, '{"revenue": 7, "profit": 7, "margin": 1}')  # holds, but says nothing
    >>> v.tests_passed, v.detail.split("; ")[-1]
    (0, 'formula margin = profit / revenue: holds, but not credited while margin, profit, revenue are wrong')
    >>> evaluate("a / (b - 1) + abs(-2)", {"a": 6, "b": 4})
    4.0
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Annotated, Literal

from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers.base import Problems, Verdict, Verifier, answer_is_data, host_only
from posttrain.envs.verifiers.typed_config import Rule, parse

MAX_FIELDS = 50
MAX_ANSWER_CHARS = 100_000
MAX_SCAN_CHARS, MAX_SCAN_ATTEMPTS = 20_000, 500  # where and how hard to look for the answer object
MAX_TOLERANCE = 1e12
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_CALLS = {"abs": abs, "min": min, "max": max}
_NUMBER_TEXT = re.compile(r"^[-+]?\$?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?$")


class FormulaError(ValueError):
    """A formula that is not allowed (names, operators) or cannot be computed (division by zero, overflow)."""


def _check_node(node: ast.AST, names) -> None:
    """Refuse anything but numbers, known names, + - * / **, unary +/-, and abs/min/max calls."""
    if isinstance(node, ast.Expression):
        return _check_node(node.body, names)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return None
    if isinstance(node, ast.Name):
        if names is not None and node.id not in names:
            raise FormulaError(f"unknown name {node.id!r}")
        return None
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        _check_node(node.left, names)
        return _check_node(node.right, names)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check_node(node.operand, names)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS
            and not node.keywords and node.args):
        for arg in node.args:
            _check_node(arg, names)
        return None
    raise FormulaError(f"not allowed in a formula: {ast.unparse(node)}")


def parse_expression(text: str, names=None) -> ast.Expression:
    """Parse an arithmetic expression, refusing anything outside the allowed subset."""
    if not isinstance(text, str) or len(text) > 500:
        raise FormulaError("must be a string of at most 500 characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as error:
        raise FormulaError(f"does not parse: {error.msg}") from None
    _check_node(tree, names)
    return tree


def _eval(node: ast.AST, values: dict[str, float]) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body, values)
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise FormulaError(f"{node.id} is missing")
        return float(values[node.id])
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, values), _eval(node.right, values)
        if isinstance(node.op, ast.Div) and right == 0:
            raise FormulaError("division by zero")
        if isinstance(node.op, ast.Pow) and (abs(right) > 16 or (left == 0 and right < 0)):
            raise FormulaError("exponent out of range")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, values))
    if isinstance(node, ast.Call):
        return float(_CALLS[node.func.id](*(_eval(arg, values) for arg in node.args)))
    raise FormulaError("not allowed")  # pragma: no cover - parse_expression refused it already


def evaluate(expression: str | ast.Expression, values: dict[str, float]) -> float:
    """The value of an allowed arithmetic expression over ``values``; ``FormulaError`` if it has none."""
    tree = parse_expression(expression) if isinstance(expression, str) else expression
    try:
        result = _eval(tree, values)
    except (OverflowError, ValueError, TypeError) as error:
        if isinstance(error, FormulaError):
            raise
        raise FormulaError(str(error)) from None
    if isinstance(result, complex) or not math.isfinite(result):
        raise FormulaError("result is not a finite number")
    return result


def parse_formula(text: str, names) -> tuple[str, ast.Expression]:
    """``"lhs = expression"`` -> (lhs, parsed expression); ``FormulaError`` naming the problem."""
    if not isinstance(text, str) or text.count("=") != 1:
        raise FormulaError("must look like 'name = expression'")
    lhs, rhs = (part.strip() for part in text.split("="))
    if lhs not in names:
        raise FormulaError(f"left-hand side {lhs!r} is not a declared field")
    return lhs, parse_expression(rhs, names)


def close(got: float, want: float, rel: float, absolute: float) -> bool:
    """Within tolerance: ``|got - want| <= max(rel * |want|, abs)``."""
    return abs(got - want) <= max(rel * abs(want), absolute)


def _identifier(name: str) -> str:
    return "" if name.isidentifier() else f"must be an identifier, got {name!r}"


Tolerance = Annotated[float, Rule(low=0, high=MAX_TOLERANCE)]


@dataclass
class FieldValue:
    value: Annotated[float, Rule(doc="the expected value")]
    rel_tol: Annotated[float, Rule(low=0, doc="this field's relative tolerance (default: rel_tol)")] = None
    abs_tol: Annotated[float, Rule(low=0, doc="this field's absolute tolerance (default: abs_tol)")] = None


@dataclass
class NumericConfig:
    """The ``verifier:`` mapping of a ``numeric`` env."""

    kind: Literal["numeric"]
    fields: Annotated[dict[Annotated[str, Rule(check=_identifier)], float | FieldValue],
                      Rule(min_len=1, max_len=MAX_FIELDS, noun="field names to values",
                           doc="field -> expected value, or {value, rel_tol, abs_tol}")]
    rel_tol: Annotated[Tolerance, Rule(doc="default relative tolerance (a value passes if either tolerance "
                                           "holds)")] = 1e-3
    abs_tol: Annotated[Tolerance, Rule(doc="default absolute tolerance")] = 0.0
    formulas: Annotated[list[Annotated[str, Rule(pattern=r"^[^=]+=[^=]+$", noun="'name = expression' string")]],
                        Rule(noun="'name = expression' strings",
                             doc="recomputed from the extracted values; credited only when the fields it names are "
                                 "right")] = field(default_factory=list)
    formula_rel_tol: Annotated[Tolerance, Rule(doc="formulas' relative tolerance (default: rel_tol)")] = None
    formula_abs_tol: Annotated[Tolerance, Rule(doc="formulas' absolute tolerance (default: abs_tol)")] = None
    answer_file: Annotated[str, Rule(pattern=r"^[\w.-]+(/[\w.-]+)*$", noun="relative path",
                                     doc="agent envs (and only they): the workspace file the episode leaves its "
                                         "answer in; the verifier scores that file's text")] = ""

    def field_check(self, name: str) -> tuple[float, float, float]:
        """(expected value, rel_tol, abs_tol) of one field: its own tolerances, else the defaults."""
        want = self.fields[name]
        if not isinstance(want, FieldValue):
            return want, self.rel_tol, self.abs_tol
        return (want.value, self.rel_tol if want.rel_tol is None else want.rel_tol,
                self.abs_tol if want.abs_tol is None else want.abs_tol)

    def formula_tolerances(self) -> tuple[float, float]:
        """(rel_tol, abs_tol) of the formulas: their own, else the fields' defaults."""
        return (self.rel_tol if self.formula_rel_tol is None else self.formula_rel_tol,
                self.abs_tol if self.formula_abs_tol is None else self.formula_abs_tol)


def check_config(spec: EnvSpec) -> Problems:
    """Formulas that do not parse, name unknown fields, or do not hold for the expected values; an agent env
    without ``answer_file`` (its episode leaves a workspace, not an answer text)."""
    config, problems = parse(NumericConfig, spec.verifier), []
    if spec.kind == "agent" and not config.answer_file:
        problems.append(("verifier.answer_file", "an agent env names the workspace file its answer is read from"))
    fields = config.fields
    expected = {name: config.field_check(name)[0] for name in fields}
    rel, absolute = config.formula_tolerances()
    for i, text in enumerate(config.formulas):
        where = f"verifier.formulas[{i}]"
        try:
            lhs, tree = parse_formula(text, set(fields))
            value = evaluate(tree, expected)
        except FormulaError as error:
            problems.append((where, f"{text!r}: {error}"))
            continue
        if not close(expected[lhs], value, rel, absolute):
            problems.append((where, f"contradicts the expected values: {text} gives {value:.6g}, "
                                    f"but {lhs} is {expected[lhs]!r}"))
    return problems


def extract_solution(completion: str) -> str:
    """The answer's JSON object text: the last ```` ```json ```` block if any, else the last top-level ``{...}``
    that parses as a JSON object (in the last 20,000 characters); the stripped completion when there is none
    (scoring then says so).

    >>> extract_solution('I think {"a": 1} then {"a": 2, "b": [3]} done')
    '{"a": 2, "b": [3]}'
    """
    text = completion[:MAX_ANSWER_CHARS]
    fenced = re.findall(r"```(?:json)?\s*\n(.*?)```", text, re.DOTALL)
    for block in reversed(fenced):
        if _json_object(block.strip()) is not None:
            return block.strip()
    tail = text[-MAX_SCAN_CHARS:]
    decoder, last, position, attempts = json.JSONDecoder(), None, 0, 0
    while attempts < MAX_SCAN_ATTEMPTS:
        start = tail.find("{", position)
        if start < 0:
            break
        attempts += 1
        try:
            obj, end = decoder.raw_decode(tail, start)
        except (ValueError, RecursionError):
            position = start + 1
            continue
        if isinstance(obj, dict):
            last = tail[start:end]
        position = end  # objects nested in this one are not candidates
    return last if last is not None else text.strip()


def _json_object(text: str):
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _number(value) -> float | None:
    """A plain number from an answer value: numbers, or strings like ``"1,234.5"`` / ``"$12"``; never bools."""
    if type(value) in (int, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str) and _NUMBER_TEXT.match(value.strip()) and any(c.isdigit() for c in value):
        return float(value.strip().replace(",", "").replace("$", ""))
    return None


SIGNALS = {
    "fields": "the fraction of the fields right (present, a number, within tolerance)",
    "formulas": "the fraction of the formulas credited: they hold for the extracted values and every field they "
                "name is right",
}


def answer_file(spec: EnvSpec) -> str:
    """The workspace file an agent episode's answer is read from ("": none; the raw mapping, read defensively)."""
    name = spec.verifier.get("answer_file") if isinstance(spec.verifier, dict) else None
    return name if isinstance(name, str) else ""


def agent_only(spec: EnvSpec) -> str:
    """With an ``answer_file``, only an agent episode leaves the answer to grade."""
    return f"reads its answer from the workspace file {answer_file(spec)}" if answer_file(spec) else ""


def unmeasured(spec: EnvSpec) -> dict[str, str]:
    """``formulas`` of a valid spec that declares none."""
    return {} if parse(NumericConfig, spec.verifier).formulas else {"formulas": "it declares no formulas"}


def _signals(fields_right: int, fields: int, formulas_credited: int, formulas: int) -> dict[str, float]:
    return {"fields": fields_right / fields, **({"formulas": formulas_credited / formulas} if formulas else {})}


@dataclass(frozen=True)
class AnswerCheck:
    """One check of an answer: a field or a formula, whether it ``passed`` (a formula: it holds and its fields are
    right), ``status``: what the agent's ``check`` tool may say of it (``feedback``: never an expected value), and
    ``detail``: why it failed, for the verdict (with the expected value)."""

    name: str
    passed: bool
    status: str
    detail: str = ""


def _field_checks(config: NumericConfig, answer: dict) -> tuple[list[AnswerCheck], dict[str, float]]:
    """A check per field, and the answer's numeric values by field."""
    checks, got = [], {}
    for name in config.fields:
        want, rel, absolute = config.field_check(name)
        value = _number(answer[name]) if name in answer else None
        if name not in answer:
            checks.append(AnswerCheck(name, False, "missing", f"{name}: missing"))
        elif value is None:
            why = f"{name}: not a number ({json.dumps(answer[name])[:40]})"
            checks.append(AnswerCheck(name, False, "not a number", why))
        else:
            got[name] = value
            right = close(value, want, rel, absolute)
            checks.append(AnswerCheck(name, right, "ok" if right else "does not match",
                                "" if right else f"{name}: got {value:.6g}, expected {want:.6g}"))
    return checks, got


def _formula_check(config: NumericConfig, text: str, got: dict[str, float], wrong: set[str]) -> AnswerCheck:
    """The check of one formula over the answer's values ``got``; credited only when no field it names is ``wrong``."""
    lhs, tree = parse_formula(text, set(config.fields))
    name = f"formula {text}"
    try:
        if lhs not in got:
            raise FormulaError(f"{lhs} is missing")
        value = evaluate(tree, got)
    except FormulaError as error:  # names fields only, never a value
        return AnswerCheck(name, False, f"cannot be computed: {error}", f"{name}: {error}")
    if not close(got[lhs], value, *config.formula_tolerances()):
        return AnswerCheck(name, False, "does not reconcile", f"{name}: {got[lhs]:.6g} != {value:.6g}")
    named = sorted(wrong & ({lhs} | {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}))
    if named:
        return AnswerCheck(name, False, "reconciles", f"{name}: holds, but not credited while {', '.join(named)} "
                                                f"{'is' if len(named) == 1 else 'are'} wrong")
    return AnswerCheck(name, True, "reconciles")


def answer_checks(spec: EnvSpec, solution: str) -> list[AnswerCheck] | None:
    """Every check of the answer ``solution`` (fields, then formulas); None when it is not a JSON object."""
    config = parse(NumericConfig, spec.verifier)
    answer = _json_object(solution[:MAX_ANSWER_CHARS].strip())
    if answer is None:
        return None
    fields, got = _field_checks(config, answer)
    wrong = {check.name for check in fields if not check.passed}
    return fields + [_formula_check(config, text, got, wrong) for text in config.formulas]


def score_on_host(spec: EnvSpec, solution: str) -> Verdict:
    """Check every field and every formula of the answer; reward is the fraction of checks passed."""
    config = parse(NumericConfig, spec.verifier)
    fields, formulas = len(config.fields), len(config.formulas)
    total = fields + formulas
    checks = answer_checks(spec, solution)
    if checks is None:
        return Verdict(reward=0.0, passed=False, compiled=False, tests_passed=0, tests_total=total,
                       detail="answer is not a JSON object of field values", signals=_signals(0, fields, 0, formulas))
    failures = [check.detail for check in checks if not check.passed]
    fields_right = sum(check.passed for check in checks[:fields])
    passed = total - len(failures)
    detail = "; ".join(failures) if failures else f"{total}/{total} checks passed"
    return Verdict(reward=passed / total, passed=not failures, compiled=True, tests_passed=passed,
                   tests_total=total, detail=detail[:1000],
                   signals=_signals(fields_right, fields, passed - fields_right, formulas))


def feedback(spec: EnvSpec, solution: str) -> tuple[bool, str]:
    """What the agent's ``check`` tool reports of the answer ``solution``: (every check passed, one line per field
    and formula with its ``AnswerCheck.status``). Never an expected value, a distance or a direction: a field is ``ok``,
    ``missing``, ``not a number`` or ``does not match``; a formula ``reconciles`` (it holds for the answer's own
    values), ``does not reconcile`` or ``cannot be computed``.

    >>> spec = EnvSpec(id="t/m", prompt="p", reference="", verifier={"kind": "numeric", "fields": {"a": 2, "b": 4,
    ...                "c": 0.5}, "formulas": ["c = a / b"]})
    >>> print(feedback(spec, '{"a": 2, "b": 5, "c": 0.4}')[1])
    a: ok
    b: does not match
    c: does not match
    formula c = a / b: reconciles
    1 of 4 checks pass
    """
    checks = answer_checks(spec, solution)
    if checks is None:
        return False, "the answer is not a JSON object of field values"
    lines = [f"{check.name}: {check.status}" for check in checks]
    passed = sum(check.passed for check in checks)
    return passed == len(checks), "\n".join(lines + [f"{passed} of {len(checks)} checks pass"])


_PROMPT_NUMBER = re.compile(r"(?<![\w.])[-+]?\$?\d[\d,]*(?:\.\d+)?")


def garbage_value(config: NumericConfig) -> float:
    """The value of every field in the "constant answer" and "self-consistent garbage" probes: 7, or the first
    integer above it that is no field's expected value (a coincidence is not a degenerate answer's credit)."""
    for value in range(7, 7 + 64):  # a tolerance wide enough to take all of them takes any garbage: then 7
        if not any(close(value, *config.field_check(name)) for name in config.fields):
            return float(value)
    return 7.0


def self_consistent_garbage(config: NumericConfig) -> dict[str, float]:
    """Every field ``garbage_value``, then each formula solved for its left-hand side (in order, until nothing
    changes): an answer that satisfies the formulas without reading the document.

    >>> config = parse(NumericConfig, {"kind": "numeric", "fields": {"a": 1, "b": 2, "c": 0.5},
    ...                                "formulas": ["c = a / b"]})
    >>> self_consistent_garbage(config)
    {'a': 7.0, 'b': 7.0, 'c': 1.0}
    """
    values = dict.fromkeys(config.fields, garbage_value(config))
    formulas = [parse_formula(text, set(values)) for text in config.formulas]
    for _ in range(len(formulas)):
        before = dict(values)
        for lhs, tree in formulas:
            try:
                values[lhs] = evaluate(tree, values)
            except FormulaError:
                continue
        if values == before:
            break
    return values


def probes(spec: EnvSpec) -> dict[str, str]:
    """Answers that must fail: empty, zeros, nulls, NaN, numbers copied from the document's first lines; and the
    degenerate answers admission bounds by name (``admission.anti_hacking.DEGENERATE_PROBES``): the empty answer,
    a constant answer and self-consistent garbage."""
    config = parse(NumericConfig, spec.verifier)
    fields = list(config.fields)
    numbers = []
    for token in _PROMPT_NUMBER.findall(spec.prompt):
        value = _number(token.lstrip("+").rstrip(","))
        if value is not None:
            numbers.append(value)
    first = numbers[:len(fields)] + [0.0] * max(0, len(fields) - len(numbers))
    largest = max(numbers, key=abs) if numbers else 1.0
    return {
        "empty answer": "",
        "constant answer": json.dumps(dict.fromkeys(fields, garbage_value(config))),
        "self-consistent garbage": json.dumps(self_consistent_garbage(config)),
        "prose, no JSON": "I could not find these values in the report.",
        "empty object": "{}",
        "all zeros": json.dumps({f: 0 for f in fields}),
        "all null": json.dumps({f: None for f in fields}),
        "all NaN": "{" + ", ".join(f'"{f}": NaN' for f in fields) + "}",
        "numbers from the first lines": json.dumps(dict(zip(fields, first))),
        "largest number everywhere": json.dumps({f: largest for f in fields}),
        "field names as values": json.dumps({f: f for f in fields}),
    }


def mutants(spec: EnvSpec) -> list[str]:
    """The reference answer with one value perturbed: by 5 % (at least 0.01) and x1000 (a units slip)."""
    reference = _json_object(spec.reference.strip())
    if reference is None:
        return []
    out = []
    for name in parse(NumericConfig, spec.verifier).fields:
        value = _number(reference.get(name))
        if value is None:
            continue
        for changed in (value + max(abs(value) * 0.05, 0.01), value * 1000 if value else -1.0):
            out.append(json.dumps({**reference, name: changed}))
    return out


VERIFIER = Verifier(kind="numeric", config=NumericConfig, extract_solution=extract_solution,
                    build_execution=host_only("numeric"), score=host_only("numeric"), probes=probes,
                    mutants=mutants, needs_sandbox=False, score_on_host=score_on_host, check_config=check_config,
                    solution_language=answer_is_data, signals=SIGNALS, unmeasured=unmeasured,
                    agent_only=agent_only, answer_file=answer_file, feedback=feedback)
validate = VERIFIER.validate
