"""The ``finance_agent`` generator: 12 agent envs over the ``finance`` documents and questions, each granting
``check``; the suite is admitted (its oracle reads, writes, checks and submits; the no-op agent earns nothing) and an
agent env of a verifier that cannot serve ``check`` is not."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from posttrain.admission.checks import admit
from posttrain.admission.consistency import oracle_settings_problems
from posttrain.admission.report import report_text
from posttrain.config import AdmissionConfig, SandboxConfig
from posttrain.envs.generators import agent_repo, finance, finance_agent
from posttrain.envs.verifiers import get_verifier
from posttrain.sandbox import make_sandbox

pytestmark = pytest.mark.integration

ENVS = finance_agent.specs()


def test_each_env_asks_the_finance_question_of_its_document_in_answer_json():
    singles = finance.specs()
    assert len(ENVS) == 12 and [e.split for e in ENVS] == [e.split for e in singles]
    for env, single in zip(ENVS, singles):
        assert env.kind == "agent" and get_verifier("numeric").validate(env) == []
        assert env.workspace["report.txt"] in single.prompt  # the same document, in the workspace
        assert {**env.verifier, "answer_file": ""} == {**single.verifier, "answer_file": ""}
        assert json.loads(env.oracle[1]["arguments"]["content"]) == json.loads(single.reference)
        assert "check" in env.agent["tools"] and "bash" not in env.agent["tools"]


def test_a_numeric_agent_env_needs_its_answer_file_and_check_needs_feedback():
    no_file = replace(ENVS[0], verifier={k: v for k, v in ENVS[0].verifier.items() if k != "answer_file"})
    assert get_verifier("numeric").validate(no_file) == [
        ("verifier.answer_file", "an agent env names the workspace file its answer is read from")]
    repo = agent_repo.specs()[0]
    granted = replace(repo, agent={"tools": ["bash", "check", "submit"]}, oracle=[])
    assert [code for code, _ in oracle_settings_problems(granted)] == ["consistency.check_not_served"]


def test_the_suite_is_admitted_and_doing_nothing_earns_nothing():
    cfg = SandboxConfig(backend="bwrap")
    with make_sandbox(cfg) as box:
        result = admit("posttrain/envs/suites/finance_agent", box, cfg, AdmissionConfig())
    assert len(result.admitted) == 12, report_text(result.report)
    assert result.details.passed.all(), report_text(result.report)
