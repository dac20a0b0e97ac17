"""Every verifier's own reward is its signals under its default layers, on the bundled suites that run in sandboxes
(``demo_python``, ``terminal``, ``node``, ``agent_repo``) and on imported ``python_asserts`` specs, in real bwrap:
each env's reference and some of its probes and mutants, verified both ways in one batch, get the same rewards."""

from __future__ import annotations

import shutil

import pytest

from posttrain.envs.importers.jsonl import import_jsonl
from posttrain.envs.suite import load_suite
from posttrain.sandbox import make_sandbox
from tests.envs.verifiers.common import CFG, assert_same_rewards

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")]

SUITES = "posttrain/envs/suites"


@pytest.mark.parametrize("suite, envs", [("demo_python", 3), ("terminal", 2), ("agent_repo", 2), ("node", 2)])
def test_bundled_rewards_are_their_signals_under_the_default_layers(suite, envs):
    specs = load_suite(f"{SUITES}/{suite}").envs[:envs]
    with make_sandbox(CFG) as box:
        seen = assert_same_rewards(specs, box, most=3)
    assert {0.0, 1.0} <= seen, seen


def test_imported_python_asserts_rewards_are_their_signals_under_the_default_layers(tmp_path):
    for style in ("mbpp", "humaneval"):
        import_jsonl(f"tests/fixtures/{style}_style.jsonl", tmp_path / style)
    specs = [spec for style in ("mbpp", "humaneval") for spec in load_suite(tmp_path / style).envs
             if spec.verifier_kind == "python_asserts"]
    with make_sandbox(CFG) as box:
        seen = assert_same_rewards(specs, box, most=3)
    assert specs
    assert {0.0, 1.0} <= seen, seen
