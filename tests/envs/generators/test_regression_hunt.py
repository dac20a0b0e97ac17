"""The ``regression_hunt`` generator: 96 agent envs over real git histories (64 train, 32 eval; strata by history
length and by the bad commit's distance from HEAD). In real sandboxes: the setup builds the declared repository (clean,
the declared length, the commit ids the host's git makes too, the tests passing up to the bad commit and failing from
it on) on warm bwrap and docker; sampled references pass while the untouched workspace, the test-editing cheat,
resetting to before the bad commit and reverting it fail; oracle episodes solve envs on docker and the agent probes
fail; a sample of every package passes admission on warm bwrap (oracle episodes and agent probes included). The
warm-up envs (warm-start data only) break other functions than the suite's, and every warm-up regression's oracle
episode solves its env while the untouched workspace fails."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from posttrain.admission import admit
from posttrain.admission.agent_episodes import NOOP, agent_probes, oracle_calls, run_scripted
from posttrain.admission.batch import SandboxBatches
from posttrain.agent.parser import FORMATS, parse_calls
from posttrain.config import AdmissionConfig, DockerPoolConfig, SandboxConfig
from posttrain.envs.generators import file_name
from posttrain.envs.generators.git_history import STREAM
from posttrain.envs.generators.regression_hunt import DISTANCES, HISTORIES, specs, warm_up_specs
from posttrain.envs.generators.regression_hunt_packages import PACKAGES, WARM_UP_REGRESSIONS
from posttrain.envs.tools import TOOLS
from posttrain.envs.verifiers import get_verifier, verify_many
from posttrain.sandbox import make_sandbox
from tests.sandbox.cases import docker_reason

ENVS = specs()
# One env per (distance, history) stratum, the package and target function rotating (specs() orders them so).
SAMPLE = [ENVS[i * 8 + i % 8] for i in range(12)]
SUITE = Path("posttrain/envs/suites/regression_hunt")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: these tests run real sandboxes")


def strata(env) -> tuple[int, int]:
    """(history length, distance of the bad commit from HEAD), from the env's tags."""
    tags = dict(tag.split("_") for tag in env.tags if tag.startswith(("history_", "distance_")))
    return int(tags["history"]), int(tags["distance"])


def good_tag(env) -> str:
    """The last good release, as the oracle bisects from it."""
    return next(c for c in env.oracle if "bisect start" in c["arguments"].get("command", ""))[
        "arguments"]["command"].split()[4]


@pytest.mark.unit
def test_ids_splits_strata_and_specs_are_valid():
    assert len({e.id for e in ENVS}) == 96
    assert Counter(e.split for e in ENVS) == {"train": 64, "eval": 32}
    assert specs() == ENVS  # deterministic
    assert len({e.prompt for e in ENVS}) == 96  # a scripted oracle tells its task by the prompt
    assert all(get_verifier("workspace_tests").validate(e) == [] for e in ENVS)
    cells = Counter((strata(e)[0], e.difficulty, e.split) for e in ENVS)
    assert {length for length, _, _ in cells} == set(HISTORIES)
    assert {(length, split) for length, _, split in cells} == {(length, s) for length in HISTORIES
                                                               for s in ("train", "eval")}
    for env in ENVS:
        length, distance = strata(env)
        assert distance in {pick(length) for pick in DISTANCES.values()}
        assert env.workspace[STREAM].count("commit refs/heads/main\n") == length
        assert [t.get("guard", False) for t in env.verifier["tests"]] == [False] + [True] * (
            len(env.verifier["tests"]) - 1)
        assert env.verifier["tests"][-1]["name"] == "later_features"  # the bad commit always adds a feature
        assert env.evaluation["behavior"][1] == {"max_steps": len(env.oracle) + 3}
    assert sorted({e.difficulty for e in ENVS}) == [1, 2, 3, 4, 5, 6]


@pytest.mark.unit
def test_every_oracle_parses_uses_known_tools_and_edits_one_line_of_head():
    allowed = {name: tool.arguments for name, tool in TOOLS.items()}
    for env in ENVS:
        calls = oracle_calls(env)
        assert [parse_calls(FORMATS["hermes"].render(c), allowed)[0].name for c in calls][-1] == "submit"
        [edit] = [c["arguments"] for c in calls if c["name"] == "edit_file"]
        assert env.workspace[edit["path"]].count(edit["search"]) == 1
        assert f"{good_tag(env)}\n" in env.workspace[STREAM]  # the tag it bisects from is in the history


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["bwrap-warm", "docker"])
def test_the_setup_builds_the_declared_repository(backend, tmp_path):
    if backend == "docker" and (why := docker_reason()):
        pytest.skip(why)
    changes = {f.regression.change for package in PACKAGES for f in package.functions if f.regression}
    box = make_sandbox(SandboxConfig(backend=backend))
    try:
        for env in SAMPLE[::4]:
            length, distance = strata(env)
            with box.session(timeout_s=30) as session:
                for path, text in env.workspace.items():
                    session.write_file(path, text)
                setup = session.run(env.setup)
                assert setup.exit_code == 0, setup.stderr
                probe = session.run("; ".join([
                    "git status --porcelain", "git rev-list --count HEAD", "git rev-parse HEAD",
                    f"git log -1 --format=%s HEAD~{distance}",
                    *[f"git checkout -q {rev} && python3 tests/run.py > /dev/null; echo exit $?"
                      for rev in ("main", f"main~{distance}", f"main~{distance + 1}", good_tag(env))]]))
            count, head, subject, *exits = probe.stdout.splitlines()  # a clean status prints nothing
            assert (count, head) == (str(length), _host_head(env, tmp_path / env.id.replace("/", "_")))
            assert subject.startswith("Add ")  # the bad commit adds a feature and breaks the target
            assert subject.split("; ")[1] in changes
            assert exits == ["exit 1", "exit 1", "exit 0", "exit 0"], probe.stdout  # broken from the bad commit on
    finally:
        box.close()


def _host_head(env, folder: Path) -> str:
    """HEAD's commit id when the host's git runs the env's setup on its workspace: the ids are reproducible."""
    for path, text in env.workspace.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    subprocess.run(["bash", "-c", env.setup], cwd=folder, check=True, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.integration
@needs_bwrap
def test_references_pass_and_untouched_test_editing_reset_and_revert_fail():
    cheat = "for f in tests/*.py; do echo 'print(\"ok\")' > $f; done\n"
    jobs = []
    for env in SAMPLE:
        _, distance = strata(env)
        jobs += [(env, env.reference), (env, ""), (env, cheat),
                 (env, f"git reset -q --hard HEAD~{distance + 1}\n"),  # the whole history back to before it
                 (env, f"git revert --no-edit HEAD~{distance}\n")]  # the bad commit undone, with what it added
    cfg = SandboxConfig(backend="bwrap-warm")
    box = make_sandbox(cfg)
    try:
        verdicts = verify_many(jobs, box, cfg)
    finally:
        box.close()
    assert not [v.detail for v in verdicts if v.excluded]
    for env, (reference, untouched, cheated, reset, reverted) in zip(SAMPLE, zip(*[verdicts[i::5] for i in range(5)])):
        assert reference.passed, (env.id, reference.detail)
        assert not any(v.passed for v in (untouched, cheated, reset, reverted)), env.id
        assert reset.failures[0] == "", (env.id, reset.detail)  # the regression itself is gone ...
        assert reset.failures[-1].startswith("later_features"), (env.id, reset.detail)  # ... and a later feature
        assert reverted.failures[-1].startswith("later_features"), (env.id, reverted.detail)
        assert reset.reward == reverted.reward == 0.0


@pytest.mark.integration
def test_oracle_episodes_solve_and_agent_probes_fail_on_docker():
    if why := docker_reason():
        pytest.skip(why)
    chosen = [SAMPLE[2], SAMPLE[8]]  # a near and a far bad commit, in two packages
    cfg = SandboxConfig(backend="docker", docker=DockerPoolConfig(size=2, max_size=6))
    box = make_sandbox(cfg)
    try:
        jobs = [(e, oracle_calls(e)) for e in chosen] + [(e, calls) for e in chosen
                                                         for calls in agent_probes(e).values()]
        verdicts = run_scripted(SandboxBatches(box, cfg), "solvability", box, cfg, AdmissionConfig(), jobs)
    finally:
        box.close()
    assert [len(agent_probes(e)) for e in chosen] == [2, 2]  # the no-op and the test-editing agent
    assert not [v.detail for v in verdicts if v.excluded]
    assert all(v.passed for v in verdicts[:2]), [v.detail for v in verdicts[:2]]
    assert not any(v.passed for v in verdicts[2:]), [v.detail for v in verdicts[2:]]


@pytest.mark.integration
@needs_bwrap
def test_a_sample_of_every_package_passes_admission(tmp_path):
    chosen = [SAMPLE[i] for i in (0, 5, 7, 10)]
    assert len({e.id.split("/")[1].split("_")[0] for e in chosen}) == 4
    for env in chosen:
        (tmp_path / file_name(env)).write_text((SUITE / file_name(env)).read_text())
    cfg = SandboxConfig(backend="bwrap-warm")
    box = make_sandbox(cfg)
    try:
        result = admit(tmp_path, box, cfg, AdmissionConfig())
    finally:
        box.close()
    details = result.details
    assert {e.id for e in result.admitted} == {e.id for e in chosen}, details[~details["passed"]]["detail"].tolist()
    solvability = details[details["check"] == "solvability"]["detail"].tolist()
    assert all("oracle episode: 3/3 tests passed" in d for d in solvability), solvability


@pytest.mark.unit
def test_warm_up_envs_break_other_functions_than_the_suites():
    warm = warm_up_specs()
    suite_targets = {(p.name, f.name) for p in PACKAGES for f in p.functions if f.regression}
    assert suite_targets.isdisjoint(WARM_UP_REGRESSIONS) and len(WARM_UP_REGRESSIONS) == 16
    fixes = {tuple(sorted(c["arguments"].items())) for e in warm for c in e.oracle if c["name"] == "edit_file"}
    suite_fixes = {tuple(sorted(c["arguments"].items())) for e in ENVS for c in e.oracle if c["name"] == "edit_file"}
    assert len(fixes) == 16 and fixes.isdisjoint(suite_fixes)
    assert not {e.prompt for e in warm} & {e.prompt for e in ENVS}  # a scripted oracle knows its task by the prompt


@pytest.mark.integration
@needs_bwrap
def test_every_warm_up_regressions_oracle_episode_solves_it_and_the_no_op_fails():
    chosen = [e for e in warm_up_specs() if e.id.endswith("_h12_near")]
    assert len(chosen) == len(WARM_UP_REGRESSIONS)
    cfg = SandboxConfig(backend="bwrap-warm")
    box = make_sandbox(cfg)
    try:
        jobs = [(e, oracle_calls(e)) for e in chosen] + [(e, agent_probes(e)[NOOP]) for e in chosen]
        verdicts = run_scripted(SandboxBatches(box, cfg), "solvability", box, cfg, AdmissionConfig(), jobs)
    finally:
        box.close()
    assert not [v.detail for v in verdicts if v.excluded]
    assert all(v.passed for v in verdicts[:len(chosen)]), [v.detail for v in verdicts[:len(chosen)] if not v.passed]
    assert not any(v.passed for v in verdicts[len(chosen):])
