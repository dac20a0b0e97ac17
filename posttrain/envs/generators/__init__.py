"""Deterministic generators of the bundled domain suites, one module per suite, and the YAML writer they share.

Each generator module has ``specs() -> list[EnvSpec]`` and a ``main`` that writes one YAML file per env:

    $ python -m posttrain.envs.generators.finance posttrain/envs/suites/finance
    $ python -m posttrain.envs.generators.finance_agent posttrain/envs/suites/finance_agent
    $ python -m posttrain.envs.generators.scene posttrain/envs/suites/scene
    $ python -m posttrain.envs.generators.terminal posttrain/envs/suites/terminal
    $ python -m posttrain.envs.generators.node posttrain/envs/suites/node
    $ python -m posttrain.envs.generators.demo_python posttrain/envs/suites/demo_python
    $ python -m posttrain.envs.generators.agent_repo posttrain/envs/suites/agent_repo
    $ python -m posttrain.envs.generators.regression_hunt posttrain/envs/suites/regression_hunt
    $ python -m posttrain.envs.generators.finance_facts posttrain/envs/suites/finance_facts
    $ python -m posttrain.envs.generators.scene_layouts posttrain/envs/suites/scene_layouts
    $ python -m posttrain.envs.generators.terminal_tasks posttrain/envs/suites/terminal_tasks

Example:
    >>> from posttrain.envs.spec import EnvSpec
    >>> spec = EnvSpec(id="x/one", prompt="Say hi.\\n", reference="{}",
    ...                verifier={"kind": "numeric", "fields": {"a": 1}})
    >>> print(render(spec, "# header\\n").splitlines()[1])
    id: x/one
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Callable

import yaml

from posttrain.envs.spec import EnvSpec

FIELD_ORDER = ("id", "domain", "difficulty", "kind", "runtime", "split", "tags", "entry_point", "prompt",
               "workspace", "setup", "reference", "oracle", "agent", "verifier", "reward", "limits", "min_gap",
               "evaluation")


class OneLine(dict):
    """A mapping the writer puts on one line (``{args: [3], expected: 10}``), e.g. a short test case."""


class _Dumper(yaml.SafeDumper):
    """Block literals for multi-line strings (when YAML allows), ``OneLine`` mappings inline, the rest as usual."""


def _str(dumper, text):
    style = "|" if "\n" in text and not any(line != line.rstrip() for line in text.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


def _list(dumper, items):
    short = len(items) <= 4 and all(type(i) in (int, float) for i in items)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=short or None)


_Dumper.add_representer(str, _str)
_Dumper.add_representer(list, _list)
_Dumper.add_representer(OneLine, lambda d, m: d.represent_mapping("tag:yaml.org,2002:map", m, flow_style=True))


def render(spec: EnvSpec, header: str) -> str:
    """The YAML text of one spec, fields in a fixed order, defaults left out."""
    defaults = EnvSpec(id="", prompt="", verifier={}, reference="")
    data = {}
    for name in FIELD_ORDER:
        value = getattr(spec, name)
        if name == "limits":
            value = {"timeout_s": value.timeout_s, "memory_mb": value.memory_mb}
        elif name == "oracle" and value:  # one call per line unless an argument spans lines; fresh objects: no
            value = [(dict if any("\n" in str(v) for v in call["arguments"].values()) else OneLine)(  # YAML aliases
                name=call["name"], arguments=dict(call["arguments"])) for call in value]
        elif value == getattr(defaults, name) and name not in ("domain", "difficulty", "kind", "runtime", "split"):
            continue
        data[name] = value
    return header + yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


def file_name(spec: EnvSpec) -> str:
    """``finance/acme_margin`` -> ``acme_margin.yaml``."""
    return spec.id.split("/", 1)[-1].replace("/", "_") + ".yaml"


def write_suite(specs: list[EnvSpec], outdir: str | Path, header: str) -> list[Path]:
    """Write one file per spec; earlier generated files (same header) that were not rewritten are removed."""
    root = Path(outdir)
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in specs:
        path = root / file_name(spec)
        path.write_text(render(spec, header), encoding="utf-8")
        written.append(path)
    for stale in set(root.glob("*.yaml")) - set(written):
        if stale.read_text(encoding="utf-8").startswith(header):
            stale.unlink()
    return written


def main(argv: list[str], module: str, make_specs: Callable[[], list[EnvSpec]], header: str) -> int:
    """Command-line entry of a generator module: ``python -m <module> OUTDIR``."""
    if len(argv) != 1:
        print(f"usage: python -m {module} OUTDIR", file=sys.stderr)
        return 2
    specs = make_specs()
    write_suite(specs, argv[0], header)
    counts = Counter(s.split for s in specs)
    print(f"wrote {len(specs)} specs to {argv[0]}: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    return 0
