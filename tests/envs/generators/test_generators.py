"""The bundled domain suites end to end: every suite loads with no rejection, the committed files equal their
generators' output, every reference passes (workspace suites in real bubblewrap sandboxes), and degenerate or
cheating solutions fail while most mutants of the references are killed."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from posttrain.admission.checks import admit
from posttrain.admission.report import report_text
from posttrain.config import AdmissionConfig, SandboxConfig
from posttrain.envs.generators import file_name, render
from posttrain.envs.generators import agent_repo, finance, finance_agent, node, regression_hunt, scene, terminal
from posttrain.envs.suite import load_suite
from posttrain.envs.verifiers import get_verifier, verify_many
from posttrain.sandbox import make_sandbox

pytestmark = pytest.mark.integration

SUITES = Path("posttrain/envs/suites")
MINIMUM = {"demo_python": 400, "terminal": 10, "finance": 10, "scene": 10, "node": 5, "agent_repo": 96,
           "regression_hunt": 96, "finance_agent": 12, "finance_facts": 208, "scene_layouts": 208,
           "terminal_tasks": 208}
GENERATORS = {"finance": finance, "scene": scene, "terminal": terminal, "node": node, "agent_repo": agent_repo,
              "regression_hunt": regression_hunt, "finance_agent": finance_agent}
# finance_facts, scene_layouts and terminal_tasks: their own test files check their committed files
CFG = SandboxConfig(backend="bwrap", batch_concurrency=2)
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: these tests run real sandboxes")


def test_every_bundled_suite_loads_without_rejections():
    ids = Counter()
    for name, least in MINIMUM.items():
        suite = load_suite(SUITES / name)
        assert suite.rejections == [], [str(r) for r in suite.rejections]
        assert len(suite.envs) >= least
        assert {s.split for s in suite.envs} == {"train", "eval"}
        ids.update(s.id for s in suite.envs)
        for spec in suite.envs:
            assert spec.reference.strip()
            assert spec.id.startswith(("demo/", f"{name}/"))
    assert max(ids.values()) == 1
    kinds = {s.kind for s in load_suite(SUITES / "terminal").envs}
    assert kinds == {"agent"}
    agent = load_suite(SUITES / "agent_repo").envs
    assert all(s.kind == "agent" and s.oracle and s.oracle[-1]["name"] == "submit" for s in agent)
    assert sum(s.split == "train" for s in agent) == 64
    assert sum(s.split == "eval" for s in agent) == 32


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_committed_files_equal_generator_output(name):
    module = GENERATORS[name]
    specs = module.specs()
    committed = {p.name: p.read_text() for p in (SUITES / name).glob("*.yaml")}
    assert set(committed) == {file_name(s) for s in specs}
    for spec in specs:
        assert committed[file_name(spec)] == render(spec, module.HEADER), \
            f"regenerate with: python -m posttrain.envs.generators.{name} {SUITES / name}"


@pytest.mark.parametrize("name", ["finance", "scene", "finance_agent", "finance_facts", "scene_layouts"])
def test_host_suites_references_pass_cheats_fail_mutants_die(name):
    for spec in load_suite(SUITES / name).envs:
        verifier = get_verifier(spec.verifier_kind)
        assert not verifier.needs_sandbox
        assert verifier.score_on_host(spec, verifier.extract_solution(f"Answer:\n{spec.reference}")).passed, spec.id
        passing = [n for n, text in verifier.probes(spec).items() if verifier.score_on_host(spec, text).passed]
        assert not passing, (spec.id, passing)
        mutants = verifier.mutants(spec)
        killed = sum(not verifier.score_on_host(spec, m).passed for m in mutants)
        assert mutants, (spec.id, killed, len(mutants))
        assert killed / len(mutants) >= 0.6, (spec.id, killed, len(mutants))


DEGENERATE = ("untouched workspace", "exit 0", "empty file", "exit 0 at load")
FULL_BATTERY = ("terminal/fix_median", "terminal/config_ini_server", "node/slugify")
MUTATED = ("terminal/fix_pagination", "terminal/config_ini_server", "node/config_package_json")


@needs_bwrap
def test_workspace_suites_in_bwrap():
    envs = load_suite(SUITES / "terminal").envs + load_suite(SUITES / "node").envs
    jobs, labels = [], []
    for spec in envs:
        verifier = get_verifier(spec.verifier_kind)
        probes = verifier.probes(spec)
        jobs.append((spec, spec.reference))
        labels.append((spec.id, "reference"))
        for name, text in probes.items():
            if name in DEGENERATE or spec.id in FULL_BATTERY:
                jobs.append((spec, text))
                labels.append((spec.id, name))
        if spec.id in MUTATED:
            jobs += [(spec, m) for m in verifier.mutants(spec)]
            labels += [(spec.id, "mutant")] * len(verifier.mutants(spec))
    box = make_sandbox(CFG)
    try:
        verdicts = verify_many(jobs, box, CFG)
    finally:
        box.close()
    assert not [(label, v.detail) for label, v in zip(labels, verdicts) if v.excluded]
    failed_references = [(env_id, v.detail) for (env_id, what), v in zip(labels, verdicts)
                         if what == "reference" and not v.passed]
    assert not failed_references
    cheats_passing = [(env_id, what) for (env_id, what), v in zip(labels, verdicts)
                      if what not in ("reference", "mutant") and v.passed]
    assert not cheats_passing
    assert sum(1 for _, what in labels if what not in ("reference", "mutant")) >= 2 * len(envs)
    for env_id in MUTATED:
        outcomes = [not v.passed for (i, what), v in zip(labels, verdicts) if i == env_id and what == "mutant"]
        assert outcomes, (env_id, outcomes)
        assert sum(outcomes) / len(outcomes) >= 0.6, (env_id, outcomes)


@needs_bwrap
@pytest.mark.parametrize("name", ["finance_facts", "scene_layouts"])
def test_every_env_of_a_host_scored_multi_domain_suite_is_admitted(name):
    with make_sandbox(CFG) as box:
        result = admit(SUITES / name, box, CFG, AdmissionConfig())
    assert len(result.admitted) == result.envs >= 200, report_text(result.report)
    assert result.details.passed.all(), report_text(result.report)

