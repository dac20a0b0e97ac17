"""The library's layering (``posttrain/__init__.py`` says it in words): imports only go down.

Every import of every module under ``posttrain/`` counts, the ones inside functions and under ``TYPE_CHECKING``
too, read from the source (``ast``), nothing imported. Two properties: a module imports only from its own layer or a
lower one, and no modules import each other in a circle, however long (a circle within one package too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A module may import its own layer and the layers below it, never a layer above.
LAYERS = (
    # foundations: no stage
    ("declaration", "config", "locations", "precision", "generated", "progress", "schemas", "timing", "memory"),
    ("trusted",),  # the programs that run inside sandboxes (standard library only)
    ("sandbox",),  # isolation: backends, sessions, scheduling
    ("envs",),  # the env spec and its vocabularies (tools, assertions, destructive judge), suites, verifiers
    ("reward",),  # verdicts of trajectories in sandboxes
    ("rollout",),  # engines and single-turn collection
    ("training",),  # advantages, losses, the DeepSpeed trainer, checkpoints
    ("agent",),  # multi-turn episodes with tools
    ("admission", "evaluation"),  # the checks an env must pass; evaluating a policy version
    ("tracking",),  # MLflow: runs, registry, reports of runs
    ("cli", "config_docs"),  # entry points
)
LAYER = {package: level for level, packages in enumerate(LAYERS) for package in packages}


def modules() -> dict[str, Path]:
    """Dotted name -> file of every module under posttrain/ (a package by its ``__init__.py``)."""
    found = {}
    for path in sorted((ROOT / "posttrain").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The posttrain modules ``name`` imports anywhere in its file (``from pkg import module`` names the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names)
    found = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target.startswith("posttrain") and target != name:
            found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def layer_of(module: str) -> int:
    package = module.split(".")[1]
    assert package in LAYER, f"{module}: its package {package!r} is in no layer of LAYERS"
    return LAYER[package]


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_package_is_in_a_layer():
    packages = {name.split(".")[1] for name in modules() if name != "posttrain"}
    assert packages == set(LAYER)


def test_no_module_imports_a_higher_layer():
    upward = [f"{module} -> {target}" for module, targets in graph().items() if module != "posttrain"
              for target in sorted(targets) if layer_of(target) > layer_of(module)]
    assert upward == []


def test_no_modules_import_each_other_in_a_circle():
    assert circles(graph()) == []


def test_the_library_imports_neither_tasks_nor_workflows():
    outside = []
    for path in sorted((ROOT / "posttrain").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            outside += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ("tasks", "workflows")]
    assert outside == []


def test_the_checks_see_circles_and_upward_imports():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer_of("posttrain.sandbox.base") < layer_of("posttrain.envs.spec") < layer_of("posttrain.tracking")
