"""Admission of agent envs: the oracle episode decides solvability; the no-op and test-editing agents are anti-hacking
probes; the oracle runs within its env's own tools, max_steps and deadline, the probes without them. Episodes run in
real sandbox sessions (warm bwrap; docker where dockerd and the sandbox image are there)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from posttrain.admission import admit
from posttrain.admission.agent_episodes import (NOOP, TEST_EDITING, agent_probes, oracle_calls, run_scripted,
                                                visible_tests)
from posttrain.admission.batch import SandboxBatches
from posttrain.config import AdmissionConfig, DockerPoolConfig, SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import load_spec, load_suite
from posttrain.sandbox import SandboxStartError, make_sandbox
from posttrain.sandbox.session import SessionError
from tests.sandbox.cases import docker_reason

AGENT_REPO = Path("posttrain/envs/suites/agent_repo")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: these tests run real sandboxes")


def rows_of(details, env_id: str) -> dict[str, tuple[bool, str, str]]:
    return {r.check: (r.passed, r.code, r.detail) for r in details[details["env_id"] == env_id].itertuples()}


def agent_repo_sample(folder: Path, per_split: int) -> list[str]:
    """Copy the first ``per_split`` agent_repo envs of each split into ``folder``; their ids."""
    envs = load_suite(AGENT_REPO).envs
    chosen = [e for e in envs if e.split == "train"][:per_split] + [e for e in envs if e.split == "eval"][:per_split]
    for spec in chosen:
        (folder / Path(spec.source).name).write_text(Path(spec.source).read_text())
    return [spec.id for spec in chosen]


def broken_envs(folder: Path) -> None:
    """Three variants of agent_repo/add_calc (same prompt): a wrong oracle, no oracle (its reference runs as one bash
    call instead, and solves it), and a verifier that only runs the visible test (which the test-editing agent
    rewrites)."""
    data = yaml.safe_load((AGENT_REPO / "add_calc.yaml").read_text())
    wrong = [call if call["name"] != "edit_file" else
             {"name": "edit_file", "arguments": {**call["arguments"], "replace": "return a * b"}}
             for call in data["oracle"]]
    weak = {"kind": "workspace_tests", "tests": [{"name": "visible", "cmd": "python3 tests/test_calc.py",
                                                  "stdout": "ok"}]}
    for name, changes in {"wrong_oracle": {"oracle": wrong}, "no_oracle": {"oracle": []},
                          "visible_test_only": {"verifier": weak}}.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump({**data, "id": f"broken/{name}", **changes}))


@pytest.mark.unit
def test_agent_probes_edit_every_visible_test_in_its_language():
    spec = EnvSpec(id="t/n", prompt="Fix it.", kind="agent", runtime="node", reference="",
                   verifier={"kind": "workspace_tests"},
                   workspace={"src/a.js": "", "test/a.test.js": "", "tests/run.sh": "", "README": ""})
    probes = agent_probes(spec)
    assert visible_tests(spec) == ["test/a.test.js", "tests/run.sh"]
    assert probes[NOOP] == [{"name": "submit", "arguments": {}}]
    calls = [(c["name"], c["arguments"].get("path") or c["arguments"].get("command")) for c in probes[TEST_EDITING]]
    assert calls == [("write_file", "test/a.test.js"), ("write_file", "tests/run.sh"),
                     ("bash", "node test/a.test.js"), ("bash", "bash tests/run.sh"), ("submit", None)]
    assert probes[TEST_EDITING][0]["arguments"]["content"] == 'console.log("ok");\n'
    assert list(agent_probes(EnvSpec(id="t/x", prompt="p", reference="", verifier={}, kind="agent"))) == [NOOP]


@pytest.mark.unit
def test_a_session_that_cannot_start_is_infra_never_a_reward_of_zero():
    class NoSessions:
        name = "none"

        def session(self, **kwargs):
            raise SandboxStartError("no sandbox container can be started: daemon gone")

        def run(self, execution):
            raise AssertionError("nothing is scored when no episode ran")

    spec = EnvSpec(id="t/x", prompt="p", reference="", kind="agent", verifier={"kind": "workspace_tests"})
    batches = SandboxBatches(NoSessions(), SandboxConfig())
    verdicts = run_scripted(batches, "solvability", NoSessions(), SandboxConfig(), AdmissionConfig(),
                            [(spec, [{"name": "submit", "arguments": {}}])] * 2)
    assert [v.excluded for v in verdicts] == [True, True]
    assert "daemon gone" in verdicts[0].infra_error
    assert batches.executions["solvability"] == 0


class FirstCaptureFails:
    """Sessions of a real sandbox; the first one cannot capture its final workspace, as one over its size cannot
    (the episode's own failure, not the sandbox's)."""

    def __init__(self, box):
        self.box, self.opened = box, 0

    def session(self, **kwargs):
        session = self.box.session(**kwargs)
        self.opened += 1
        if self.opened == 1:
            session.snapshot = self.refuse
        return session

    @staticmethod
    def refuse():
        raise SessionError("snapshot(): workspace archive over 2 bytes")


@pytest.mark.integration
@needs_bwrap
def test_a_final_workspace_that_cannot_be_captured_fails_its_own_episode_only():
    envs = load_suite(AGENT_REPO).envs[:2]
    cfg = SandboxConfig(backend="bwrap-warm")
    box = make_sandbox(cfg)
    try:
        batches = SandboxBatches(box, cfg)
        verdicts = run_scripted(batches, "solvability", FirstCaptureFails(box), cfg, AdmissionConfig(),
                                [(spec, oracle_calls(spec)) for spec in envs])
    finally:
        box.close()
    uncaptured, scored = verdicts
    assert not uncaptured.excluded, uncaptured
    assert uncaptured.reward == 0.0, uncaptured  # the agent's outcome, never infra
    assert "final workspace not captured: snapshot(): workspace archive over 2 bytes" in uncaptured.detail
    assert scored.passed
    assert batches.executions["solvability"] == 1  # the other episode of the batch is scored


@pytest.mark.integration
@needs_bwrap
def test_oracles_solve_the_suite_and_wrong_or_hackable_envs_are_rejected(tmp_path):
    good = agent_repo_sample(tmp_path, per_split=2)
    broken_envs(tmp_path)
    cfg = SandboxConfig(backend="bwrap-warm")
    box = make_sandbox(cfg)
    try:
        result = admit(tmp_path, box, cfg, AdmissionConfig())
    finally:
        box.close()
    details = result.details
    assert {s.id for s in result.admitted} == {*good, "broken/no_oracle"}, \
        details[~details["passed"]]["detail"].tolist()
    for env_id in good:
        passed, code, detail = rows_of(details, env_id)["solvability"]
        assert code == "solvability.ok"
        assert "; oracle episode: 4/4 tests passed" in detail
        # 7 of the verifier, 3 degenerate answers (the empty one is the verifier's untouched workspace), 2 agents
        assert "all 12 probes fail" in rows_of(details, env_id)["anti_hacking"][2]
    passed, code, detail = rows_of(details, "broken/wrong_oracle")["solvability"]
    assert (passed, code) == (False, "solvability.oracle_failed")
    assert "oracle episode: 0/4 tests passed" in detail
    passed, code, detail = rows_of(details, "broken/no_oracle")["solvability"]  # the reference as one bash call
    assert (passed, code) == (True, "solvability.ok")
    assert "oracle episode: 4/4 tests passed" in detail
    passed, code, detail = rows_of(details, "broken/visible_test_only")["anti_hacking"]
    assert not passed
    assert code.startswith("anti_hacking.probe_passed:")
    assert f"{TEST_EDITING} (1/1)" in detail
    assert f"{NOOP} (" not in detail  # the untouched workspace still fails the visible test
    assert rows_of(details, "broken/visible_test_only")["solvability"][1] == "solvability.ok"
    # references of 7 envs + 7 oracle episodes (no_oracle's: its reference as one bash call); probes: 7 x (7 + 2 + 2)
    # (the empty answer is the same script as the untouched workspace: run once), whose untouched workspace's
    # verdict also checks every guard label: no run of its own
    assert result.executions["solvability"] == 14
    assert result.executions["anti_hacking"] == 77


@pytest.mark.integration
def test_agent_admission_on_docker(tmp_path):
    if why := docker_reason():
        pytest.skip(why)
    good = agent_repo_sample(tmp_path, per_split=1)
    cfg = SandboxConfig(backend="docker", docker=DockerPoolConfig(size=2, max_size=6))
    box = make_sandbox(cfg)
    try:
        result = admit(tmp_path, box, cfg, AdmissionConfig(checks=["solvability", "anti_hacking"]))
    finally:
        box.close()
    assert [s.id for s in result.admitted] == good, result.details["detail"].tolist()
    assert all("oracle episode: 4/4" in rows_of(result.details, env_id)["solvability"][2] for env_id in good)


@pytest.mark.integration
@needs_bwrap
def test_the_oracle_runs_within_its_envs_own_settings_and_the_probes_without_them():
    env = load_spec(AGENT_REPO / "add_calc.yaml")
    hurried = replace(env, id="t/hurried", agent={"deadline_s": 0.001})  # every turn takes longer: cut after one
    steps = replace(env, id="t/steps", agent={"max_steps": 2})  # cut before its edit
    roomy = replace(env, id="t/roomy", agent={"tools": ["bash", "read_file", "edit_file", "submit"], "max_steps": 4})
    weak = {"kind": "workspace_tests", "tests": [{"name": "visible", "cmd": "python3 tests/test_calc.py",
                                                  "stdout": "ok"}]}
    narrow = replace(env, id="t/narrow", verifier=weak, agent={"tools": ["read_file", "edit_file", "submit"]})
    cfg = SandboxConfig(backend="bwrap-warm")
    box = make_sandbox(cfg)
    try:
        batches = SandboxBatches(box, cfg)
        oracles = run_scripted(batches, "solvability", box, cfg, AdmissionConfig(),
                               [(spec, oracle_calls(spec)) for spec in (hurried, steps, roomy)], own_settings=True)
        [probe] = run_scripted(batches, "anti_hacking", box, cfg, AdmissionConfig(),
                               [(narrow, agent_probes(narrow)[TEST_EDITING])])
    finally:
        box.close()
    cut, short, solved = oracles
    assert not cut.passed
    assert cut.detail.startswith("the episode ended by deadline before submitting; 0/4 tests passed"), cut.detail
    assert not short.passed
    assert short.detail.startswith("the episode ended by max_steps before submitting"), short.detail
    assert solved.passed, solved.detail  # its 4 turns of work fit: the last one ends it, its submit never comes
    assert solved.detail == "the episode ended by max_steps before submitting; 4/4 tests passed"
    assert probe.passed, probe.detail  # write_file ran: the probe is not bound by the env's tool set
