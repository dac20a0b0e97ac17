"""Agent envs in episodes: an ``EnvSpec`` of kind ``agent`` becomes an ``AgentTask``; the final workspace of its
episode becomes the solution the env's verifier scores.

The ``workspace_tests`` verifier applies a bash solution to a fresh copy of the env's workspace and then runs its
trusted tests. ``workspace_solution(snapshot)`` is such a script that makes the workspace exactly the episode's
final one (a tar taken inside the session, unpacked over an emptied ``/work``), so the verifier, its trusted tests and
its isolation are the same for agent episodes as for single-turn solutions. A final workspace that cannot be captured
fails its own episode only: as the agent's outcome (reward 0) when the capture itself failed (a workspace over its
size), as infra (excluded) only when the sandbox failed the step. A verifier that reads its answer from a workspace
file (``Verifier.answer_file``: ``numeric`` with ``answer_file``) scores that file's text instead
(``final_solution``: read on the host from the captured tar; a missing file is an empty answer). ``final_effects``
reads what a captured final workspace shows of the episode's destructive effects (task files deleted or emptied), the
evidence by effect of the ``no_destructive_command`` assertion.

Example:
    >>> from posttrain.envs.spec import EnvSpec
    >>> spec = EnvSpec(id="t/cfg", prompt="Set port=8080 in app.ini", reference="", kind="agent",
    ...                workspace={"app.ini": "port=80\\n"}, verifier={"kind": "workspace_tests"},
    ...                agent={"tools": ["submit", "edit_file"], "max_steps": 4})
    >>> task = task_of(spec, group_id="g", sample_idx=1)
    >>> task.files, task.domain, task.settings.given()
    ({'app.ini': 'port=80\\n'}, 'python', {'tools': ['edit_file', 'submit'], 'max_steps': 4})
    >>> print(workspace_solution(b"x" * 3).splitlines()[0])
    find . -mindepth 1 -delete
    >>> final_effects(spec, workspace_solution(b"\\0" * 1024))   # an empty archive: app.ini is gone
    ['deleted task file app.ini']
    >>> final_solution(spec, "script") == "script"    # workspace_tests scores the workspace itself
    True
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from posttrain.agent.check import env_tools
from posttrain.agent.runner import AgentTask
from posttrain.config import SandboxConfig
from posttrain.envs.agent_settings import parse_settings
from posttrain.envs.destructive.workspace_effects import final_files, workspace_effects
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import get_verifier, verify_many
from posttrain.envs.verifiers.base import Verdict
from posttrain.sandbox.session import SandboxSession, SessionError


def task_of(spec: EnvSpec, group_id: str = "", sample_idx: int = 0) -> AgentTask:
    """The episode of ``spec``: its prompt, workspace, domain, its own tools and budgets (``agent:``) and the
    executors of the env-bound tools it can serve (``agent.check``)."""
    return AgentTask(env_id=spec.id, prompt=spec.prompt, files=dict(spec.workspace), setup=spec.setup,
                     domain=spec.domain, group_id=group_id or spec.id, sample_idx=sample_idx,
                     settings=parse_settings(spec.agent), env_tools=env_tools(spec))


def workspace_solution(tar: bytes) -> str:
    """A bash script that replaces the workspace (the cwd) by the content of ``tar``."""
    encoded = base64.encodebytes(tar).decode("ascii")
    return f"find . -mindepth 1 -delete\nbase64 -d <<'EOF' | tar -x -f -\n{encoded}EOF\n"


def final_workspaces(sessions: Sequence[SandboxSession], never_started: Sequence[str] = ()) -> list[str | Verdict]:
    """Each session's final workspace as a ``workspace_solution`` script, or, for a workspace that could not be
    captured, its episode's verdict (``uncaptured``); the sessions can be closed afterwards. ``never_started``: per
    session, why its episode ended as infra before its first turn ("" where it did not): that workspace was never the
    agent's (never prepared, or the prompt left no room), so it is neither captured nor verified (``not_started``)."""
    finals: list[str | Verdict] = []
    for session, why in zip(sessions, never_started or [""] * len(sessions)):
        if why:
            finals.append(not_started(why))
            continue
        try:
            finals.append(workspace_solution(session.snapshot().data))
        except SessionError as exc:
            finals.append(uncaptured(exc))
    return finals


def uncaptured(exc: SessionError) -> Verdict:
    """The verdict of an episode whose final workspace could not be captured: infra only if the sandbox failed."""
    why = f"final workspace not captured: {exc}"
    return Verdict(reward=0.0, passed=False, compiled=False, tests_passed=0, tests_total=0,
                   infra_error=why if exc.infra_error else "", detail=("infra: " if exc.infra_error else "") + why)


def not_started(why: str) -> Verdict:
    """The verdict of an episode that ended as infra before its first turn, ``why`` being its episode's reason.

    >>> not_started("workspace not prepared: gone").infra_error
    'workspace not prepared: gone'
    """
    return Verdict(reward=0.0, passed=False, compiled=False, tests_passed=0, tests_total=0, infra_error=why,
                   detail=f"infra: episode never started: {why}")


def final_solution(spec: EnvSpec, final: str | Verdict) -> str | Verdict:
    """What ``spec``'s verifier scores of a captured final workspace (``final_workspaces``): the workspace itself, or,
    for a verifier with an ``answer_file``, that file's text ("" when the file is missing or not text)."""
    path = get_verifier(spec.verifier_kind).answer_file(spec)
    if not path or not isinstance(final, str):
        return final
    content = (final_files(final) or {}).get(path, b"")
    return content.decode("utf-8", "replace")


def final_effects(spec: EnvSpec, final: str | Verdict) -> list[str] | None:
    """The destructive effects seen on an episode's final workspace (``final_workspaces``): the task files of
    ``spec`` it deleted or emptied (``workspace_effects``; no reference workspace, so every such file counts); None
    when the workspace was not captured or cannot be read."""
    files = final_files(final) if isinstance(final, str) else None
    return None if files is None else workspace_effects(spec.workspace, files)


def score_workspaces(specs: Sequence[EnvSpec], finals: Sequence[str | Verdict], sandbox,
                     cfg: SandboxConfig) -> list[Verdict]:
    """The verifier's verdict on each captured final workspace (``final_workspaces``), in order."""
    verdicts = list(finals)
    captured = [i for i, final in enumerate(finals) if isinstance(final, str)]
    solutions = [(specs[i], final_solution(specs[i], finals[i])) for i in captured]
    for i, verdict in zip(captured, verify_many(solutions, sandbox, cfg)):
        verdicts[i] = verdict
    return verdicts


def score_final_workspaces(specs: Sequence[EnvSpec], sessions: Sequence[SandboxSession], sandbox,
                           cfg: SandboxConfig) -> list[Verdict]:
    """The verifier's verdict on each session's final workspace (sessions still open)."""
    return score_workspaces(specs, final_workspaces(sessions), sandbox, cfg)
