"""The ``terminal_tasks`` generator: 208 agent envs (160 train, 48 eval, every difficulty in both splits) whose
prompts, files and oracles fit a tiny policy; 704 warm-up envs over names no suite env uses and 528 over the suite's
names with no suite env's prompt; the committed suite is
the generator's output. In real bwrap sandboxes: an env of each family in each split passes admission (the oracle
episode solves its env, the no-op agent and the verifier's cheats fail), agents that hard-code what the task shows
fail, and the oracle episodes of a sample of warm-up envs solve them while the no-op agent does not; copy drills
(warm-start data) hold lines of train and warm-up workspaces only."""

from __future__ import annotations

import json
import shlex
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from posttrain.admission.agent_episodes import NOOP, agent_probes, oracle_calls, run_scripted
from posttrain.admission.batch import SandboxBatches
from posttrain.admission.checks import admit
from posttrain.agent.parser import FORMATS, parse_calls
from posttrain.agent.tools import replace_once
from posttrain.config import AdmissionConfig, SandboxConfig
from posttrain.envs.generators import file_name, render
from posttrain.envs.generators import terminal_tasks
from posttrain.envs.generators.terminal_tasks import FAMILIES, specs, suite_pool_warm_up_specs, warm_up_specs
from posttrain.envs.tools import TOOLS
from posttrain.envs.verifiers import get_verifier
from posttrain.sandbox import make_sandbox

ENVS = specs()
WARM_UP = warm_up_specs()
SUITE_POOL_WARM_UP = suite_pool_warm_up_specs()
SUITE = Path("posttrain/envs/suites/terminal_tasks")
CFG = SandboxConfig(backend="bwrap")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: these tests run real sandboxes")


def family(env) -> str:
    return env.tags[1]


def one_per_family(envs) -> list:
    return list({family(e): e for e in reversed(envs)}.values())


@pytest.mark.unit
def test_counts_splits_and_difficulties():
    assert Counter(e.split for e in ENVS) == {"train": 160, "eval": 48}
    assert Counter(e.difficulty for e in ENVS) == {1: 91, 2: 65, 3: 52}
    cells = Counter((e.difficulty, e.split) for e in ENVS)
    assert {(d, s) for d in (1, 2, 3) for s in ("train", "eval")} <= set(cells)
    assert {family(e) for e in ENVS if e.split == "eval"} == {f for fs in FAMILIES.values() for f, *_ in fs}
    assert len({e.id for e in ENVS}) == len({e.prompt for e in ENVS}) == 208  # scripted oracles tell tasks by prompt
    assert all(e.id.startswith("terminal_tasks/") and (e.domain, e.kind, e.runtime) == ("terminal", "agent", "bash")
               for e in ENVS)
    assert all(get_verifier("workspace_tests").validate(e) == [] for e in ENVS)
    assert specs() == ENVS and warm_up_specs() == WARM_UP  # deterministic
    assert suite_pool_warm_up_specs() == SUITE_POOL_WARM_UP


@pytest.mark.unit
def test_prompts_files_and_oracles_fit_a_tiny_policy():
    for env in ENVS + WARM_UP + SUITE_POOL_WARM_UP:
        assert len(env.prompt) <= 300, env.id
        assert all(len(text) <= 400 for text in env.workspace.values()), env.id
        assert 2 <= len(env.oracle) <= 5 and env.oracle[-1]["name"] == "submit", env.id
        assert all(len(value) <= 60 for call in env.oracle for value in call["arguments"].values()), env.id
        assert env.evaluation["behavior"][1] == {"max_steps": len(env.oracle) + 1}


@pytest.mark.unit
def test_every_oracle_parses_and_its_edits_apply_where_the_workspace_has_them():
    allowed = {name: tool.arguments for name, tool in TOOLS.items()}
    for env in ENVS + WARM_UP + SUITE_POOL_WARM_UP:
        assert [parse_calls(FORMATS["hermes"].render(c), allowed)[0].name for c in env.oracle] == \
            [c["name"] for c in env.oracle]
        files = dict(env.workspace)
        for call in env.oracle:
            args = call["arguments"]
            if call["name"] == "edit_file":
                assert files[args["path"]].count(args["search"]) == 1, (env.id, args)
                files[args["path"]] = replace_once(files[args["path"]], args["search"], args["replace"])
            elif call["name"] == "write_file":  # into a folder the workspace has (the reference writes no folder)
                assert any(p.startswith(args["path"].rpartition("/")[0] + "/") for p in env.workspace), env.id
                files[args["path"]] = args["content"]
        assert files != env.workspace, env.id
        assert tuple(env.evaluation["behavior"][0].values())[0] in {c["name"] for c in env.oracle}


@pytest.mark.unit
def test_warm_up_envs_use_names_no_suite_env_uses():
    assert len(WARM_UP) >= 150 and {e.split for e in WARM_UP} == {"train"}
    assert Counter(family(e) for e in WARM_UP).keys() == Counter(family(e) for e in ENVS).keys()
    assert not {e.id for e in WARM_UP} & {e.id for e in ENVS}
    assert not {e.prompt for e in WARM_UP} & {e.prompt for e in ENVS}
    suite_paths = {p for e in ENVS for p in e.workspace} | {c["arguments"].get("path") for e in ENVS for c in e.oracle}
    warm_paths = {p for e in WARM_UP for p in e.workspace} | {c["arguments"].get("path") for e in WARM_UP
                                                             for c in e.oracle}
    assert suite_paths & warm_paths == {"Makefile", None}
    for kind in ("sections", "scripts", "numbers", "words", "parts", "outputs", "lines"):
        assert not set(getattr(terminal_tasks.SUITE_POOLS, kind)) & set(getattr(terminal_tasks.WARM_UP_POOLS, kind))
    suite_keys = {k for keys in terminal_tasks.SUITE_POOLS.sections.values() for k in keys}
    assert not suite_keys & {k for keys in terminal_tasks.WARM_UP_POOLS.sections.values() for k in keys}


def distinct_per_family(envs, count: int) -> bool:
    """``count`` envs of each family, no two with the same task and files."""
    tasks = {(e.prompt, json.dumps(e.workspace, sort_keys=True)) for e in envs}
    return len(tasks) == len(envs) and set(Counter(family(e) for e in envs).values()) == {count}


@pytest.mark.unit
def test_suite_pool_warm_up_envs_are_new_tasks_over_the_suite_names():
    assert distinct_per_family(WARM_UP, 64) and distinct_per_family(SUITE_POOL_WARM_UP, 48)
    assert {e.split for e in SUITE_POOL_WARM_UP} == {"train"}
    assert not {e.prompt for e in SUITE_POOL_WARM_UP} & {e.prompt for e in ENVS}  # no eval (nor train) task
    assert len({e.id for e in ENVS + WARM_UP + SUITE_POOL_WARM_UP}) == len(ENVS + WARM_UP + SUITE_POOL_WARM_UP)
    suite_keys = {k for keys in terminal_tasks.SUITE_POOLS.sections.values() for k in keys}
    edited = {c["arguments"]["search"].split(" = ")[0] for e in SUITE_POOL_WARM_UP for c in e.oracle
              if c["name"] == "edit_file" and "ini" in e.tags}
    assert edited == suite_keys  # every key of the suite is set, to values the prompt gives
    eval_paths = {p for e in ENVS if e.split == "eval" for p in e.workspace}
    assert eval_paths <= {p for e in SUITE_POOL_WARM_UP for p in e.workspace} | {p for e in ENVS
                                                                                if e.split == "train"
                                                                                for p in e.workspace}


@pytest.mark.unit
def test_warm_start_drills_copy_paths_and_lines_of_train_and_warm_up_workspaces_only():
    drills = terminal_tasks.warm_start_drills(300)
    seen = {line for env in [e for e in ENVS if e.split == "train"] + WARM_UP
            for path, text in env.workspace.items() for line in [path, *text.splitlines()]}
    for prompt, answer in drills:
        assert prompt == f"Copy these lines:\n{answer}Copy:\n" and 2 <= len(answer.splitlines()) <= 4
        assert set(answer.splitlines()) <= seen


@pytest.mark.unit
def test_committed_files_equal_generator_output():
    committed = {p.name: p.read_text() for p in SUITE.glob("*.yaml")}
    assert set(committed) == {file_name(s) for s in ENVS}
    for spec in ENVS:
        assert committed[file_name(spec)] == render(spec, terminal_tasks.HEADER), \
            f"regenerate with: python -m posttrain.envs.generators.terminal_tasks {SUITE}"


@pytest.mark.integration
@needs_bwrap
def test_an_env_of_each_family_in_each_split_is_admitted(tmp_path):
    """A sample, not the 208 (~200 s of admission on 2 cores): ``make demo-multi`` admits the whole suite."""
    sample = [e for split in ("train", "eval") for e in one_per_family([e for e in ENVS if e.split == split])]
    for env in sample:
        shutil.copy(SUITE / file_name(env), tmp_path / file_name(env))
    box = make_sandbox(CFG)
    started = time.monotonic()
    try:
        result = admit(tmp_path, box, CFG, AdmissionConfig())
    finally:
        box.close()
    details = result.details
    print(f"admitted {len(result.admitted)}/{result.envs} envs in {time.monotonic() - started:.0f} s: "
          + ", ".join(f"{check} {s:.0f} s" for check, s in result.seconds.items()))
    assert {e.id for e in result.admitted} == {e.id for e in sample}, \
        details[~details["passed"]][["env_id", "detail"]].values.tolist()
    solvability = details[details["check"] == "solvability"]["detail"].tolist()
    assert all("oracle episode" in d for d in solvability), solvability[:3]


def hard_coded(env) -> list[dict]:
    """An agent that hard-codes what it was shown: a script or Makefile that prints the visible output, or a config
    file holding only the settings it was asked to change."""
    edited = list(dict.fromkeys(c["arguments"]["path"] for c in env.oracle if c["name"] == "edit_file"))
    tests = {t["name"]: t for t in env.verifier["tests"]}
    if "output" in tests:
        visible = tests["output"]["stdout"].split("\n--\n")[0]  # what the workspace's data gives
        printed = f"printf '%s\\n' {shlex.join(visible.splitlines())}"
        if edited == ["Makefile"]:
            target = env.prompt.split()[3]
            content = f"{target}:\n\tmkdir -p {target.split('/')[0]}\n\t{printed} > $@\n"
        else:
            content = printed + "\n"
    else:
        content = None
    calls = []
    for path in edited:
        lines = [c["arguments"]["replace"] for c in env.oracle if c["name"] == "edit_file"
                 and c["arguments"]["path"] == path]
        text = content or ("{" + ", ".join(lines) + "}\n" if path.endswith(".json") else "\n".join(lines) + "\n")
        if path.endswith(".ini") and content is None:
            text = env.workspace[path].splitlines()[0] + "\n" + text  # keep the first section's header
        calls.append({"name": "write_file", "arguments": {"path": path, "content": text}})
    return [*calls, {"name": "bash", "arguments": {"command": "ls"}}, {"name": "submit", "arguments": {}}]


@pytest.mark.integration
@needs_bwrap
def test_hard_coding_and_no_op_agents_fail_and_the_oracle_solves():
    chosen = [e for e in one_per_family(ENVS) if family(e) != "create_file"]
    assert len(chosen) == 10
    box = make_sandbox(CFG)
    try:
        jobs = [(e, oracle_calls(e)) for e in chosen] + [(e, hard_coded(e)) for e in chosen]
        jobs += [(e, calls) for e in chosen for calls in agent_probes(e).values()]
        verdicts = run_scripted(SandboxBatches(box, CFG), "anti_hacking", box, CFG, AdmissionConfig(), jobs)
    finally:
        box.close()
    assert [list(agent_probes(e)) for e in chosen] == [[NOOP]] * len(chosen)  # no visible test to edit
    assert not [v.detail for v in verdicts if v.excluded]
    n = len(chosen)
    assert all(v.passed for v in verdicts[:n]), [v.detail for v in verdicts[:n] if not v.passed]
    assert not [(job[0].id, v.detail) for job, v in zip(jobs[n:], verdicts[n:]) if v.passed]
    assert all(v.reward == 0.0 for v in verdicts[n:]), [(job[0].id, v.detail) for job, v in zip(jobs[n:], verdicts[n:])
                                                       if v.reward]


@pytest.mark.integration
@needs_bwrap
def test_warm_up_oracle_episodes_solve_and_the_no_op_fails():
    chosen = WARM_UP[::32] + SUITE_POOL_WARM_UP[::24]
    assert len(chosen) == 44 and {family(e) for e in chosen} == {family(e) for e in WARM_UP}
    box = make_sandbox(CFG)
    try:
        jobs = [(e, oracle_calls(e)) for e in chosen] + [(e, agent_probes(e)[NOOP]) for e in chosen]
        verdicts = run_scripted(SandboxBatches(box, CFG), "solvability", box, CFG, AdmissionConfig(), jobs)
    finally:
        box.close()
    assert not [v.detail for v in verdicts if v.excluded]
    n = len(chosen)
    assert all(v.passed for v in verdicts[:n]), [(e.id, v.detail) for e, v in zip(chosen, verdicts) if not v.passed]
    assert not any(v.passed for v in verdicts[n:])
