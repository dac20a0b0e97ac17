"""Every docstring example in ``posttrain`` runs: one test per module (heavy examples are marked ``+SKIP`` in place).

Modules are found by walking the source tree, not ``pkgutil.walk_packages``: several subpackages (``envs``,
``rollout``, ``training``, ``evaluation``) are namespace packages, which ``walk_packages`` does not descend into.
The trusted programs (``posttrain.trusted``) are imported too: each runs only under ``__main__``.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

from tests import ROOT

pytestmark = pytest.mark.unit
# Dependencies only an extra installs (``make install EXTRA=cpu|gpu``): a module that imports one at load time is
# skipped only where it is not installed (today every module imports vLLM lazily, so none is).
OPTIONAL = {"vllm"}


def module_names() -> list[str]:
    names = []
    for path in sorted((ROOT / "posttrain").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_modules_are_found():
    names = module_names()
    assert {"posttrain.config", "posttrain.envs.spec", "posttrain.admission.report", "posttrain.rollout.collect",
            "posttrain.training.algorithms.ppo_clip", "posttrain.evaluation.metrics"} <= set(names)


@pytest.mark.parametrize("name", module_names())
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name in OPTIONAL:
            pytest.skip(f"{name} needs the optional dependency {error.name!r}, which is not installed")
        raise
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
