"""The environment spec: one RL env (prompt, workspace, verifier, reference solution, limits) as a typed record.

Specs are YAML files in a suite folder; ``posttrain.envs.suite.load_suite`` parses and validates them. Every field
and each verifier kind's config is documented in ``docs/env-spec.md``; ``posttrain/envs/spec_schema.json`` is the
same format as a JSON Schema (``python -m posttrain.envs.spec_json_schema`` regenerates it). An agent env
(``kind: agent``) also carries its ``oracle``: tool calls that solve it, which admission runs as an agent episode.

Example:
    >>> spec = EnvSpec(id="demo/add_3", prompt="...", entry_point="add_3",
    ...                verifier={"kind": "python_tests", "cases": [{"args": [1], "expected": 4}]},
    ...                reference="def add_3(x):\\n    return x + 3\\n")
    >>> spec.limits.timeout_s, spec.split
    (5.0, 'train')
    >>> agent = EnvSpec(id="t/fix", prompt="Fix a.py.", kind="agent", reference="sed -i s/1/2/ a.py\\n",
    ...                 workspace={"a.py": "x = 1\\n"}, verifier={"kind": "workspace_tests", "tests": []},
    ...                 oracle=[{"name": "edit_file", "arguments": {"path": "a.py", "search": "1", "replace": "2"}}])
    >>> EnvSpec.from_json(agent.to_json()) == agent
    True
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from posttrain.declaration import declare

RUNTIMES = ("python", "node", "bash")
KINDS = ("single_turn", "agent")
SPLITS = ("train", "eval")
CHOICES = {"runtime": RUNTIMES, "kind": KINDS, "split": SPLITS}  # the spec fields a registry gives the values of


MAX_TIMEOUT_S = 300.0
MAX_MEMORY_MB = 8192
MAX_DIFFICULTY = 10


@dataclass
class Limits:
    timeout_s: float = declare(5.0, low=0, open_low=True, high=MAX_TIMEOUT_S,
                               doc="wall clock of one sandbox execution (the sandbox config may lower it)")
    memory_mb: int = declare(256, low=0, open_low=True, high=MAX_MEMORY_MB, doc="memory of one execution")


@dataclass
class EnvSpec:
    """One env, each field declared once (``declare``): the loader's bounds, the JSON Schema and the docs' fields
    table come from these declarations."""

    id: str = declare(pattern=r"^\S+$", noun="string without whitespace",
                      doc="unique id, conventionally ``<suite>/<name>``")
    prompt: str = declare(min_len=1, doc="what the policy sees")
    verifier: dict = declare(doc="``kind:`` plus that verifier's config (docs/env-spec.md, Verifier kinds)")
    reference: str = declare(doc="a solution that passes (admission's solvability check runs it): a program, an "
                                 "edit script, file content or an answer, per verifier")
    entry_point: str = declare("", doc="the function the tests call (``python_tests``, ``python_asserts``)")
    domain: str = declare("python", doc="grouping for reports (python, terminal, finance, scene, node...)")
    difficulty: int = declare(1, low=0, high=MAX_DIFFICULTY, doc="for stratified reports")
    kind: str = declare("single_turn", doc="single_turn (one completion) or agent (multi-step episode in a workspace)")
    runtime: str = declare("python",
                           doc="interpreter the sandbox provides; ignored by host-only verifiers (numeric, scene)")
    split: str = declare("train", doc="training or held-out evaluation")
    workspace: dict[str, str] = declare(factory=dict, noun="relative paths to file contents",
                                        doc="files (relative path -> content) written into the sandbox's ``/work`` "
                                            "before the solution runs")
    setup: str = declare("", doc="bash run in ``/work`` once the workspace is written, before the solution "
                                 "(``workspace_tests``) or an agent's first turn, e.g. building a git repository "
                                 "from a shipped ``git fast-import`` stream; its failure is the env's (infra), "
                                 "never the solution's (docs/env-spec.md, Workspace setup)")
    limits: Limits = declare(factory=Limits, doc="per-execution sandbox limits")
    min_gap: float = declare(0.0, low=0, high=1,
                             doc="the strong-minus-weak pass-rate gap admission's discrimination check requires of "
                                 "this env, where more than the run's ``admission.min_gap`` (0: the run's)")
    reward: dict = declare(factory=dict, doc=(
        "reward layers composing the verifier's named signals with weights and gates: ``{layers: [{signal: compiles, "
        "gate: true}, {signal: tests, weight: 0.9}, {signal: lint, weight: 0.1}]}``; empty: the verifier's own reward "
        "(docs/env-spec.md, Reward layers)"))
    evaluation: dict = declare(factory=dict, doc=(
        "dual-track evaluation assertions, ``result:`` and ``behavior:`` lists: ``{result: [tests_pass, "
        "no_regression], behavior: [{used_tool: <tool>}, {max_steps: N}, no_destructive_command]}``; "
        "no_destructive_command judges by text (no destructive command attempted) and by effect (no task file deleted "
        "or emptied in the final workspace) (docs/env-spec.md, Evaluation assertions)"))
    tags: list[str] = declare(factory=list, noun="strings", doc="free-form labels")
    oracle: list[dict] = declare(factory=list, noun="tool calls",
                                 doc="``kind: agent`` only: the tool calls ``{name, arguments}`` that solve the env, "
                                     "run by admission's solvability check as an agent episode")
    agent: dict = declare(factory=dict, doc=(
        "``kind: agent`` only: the env's own episode settings, each over the run's ``agent.*`` for its episodes: "
        "``{tools: [bash, read_file, submit], max_steps: N, max_new_tokens: N, token_budget: N, context_budget: N, "
        "deadline_s: S, snapshot_every: N}``, every key optional; empty: the run's (docs/env-spec.md, Agent settings)"))
    source: str = ""  # file the spec was loaded from, for error messages (set by the loader, never in a spec file)

    @property
    def verifier_kind(self) -> str:
        return str(self.verifier.get("kind", ""))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "EnvSpec":
        data = json.loads(text)
        data["limits"] = Limits(**data.get("limits", {}))
        return cls(**data)
