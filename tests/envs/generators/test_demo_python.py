"""The committed demo suite equals the generator's output and loads cleanly; its eval split (>= 100 envs beside >= 300
train, every difficulty in both) is held out by behaviour, not only by name, and recombines steps seen in train."""

from __future__ import annotations

import pytest

from collections import Counter
from pathlib import Path

from posttrain.config import DEMO_SUITE
from posttrain.envs.generators import main, write_suite
from posttrain.envs.generators.demo_python import HEADER, specs as demo_specs
from posttrain.envs.suite import load_suite

pytestmark = pytest.mark.unit


def test_committed_files_equal_generator_output(tmp_path):
    write_suite(demo_specs(), tmp_path, HEADER)
    generated = {p.name: p.read_text() for p in tmp_path.glob("*.yaml")}
    committed = {p.name: p.read_text() for p in Path(DEMO_SUITE).iterdir()}
    regenerate = f"regenerate: python -m posttrain.envs.generators.demo_python {DEMO_SUITE}"
    assert committed.keys() == generated.keys(), regenerate
    assert [name for name in generated if committed[name] != generated[name]] == []


def test_rewriting_removes_stale_generated_files_only(tmp_path):
    (tmp_path / "old_env.yaml").write_text(HEADER + "id: demo/old\n")
    (tmp_path / "mine.yaml").write_text("id: mine\n")
    write_suite(demo_specs(), tmp_path, HEADER)
    assert not (tmp_path / "old_env.yaml").exists()
    assert (tmp_path / "mine.yaml").exists()


def test_suite_loads_to_the_generated_specs():
    suite = load_suite(DEMO_SUITE)
    assert suite.rejections == []
    loaded = sorted(suite.envs, key=lambda s: s.id)
    expected = sorted(demo_specs(), key=lambda s: s.id)
    assert len(loaded) >= 400
    for got, want in zip(loaded, expected, strict=True):
        want.source = got.source
        assert got == want


def test_specs_are_small_and_regular():
    for spec in demo_specs():
        name = spec.entry_point
        assert spec.id == f"demo/{name}"
        assert spec.prompt.startswith(f"# Write a function {name}(x) that returns ")
        assert spec.prompt.endswith(".\n")
        assert spec.reference.startswith(f"def {name}(x):\n    return ")
        assert spec.reference.count("\n") == 2
        assert len(spec.prompt) < 100
        assert len(spec.reference) < 60
        args = [case["args"][0] for case in spec.verifier["cases"]]
        assert 5 <= len(args) <= 8
        assert 0 in args
        assert min(args) < 0
        assert (spec.domain, spec.kind, spec.runtime, spec.verifier_kind) == (
            "python", "single_turn", "python", "python_tests")
        assert (spec.limits.timeout_s, spec.limits.memory_mb) == (5, 256)


def _reference(spec):
    namespace: dict = {}
    exec(spec.reference, namespace)  # the generator's own trusted code
    return namespace[spec.entry_point]


def test_references_compute_the_expected_values():
    for spec in demo_specs():
        function = _reference(spec)
        assert [function(*c["args"]) for c in spec.verifier["cases"]] == [
            c["expected"] for c in spec.verifier["cases"]], spec.id
        expected = [c["expected"] for c in spec.verifier["cases"]]
        assert len(set(expected)) > 1, f"{spec.id}: a constant answers it"
        assert expected != [c["args"][0] for c in spec.verifier["cases"]], f"{spec.id}: `return x` answers it"


def test_eval_split_is_large_disjoint_stratified_and_learnable():
    specs = demo_specs()
    train = [s for s in specs if s.split == "train"]
    evals = [s for s in specs if s.split == "eval"]
    assert len(train) >= 300
    assert len(evals) >= 100
    total, held = Counter(s.difficulty for s in specs), Counter(s.difficulty for s in evals)
    assert sorted(total) == [1, 2, 3]
    for difficulty, n in total.items():
        assert 0.15 <= held[difficulty] / n <= 0.3, (difficulty, held[difficulty], n)
    assert {s.entry_point for s in train}.isdisjoint({s.entry_point for s in evals})  # (op, constant) combos


def test_no_env_is_another_under_a_new_name():
    specs = demo_specs()
    probes = range(-60, 61)  # far wider than the tests' inputs
    assert len({tuple(map(_reference(s), probes)) for s in specs}) == len(specs)
    # not even the tests can tell two envs apart: a train reference renamed never passes an eval env
    cases = {tuple(c["expected"] for c in s.verifier["cases"]) for s in specs if s.split == "train"}
    assert not [s.id for s in specs if s.split == "eval" and
                tuple(c["expected"] for c in s.verifier["cases"]) in cases]


def _steps(spec) -> list[tuple[str, int]]:
    """``demo/add_3_mul_4`` -> ``[("add", 3), ("mul", 4)]``; ``gt_3_add_2`` -> ``[("gt", 3), ("add", 2)]``."""
    parts = spec.entry_point.split("_")
    return [(op, int(c)) for op, c in zip(parts[::2], parts[1::2], strict=True)]


def test_eval_envs_recombine_steps_and_shapes_seen_in_train():
    specs = demo_specs()
    train = [_steps(s) for s in specs if s.split == "train"]
    train_steps = {step for steps in train for step in steps}
    train_shapes = {tuple(op for op, _ in steps) for steps in train}
    for spec in specs:
        if spec.split == "eval":
            steps = _steps(spec)
            assert set(steps) <= train_steps, spec.id
            assert tuple(op for op, _ in steps) in train_shapes, spec.id
    # e.g. add_3 alone is held out: train sees x + 3 only inside compositions
    assert [s for s in specs if s.split == "eval" and s.difficulty == 1]


def test_cli(tmp_path, capsys):
    module = "posttrain.envs.generators.demo_python"
    assert main([], module, demo_specs, HEADER) == 2
    assert main([str(tmp_path)], module, demo_specs, HEADER) == 0
    assert len(list(tmp_path.glob("*.yaml"))) == len(demo_specs())
    assert "wrote" in capsys.readouterr().out
