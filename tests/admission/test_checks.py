"""Admission end to end in real (warm) bubblewrap sandboxes: a sample of every demo shape is admitted by every check
(the whole suite: in the smoke run, ``tests/workflows/test_rl_loop.py``);
learnability, policy failures and check selection behave; hostile solutions earn nothing they did not compute;
reward layers are admitted like the verifier's own reward;
sandbox failures are reported as infra; the CLI writes the same report files as the workflow."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from posttrain.admission import admit, report_text
from posttrain.admission.policies import DegeneratePolicy
from posttrain.cli import main as cli_main
from posttrain.config import ADMISSION_CHECKS, DEMO_SUITE, AdmissionConfig, ConfigError, SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import load_suite
from posttrain.envs.table import envs_to_table
from posttrain.envs.verifiers import verify_many
from posttrain.sandbox import make_sandbox
from posttrain.sandbox.bwrap import BwrapSandbox

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: these tests run real sandboxes")]

CFG = SandboxConfig()  # the default backend: warm bwrap slots


@pytest.fixture
def sandbox():
    box = make_sandbox(CFG)
    yield box
    box.close()


def demo_spec_data(name: str) -> dict:
    return yaml.safe_load((Path(DEMO_SUITE) / f"{name}.yaml").read_text())


@pytest.fixture
def small_suite(tmp_path) -> Path:
    for name in ("add_2", "gt_3_mul_2", "mod_5"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(demo_spec_data(name)))
    return tmp_path


def rows_of(details, env_id: str) -> dict[str, tuple[bool, str]]:
    return {r.check: (r.passed, r.detail) for r in details[details["env_id"] == env_id].itertuples()}


def demo_sample(folder: Path) -> Path:
    """One demo env per (shape, split): every op, every difficulty and both splits, a few dozen envs in all."""
    chosen = {(tuple(spec.tags), spec.split): spec for spec in reversed(load_suite(DEMO_SUITE).envs)}
    for spec in chosen.values():
        (folder / Path(spec.source).name).write_text(Path(spec.source).read_text())
    return folder


def test_a_sample_of_every_demo_shape_is_admitted_by_every_check(sandbox, tmp_path):
    """Every check on one env per (shape, split); the whole demo suite is admitted by every check in the smoke run
    (``tests/workflows/test_rl_loop.py``)."""
    folder = demo_sample(tmp_path)
    started = time.monotonic()
    result = admit(folder, sandbox, CFG, AdmissionConfig())
    wall_s = time.monotonic() - started
    suite = load_suite(folder)
    print(f"admitted {len(result.admitted)} demo envs in {wall_s:.1f} s; executions {result.executions}")
    assert result.report["passed"].all(), report_text(result.report)
    assert len(result.admitted) == len(suite.envs) >= 50
    assert {(s.difficulty, s.split) for s in suite.envs} == {(d, sp) for d in (1, 2, 3) for sp in ("train", "eval")}
    assert len(result.report) == len(ADMISSION_CHECKS) * len(suite.envs)
    assert set(result.details["status"]) == {"pass"}
    assert (result.details.groupby("check")["value"].min().drop("consistency") > 0.6).all()
    assert list(result.stats["check"]) == list(ADMISSION_CHECKS)
    assert (result.stats["pass_rate"] == 1.0).all()
    # the shared cache: the strong (reference) samples reuse the solvability runs, the identity samples run once
    assert result.executions["discrimination"] == len(suite.envs)
    assert result.executions["reproducibility"] == 2 * len(suite.envs)
    table = envs_to_table(result.admitted)
    assert set(table["split"]) == {"train", "eval"}
    assert [EnvSpec.from_json(s) for s in table["spec_json"]] == result.admitted


def test_learnability_is_reported_or_filtered_and_checks_can_be_chosen(sandbox, small_suite):
    cfg = AdmissionConfig(checks=["consistency", "solvability"], learnability_policy="noisy:0.5", k=8)
    reported = admit(small_suite, sandbox, CFG, cfg).details
    assert set(reported["check"]) == {"consistency", "solvability", "learnability"}
    learn = reported[reported["check"] == "learnability"].set_index("env_id")
    assert learn["passed"].all()
    assert learn["value"].between(0, 1).all()
    assert set(learn["code"]) <= {"learnability.ok", "learnability.solved", "learnability.unsolved"}
    assert "learnability.ok" in set(learn["code"])  # noisy:0.5 over 8 samples both passes and fails
    assert set(learn["status"]) <= {"pass", "reported"}
    always = admit(small_suite, sandbox, CFG, AdmissionConfig(checks=["solvability"], learnability_policy="reference",
                                                              filter_learnability=True))
    codes = always.details[always.details["check"] == "learnability"]["code"]
    assert set(codes) == {"learnability.solved"}
    assert always.admitted == []


def test_reward_layers_are_checked_when_loaded_against_the_reference_and_against_degenerate_answers(sandbox,
                                                                                                   tmp_path):
    lint = {"signal": "lint", "weight": 0.1}
    files = {  # name -> (reference prepended with, layers)
        "lint_light": ("", [{"signal": "compiles", "gate": True}, {"signal": "tests", "weight": 0.9}, lint]),
        "lint_heavy": ("", [{"signal": "tests", "weight": 0.8}, {"signal": "lint", "weight": 0.2}]),
        "unlinted_reference": ("import os\n", [{"signal": "tests", "weight": 0.9}, lint]),
        "misspelt": ("", [{"signal": "tests"}, {"signal": "lnt"}]),
    }
    for name, (prefix, layers) in files.items():
        data = demo_spec_data("add_2")
        data.update(id=f"t/{name}", reference=prefix + data["reference"], reward={"layers": layers})
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
    result = admit(tmp_path, sandbox, CFG, AdmissionConfig(checks=["consistency", "solvability", "anti_hacking"]))
    details = result.details.set_index(["env_id", "check"])
    assert [spec.id for spec in result.admitted] == ["t/lint_light"], report_text(result.report)
    # doing nothing meets lint: 0.2 of the reward for the empty program is more than max_probe_reward (0.1 is not)
    assert details.loc[("t/lint_heavy", "anti_hacking"), "code"] == "anti_hacking.probe_rewarded:empty answer"
    assert "empty answer (reward 0.20" in details.loc[("t/lint_heavy", "anti_hacking"), "detail"]
    unlinted = details.loc[("t/unlinted_reference", "solvability")]
    assert unlinted["code"] == "solvability.reference_below_full_reward"
    assert unlinted["value"] == pytest.approx(0.9)
    assert "lint: line 1: 'os' imported but unused" in unlinted["detail"]
    misspelt = result.details[result.details["code"] == "consistency.invalid_reward"]
    assert len(misspelt) == 1
    assert f"{tmp_path / 'misspelt.yaml'}: reward.layers[1].signal: unknown signal 'lnt'" in misspelt["detail"].iloc[0]


class SolvesOnly:
    """A checkpoint policy that answers the reference on some envs and the identity program on the others."""

    name = "solves-only"

    def __init__(self, env_ids: set[str]):
        self.env_ids = env_ids

    def solutions_many(self, specs, k, seed):
        return [[spec.reference if spec.id in self.env_ids else DegeneratePolicy("identity").program(spec)] * k
                for spec in specs]

    def close(self):
        pass


def test_the_default_min_gap_rejects_an_env_both_policies_pass_alike_and_keeps_one_with_a_gap(sandbox, small_suite,
                                                                                              tmp_path):
    weak = str(tmp_path)  # a checkpoint that solves demo/add_2 as the strong reference does, and nothing else
    cfg = AdmissionConfig(checks=["solvability", "discrimination"], weak_policy=weak)
    given = {weak: SolvesOnly({"demo/add_2"})}
    rows = admit(small_suite, sandbox, CFG, cfg, policies=given).details.set_index(["env_id", "check"])
    tie, gap = rows.loc[("demo/add_2", "discrimination")], rows.loc[("demo/mod_5", "discrimination")]
    assert cfg.min_gap == 0.1
    assert tie["code"] == "discrimination.gap_too_small"
    assert tie["value"] == 0.0
    assert "strong 'reference' 1.00 - weak" in tie["detail"]
    assert "1.00 = gap 0.00 (min_gap 0.1, k=4/4)" in tie["detail"]
    assert (gap["code"], gap["value"]) == ("discrimination.ok", 1.0)
    unfiltered = admit(small_suite, sandbox, CFG, replace(cfg, min_gap=0.0), policies=given).details
    assert unfiltered[unfiltered["check"] == "discrimination"]["passed"].all()  # 0: a tie passes


class EngineThatCannotStart:
    """A checkpoint policy whose vLLM engine fails to start."""

    name = "unstartable"

    def solutions_many(self, specs, k, seed):
        raise RuntimeError("engine core failed to start")

    def close(self):
        pass


def test_a_policy_that_cannot_sample_is_infra_not_the_envs_fault(sandbox, small_suite, tmp_path):
    checkpoint = str(tmp_path)
    result = admit(small_suite, sandbox, CFG, AdmissionConfig(checks=["solvability", "discrimination"],
                                                              weak_policy=checkpoint),
                   policies={checkpoint: EngineThatCannotStart()})
    rows = result.details[result.details["check"] == "discrimination"]
    assert len(rows) == 3
    assert set(rows["code"]) == {"infra"}
    assert rows["detail"].str.startswith(f"infra: policy {checkpoint!r} failed: RuntimeError: engine core").all()
    assert result.details[result.details["check"] == "solvability"]["passed"].all()


def test_a_policy_that_cannot_be_resolved_stops_admission_naming_its_field(small_suite, tmp_path):
    class NoSandbox:  # resolved before any sandbox work: nothing may run
        def __getattr__(self, name):
            raise AssertionError(f"sandbox.{name} used")

    cfg = AdmissionConfig(checks=["solvability", "discrimination"], strong_policy=str(tmp_path))
    with pytest.raises(ConfigError, match=f"admission.strong_policy: policy dir {tmp_path} has no config.json"):
        admit(small_suite, NoSandbox(), CFG, cfg)


def test_hostile_solutions_earn_only_what_they_compute(sandbox):
    spec = load_suite(DEMO_SUITE).envs[0]  # demo/add_2, 8 cases
    entry = spec.entry_point
    hostile = {
        "forged lines": f"import sys\nfor i in range(8):\n    print('{{\"case\": %d, \"value\": %d}}' % (i, i + 2))\n"
                        f"    sys.__stdout__.write('x {{\"case\": %d, \"value\": 0}}\\n' % i)\n"
                        f"def {entry}(x):\n    return 0\n",
        "exit before answering": f"import os\ndef {entry}(x):\n    os._exit(0)\n",
        "kill the harness": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
        # the nonce is no secret from code in the harness's process, but a claim still has to be the right value
        "forges with the nonce": "import os, sys\nr = sys._getframe(1).f_locals['results']\nfor i in range(8):\n"
                                 "    claim = '%s {\"case\": %d, \"value\": 0}\\n' % (r.nonce, i)\n"
                                 "    os.write(r.fd, claim.encode())\n"
                                 f"def {entry}(x):\n    return x + 2\n",
        "floods stdout": f"print('x' * 5_000_000)\ndef {entry}(x):\n    return x + 2\n",
        "returns huge value": f"def {entry}(x):\n    return 'y' * 100_000\n",
    }
    verdicts = verify_many([(spec, program) for program in hostile.values()], sandbox, CFG)
    got = {name: (v.tests_passed, v.excluded) for name, v in zip(hostile, verdicts)}
    assert got == {"forged lines": (1, False),  # add_2(x) == 0 only for x = -2
                   "exit before answering": (0, False), "kill the harness": (0, False),
                   "forges with the nonce": (1, False), "floods stdout": (8, False), "returns huge value": (0, False)}


def test_a_solution_that_never_returns_times_out(sandbox):
    spec = load_suite(DEMO_SUITE).envs[0]
    (v,) = verify_many([(spec, f"def {spec.entry_point}(x):\n    while True:\n        pass\n")], sandbox,
                       SandboxConfig(timeout_s=1.5))
    assert (v.timed_out, v.passed, v.excluded, v.compiled) == (True, False, False, True)


def test_sandbox_failure_is_reported_as_infra_not_as_the_envs_fault(tmp_path):
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(demo_spec_data("add_2")))
    broken = BwrapSandbox(extra_ro_binds=[("/nonexistent/posttrain-test", "/opt/missing")])
    result = admit(tmp_path, broken, SandboxConfig(start_retries=0))
    rows = rows_of(result.details, "demo/add_2")
    assert rows["consistency"][0] is True
    for check in ("solvability", "reproducibility", "anti_hacking"):
        passed, detail = rows[check]
        assert passed is False, (check, detail)
        assert detail.startswith("infra: "), (check, detail)
    for check in ("coverage", "discrimination"):
        assert rows[check] == (False, f"{check}.skipped: the reference run hit an infra error")
    assert result.admitted == []
    assert result.stats.set_index("check").loc["solvability", "infra"] == 1


def test_cli_writes_the_report_files_and_prints_per_check_stats(small_suite, tmp_path, capsys):
    (small_suite / "broken.yaml").write_text("id: [oops\n")
    out = tmp_path / "report"
    assert cli_main(["admit", str(small_suite), "--out", str(out), "--no-progress", "--k", "2",
                     "--config", json.dumps({"max_mutants": 4})]) == 0
    printed = capsys.readouterr().out
    assert "per-check statistics:" in printed
    assert "consistency.malformed_yaml" in printed
    assert "3/4 envs admitted in" in printed
    details = pd.read_parquet(out / "report.parquet")
    assert set(details["check"]) == set(ADMISSION_CHECKS)
    stats = json.loads((out / "check_stats.json").read_text())
    assert stats["coverage"]["pass"] == 3
    assert stats["consistency"]["fail"] == 1
    assert (out / "report.html").read_text().count("<table>") == 4

