"""The configuration reference (docs/configuration.md), rendered from ``posttrain/config.py``, where it is written once.

Every field of ``LoopConfig`` (the ``--cfg`` of ``rl_loop``) and of each config nested in it, and the top-level fields
of ``EvaluateConfig`` (the ``--cfg`` of ``workflows/evaluate.py``), become one Markdown table per config: the field's
path in the JSON a user writes (``rollout.temperature``), its type, its default (as JSON) and its doc line, the
``doc`` of its declaration (``posttrain.declaration.declare``). A nested config's own doc line and its class
docstring introduce its table.

``posttrain config-docs --write docs/configuration.md`` rewrites the block between ``BEGIN`` and ``END``; a test fails
while it is stale (``tests/test_config_docs.py``), and another while a field has no doc line.

Example:
    >>> from posttrain.config import SandboxConfig
    >>> field_docs(SandboxConfig)["timeout_s"]
    'wall-clock limit of one execution, unless the env asks for less'
    >>> row = next(r for r in rows(SandboxConfig, "sandbox.") if r.path == "sandbox.memory_mb")
    >>> row.type, row.default
    ('int', '512')
    >>> markdown_row(row)
    '| `sandbox.memory_mb` | `int` | `512` | address-space / cgroup memory limit per execution |'
    >>> [t.prefix for t in tables()][:3]
    ['', 'sandbox.', 'sandbox.docker.']
"""

from __future__ import annotations

import inspect
import json
from dataclasses import MISSING, dataclass, fields, is_dataclass
from pathlib import Path

from posttrain.config import EvaluateConfig, LoopConfig
from posttrain.declaration import rule_of
from posttrain.generated import markdown, with_block, write_block

BEGIN = "<!-- config-docs:begin: generated from posttrain/config.py by `posttrain config-docs --write` -->"
END = "<!-- config-docs:end -->"
REWRITE = "posttrain config-docs --write docs/configuration.md"

# The configs a user writes: (title, class). Nested configs are found by walking their fields.
ROOTS = (("`rl_loop --cfg` (`LoopConfig`)", LoopConfig), ("`evaluate --cfg` (`EvaluateConfig`)", EvaluateConfig))


@dataclass(frozen=True)
class Row:
    path: str  # the field's path in the JSON config, e.g. "rollout.temperature"
    type: str  # the annotation as written in config.py
    default: str  # JSON
    doc: str  # "" when its declaration has no doc line


@dataclass(frozen=True)
class Table:
    title: str
    prefix: str  # "" for the root config, else "rollout." etc.
    cls: type
    intro: str
    rows: tuple[Row, ...]


def _sentence(part: str) -> str:
    """``part`` with a capital first letter, unless its first word is a name (``max_size``, ``docker.image``)."""
    word = part.split(" ", 1)[0]
    return part[0].upper() + part[1:] if word.isalpha() and word.islower() else part


def _join(parts: list[str]) -> str:
    """Pieces of text as one line: each a sentence ended by a period unless it ends punctuated already."""
    if len(parts) < 2:
        return "".join(parts)
    return " ".join(_sentence(p) if p.endswith((".", ":", ";", ",")) else _sentence(p) + "." for p in parts)


def field_docs(cls: type) -> dict[str, str]:
    """Each field of the config dataclass ``cls`` -> its declared doc line ("" where there is none)."""
    return {f.name: rule_of(f).doc for f in fields(cls)}


def _default(f) -> object:
    return f.default_factory() if f.default is MISSING else f.default


def _is_config(f) -> bool:
    return f.default is MISSING and is_dataclass(_default(f))


def _intro(cls: type, doc_line: str) -> str:
    """A table's introduction: the nested field's doc line, then the class docstring (dataclass's generated one
    skipped), reST literals as Markdown ones."""
    doc = cls.__doc__ or ""
    doc = "" if doc.startswith(f"{cls.__name__}(") else " ".join(inspect.cleandoc(doc).split())
    return markdown(_join([part for part in (doc_line, doc) if part]))


def rows(cls: type, prefix: str) -> list[Row]:
    """The leaf fields of ``cls`` (nested configs get tables of their own), their paths under ``prefix``."""
    docs = field_docs(cls)
    return [Row(prefix + f.name, str(f.type), json.dumps(_default(f)), docs[f.name])
            for f in fields(cls) if not _is_config(f)]


def tables() -> list[Table]:
    """One table per config, in the order of the fields that hold them; a config class already shown is named, not
    shown again (``EvaluateConfig.rollout`` is the loop's ``rollout``)."""
    out, shown = [], {}

    def walk(title: str, cls: type, prefix: str, doc_line: str) -> None:
        docs, nested = field_docs(cls), [f for f in fields(cls) if _is_config(f)]
        again = [f"`{prefix}{f.name}` takes the fields of `{shown[f.type]}.*`" for f in nested if f.type in shown]
        intro = _intro(cls, doc_line)
        if again:
            intro = _join([intro] * bool(intro) + [", ".join(again) + " (tables above)."])
        out.append(Table(title, prefix, cls, intro, tuple(rows(cls, prefix))))
        shown.setdefault(cls.__name__, prefix.rstrip(".") or title)
        for f in nested:
            if f.type not in shown:
                walk(f"`{prefix}{f.name}` (`{f.type}`)", type(_default(f)), f"{prefix}{f.name}.", docs[f.name])

    for title, cls in ROOTS:
        walk(title, cls, "", "")
    return out


def markdown_row(row: Row) -> str:
    return f"| `{row.path}` | `{row.type}` | `{row.default}` | {markdown(row.doc)} |"


def markdown_tables() -> str:
    """Every table, each under a ``###`` heading."""
    blocks = []
    for table in tables():
        lines = [f"### {table.title}", ""]
        if table.intro:
            lines += [table.intro, ""]
        lines += ["| field | type | default | meaning |", "|---|---|---|---|"]
        lines += [markdown_row(row) for row in table.rows]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def undocumented() -> list[str]:
    """Paths of the fields declared without a doc line."""
    return [row.path if table.prefix else f"{table.cls.__name__}.{row.path}"
            for table in tables() for row in table.rows if not row.doc]


def with_tables(text: str) -> str:
    """``text`` with the block between ``BEGIN`` and ``END`` replaced by the current tables."""
    return with_block(text, BEGIN, END, markdown_tables(), "config-docs")


def write_tables(path: str | Path) -> bool:
    """Rewrite the config-docs block of the file at ``path``; whether it changed."""
    return write_block(path, BEGIN, END, markdown_tables(), "config-docs")
