"""Suite loading: every kind of bad spec becomes a Rejection naming its file and field; good specs still load."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import DOCUMENT, SpecError, load_spec, load_suite, suite_digest, suite_files
from posttrain.locations import local_copy

pytestmark = pytest.mark.unit

GOOD = {
    "id": "t/add_1",
    "prompt": "# Write a function add_1(x) that returns x plus 1.\n",
    "reference": "def add_1(x):\n    return x + 1\n",
    "entry_point": "add_1",
    "difficulty": 1,
    "split": "train",
    "tags": ["demo", "add"],
    "verifier": {"kind": "python_tests", "cases": [{"args": [0], "expected": 1}, {"args": [-2], "expected": -1}]},
    "limits": {"timeout_s": 5, "memory_mb": 256},
}


def spec_with(**changes) -> dict:
    """GOOD with top-level fields replaced; a value of ``...`` deletes the field."""
    data = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is ...:
            del data[key]
        else:
            data[key] = value
    return data


def write(folder, name: str, data) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_good_spec_loads(tmp_path):
    spec = load_spec(write(tmp_path, "a.yaml", GOOD))
    assert isinstance(spec, EnvSpec)
    assert (spec.id, spec.entry_point, spec.limits.timeout_s, spec.limits.memory_mb) == ("t/add_1", "add_1", 5, 256)
    assert spec.source.endswith("a.yaml")
    assert spec.runtime == "python"
    assert spec.kind == "single_turn"
    assert EnvSpec.from_json(spec.to_json()) == spec


BAD = [
    # (what, file content, field, code, words in the reason)
    ("malformed yaml", "id: [unclosed\nprompt: x\n", DOCUMENT, "malformed_yaml", "malformed YAML"),
    ("not a mapping", "- just\n- a list\n", DOCUMENT, "malformed_yaml", "mapping"),
    ("empty file", "", DOCUMENT, "malformed_yaml", "got an empty file"),
    ("not utf-8", "id: caf\xe9\n".encode("latin-1"), DOCUMENT, "unreadable", "utf-8"),
    ("missing prompt", spec_with(prompt=...), "prompt", "missing_field", "missing"),
    ("missing verifier", spec_with(verifier=...), "verifier", "missing_field", "missing"),
    ("typo'd field", {**GOOD, "promt": "x"}, "promt", "unknown_field", "did you mean 'prompt'"),
    ("difficulty not int", spec_with(difficulty="hard"), "difficulty", "wrong_type", "integer"),
    ("difficulty bool", spec_with(difficulty=True), "difficulty", "wrong_type", "integer"),
    ("tags not strings", spec_with(tags=["a", 3]), "tags", "wrong_type", "list of strings"),
    ("verifier not mapping", spec_with(verifier="python_tests"), "verifier", "wrong_type", "mapping"),
    ("a list for a mapping", spec_with(reward=[{"signal": "tests"}]), "reward", "wrong_type", "mapping, got list"),
    ("empty id", spec_with(id=" "), "id", "out_of_range", "non-empty"),
    ("unknown runtime", spec_with(runtime="ruby"), "runtime", "unknown_value", "'ruby'"),
    ("unknown kind", spec_with(kind="chat"), "kind", "unknown_value", "'chat'"),
    ("unknown split", spec_with(split="test"), "split", "unknown_value", "'test'"),
    ("unknown verifier", spec_with(verifier={"kind": "llm_judge"}), "verifier.kind", "unknown_value", "llm_judge"),
    ("zero timeout", spec_with(limits={"timeout_s": 0}), "limits.timeout_s", "out_of_range", "(0, 300]"),
    ("huge timeout", spec_with(limits={"timeout_s": 301}), "limits.timeout_s", "out_of_range", "301"),
    ("negative memory", spec_with(limits={"memory_mb": -1}), "limits.memory_mb", "out_of_range", "-1"),
    ("huge memory", spec_with(limits={"memory_mb": 9000}), "limits.memory_mb", "out_of_range", "8192"),
    ("memory not int", spec_with(limits={"memory_mb": "1G"}), "limits.memory_mb", "wrong_type", "integer"),
    ("unknown limit", spec_with(limits={"cpus": 2}), "limits.cpus", "unknown_field", "unknown limit"),
    ("min_gap > 1", spec_with(min_gap=2), "min_gap", "out_of_range", "[0, 1]"),
    ("bad entry point", spec_with(entry_point="2add"), "entry_point", "invalid_verifier", "function name"),
    ("no cases", spec_with(verifier={"kind": "python_tests", "cases": []}), "verifier.cases", "invalid_verifier",
     "1..100"),
    ("case without expected", spec_with(verifier={"kind": "python_tests", "cases": [{"args": [1]}]}),
     "verifier.cases[0]", "invalid_verifier", "'expected'"),
    ("args not a list", spec_with(verifier={"kind": "python_tests", "cases": [{"args": 1, "expected": 2}]}),
     "verifier.cases[0].args", "invalid_verifier", "list"),
    ("unknown verifier key", spec_with(verifier={**GOOD["verifier"], "timeout": 3}), "verifier.timeout",
     "invalid_verifier", "unknown key"),
    ("wrong runtime for verifier", spec_with(runtime="node"), "runtime", "invalid_verifier", "python"),
    ("reserved workspace file", spec_with(workspace={"harness.py": "x"}), "workspace.harness.py",
     "invalid_verifier", "reserved"),
    ("oracle on a single-turn env", spec_with(oracle=[{"name": "submit", "arguments": {}}]), "oracle",
     "invalid_oracle", "only agent envs"),
    ("unknown assertion", spec_with(evaluation={"behavior": [{"used_tool": "bash"}, "teleport"]}),
     "evaluation.behavior[1]", "invalid_evaluation", "unknown assertion 'teleport'"),
    ("assertion value out of range", spec_with(evaluation={"behavior": [{"max_steps": 0}]}),
     "evaluation.behavior[0]", "invalid_evaluation", "max_steps"),
]


@pytest.mark.parametrize("what,content,field,code,words", BAD, ids=[b[0] for b in BAD])
def test_bad_spec_is_rejected_naming_file_and_field(tmp_path, what, content, field, code, words):
    path = write(tmp_path, "bad.yaml", content)
    suite = load_suite(tmp_path)
    assert suite.envs == []
    matching = [r for r in suite.rejections if r.field == field]
    assert matching, f"{what}: no rejection for field {field!r} in {suite.rejections}"
    rejection = matching[0]
    assert (rejection.file, rejection.code) == (path, code)
    assert words in rejection.reason
    with pytest.raises(SpecError) as raised:
        load_spec(path)
    assert raised.value.file == path
    assert raised.value.field in {r.field for r in suite.rejections}


def test_every_problem_of_one_file_is_reported(tmp_path):
    write(tmp_path, "bad.yaml", spec_with(prompt=..., runtime="ruby", difficulty="x", limits={"timeout_s": -1}))
    fields = {r.field for r in load_suite(tmp_path).rejections}
    assert {"prompt", "difficulty"} <= fields  # type and presence problems are reported together


def test_batch_continues_past_bad_files(tmp_path):
    write(tmp_path, "a.yaml", GOOD)
    write(tmp_path, "b.yaml", "id: [oops\n")
    write(tmp_path, "c.yaml", spec_with(id="t/c", limits={"memory_mb": 0}))
    write(tmp_path, "sub/d.yml", spec_with(id="t/d"))
    write(tmp_path, "notes.txt", "not a spec")
    suite = load_suite(tmp_path)
    assert [s.id for s in suite.envs] == ["t/add_1", "t/d"]
    assert [(r.file.rsplit("/", 1)[-1], r.field) for r in suite.rejections] == [
        ("b.yaml", DOCUMENT), ("c.yaml", "limits.memory_mb")]
    assert suite.rejections[1].env_id == "t/c"
    assert [s.id for s in suite.split("train")] == ["t/add_1", "t/d"]


def test_duplicate_id_rejects_the_later_file(tmp_path):
    first = write(tmp_path, "a.yaml", GOOD)
    second = write(tmp_path, "b.yaml", spec_with(prompt="# Write a function add_1(x), again.\n"))
    suite = load_suite(tmp_path)
    assert [s.source for s in suite.envs] == [first]
    (rejection,) = suite.rejections
    assert (rejection.file, rejection.field, rejection.code, rejection.env_id) == (
        second, "id", "duplicate_id", "t/add_1")
    assert first in rejection.reason


def test_missing_folder_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="suite folder not found"):
        load_suite(tmp_path / "nope")



def test_a_suite_includes_other_folders_by_relative_path_and_by_reference(tmp_path):
    write(tmp_path / "code", "a.yaml", GOOD)
    write(tmp_path / "more", "b.yaml", spec_with(id="t/b"))
    write(tmp_path / "both", "own.yaml", spec_with(id="t/own"))
    write(tmp_path / "both", "include.txt", f"# two folders\n../code\n\n{tmp_path / 'more'}  # absolute\n../code\n")
    names = [name for name, _ in suite_files(tmp_path / "both")]
    assert names == ["own.yaml", "../code/a.yaml", f"{tmp_path / 'more'}/b.yaml"]  # a folder reached twice: once
    assert [e.id for e in load_suite(tmp_path / "both").envs] == ["t/own", "t/add_1", "t/b"]
    packaged = load_suite(local_copy("posttrain:envs/suites/agent_long"))
    assert {e.id.split("/")[0] for e in packaged.envs} == {"regression_hunt", "finance_agent"}
    assert packaged.rejections == []


def test_a_cycle_of_includes_reads_each_folder_once(tmp_path):
    write(tmp_path / "a", "a.yaml", GOOD)
    write(tmp_path / "a", "include.txt", "../b\n")
    write(tmp_path / "b", "b.yaml", spec_with(id="t/b"))
    write(tmp_path / "b", "include.txt", "../a\n")
    assert [e.id for e in load_suite(tmp_path / "a").envs] == ["t/add_1", "t/b"]


def test_a_missing_include_names_the_include_file_and_its_line(tmp_path):
    write(tmp_path / "a", "a.yaml", GOOD)
    include = write(tmp_path / "a", "include.txt", "# first\n../nope\n")
    with pytest.raises(FileNotFoundError, match=f"{re.escape(include)}: line 2: suite folder not found: ../nope"):
        load_suite(tmp_path / "a")


def test_the_digest_covers_included_specs_and_keeps_a_plain_suites_value(tmp_path):
    write(tmp_path / "code", "a.yaml", GOOD)
    plain = suite_digest(tmp_path / "code")
    write(tmp_path / "both", "include.txt", "../code\n")
    before = suite_digest(tmp_path / "both")
    assert before != plain  # the names carry the include
    write(tmp_path / "code", "a.yaml", spec_with(prompt="# Write a function add_1(x): x plus one.\n"))
    assert suite_digest(tmp_path / "both") != before
    assert suite_digest(tmp_path / "code") != plain
    write(tmp_path / "code", "a.yaml", GOOD)
    assert suite_digest(tmp_path / "code") == plain

AGENT = {
    "id": "t/fix_x", "kind": "agent", "runtime": "python", "workspace": {"a.py": "x = 1\n"},
    "prompt": "Set x to 2 in a.py, then submit.\n", "reference": "sed -i 's/x = 1/x = 2/' a.py\n",
    "oracle": [{"name": "read_file", "arguments": {"path": "a.py"}},
               {"name": "edit_file", "arguments": {"path": "a.py", "search": "x = 1", "replace": "x = 2"}},
               {"name": "submit", "arguments": {}}],
    "verifier": {"kind": "workspace_tests",
                 "files": {"x.py": "import sys\nsys.path.append('/work')\nimport a\nprint(a.x)\n"},
                 "tests": [{"name": "x", "cmd": "python3 -I {tests}/x.py", "stdout": "2"}]},
}


def test_an_agent_spec_carries_its_oracle_through_yaml_json_and_the_generators_writer(tmp_path):
    from posttrain.envs.generators import render

    spec = load_spec(write(tmp_path, "a.yaml", AGENT))
    assert spec.oracle == AGENT["oracle"]
    assert EnvSpec.from_json(spec.to_json()) == spec
    text = render(spec, "# generated\n")
    assert "- {name: submit, arguments: {}}" in text
    assert "&id" not in text  # one call a line, no YAML aliases
    again = load_spec(write(tmp_path / "again", "a.yaml", text))
    assert (again.oracle, again.prompt, again.verifier) == (spec.oracle, spec.prompt, spec.verifier)
    assert load_spec(write(tmp_path, "b.yaml", {**AGENT, "oracle": []})).oracle == []
    assert "oracle:" not in render(EnvSpec(**{**AGENT, "oracle": []}), "")  # default left out


BAD_ORACLES = [
    # (what, oracle, field, code, words in the reason)
    ("not a list", "edit a.py", "oracle", "wrong_type", "must be a list of mappings, got str"),
    ("item not a mapping", [{"name": "submit", "arguments": {}}, "bash ls"], "oracle", "wrong_type",
     "whose item 1 is a str"),
    ("unknown tool", [{"name": "rm", "arguments": {"path": "a.py"}}], "oracle[0].name", "invalid_oracle",
     "unknown tool 'rm' (known: bash, python"),
    ("no arguments", [{"name": "bash"}], "oracle[0]", "invalid_oracle", "missing ['arguments']"),
    ("unexpected key", [{"name": "submit", "arguments": {}, "why": "done"}], "oracle[0]", "invalid_oracle",
     "unexpected ['why']"),
    ("wrong argument name", [{"name": "submit", "arguments": {}}, {"name": "bash", "arguments": {"cmd": "ls"}}],
     "oracle[1].arguments", "invalid_oracle", "bash: missing ['command']; unexpected ['cmd']"),
    ("argument not a string", [{"name": "bash", "arguments": {"command": ["ls"]}}], "oracle[0].arguments",
     "invalid_oracle", "not strings ['command']"),
    ("arguments not a mapping", [{"name": "read_file", "arguments": "a.py"}], "oracle[0].arguments",
     "invalid_oracle", "must be a mapping of ['path'], got str"),
]


@pytest.mark.parametrize("what,oracle,field,code,words", BAD_ORACLES, ids=[b[0] for b in BAD_ORACLES])
def test_a_malformed_oracle_is_rejected_naming_file_and_field(tmp_path, what, oracle, field, code, words):
    path = write(tmp_path, "bad.yaml", {**AGENT, "oracle": oracle})
    suite = load_suite(tmp_path)
    assert suite.envs == []
    assert [(r.file, r.field, r.code) for r in suite.rejections] == [(path, field, code)], suite.rejections
    assert words in suite.rejections[0].reason
    with pytest.raises(SpecError, match=f"bad.yaml: {re.escape(field)}: "):
        load_spec(path)


def test_an_agent_spec_carries_its_own_tools_and_budgets_through_yaml_json_and_the_generators_writer(tmp_path):
    from posttrain.envs.generators import render

    agent = {"tools": ["submit", "read_file", "edit_file"], "max_steps": 4, "deadline_s": 30}
    spec = load_spec(write(tmp_path, "a.yaml", {**AGENT, "agent": agent}))
    assert spec.agent == agent
    assert EnvSpec.from_json(spec.to_json()) == spec
    assert load_spec(write(tmp_path / "again", "a.yaml", render(spec, "# generated\n"))).agent == agent
    assert load_spec(write(tmp_path, "b.yaml", AGENT)).agent == {}


BAD_AGENT_SETTINGS = [
    # (what, agent, field, words in the reason); every one is invalid_agent
    ("unknown tool", {"tools": ["bash", "curl", "submit"]}, "agent.tools[1]", "got 'curl'"),
    ("no submit", {"tools": ["bash"]}, "agent.tools", "must include submit"),
    ("a tool twice", {"tools": ["bash", "bash", "submit"]}, "agent.tools", "lists ['bash'] more than once"),
    ("no tools", {"tools": []}, "agent.tools", "must be a non-empty list of tools"),
    ("typo'd key", {"max_step": 4}, "agent.max_step", "unknown key for agent settings (allowed: context_budget"),
    ("zero max_steps", {"max_steps": 0}, "agent.max_steps", "must be an integer >= 1, got 0"),
    ("max_steps not an integer", {"max_steps": 2.5}, "agent.max_steps", "got 2.5"),
    ("zero deadline", {"deadline_s": 0}, "agent.deadline_s", "must be a positive number, got 0"),
    ("token_budget a string", {"token_budget": "1k"}, "agent.token_budget", "got '1k'"),
    ("not a mapping", ["bash"], "agent", "must be a mapping"),
]


@pytest.mark.parametrize("what,agent,field,words", BAD_AGENT_SETTINGS, ids=[b[0] for b in BAD_AGENT_SETTINGS])
def test_bad_agent_settings_are_rejected_naming_file_and_field(tmp_path, what, agent, field, words):
    path = write(tmp_path, "bad.yaml", {**AGENT, "agent": agent})
    suite = load_suite(tmp_path)
    assert suite.envs == []
    code = "wrong_type" if field == "agent" else "invalid_agent"
    assert [(r.file, r.field, r.code) for r in suite.rejections] == [(path, field, code)], suite.rejections
    assert words in suite.rejections[0].reason
    with pytest.raises(SpecError, match=f"bad.yaml: {re.escape(field)}: "):
        load_spec(path)


def test_agent_settings_belong_to_agent_envs_only(tmp_path):
    path = write(tmp_path, "bad.yaml", spec_with(agent={"max_steps": 3}))
    [rejection] = load_suite(tmp_path).rejections
    assert (rejection.file, rejection.field, rejection.code) == (path, "agent", "invalid_agent")
    assert "only agent envs have agent settings (kind is 'single_turn')" in rejection.reason
