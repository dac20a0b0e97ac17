"""The ``agent_repo`` generator: 96 valid agent envs (64 train, 32 eval), every reference passes its verifier in
real sandboxes, the untouched workspace and a rewritten visible test fail, and each env's oracle is well formed."""

from __future__ import annotations

import pytest

from posttrain.agent.parser import FORMATS, parse_calls
from posttrain.config import SandboxConfig
from posttrain.envs.generators.agent_repo import oracle, specs
from posttrain.envs.tools import TOOLS
from posttrain.envs.verifiers import get_verifier, verify_many
from posttrain.sandbox import make_sandbox

pytestmark = pytest.mark.integration

ENVS = specs()


def test_ids_splits_and_specs_are_valid():
    assert len({e.id for e in ENVS}) == 96
    assert sum(e.split == "train" for e in ENVS) == 64
    assert sum(e.split == "eval" for e in ENVS) == 32
    assert all(get_verifier("workspace_tests").validate(e) == [] for e in ENVS)
    assert specs() == ENVS  # deterministic


def test_every_oracle_parses_and_uses_only_known_tools():
    allowed = {name: tool.arguments for name, tool in TOOLS.items()}
    for env in ENVS:
        calls = oracle(env)
        assert [parse_calls(FORMATS["hermes"].render(c), allowed)[0].name for c in calls][-1] == "submit"
        edit = next(c for c in calls if c["name"] == "edit_file")
        assert env.workspace[edit["arguments"]["path"]].count(edit["arguments"]["search"]) == 1


def test_references_pass_and_untouched_or_test_editing_workspaces_fail():
    cfg = SandboxConfig(backend="bwrap-warm")
    box = make_sandbox(cfg)
    try:
        cheat = "for f in tests/*.py; do echo 'print(\"ok\")' > $f; done\n"
        reference = verify_many([(e, e.reference) for e in ENVS], box, cfg)
        probes = verify_many([(e, s) for e in ENVS[::4] for s in ("true\n", cheat)], box, cfg)
    finally:
        box.close()
    assert not [v for v in reference + probes if v.infra_error]
    untouched, cheated = probes[0::2], probes[1::2]
    assert all(v.passed for v in reference), [e.id for e, v in zip(ENVS, reference) if not v.passed]
    assert not any(v.passed for v in untouched)
    assert not any(v.passed for v in cheated)
