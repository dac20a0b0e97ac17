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
from dataclasses import asdict, dataclass, field

RUNTIMES = ("python", "node", "bash")
KINDS = ("single_turn", "agent")
SPLITS = ("train", "eval")


@dataclass
class Limits:
    timeout_s: float = 5.0
    memory_mb: int = 256


@dataclass
class EnvSpec:
    id: str
    prompt: str
    verifier: dict  # {"kind": python_tests | python_asserts | workspace_tests | numeric | scene, ...its config}
    reference: str
    entry_point: str = ""
    domain: str = "python"
    difficulty: int = 1
    kind: str = "single_turn"
    runtime: str = "python"  # ignored by host-only verifiers (numeric, scene)
    split: str = "train"
    workspace: dict[str, str] = field(default_factory=dict)  # path -> file content, written before the run
    limits: Limits = field(default_factory=Limits)
    min_gap: float = 0.0  # required strong-minus-weak pass-rate gap (discriminative power)
    evaluation: dict = field(default_factory=dict)  # {"result": [...], "behavior": [...]}
    tags: list[str] = field(default_factory=list)
    # agent envs: tool calls {"name": <tool>, "arguments": {...}} that solve the env (admission runs them as an episode)
    oracle: list[dict] = field(default_factory=list)
    source: str = ""  # file the spec was loaded from, for error messages

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
