"""Admission end to end in real bubblewrap sandboxes: the demo suite is admitted whole; bad envs are rejected for
the right reason; hostile solutions earn nothing they did not compute; sandbox failures are reported as infra."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import yaml

from posttrain.admission.checks import admit
from posttrain.admission.report import summarize
from posttrain.config import DEMO_SUITE, SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import load_suite
from posttrain.envs.table import envs_to_table
from posttrain.envs.verifiers import verify_many
from posttrain.sandbox import make_sandbox
from posttrain.sandbox.bwrap import BwrapSandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap (bwrap) is not installed: these tests run real sandboxes")

CFG = SandboxConfig(backend="bwrap", concurrency=2)


@pytest.fixture
def sandbox():
    box = make_sandbox(CFG)
    yield box
    box.close()


def demo_spec_data(name: str) -> dict:
    return yaml.safe_load((Path(DEMO_SUITE) / f"{name}.yaml").read_text())


def rows_of(report, env_id: str) -> dict[str, tuple[bool, str]]:
    return {r.check: (r.passed, r.detail) for r in report[report["env_id"] == env_id].itertuples()}


def test_demo_suite_is_admitted_whole(sandbox):
    started = time.monotonic()
    result = admit(DEMO_SUITE, sandbox, CFG)
    wall_s = time.monotonic() - started
    suite = load_suite(DEMO_SUITE)
    print(f"admitted {len(result.admitted)} demo envs in {wall_s:.1f} s")
    assert result.report["passed"].all(), summarize(result.report)
    assert len(result.admitted) == len(suite.envs) >= 60
    assert len(result.report) == 3 * len(suite.envs)
    assert set(result.report["check"]) == {"consistency", "solvability", "anti_hacking"}
    table = envs_to_table(result.admitted)
    assert set(table["split"]) == {"train", "eval"}
    assert [EnvSpec.from_json(s) for s in table["spec_json"]] == result.admitted


@pytest.fixture
def fixture_suite(tmp_path) -> Path:
    def write(name: str, data) -> None:
        (tmp_path / name).write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))

    write("good.yaml", {**demo_spec_data("add_2"), "id": "t/good"})
    write("wrong_reference.yaml", {**demo_spec_data("add_3"), "id": "t/wrong_reference",
                                   "reference": "def add_3(x):\n    return x + 4\n"})
    write("malformed.yaml", "id: t/malformed\nprompt: [oops\n")
    hackable = demo_spec_data("mul_2")
    hackable.update(id="t/hackable", reference="def mul_2(x):\n    return None\n",
                    verifier={"kind": "python_tests", "cases": [{"args": [x], "expected": None} for x in (-1, 0, 3)]})
    write("hackable.yaml", hackable)
    write("unnamed_entry.yaml", {**demo_spec_data("sub_2"), "id": "t/unnamed_entry",
                                 "prompt": "# Write a function that returns x minus 2.\n"})
    write("duplicate.yaml", {**demo_spec_data("add_4"), "id": "t/good"})
    return tmp_path


def test_bad_envs_are_rejected_for_the_right_reason(sandbox, fixture_suite):
    result = admit(fixture_suite, sandbox, CFG)
    report = result.report
    assert [s.id for s in result.admitted] == []  # t/good shares its id with duplicate.yaml
    assert rows_of(report, "t/wrong_reference")["solvability"][0] is False
    assert "returned" in rows_of(report, "t/wrong_reference")["solvability"][1]
    assert rows_of(report, "t/wrong_reference")["anti_hacking"][0] is True
    malformed = rows_of(report, str(fixture_suite / "malformed.yaml"))
    assert malformed["consistency"][0] is False and "malformed YAML" in malformed["consistency"][1]
    assert "malformed.yaml: <document>" in malformed["consistency"][1]
    hackable = rows_of(report, "t/hackable")
    assert hackable["solvability"][0] is True
    assert hackable["anti_hacking"] == (False, "hackable: no-op passes (no-op: 3/3; sys.exit(0): 0/3)")
    unnamed = rows_of(report, "t/unnamed_entry")
    assert unnamed["consistency"][0] is False and "not named in the prompt" in unnamed["consistency"][1]
    duplicate = report[(report["env_id"] == "t/good") & ~report["passed"]]
    assert list(duplicate["detail"].str.contains("duplicate id 't/good'")) == [True]
    assert rows_of(report, "t/good")["solvability"][0] is True  # the first t/good itself was fine


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
        "forges with the nonce": "import os, sys\nh = sys._getframe(1).f_locals\nfor i in range(8):\n"
                                 "    claim = '%s {\"case\": %d, \"value\": 0}\\n' % (h['nonce'], i)\n"
                                 "    os.write(h['results_fd'], claim.encode())\n"
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
    cfg = SandboxConfig(timeout_s=1.5)
    (v,) = verify_many([(spec, f"def {spec.entry_point}(x):\n    while True:\n        pass\n")], sandbox, cfg)
    assert (v.timed_out, v.passed, v.excluded, v.compiled) == (True, False, False, True)


def test_sandbox_failure_is_reported_as_infra_not_as_the_envs_fault(tmp_path):
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(demo_spec_data("add_2")))
    broken = BwrapSandbox(extra_ro_binds=[("/nonexistent/posttrain-test", "/opt/missing")])
    result = admit(tmp_path, broken, SandboxConfig(start_retries=0))
    rows = rows_of(result.report, "demo/add_2")
    assert rows["consistency"][0] is True
    for check in ("solvability", "anti_hacking"):
        passed, detail = rows[check]
        assert passed is False and detail.startswith("infra: "), (check, detail)
    assert result.admitted == []
