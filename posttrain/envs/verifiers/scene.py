"""The ``scene`` verifier (host-only): a JSON scene of boxes checked against geometric constraints.

The answer is a JSON object ``{"objects": [{"name", "type", "position": [x, y, z], "size": [w, d, h]}, ...]}``:
``position`` is the box's minimum corner, ``size`` its extent along x, y and z (z is up; the floor is the bounds'
minimum z). Every constraint is one check; reward = checks credited / checks. An answer that does not parse, or an
object with missing or ill-typed keys, fails every check and ``detail`` says why.

Counts gate the rest: a constraint on some types is credited only while every ``count`` on those types holds, and a
scene-wide one (``inside_bounds``, ``no_overlap``, ``supported``) only while every ``count`` holds. Otherwise they
would hold vacuously: "every lamp on a table" is true of a scene without lamps, "no overlap" of an empty one, and
the empty scene earned most of the reward. Degenerate scenes (empty, one stray box) earn 0. Signals (``SIGNALS``, for
reward layers): ``counts`` and ``constraints``, the fractions of the count constraints that hold and of the others
credited; the reward is their mean weighted by how many constraints of each kind there are. A layer
``{signal: counts, gate: true}`` makes every count a gate of the whole reward.

Spec config::

    verifier:
      kind: scene
      bounds: {min: [0, 0, 0], max: [6, 5, 3]}
      tolerance: 0.001                       # optional: slack for touching, resting and size comparisons
      constraints:
        - {type: inside_bounds}                              # every box inside the bounds
        - {type: no_overlap}                                 # no two boxes share volume (touching is fine)
        - {type: supported}                                  # every box on the floor or on top of another box
        - {type: count, object_type: chair, min: 4, max: 4}  # how many of a type (min and/or max)
        - {type: size, object_type: table, size: [2, 1, 0.75]}  # every box of the type has this size (w/d may swap)
        - {type: on_top_of, object_type: lamp, support_type: table}   # rests on a box of that type
        - {type: max_distance, object_type: chair, other_type: table, distance: 0.5}  # near one (gap in x-y)
        - {type: min_distance, object_type: bed, other_type: desk, distance: 1.0}     # far from all
        - {type: against_wall, object_type: shelf}           # touches a wall of the bounds

"Rests on" means the box's bottom is at the supporter's top and its x-y centre lies over the supporter.

Example:
    >>> from posttrain.envs.spec import EnvSpec
    >>> config = {"kind": "scene", "bounds": {"min": [0, 0, 0], "max": [4, 4, 3]},
    ...           "constraints": [{"type": "inside_bounds"}, {"type": "no_overlap"}, {"type": "supported"},
    ...                           {"type": "count", "object_type": "box", "min": 2, "max": 2}]}
    >>> spec = EnvSpec(id="t/s", prompt="two boxes", reference="", verifier=config, runtime="python")
    >>> validate(spec)
    []
    >>> good = '{"objects": [{"name": "a", "type": "box", "position": [0, 0, 0], "size": [1, 1, 1]},' \\
    ...        ' {"name": "b", "type": "box", "position": [0, 0, 1], "size": [1, 1, 1]}]}'
    >>> score_on_host(spec, good).passed
    True
    >>> v = score_on_host(spec, good.replace("[0, 0, 1]", "[0.5, 0, 0]"))
    >>> v.tests_passed, v.detail, v.signals
    (3, 'no_overlap: a and b overlap', {'counts': 1.0, 'constraints': 0.6666666666666666})
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Annotated, Literal, Union

from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers.base import Problems, Verdict, Verifier, answer_is_data, host_only
from posttrain.envs.verifiers.numeric import extract_solution as _extract_json
from posttrain.envs.verifiers.typed_config import Rule, parse

MAX_OBJECTS = 200
MAX_ANSWER_CHARS = 200_000
Vector = Annotated[list[float], Rule(min_len=3, max_len=3, noun="numbers")]
TypeName = Annotated[str, Rule(min_len=1)]
Distance = Annotated[float, Rule(low=0, doc="gap in the x-y plane")]


@dataclass
class Bounds:
    min: Annotated[Vector, Rule(doc="[x, y, z] of the room's minimum corner; min z is the floor")]
    max: Annotated[Vector, Rule(doc="[x, y, z] of the room's maximum corner")]


# One dataclass per constraint type, told apart by ``type``; each holds on every box of ``object_type``.
@dataclass
class InsideBounds:
    type: Annotated[Literal["inside_bounds"], Rule(doc="every box inside the bounds")]


@dataclass
class NoOverlap:
    type: Annotated[Literal["no_overlap"], Rule(doc="no two boxes share volume (touching is fine)")]


@dataclass
class Supported:
    type: Annotated[Literal["supported"], Rule(doc="every box on the floor or resting on another box")]


@dataclass
class AgainstWall:
    type: Annotated[Literal["against_wall"], Rule(doc="touches a wall of the bounds")]
    object_type: Annotated[TypeName, Rule(doc="the type of box constrained")]


@dataclass
class Count(AgainstWall):
    type: Annotated[Literal["count"], Rule(doc="how many boxes of the type (min and/or max)")]
    min: Annotated[int, Rule(low=0, high=MAX_OBJECTS)] = None
    max: Annotated[int, Rule(low=0, high=MAX_OBJECTS)] = None

    @property
    def least(self) -> int:
        """The lower bound: ``min``, else 0."""
        return 0 if self.min is None else self.min

    @property
    def most(self) -> float:
        """The upper bound: ``max``, else none (infinity)."""
        return math.inf if self.max is None else self.max


@dataclass
class SizeOf(AgainstWall):
    type: Annotated[Literal["size"], Rule(doc="every box of the type has this size")]
    size: Annotated[list[Annotated[float, Rule(low=0)]], Rule(min_len=3, max_len=3, noun="numbers",
                                                             doc="[w, d, h]")]
    rotatable: Annotated[bool, Rule(doc="w and d may swap")] = True


@dataclass
class OnTopOf(AgainstWall):
    type: Annotated[Literal["on_top_of"], Rule(doc="rests on a box of support_type")]
    support_type: TypeName


@dataclass
class MaxDistance(AgainstWall):
    type: Annotated[Literal["max_distance"], Rule(doc="within distance of some box of other_type")]
    other_type: TypeName
    distance: Distance


@dataclass
class MinDistance(MaxDistance):
    type: Annotated[Literal["min_distance"], Rule(doc="at least distance from every box of other_type")]


Constraint = Union[InsideBounds, NoOverlap, Supported, Count, SizeOf, OnTopOf, MaxDistance, MinDistance, AgainstWall]


@dataclass
class SceneConfig:
    """The ``verifier:`` mapping of a ``scene`` env."""

    kind: Literal["scene"]
    bounds: Annotated[Bounds, Rule(doc="the room")]
    constraints: Annotated[list[Constraint], Rule(min_len=1, noun="constraints", doc="one check each")]
    tolerance: Annotated[float, Rule(low=0, high=1, doc="slack for touching, resting and size comparisons")] = 1e-3


@dataclass(frozen=True)
class Box:
    name: str
    type: str
    lo: tuple[float, float, float]
    size: tuple[float, float, float]

    @property
    def hi(self) -> tuple[float, float, float]:
        return tuple(a + b for a, b in zip(self.lo, self.size))

    @property
    def center_xy(self) -> tuple[float, float]:
        return self.lo[0] + self.size[0] / 2, self.lo[1] + self.size[1] / 2


def _vector(value, positive: bool) -> tuple[float, float, float] | None:
    if not (isinstance(value, list) and len(value) == 3):
        return None
    if not all(type(v) in (int, float) and math.isfinite(v) and (v >= 0 if positive else True) for v in value):
        return None
    return tuple(float(v) for v in value)


def parse_scene(text: str) -> tuple[list[Box], list[str]]:
    """The boxes of a scene answer, or the reasons it does not parse (then the box list is empty)."""
    try:
        data = json.loads(text[:MAX_ANSWER_CHARS])
    except (ValueError, RecursionError) as error:
        return [], [f"not JSON: {str(error)[:80]}"]
    if isinstance(data, dict):
        data = data.get("objects")
    if not isinstance(data, list):
        return [], ["expected an object with an 'objects' list"]
    if len(data) > MAX_OBJECTS:
        return [], [f"more than {MAX_OBJECTS} objects"]
    boxes, errors, names = [], [], set()
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            errors.append(f"objects[{i}]: not an object")
            continue
        name, kind = item.get("name"), item.get("type")
        lo, size = _vector(item.get("position"), False), _vector(item.get("size"), True)
        if not isinstance(name, str) or not name:
            errors.append(f"objects[{i}]: 'name' must be a non-empty string")
        elif name in names:
            errors.append(f"objects[{i}]: duplicate name {name!r}")
        if not isinstance(kind, str) or not kind:
            errors.append(f"objects[{i}]: 'type' must be a non-empty string")
        if lo is None:
            errors.append(f"objects[{i}]: 'position' must be three finite numbers")
        if size is None:
            errors.append(f"objects[{i}]: 'size' must be three non-negative numbers")
        if isinstance(name, str):
            names.add(name)
        if not errors:
            boxes.append(Box(name, kind, lo, size))
    return ([], errors) if errors else (boxes, [])


def _overlap(a: Box, b: Box, tol: float) -> bool:
    return all(min(ah, bh) - max(al, bl) > tol for al, ah, bl, bh in zip(a.lo, a.hi, b.lo, b.hi))


def _rests_on(a: Box, b: Box, tol: float) -> bool:
    """``a``'s bottom is at ``b``'s top and ``a``'s x-y centre is over ``b``."""
    cx, cy = a.center_xy
    return (abs(a.lo[2] - b.hi[2]) <= tol and b.lo[0] - tol <= cx <= b.hi[0] + tol
            and b.lo[1] - tol <= cy <= b.hi[1] + tol and a is not b)


def _gap_xy(a: Box, b: Box) -> float:
    dx = max(0.0, b.lo[0] - a.hi[0], a.lo[0] - b.hi[0])
    dy = max(0.0, b.lo[1] - a.hi[1], a.lo[1] - b.hi[1])
    return math.hypot(dx, dy)


def check(constraint: Constraint, boxes: list[Box], lo, hi, tol: float) -> str:
    """'' when ``constraint`` holds for ``boxes``, else the reason it does not."""
    kind = constraint.type
    if kind == "inside_bounds":
        out = [b.name for b in boxes if any(bl < l - tol or bh > h + tol for bl, bh, l, h in zip(b.lo, b.hi, lo, hi))]
        return f"outside the bounds: {', '.join(out[:5])}" if out else ""
    if kind == "no_overlap":
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                if _overlap(a, b, tol):
                    return f"{a.name} and {b.name} overlap"
        return ""
    if kind == "supported":
        loose = [a.name for a in boxes
                 if abs(a.lo[2] - lo[2]) > tol and not any(_rests_on(a, b, tol) for b in boxes)]
        return f"not on the floor or on another object: {', '.join(loose[:5])}" if loose else ""
    of = [b for b in boxes if b.type == constraint.object_type]
    if kind == "count":
        n, least, most = len(of), constraint.least, constraint.most
        return "" if least <= n <= most else f"{n} of type {constraint.object_type!r}, wanted " + (
            f"{least}" if least == most else f"{least}..{most}")
    if kind == "size":
        want = constraint.size
        rotations = [want, [want[1], want[0], want[2]]] if constraint.rotatable else [want]
        wrong = [b.name for b in of if not any(all(abs(s - w) <= tol for s, w in zip(b.size, r)) for r in rotations)]
        return f"wrong size (want {want}): {', '.join(wrong[:5])}" if wrong else ""
    if kind == "on_top_of":
        supports = [b for b in boxes if b.type == constraint.support_type]
        loose = [a.name for a in of if not any(_rests_on(a, b, tol) for b in supports)]
        return f"not on a {constraint.support_type}: {', '.join(loose[:5])}" if loose else ""
    if kind in ("max_distance", "min_distance"):
        others, distance = [b for b in boxes if b.type == constraint.other_type], constraint.distance
        if kind == "max_distance":
            far = [a.name for a in of if not any(_gap_xy(a, b) <= distance + tol for b in others if b is not a)]
            return f"farther than {distance} from any {constraint.other_type}: {', '.join(far[:5])}" if far else ""
        near = [a.name for a in of if any(_gap_xy(a, b) < distance - tol for b in others if b is not a)]
        return f"closer than {distance} to a {constraint.other_type}: {', '.join(near[:5])}" if near else ""
    if kind == "against_wall":
        free = [b.name for b in of if not any(abs(b.lo[k] - lo[k]) <= tol or abs(b.hi[k] - hi[k]) <= tol
                                              for k in (0, 1))]
        return f"not against a wall: {', '.join(free[:5])}" if free else ""
    raise ValueError(f"unknown constraint type {kind!r}")  # pragma: no cover - validate refused it


SIGNALS = {
    "counts": "the fraction of the count constraints that hold",
    "constraints": "the fraction of the other constraints credited: they hold and so does every count they depend "
                   "on (the types they name; every count for inside_bounds, no_overlap, supported)",
}


def unmeasured(spec: EnvSpec) -> dict[str, str]:
    """``constraints`` of a valid spec whose constraints are all counts."""
    if any(c.type != "count" for c in parse(SceneConfig, spec.verifier).constraints):
        return {}
    return {"constraints": "every constraint is a count"}


def _signals(constraints: list[Constraint], credited: list[bool]) -> dict[str, float]:
    counts = [ok for c, ok in zip(constraints, credited) if c.type == "count"]
    others = [ok for c, ok in zip(constraints, credited) if c.type != "count"]
    return {"counts": sum(counts) / len(counts), **({"constraints": sum(others) / len(others)} if others else {})}


def score_on_host(spec: EnvSpec, solution: str) -> Verdict:
    """Check every constraint; a scene that does not parse fails them all, with the reasons."""
    config = parse(SceneConfig, spec.verifier)
    constraints = config.constraints
    total = len(constraints)
    boxes, errors = parse_scene(solution)
    if errors:
        return Verdict(reward=0.0, passed=False, compiled=False, tests_passed=0, tests_total=total,
                       detail="scene does not parse: " + "; ".join(errors[:5]),
                       signals=_signals(constraints, [False] * total))
    lo, hi = config.bounds.min, config.bounds.max
    reasons = [check(c, boxes, lo, hi, config.tolerance) for c in constraints]
    miscounted = {c.object_type for c, reason in zip(constraints, reasons) if c.type == "count" and reason}
    failures, credited = [], []
    for c, reason in zip(constraints, reasons):
        wrong = sorted(gate_types(c, constraints) & miscounted)
        if not reason and wrong:
            reason = (f"not credited while the count of {wrong[0]} is wrong" if len(wrong) == 1 else
                      f"not credited while the counts of {', '.join(wrong)} are wrong")
        if reason:
            label = f"{c.type}({c.object_type})" if c.type in ("count", "size") else c.type
            failures.append(f"{label}: {reason}")
        credited.append(not reason)
    passed = total - len(failures)
    return Verdict(reward=passed / total, passed=not failures, compiled=True, tests_passed=passed, tests_total=total,
                   detail=("; ".join(failures) if failures else f"{total}/{total} constraints satisfied")[:1000],
                   signals=_signals(constraints, credited))


SCENE_WIDE = ("inside_bounds", "no_overlap", "supported")


def gate_types(constraint: Constraint, constraints: list[Constraint]) -> set[str]:
    """The types whose counts must hold for ``constraint`` to be credited: the types it names, every counted type
    for a scene-wide constraint, none for a count."""
    if constraint.type == "count":
        return set()
    if constraint.type in SCENE_WIDE:
        return {c.object_type for c in constraints if c.type == "count"}
    return {getattr(constraint, key) for key in ("object_type", "support_type", "other_type")
            if getattr(constraint, key, None) is not None}


def check_config(spec: EnvSpec) -> Problems:
    """What the types cannot say: bounds in order, counts with a min or max, no constraint that holds vacuously,
    and at least one object asked for (else the empty scene satisfies every constraint)."""
    config, problems, counted = parse(SceneConfig, spec.verifier), [], set()
    if not all(a < b for a, b in zip(config.bounds.min, config.bounds.max)):
        problems.append(("verifier.bounds", "min must be below max on every axis"))
    for i, c in enumerate(config.constraints):
        if c.type == "count":
            if (c.min is None and c.max is None) or c.least > c.most:
                problems.append((f"verifier.constraints[{i}]",
                                 f"count needs integer min and/or max with 0 <= min <= max <= {MAX_OBJECTS}"))
            elif c.least >= 1:
                counted.add(c.object_type)
    for i, c in enumerate(config.constraints):  # a per-type constraint with no object of the type holds vacuously
        for key in ("object_type", "support_type", "other_type"):
            name = getattr(c, key, None)  # None: this constraint type has no such field
            if c.type != "count" and name is not None and name not in counted:
                problems.append((f"verifier.constraints[{i}].{key}",
                                 f"type {name!r} needs a count constraint with min >= 1, or this constraint "
                                 "holds vacuously"))
    if not counted:
        problems.append(("verifier.constraints", "needs a count constraint with min >= 1: otherwise the empty scene "
                                                 "satisfies every constraint"))
    return problems


def extract_solution(completion: str) -> str:
    """The scene JSON from a completion (the last fenced JSON block or the last JSON object)."""
    return _extract_json(completion)


def _reference_objects(spec: EnvSpec) -> list[dict]:
    try:
        data = json.loads(spec.reference)
    except ValueError:
        return []
    objects = data.get("objects") if isinstance(data, dict) else data
    return [dict(o) for o in objects if isinstance(o, dict)] if isinstance(objects, list) else []


def probes(spec: EnvSpec) -> dict[str, str]:
    """Scenes that must fail: all at the origin, outside the bounds, zero-sized, floating, not JSON; and the
    degenerate answers admission bounds by name (``admission.anti_hacking.DEGENERATE_PROBES``): the empty scene and
    a constant one (one unit box on the floor, whatever the room asks for)."""
    objects = _reference_objects(spec)
    bounds = parse(SceneConfig, spec.verifier).bounds
    lo, hi = bounds.min, bounds.max
    width = hi[0] - lo[0]

    def scene(transform) -> str:
        return json.dumps({"objects": [transform(dict(o)) for o in objects]})

    return {
        "not JSON": "Here is a lovely room with everything in its place.",
        "empty answer": json.dumps({"objects": []}),
        "constant answer": json.dumps({"objects": [{"name": "object", "type": "object", "position": list(lo),
                                                    "size": [1, 1, 1]}]}),
        "everything at the origin": scene(lambda o: {**o, "position": list(lo)}),
        "objects outside the bounds": scene(lambda o: {**o, "position": [o["position"][0] + width + 1,
                                                                         *o["position"][1:]]}),
        "zero-size objects at the origin": scene(lambda o: {**o, "position": list(lo), "size": [0, 0, 0]}),
        "everything floating": scene(lambda o: {**o, "position": [*o["position"][:2], o["position"][2] + 0.5]}),
    }


def mutants(spec: EnvSpec, limit: int = 24) -> list[str]:
    """The reference with one object moved: onto another object (overlap), out of the bounds, or lifted."""
    from posttrain.envs.mutation import thin

    objects = _reference_objects(spec)
    hi = parse(SceneConfig, spec.verifier).bounds.max
    out = []
    for i, obj in enumerate(objects):
        other = objects[(i + 1) % len(objects)]
        moves = [[other["position"][0], other["position"][1], obj["position"][2]],
                 [hi[0] + 0.5, obj["position"][1], obj["position"][2]],
                 [obj["position"][0], obj["position"][1], obj["position"][2] + 0.5]]
        for position in moves:
            changed = [dict(o) for o in objects]
            changed[i] = {**obj, "position": position}
            out.append(json.dumps({"objects": changed}))
    return thin(out, limit)


VERIFIER = Verifier(kind="scene", config=SceneConfig, extract_solution=extract_solution,
                    build_execution=host_only("scene"), score=host_only("scene"), probes=probes, mutants=mutants,
                    needs_sandbox=False, score_on_host=score_on_host, check_config=check_config,
                    solution_language=answer_is_data, signals=SIGNALS, unmeasured=unmeasured)
validate = VERIFIER.validate
