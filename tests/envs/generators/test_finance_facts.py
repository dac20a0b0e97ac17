"""The ``finance_facts`` generator: >= 150 train and >= 40 eval short extraction envs, every difficulty in both splits
and every eval question kind seen in train; deterministic, the committed files its output; every reference scores
1.0, an answer copied from the prior-year column earns nothing, a derived value is credited only on right inputs;
and the warm-up envs are other statements of every variant, their references right; a worked reference quotes the
statement's own line of each item asked, then answers as the reference does (admission of the whole suite:
test_generators.py)."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest

from posttrain.envs.generators import file_name, render
from posttrain.envs.generators.finance_facts import (HEADER, ITEMS, derived_statements, specs, statements, sum_drills,
                                                    to_spec, warm_start_pairs, warm_up_specs, worked_reference)
from posttrain.envs.verifiers import get_verifier

SUITE = Path("posttrain/envs/suites/finance_facts")
ENVS = specs()
NUMERIC = get_verifier("numeric")


@pytest.mark.unit
def test_splits_hold_every_difficulty_and_eval_asks_what_train_asks():
    counts = Counter((e.difficulty, e.split) for e in ENVS)
    assert sum(e.split == "train" for e in ENVS) >= 150 and sum(e.split == "eval" for e in ENVS) >= 40
    assert all(counts[d, split] >= 10 for d in (1, 2, 3) for split in ("train", "eval")), counts
    assert len({e.id for e in ENVS}) == len(ENVS)
    kinds = {split: {tuple(e.tags[2:]) for e in ENVS if e.split == split} for split in ("train", "eval")}
    assert kinds["eval"] <= kinds["train"]  # (form, variant) pairs: eval asks them of new companies and numbers
    assert {e.tags[2] for e in ENVS} == {"text", "list", "table", "mixed"}


@pytest.mark.unit
def test_deterministic_and_the_committed_files_are_its_output():
    assert [asdict(e) for e in specs()] == [asdict(e) for e in ENVS]
    committed = {p.name: p.read_text(encoding="utf-8") for p in SUITE.glob("*.yaml")}
    assert set(committed) == {file_name(e) for e in ENVS}
    stale = [e.id for e in ENVS if committed[file_name(e)] != render(e, HEADER)]
    assert stale == [], f"regenerate: python -m posttrain.envs.generators.finance_facts {SUITE}"


@pytest.mark.unit
def test_prompts_and_answers_are_short_and_plain():
    for env in ENVS:
        answer = json.loads(env.reference)
        assert len(env.prompt) <= 600 and len(env.reference) <= 90 and env.reference.endswith("}\n"), env.id
        assert (env.domain, env.kind, env.runtime, env.verifier["kind"]) == (
            "finance", "single_turn", "python", "numeric")
        assert list(answer) == list(env.verifier["fields"]) == re.findall(r'^- "(\w+)": ', env.prompt, re.M)
        assert len(answer) == (1, 2, 3)[env.difficulty - 1] and bool(env.verifier["formulas"]) == (env.difficulty == 3)
        assert all(type(value) is float and value >= 1.0 for value in answer.values()), env.id
        assert not re.search(r"\d,\d", env.prompt), env.id  # no thousands separators anywhere


@pytest.mark.unit
def test_references_score_one_and_prior_year_copies_score_nothing():
    for s, env in zip(statements(), ENVS, strict=True):
        assert NUMERIC.score_on_host(env, NUMERIC.extract_solution(f"Answer:\n{env.reference}")).reward == 1.0
        wrong = {s.key(ask): s.figures[1 - ask[1]][ask[0]] / 10 for ask in s.variant.asks}  # the other column
        if s.variant.derived:
            first, second = wrong.values()
            wrong[s.variant.derived] = round(first + second if s.variant.op == "+" else first - second, 1)
        verdict = NUMERIC.score_on_host(env, json.dumps(wrong))
        assert verdict.reward == 0.0 and not verdict.passed, (env.id, wrong, verdict.detail)


@pytest.mark.unit
def test_a_derived_value_is_credited_only_with_right_inputs():
    derived = [e for e in ENVS if e.difficulty == 3]
    assert len({e.tags[3] for e in derived}) >= 6
    for env in derived:
        answer = json.loads(env.reference)
        first, second, result = answer
        garbled = {**answer, first: answer[first] + 1.0, result: answer[result] + 1.0}  # consistent, input wrong
        verdict = NUMERIC.score_on_host(env, json.dumps(garbled))
        assert (verdict.tests_passed, verdict.tests_total) == (1, 4), (env.id, verdict.detail)
        assert "not credited" in verdict.detail


@pytest.mark.unit
def test_warm_up_envs_are_other_statements_of_every_variant_with_right_references():
    warm_up = warm_up_specs()
    assert len(warm_up) == 1000 and {env.split for env in warm_up} == {"train"}
    assert len({env.id for env in warm_up} | {env.id for env in ENVS}) == len(warm_up) + len(ENVS)
    assert not {env.prompt for env in warm_up} & {env.prompt for env in ENVS}
    assert {env.tags[-1] for env in warm_up} == {env.tags[-1] for env in ENVS}  # every variant
    for env in warm_up:
        assert NUMERIC.score_on_host(env, NUMERIC.extract_solution(env.reference)).reward == 1.0, env.id



@pytest.mark.unit
def test_the_warm_start_answers_statements_the_suite_does_not_hold_and_more_that_derive_a_value():
    derived = derived_statements(300)
    assert {s.variant.difficulty for s in derived} == {3}
    assert {s.variant.name for s in derived} == {s.variant.name for s in statements() if s.variant.derived}
    pairs = warm_start_pairs(warm_up=300, drills=0, sums=0, derived=300)
    suite_prompts = {env.prompt for env in ENVS}
    warm_prompts = [prompt for prompt, _ in pairs if prompt not in suite_prompts]
    assert len(set(warm_prompts)) == 600  # the warm-up and the derived statements: none repeats, none is the suite's
    assert {to_spec(s).prompt for s in derived} <= set(warm_prompts)
    assert {env.prompt for env in ENVS if env.split == "eval"}.isdisjoint(prompt for prompt, _ in pairs)


@pytest.mark.unit
def test_a_worked_reference_quotes_the_asked_lines_of_the_prompt_works_a_derived_value_then_answers_as_the_reference():
    for s in statements():
        spec = to_spec(s)
        *quotes, answer = worked_reference(s).splitlines()
        if s.variant.derived:  # the formula over the two figures asked, the result padded to their width
            work = quotes.pop()
            values = json.loads(spec.reference)
            (first, second), result = (s.key(ask) for ask in s.variant.asks), values[s.variant.derived]
            a, b, padded = work.removeprefix(f"{s.variant.derived} = ").replace(f" {s.variant.op} ", " = ").split(" = ")
            assert (float(a), float(b), float(padded)) == (values[first], values[second], result), (spec.id, work)
            assert len(padded) == len(a) == len(b), (spec.id, work)
        asked = list(dict.fromkeys(item for item, _ in s.variant.asks))
        assert len(quotes) == len(asked), spec.id
        for quote, item in zip(quotes, asked):
            assert quote in spec.prompt, (spec.id, quote)
            assert ITEMS[item][0] in quote.lower(), (spec.id, quote)
        assert answer + "\n" == spec.reference
        verdict = NUMERIC.score_on_host(spec, NUMERIC.extract_solution(worked_reference(s)))
        assert verdict.passed, spec.id


@pytest.mark.unit
def test_sum_drills_are_worked_like_a_derived_value_without_carry_or_borrow():
    drills = sum_drills(300)
    assert len(set(drills)) == 300 and {prompt.split()[2] for prompt, _ in drills} == {"+", "-"}
    for prompt, work in drills:
        a, op, b = prompt.removeprefix("Compute: ").split()
        left, result = work.rstrip("\n").split(" = ")
        assert left == f"{a} {op} {b}" and len(result) == len(a) == len(b)
        digits = [(int(x), int(y), int(z)) for x, y, z in zip(a, b, result) if x != "."]
        assert all(z == (x + y if op == "+" else x - y) for x, y, z in digits), work  # digit by digit: no carry
