"""Trusted programs: everything that runs inside a sandbox on the host's behalf, and how it is shipped.

One naming rule: ``trusted/<what>.py`` is one standalone program for the sandbox's ``python3`` (standard library
only, plain syntax: that Python may be older than ours). What the programs share lives in ``prelude.py``; each
program imports it with one line, and ``source(name)`` ships the program with that line replaced by the prelude's
text, so the sandbox gets one self-contained file and no copy of the preamble exists.

- ``container_agent``: pid 1 of a pooled Docker container (``sandbox/docker/agent_client.py`` talks to it).
- ``python_tests_harness``: loads a solution, reports the values its entry point returns (``python_tests``).
- ``python_asserts_harness``: runs each assert in a forked child, reports which passed (``python_asserts``).
- ``workspace_driver``: runs a solution script, then the trusted tests against the workspace (``workspace_tests``).
- ``zygote``: pid 1 of a warm bwrap slot, forks one fresh sandbox per execution (``sandbox/warm.py``).

Example:
    >>> from posttrain import trusted
    >>> text = trusted.source("python_tests_harness")
    >>> "def make_non_dumpable" in text, "prelude import compile_solution" in text
    (True, False)
    >>> code = compile(text, "harness.py", "exec")
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).parent
PROGRAMS = ("container_agent", "python_tests_harness", "python_asserts_harness", "workspace_driver", "zygote")
PRELUDE_IMPORT = "from posttrain.trusted.prelude import "


@lru_cache(maxsize=None)
def source(program: str) -> str:
    """The text that runs in the sandbox: ``trusted/<program>.py`` with its prelude import replaced by the prelude."""
    if program not in PROGRAMS:
        raise ValueError(f"trusted program {program!r}: unknown, expected one of {PROGRAMS}")
    lines = (HERE / f"{program}.py").read_text(encoding="utf-8").splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.startswith(PRELUDE_IMPORT)]
    if len(at) != 1:
        raise ValueError(f"trusted/{program}.py: needs exactly one line starting {PRELUDE_IMPORT!r}, has {len(at)}")
    lines[at[0]] = (HERE / "prelude.py").read_text(encoding="utf-8")
    return "".join(lines)
