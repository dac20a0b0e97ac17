"""The agent's tools, run in the env's sandbox session: ``bash``, ``python``, ``read_file``, ``write_file``,
``edit_file`` (search/replace, exactly one match), ``check`` (env-bound: ``posttrain.agent.check``), ``submit``.

The tools are named, described and given their arguments by the env spec's vocabulary (``posttrain.envs.tools``:
``TOOLS``, ``tool_specs``); here each has its ``execute(session, args) -> Observation`` in ``EXECUTORS``, under the
same name. A tool never raises for the agent's mistakes (a missing file, a search string that is not there, a
failing command, an argument the session refuses: a NUL in a command, a command too long for a program's argv, a path
that is not UTF-8 text): those are observations with ``ok=False``; only a sandbox that failed the step is flagged as
such (``infra_error``).

Example:
    >>> from posttrain.sandbox import make_sandbox
    >>> with make_sandbox("bwrap").session(timeout_s=10) as s:
    ...     _ = run_tool(s, "write_file", {"path": "a.py", "content": "x = 1\\n"})
    ...     _ = run_tool(s, "edit_file", {"path": "a.py", "search": "x = 1", "replace": "x = 2"})
    ...     obs = run_tool(s, "python", {"code": "import a; print(a.x)"})
    >>> obs.ok, obs.text, obs.exit_code
    (True, '2\\n', 0)
    >>> sorted(EXECUTORS) == sorted(TOOLS)
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from posttrain.envs.tools import TOOLS
from posttrain.sandbox.session import SandboxSession, SessionError


# No bytecode caches in the workspace: Python revalidates a .pyc by source mtime (1 s) and size, so an edit that
# keeps the size within the second of the last import would run the old code.
NO_PYC = "export PYTHONDONTWRITEBYTECODE=1\n"


@dataclass
class Observation:
    """What a tool call gives back to the model. ``exit_code`` is None when no program ran (or it was killed)."""

    text: str
    ok: bool
    exit_code: int | None = None
    infra_error: str = ""
    submitted: bool = False


def _command(session: SandboxSession, argv: str | list[str], stdin: str = "", runtime: str | None = None
             ) -> Observation:
    try:
        result = session.run(argv, stdin=stdin, runtime=runtime)
    except SessionError as exc:  # refused before it started (the agent's arguments), or the session is gone
        return Observation(text=f"error: {exc}", ok=False, infra_error=exc.infra_error)
    text = result.stdout + (f"\n[stderr]\n{result.stderr}" if result.stderr else "")
    if result.timed_out:
        text += "\n[timed out]"
    return Observation(text=text, ok=result.ok, exit_code=None if result.timed_out else result.exit_code,
                       infra_error=result.infra_error)


def _file_op(op: Callable[[], str]) -> Observation:
    try:
        return Observation(text=op(), ok=True, exit_code=0)
    except SessionError as exc:
        return Observation(text=f"error: {exc}", ok=False, infra_error=exc.infra_error)


def _read(session: SandboxSession, args: dict) -> Observation:
    return _file_op(lambda: session.read_file(args["path"]))


def _write(session: SandboxSession, args: dict) -> Observation:
    def op() -> str:
        session.write_file(args["path"], args["content"])
        return f"wrote {len(args['content'].encode())} bytes to {args['path']}"

    return _file_op(op)


def replace_once(text: str, search: str, replace: str) -> str:
    """``text`` with its single occurrence of ``search`` replaced; ValueError when there is none or several.

    >>> replace_once("a = 1\\nb = 1\\n", "b = 1", "b = 2")
    'a = 1\\nb = 2\\n'
    """
    count = text.count(search) if search else 0
    if count != 1:
        raise ValueError(f"search string found {count} times, expected exactly once")
    return text.replace(search, replace, 1)


def _edit(session: SandboxSession, args: dict) -> Observation:
    read = _read(session, args)
    if not read.ok:
        return read
    try:
        edited = replace_once(read.text, args["search"], args["replace"])
    except ValueError as exc:
        return Observation(text=f"error: edit_file({args['path']!r}): {exc}", ok=False)
    return _write(session, {"path": args["path"], "content": edited})


def _unchecked(session: SandboxSession, args: dict) -> Observation:
    return Observation(text="error: check: this env has no answer file to check", ok=False)


def _submit(session: SandboxSession, args: dict) -> Observation:
    return Observation(text="submitted", ok=True, submitted=True)


Executor = Callable[[SandboxSession, dict], Observation]
EXECUTORS: dict[str, Executor] = {  # by the names of TOOLS; an env-bound tool's here serves envs that lack one
    "bash": lambda s, a: _command(s, NO_PYC + a["command"]),
    "python": lambda s, a: _command(s, ["python3", "-B", "-"], a["code"], "python"),
    "read_file": _read,
    "write_file": _write,
    "edit_file": _edit,
    "check": _unchecked,
    "submit": _submit,
}


def run_tool(session: SandboxSession, name: str, arguments: dict, env_tools: dict[str, Executor] | None = None
             ) -> Observation:
    """Execute one (already validated) call of tool ``name`` in ``session``: with the env's own executor when
    ``env_tools`` (the env-bound tools its task grants: ``posttrain.agent.check``) has one, else the registry's."""
    return (env_tools or {}).get(name, EXECUTORS[name])(session, arguments)
