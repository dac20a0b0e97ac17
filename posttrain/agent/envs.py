"""Agent envs in episodes: an ``EnvSpec`` of kind ``agent`` becomes an ``AgentTask``; the final workspace of its
episode becomes the solution the env's verifier scores.

The ``workspace_tests`` verifier applies a bash solution to a fresh copy of the env's workspace and then runs its
trusted tests. ``workspace_solution(snapshot)`` is such a script that makes the workspace exactly the episode's
final one (a tar taken inside the session, unpacked over an emptied ``/work``), so the verifier, its trusted tests and
its isolation are the same for agent episodes as for single-turn solutions.

Example:
    >>> from posttrain.envs.spec import EnvSpec
    >>> spec = EnvSpec(id="t/cfg", prompt="Set port=8080 in app.ini", reference="", kind="agent",
    ...                workspace={"app.ini": "port=80\\n"}, verifier={"kind": "workspace_tests"})
    >>> task = task_of(spec, group_id="g", sample_idx=1)
    >>> task.files, task.domain
    ({'app.ini': 'port=80\\n'}, 'python')
    >>> print(workspace_solution(b"x" * 3).splitlines()[0])
    find . -mindepth 1 -delete
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from posttrain.agent.runner import AgentTask
from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import verify_many
from posttrain.envs.verifiers.base import Verdict
from posttrain.sandbox.session import SandboxSession


def task_of(spec: EnvSpec, group_id: str = "", sample_idx: int = 0) -> AgentTask:
    return AgentTask(env_id=spec.id, prompt=spec.prompt, files=dict(spec.workspace), domain=spec.domain,
                     group_id=group_id or spec.id, sample_idx=sample_idx)


def workspace_solution(tar: bytes) -> str:
    """A bash script that replaces the workspace (the cwd) by the content of ``tar``."""
    encoded = base64.encodebytes(tar).decode("ascii")
    return f"find . -mindepth 1 -delete\nbase64 -d <<'EOF' | tar -x -f -\n{encoded}EOF\n"


def score_final_workspaces(specs: Sequence[EnvSpec], sessions: Sequence[SandboxSession], sandbox,
                           cfg: SandboxConfig) -> list[Verdict]:
    """The verifier's verdict on each session's final workspace (sessions still open)."""
    solutions = [workspace_solution(session.snapshot().data) for session in sessions]
    return verify_many(list(zip(specs, solutions)), sandbox, cfg)
