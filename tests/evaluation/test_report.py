"""The evaluation report's rendering functions, each on hand-made results: the pass@1 table across policies, the
HTML tables, the SVG plots, the flips section and the self-contained page."""

from __future__ import annotations

import html
import re

import pandas as pd
import pytest

from posttrain.evaluation.regression import flips
from posttrain.evaluation.report import (MAX_FLIP_ROWS, as_page, flips_html, line_plot_svg, pass_at_1_by_policy,
                                         pass_plot_svg, pass_table_html, render_body)

pytestmark = pytest.mark.unit


def results(version: int, greedy: dict[str, bool], samples: dict[str, list[bool]]) -> pd.DataFrame:
    """EvalResults of envs a (python, d1), b (python, d2), c (finance, d2)."""
    strata = {"a": ("python", 1), "b": ("python", 2), "c": ("finance", 2)}
    rows = [(env, "greedy", 0, passed) for env, passed in greedy.items()]
    rows += [(env, "sampled", i, passed) for env, verdicts in samples.items() for i, passed in enumerate(verdicts)]
    return pd.DataFrame([{"env_id": env, "domain": strata[env][0], "difficulty": strata[env][1], "decoding": decoding,
                          "sample_idx": i, "policy_version": version, "steps": 1, "passed": passed,
                          "reward": float(passed), "infra_error": "", "assertions": "{}"}
                         for env, decoding, i, passed in rows])


V0 = results(0, {"a": True, "b": False, "c": False}, {"a": [True, False], "b": [False, False], "c": [False, False]})
V1 = results(1, {"a": True, "b": True, "c": False}, {"a": [True, True], "b": [True, False], "c": [False, False]})


def table() -> pd.DataFrame:
    return pass_at_1_by_policy({"v0": V0, "v1": V1})


def value(t: pd.DataFrame, policy: str, stratum: str, group: str, decoding: str) -> float:
    (v,) = t[(t["policy"] == policy) & (t["stratum"] == stratum) & (t["group"] == group)
             & (t["decoding"] == decoding)]["value"]
    return v


def test_pass_at_1_by_policy_per_stratum_by_hand():
    t = table()
    assert set(t["stratum"]) == {"all", "domain", "difficulty"}  # the step buckets are not in the report
    assert value(t, "v0", "all", "all", "greedy") == pytest.approx(1 / 3)
    assert value(t, "v1", "all", "all", "greedy") == pytest.approx(2 / 3)
    assert value(t, "v1", "domain", "python", "greedy") == 1.0
    assert value(t, "v1", "difficulty", "2", "greedy") == 0.5
    assert value(t, "v0", "all", "all", "sampled") == pytest.approx((1 / 2 + 0 + 0) / 3)
    assert value(t, "v1", "domain", "python", "sampled") == pytest.approx((1 + 1 / 2) / 2)
    assert list(dict.fromkeys(t["policy"])) == ["v0", "v1"]  # the order given
    assert pass_at_1_by_policy({}).empty


def test_pass_table_has_a_row_per_stratum_group_and_a_column_per_policy():
    text = pass_table_html(table(), "greedy")
    assert re.findall(r"<th>([^<]*)</th>", text) == ["stratum", "v0", "v1"]
    labels = re.findall(r'<td class="label">([^<]*)</td>', text)
    assert labels == ["all", "domain finance", "domain python", "difficulty 1", "difficulty 2"]
    assert "<td>0.333 <span class=\"note\">(3)</span></td><td>0.667 <span class=\"note\">(3)</span></td>" in text
    assert "no sampled evaluation" in pass_table_html(table()[table()["decoding"] == "greedy"], "sampled")


def test_a_policy_without_a_stratum_shows_a_dash():
    t = pass_at_1_by_policy({"v0": V0[V0["env_id"] == "a"], "v1": V1})
    assert '<td class="label">domain finance</td><td>–</td><td>0.000' in pass_table_html(t, "greedy")


def test_line_plot_is_inline_svg_with_its_labels_as_text():
    svg = line_plot_svg({"all": pd.Series([0.2, 0.4], index=["v0", "v1"]),
                         "domain python": pd.Series([0.1, 0.5], index=["v0", "v1"])}, "greedy pass@1", "policy", "y")
    assert svg.startswith("<svg")
    assert svg.rstrip().endswith("</svg>")
    assert "<?xml" not in svg
    for text in ("greedy pass@1", "v0", "v1", "domain python"):  # svg.fonttype none: text stays text
        assert text in svg


def test_pass_plot_draws_a_line_per_stratum_group():
    svg = pass_plot_svg(table(), "sampled")
    assert "sampled pass@1" in svg
    for label in ("all", "domain finance", "domain python", "difficulty 1", "difficulty 2"):
        assert label in svg


def test_flips_section_counts_every_kind_and_lists_fixed_and_broken():
    changes = flips(V1, V0)  # b fixed; a still passing; c still failing
    text = flips_html(changes)
    assert re.findall(r"<th>([^<]*)</th>", text)[:5] == ["fixed", "broken", "still_passing", "still_failing",
                                                         "unverified"]
    assert "<tr><td>1</td><td>0</td><td>1</td><td>1</td><td>0</td></tr>" in text
    assert re.findall(r'<td class="label">([^<]*)</td><td>(\w+)</td>', text) == [("b", "fixed")]


def test_flips_section_lists_at_most_max_rows():
    many = pd.DataFrame({"env_id": [f"e{i:03}" for i in range(MAX_FLIP_ROWS + 5)], "baseline_passed": True,
                         "candidate_passed": False, "flip": "broken"})
    text = flips_html(many)
    assert text.count("<td>broken</td>") == MAX_FLIP_ROWS
    assert "5 more fixed or broken envs" in text


def test_body_has_both_decodings_the_reward_curve_and_flips_only_when_given():
    body = render_body(table(), title="<run>")
    assert "<h1>&lt;run&gt;</h1>" in body
    assert body.count("<svg") == 2
    assert "reward curve" not in body
    assert "flips" not in body
    full = render_body(table(), rewards=pd.Series({1: 0.1, 2: 0.3}), flips=flips(V1, V0))
    assert full.count("<svg") == 3
    assert "<h2>reward curve</h2>" in full
    assert "<h2>flips</h2>" in full
    assert "no greedy evaluation" in render_body(pass_at_1_by_policy({}))


def test_page_is_self_contained():
    page = as_page(render_body(table(), rewards=pd.Series({1: 0.1})), title="a & b")
    assert page.startswith("<!DOCTYPE html>")
    assert f"<title>{html.escape('a & b')}</title>" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched from elsewhere
