"""Blocks of a document generated from code: the text between a begin and an end marker line is rewritten from the
one place its contents are declared (the admission reason codes, the config fields), and a test compares the file
with its regenerated self so a stale document fails.

Example:
    >>> doc = "intro\\n<!-- b -->\\nold\\n<!-- e -->\\nrest\\n"
    >>> print(with_block(doc, "<!-- b -->", "<!-- e -->", "new", "demo"), end="")
    intro
    <!-- b -->
    new
    <!-- e -->
    rest
    >>> with_block("no markers", "<!-- b -->", "<!-- e -->", "new", "demo")
    Traceback (most recent call last):
    ...
    ValueError: no demo block: add the lines <!-- b --> and <!-- e -->
    >>> markdown("a | b, ``c|d`` and <folder>")
    'a \\\\| b, `c|d` and \\\\<folder>'
"""

from __future__ import annotations

import re
from pathlib import Path


def markdown(text: str) -> str:
    """A doc line as Markdown table text: reST literals as code spans; outside them ``|`` and ``<`` escaped."""
    pieces = re.sub(r"``([^`]+)``", r"`\1`", text).split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|").replace("<", "\\<") for i, p in enumerate(pieces))


def with_block(text: str, begin: str, end: str, content: str, what: str) -> str:
    """``text`` with the lines between ``begin`` and ``end`` replaced by ``content`` (``what`` names the block)."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"no {what} block: add the lines {begin} and {end}")
    return text[:start] + f"{begin}\n{content}\n" + text[stop:]


def write_block(path: str | Path, begin: str, end: str, content: str, what: str) -> bool:
    """Rewrite the block of the file at ``path``; whether it changed."""
    file = Path(path)
    old = file.read_text(encoding="utf-8")
    new = with_block(old, begin, end, content, what)
    if new != old:
        file.write_text(new, encoding="utf-8")
    return new != old
