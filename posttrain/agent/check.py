"""The env-bound ``check`` tool: the host scores the episode's answer file against its env's expected values and
tells the agent which checks fail, never the right values.

An env grants ``check`` by listing it in its ``agent.tools``; its verifier must read the answer from a workspace file
(``Verifier.answer_file``) and give ``feedback`` (``numeric``: each field ``ok`` / ``missing`` / ``not a number`` /
``does not match``, each formula ``reconciles`` / ``does not reconcile``, no expected value, distance or direction).
The verdict is computed on the host from the file's text, read through the session like ``read_file``; nothing of
the agent's runs. ``env_tools(spec)`` gives the executors ``task_of`` puts in ``AgentTask.env_tools``, so the runner
stays free of any env kind: it runs an env-bound tool with its task's executor (``agent.tools.run_tool``).

The observation is ``ok`` (exit code 0) only when every check passes, like a test command that exits 0: the first
``check`` step of an episode says whether its first answer was right (``agent.metrics``: first-try accuracy).

Example:
    >>> from posttrain.envs.spec import EnvSpec
    >>> from posttrain.sandbox import make_sandbox
    >>> spec = EnvSpec(id="t/m", prompt="p", reference='{"a": 2, "b": 4}', kind="agent",
    ...                verifier={"kind": "numeric", "fields": {"a": 2, "b": 4}, "answer_file": "answer.json"},
    ...                agent={"tools": ["write_file", "check", "submit"]})
    >>> [check] = env_tools(spec).values()
    >>> with make_sandbox("bwrap").session(timeout_s=10) as session:
    ...     missing = check(session, {})
    ...     session.write_file("answer.json", '{"a": 2, "b": 5}')
    ...     wrong = check(session, {})
    >>> missing.ok, missing.text.splitlines()[0][:40]
    (False, 'error: check: answer.json could not be r')
    >>> wrong.ok, wrong.exit_code, wrong.text
    (False, 1, 'answer.json:\\na: ok\\nb: does not match\\n1 of 2 checks pass')
"""

from __future__ import annotations

import functools

from posttrain.agent.tools import Executor, Observation
from posttrain.envs.agent_settings import parse_settings
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import get_verifier
from posttrain.sandbox.session import SandboxSession, SessionError


def check_answer(spec: EnvSpec, session: SandboxSession, args: dict) -> Observation:
    """The ``check`` of ``spec``'s answer file in ``session``'s workspace: the verifier's ``feedback`` on its text."""
    verifier = get_verifier(spec.verifier_kind)
    path = verifier.answer_file(spec)
    try:
        text = session.read_file(path)
    except SessionError as exc:
        return Observation(f"error: check: {path} could not be read: {exc}", ok=False, infra_error=exc.infra_error)
    passed, report = verifier.feedback(spec, text)
    return Observation(f"{path}:\n{report}", ok=passed, exit_code=0 if passed else 1)


def env_tools(spec: EnvSpec) -> dict[str, Executor]:
    """The executors of the env-bound tools ``spec`` grants (its ``agent.tools``) and can serve: ``check`` when its
    verifier reads an answer file and gives feedback (admission's consistency check requires that of an env that
    grants it: ``check_problem``)."""
    if "check" not in (parse_settings(spec.agent).tools or []) or check_problem(spec):
        return {}
    return {"check": functools.partial(check_answer, spec)}


def check_problem(spec: EnvSpec) -> str:
    """Why ``spec``'s verifier cannot serve ``check`` ("" when it can).

    >>> check_problem(EnvSpec(id="t/x", prompt="p", reference="", verifier={"kind": "workspace_tests"}))
    'the workspace_tests verifier gives no feedback on an answer file (numeric with answer_file does)'
    """
    verifier = get_verifier(spec.verifier_kind)
    if verifier.feedback is None or not verifier.answer_file(spec):
        return f"the {spec.verifier_kind} verifier gives no feedback on an answer file (numeric with answer_file does)"
    return ""
