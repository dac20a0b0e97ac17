"""Reward layers: an env's ``reward:`` composes the named signals its verifier measures, with weights and gates.

Every verdict carries its verifier's signals (``Verdict.signals``, each in [0, 1]; the names and meanings are each
verifier's ``Verifier.signals``): ``compiles``, ``tests``, ``fields``, ``counts``... An env spec may compose them::

    reward:
      layers:
        - {signal: compiles, gate: true}   # reward 0 unless the signal reaches its threshold (default 1)
        - {signal: tests, weight: 0.9}
        - {signal: lint, weight: 0.1}      # computed only because a layer names it (Verifier.on_demand)

The reward is 0 if any gate's signal is below its threshold, else the weighted mean of the other layers' signals
(weights normalised; 1 when every layer is a gate). An env without ``reward:`` keeps its verifier's own reward,
untouched: each verifier's reward is itself a composition of its signals (docs/env-spec.md, Reward layers), so a
spec spells out a default only to change it. Layers change the reward, never ``passed`` (every test passed), which
pass rates count.

- ``layers_problems(reward)``: (field, reason) problems of a ``reward`` mapping's shape, for the loader.
- ``signal_problems(spec, verifier)``: layers naming a signal the verifier does not measure for this spec.
- ``compose(layers, signals)``: the reward and, when a gate zeroed it, why.
- ``layered(spec, solution, verdict, verifier)``: the verdict with its reward composed (``verify_many`` applies it).

Example:
    >>> layers = parse_layers({"layers": [{"signal": "compiles", "gate": True}, {"signal": "tests", "weight": 3},
    ...                                   {"signal": "lint"}]})
    >>> compose(layers, {"compiles": 1.0, "tests": 0.5, "lint": 1.0})
    (0.625, '')
    >>> compose(layers, {"compiles": 0.0, "tests": 0.5, "lint": 1.0})
    (0.0, 'reward 0: gate compiles is 0, below 1')
    >>> layers_problems({"layers": [{"signal": "tests", "gate": True, "weight": 2}, {"signal": "tests"}]})
    [('reward.layers[0].weight', 'a gate has no weight: it zeroes the reward or lets it through'), \
('reward.layers[1].signal', "'tests' is already layers[0]")]
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, replace
from typing import Annotated

from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers.base import Verdict, Verifier
from posttrain.envs.verifiers.typed_config import Problems, Rule, config_problems, json_schema, parse

MAX_LAYERS = 16
WHERE = "reward"  # the spec field


@dataclass
class Layer:
    signal: Annotated[str, Rule(min_len=1, doc="a signal the env's verifier measures (docs/env-spec.md, Reward "
                                               "layers)")]
    weight: Annotated[float, Rule(low=0, open_low=True, doc="its share of the weighted mean, normalised over the "
                                                            "layers that are not gates; not on a gate")] = 1.0
    gate: Annotated[bool, Rule(doc="reward 0 unless the signal reaches threshold; a gate adds nothing else")] = False
    threshold: Annotated[float, Rule(low=0, open_low=True, high=1,
                                     doc="gates only: the least signal that lets the reward through")] = 1.0


@dataclass
class RewardLayers:
    """The ``reward:`` mapping of an env spec."""

    layers: Annotated[list[Layer], Rule(min_len=1, max_len=MAX_LAYERS, noun="layers",
                                        doc="the signals composed, each once; gates may stand anywhere")]


def layers_problems(reward: dict) -> Problems:
    """Problems of a spec's ``reward`` mapping as (field, reason), each naming the field (``reward.layers[1].gate``);
    ``{}`` (no layers: the verifier's own reward) has none. Signal names are checked against the verifier by
    ``signal_problems``, once the verifier config is valid."""
    if not reward:
        return []
    problems = config_problems(RewardLayers, reward, WHERE, where=WHERE)
    if problems:
        return problems
    first: dict[str, int] = {}
    for i, (raw, layer) in enumerate(zip(reward["layers"], parse_layers(reward))):
        where = f"{WHERE}.layers[{i}]"
        if layer.gate and "weight" in raw:
            problems.append((f"{where}.weight", "a gate has no weight: it zeroes the reward or lets it through"))
        if not layer.gate and "threshold" in raw:
            problems.append((f"{where}.threshold", "only a gate has a threshold (add gate: true)"))
        if layer.signal in first:
            problems.append((f"{where}.signal", f"{layer.signal!r} is already layers[{first[layer.signal]}]"))
        first.setdefault(layer.signal, i)
    return problems


def parse_layers(reward: dict) -> list[Layer]:
    """The layers of a valid ``reward`` mapping (``layers_problems`` found nothing); [] for ``{}``."""
    return parse(RewardLayers, reward).layers if reward else []


def signal_problems(spec: EnvSpec, verifier: Verifier) -> Problems:
    """Layers of a spec (valid shape, valid verifier config) that name a signal its verifier does not know, or does
    not measure for this spec (``Verifier.unmeasured``: e.g. ``formulas`` of an env without formulas)."""
    problems, unmeasured = [], verifier.unmeasured(spec)
    for i, layer in enumerate(parse_layers(spec.reward)):
        where, name = f"{WHERE}.layers[{i}].signal", layer.signal
        if name not in verifier.signals:
            near = difflib.get_close_matches(name, list(verifier.signals), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            problems.append((where, f"unknown signal {name!r} for {verifier.kind}{hint}; known: "
                                    f"{', '.join(verifier.signals)}"))
        elif name in unmeasured:
            problems.append((where, f"{verifier.kind} measures no {name!r} for this env: {unmeasured[name]}"))
    return problems


def compose(layers: list[Layer], signals: dict[str, float]) -> tuple[float, str]:
    """The reward of ``layers`` over ``signals`` (a signal the verdict lacks counts 0) and, when a gate zeroed it,
    why ("" otherwise). All signals 1 gives exactly 1.0."""
    for layer in layers:
        value = signals.get(layer.signal, 0.0)
        if layer.gate and value < layer.threshold:
            return 0.0, f"reward 0: gate {layer.signal} is {value:.3g}, below {layer.threshold:g}"
    weighted = [layer for layer in layers if not layer.gate]
    if not weighted:
        return 1.0, ""
    total = math.fsum(layer.weight * signals.get(layer.signal, 0.0) for layer in weighted)
    return total / math.fsum(layer.weight for layer in weighted), ""


def layered(spec: EnvSpec, solution: str, verdict: Verdict, verifier: Verifier) -> Verdict:
    """``verdict`` of ``solution`` with the reward of ``spec``'s layers, the on-demand signals they name added
    (``Verifier.on_demand``: computed here, only then); unchanged for a spec without layers and for an excluded
    verdict (an infra failure has no reward to compose). The detail gains each on-demand signal's note and the
    gate that zeroed the reward."""
    layers = parse_layers(spec.reward)
    if not layers or verdict.excluded:
        return verdict
    signals, notes = dict(verdict.signals), []
    for name in dict.fromkeys(layer.signal for layer in layers):
        if name not in signals and name in verifier.on_demand:
            signals[name], note = verifier.on_demand[name](spec, solution)
            notes += [f"{name}: {note}"] if note else []
    reward, why = compose(layers, signals)
    detail = "; ".join(part for part in (verdict.detail, *notes, why) if part)
    return replace(verdict, reward=reward, signals=signals, detail=detail)


def reward_schema(signals: list[str]) -> dict:
    """The JSON Schema of a spec's ``reward`` value: ``{}`` or the layers, each naming one of ``signals`` (every
    verifier's; the loader checks the env's own)."""
    schema = json_schema(RewardLayers)
    schema["properties"]["layers"]["items"]["properties"]["signal"]["enum"] = sorted(signals)
    return {"anyOf": [schema, {"type": "object", "maxProperties": 0}]}
