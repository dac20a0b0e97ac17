"""What the reward-layer tests share: each verifier's own reward written out as layers, the solutions admission knows
for a spec, and verifying them both ways (as the spec is, and with those layers) in one batch."""

from __future__ import annotations

import dataclasses

import pytest

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import get_verifier, verify_many
from posttrain.envs.verifiers.base import Verdict
from posttrain.envs.verifiers.reward_layers import layers_problems, signal_problems

CFG = SandboxConfig(batch_concurrency=2)


def default_layers(spec: EnvSpec) -> dict:
    """A verifier's own reward for ``spec``, written out as layers (docs/env-spec.md, Reward layers)."""
    config, kind = spec.verifier, spec.verifier_kind
    if kind in ("python_tests", "python_asserts"):
        layers = [{"signal": "tests"}]
    elif kind == "workspace_tests":
        guarded = any(test.get("guard") for test in config["tests"])
        layers = [{"signal": "guards", "gate": True}] * guarded + [{"signal": "tests"}]
    elif kind == "numeric":
        formulas = len(config.get("formulas", []))
        layers = [{"signal": "fields", "weight": len(config["fields"])}] + \
            [{"signal": "formulas", "weight": formulas}] * bool(formulas)
    else:
        counts = sum(c["type"] == "count" for c in config["constraints"])
        others = len(config["constraints"]) - counts
        layers = [{"signal": "counts", "weight": counts}] + [{"signal": "constraints", "weight": others}] * bool(others)
    return {"layers": layers}


def solutions(spec: EnvSpec, most: int | None = None) -> list[str]:
    """The reference and the wrong solutions admission knows for ``spec``: its probes and mutants (at most ``most``
    of each)."""
    verifier = get_verifier(spec.verifier_kind)
    return [spec.reference, *list(verifier.probes(spec).values())[:most], *verifier.mutants(spec)[:most]]


def assert_same_rewards(specs: list[EnvSpec], sandbox, most: int | None = None) -> set[float]:
    """Every solution of every spec verified as the spec is (no layers) and with its default layers written out, in
    one ``verify_many`` batch, gets the same reward and signals both ways; the rewards seen."""
    pairs = [(spec, solution) for spec in specs for solution in solutions(spec, most)]
    layered = [(dataclasses.replace(spec, reward=default_layers(spec)), solution) for spec, solution in pairs]
    for spec, _ in layered:
        assert layers_problems(spec.reward) == []
        assert signal_problems(spec, get_verifier(spec.verifier_kind)) == []
    verdicts: list[Verdict] = verify_many(pairs + layered, sandbox, CFG)
    seen = set()
    for plain, with_layers in zip(verdicts[:len(pairs)], verdicts[len(pairs):]):
        assert not plain.excluded, plain.detail
        assert with_layers.reward == pytest.approx(plain.reward, abs=1e-12), (plain.detail, plain.signals)
        assert with_layers.signals == plain.signals
        seen.add(round(plain.reward, 9))
    return seen
