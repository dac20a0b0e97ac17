"""Every admission reason code and what it means, listed once; the table in docs/admission.md is rendered from here.

A report row's ``detail`` starts with its reason code (``admission.report``): ``<check>.<reason>``, or ``infra``.
``EVERY_CHECK`` holds the codes any check can give, ``REASON_CODES`` each check's own (a ``:<...>`` suffix stands
for a name the row fills in). ``posttrain reason-codes --write docs/admission.md`` rewrites the block between
``BEGIN`` and ``END`` from ``markdown_table()``; a test fails while it is stale.

Example:
    >>> meaning("coverage.mutants_survived")
    'the mutation score of the reference is below `mutation_threshold`; the surviving mutants are listed'
    >>> meaning("anti_hacking.probe_passed:return None") == meaning("anti_hacking.probe_passed:<probe>")
    True
    >>> meaning("solvability.ok")
    'the check passed'
    >>> print(markdown_table().splitlines()[2])
    | every check | `<check>.ok` | the check passed |
"""

from __future__ import annotations

from pathlib import Path

from posttrain.generated import with_block, write_block

BEGIN = "<!-- reason-codes:begin: generated from posttrain/admission/reasons.py by `posttrain reason-codes --write` -->"
END = "<!-- reason-codes:end -->"

EVERY_CHECK = {
    "<check>.ok": "the check passed",
    "<check>.skipped": "not run because its prerequisite, a reference that passes reproducibly, failed (never admits)",
    "infra": "the sandbox or a policy engine failed: not admitted this run, but not the env's fault",
}

REASON_CODES: dict[str, dict[str, str]] = {
    "consistency": {
        "consistency.malformed_yaml": "the file is not YAML, or not a mapping of spec fields",
        "consistency.unreadable": "the file cannot be read (I/O or encoding error)",
        "consistency.missing_field": "a required field is missing",
        "consistency.unknown_field": "a field (or a limit) the spec format does not have",
        "consistency.wrong_type": "a field has the wrong type",
        "consistency.unknown_runtime": "`runtime` is not a known runtime",
        "consistency.unknown_kind": "`kind` is not `single_turn` or `agent`",
        "consistency.unknown_split": "`split` is not `train` or `eval`",
        "consistency.unknown_verifier": "`verifier.kind` is not a registered verifier",
        "consistency.invalid_id": "the id is empty or contains whitespace",
        "consistency.empty_prompt": "the prompt is empty",
        "consistency.out_of_range": "`difficulty` or `min_gap` is out of range",
        "consistency.limits_too_large": "a limit above the loader's bound, or more time or memory than the sandbox "
                                        "grants (it would silently cut them)",
        "consistency.limits_too_small": "a limit that is not positive, or below `AdmissionConfig.min_timeout_s` / "
                                        "`min_memory_mb`",
        "consistency.no_tests": "the verifier config has no test cases",
        "consistency.no_asserts": "a test that cannot fail: a `python_asserts` snippet without an assert, or a "
                                  "`workspace_tests` test without expected stdout whose command asserts nothing",
        "consistency.runtime_mismatch": "the verifier cannot run this runtime",
        "consistency.invalid_entry_point": "the entry point is not valid for the verifier",
        "consistency.contradictory_spec": "the verifier config contradicts itself (e.g. expected values that break "
                                          "a declared formula)",
        "consistency.invalid_verifier": "any other problem with the verifier config",
        "consistency.duplicate_id": "another spec file has the same id",
        "consistency.invalid_oracle": "the `oracle` is not a list of `{name, arguments}` calls of registered tools "
                                      "with exactly their (string) arguments, or a non-agent env has one",
        "consistency.invalid_evaluation": "the `evaluation` assertions name an unknown track, assertion or tool, or "
                                          "a value that does not fit (e.g. `max_steps: 0`)",
        "consistency.invalid_reward": "the `reward` layers do not fit their shape (e.g. a gate with a weight, a "
                                      "signal twice) or name a signal the env's verifier does not measure for it "
                                      "(e.g. `formulas` of a `numeric` env without formulas)",
        "consistency.invalid_agent": "the `agent` settings name an unknown key or tool, leave out `submit`, ask for "
                                     "a budget outside `AgentConfig`'s bounds (e.g. `max_steps: 0`), or a non-agent "
                                     "env has them",
        "consistency.oracle_tool_not_allowed": "the oracle (without one, the reference run as a `bash` call) calls a "
                                               "tool outside the env's own `agent.tools`",
        "consistency.oracle_over_max_steps": "the oracle's calls before its `submit` are more turns than the env's "
                                             "own `agent.max_steps`",
        "consistency.check_not_served": "the env's `agent.tools` grants `check`, but its verifier cannot serve it "
                                        "(it gives no mismatch feedback, or the spec names no `answer_file`)",
        "consistency.entry_point_not_in_prompt": "the entry point is not named in the prompt",
        "consistency.entry_point_mismatch": "the (Python) reference does not define the entry point",
        "consistency.entry_point_not_in_reference": "the entry point is not named in the reference (non-Python "
                                                    "runtimes)",
        "consistency.entry_point_not_in_tests": "the verifier's test code never mentions the entry point",
        "consistency.contradictory_kind": "a `single_turn` env graded by `workspace_tests` without a "
                                          "`solution_file` (that grades an agent's edit script)",
        "consistency.missing_file": "the reference or tests read a relative path that is neither in the workspace "
                                    "nor named in the prompt",
    },
    "solvability": {
        "solvability.reference_failed": "the reference does not pass its own tests; the detail says why",
        "solvability.reference_below_full_reward": "the reference passes every test but earns less than reward 1 "
                                                   "under the env's `reward` layers (a gate or a layer, e.g. `lint`, "
                                                   "it fails): no solution could meet them",
        "solvability.oracle_failed": "the env's `oracle`, run as a scripted agent episode in a sandbox session within "
                                     "the env's own `agent:` tools, `max_steps` and `deadline_s`, did not solve it "
                                     "(reward below 1); the detail gives the verifier's verdict, and how the episode "
                                     "ended when its limits cut it short",
    },
    "reproducibility": {
        "reproducibility.flaky": "`repeats` runs of the reference gave different verdicts (pass/fail, reward, "
                                 "cases passed, exit code, timeout or failure message)",
        "reproducibility.not_applicable": "fewer than 2 repeats: nothing to compare (passes)",
    },
    "anti_hacking": {
        "anti_hacking.probe_passed:<probe>": "a degenerate or cheating solution (`verifier.probes`; for agent envs "
                                             "also the `no-op agent` and `test-editing agent` episodes) passed or "
                                             "earned full reward; the code names the first, the detail lists all",
        "anti_hacking.probe_rewarded:<probe>": "a degenerate answer (`empty answer`, `constant answer`, `copy of "
                                               "the prompt`, `self-consistent garbage`) earned more than "
                                               "`max_probe_reward` (default 0.1): the reward credits nothing; the "
                                               "code names the first, the detail lists all",
        "anti_hacking.mislabelled:<test>": "a test's `guard` label (`workspace_tests`) disagrees with the untouched "
                                           "workspace, where each test runs alone: a guard that fails there, or a "
                                           "test without `guard: true` that already passes there (doing nothing "
                                           "would earn it); the code names the first, the detail lists all",
        "anti_hacking.not_applicable": "the verifier has no probes for this env (passes)",
    },
    "coverage": {
        "coverage.mutants_survived": "the mutation score of the reference is below `mutation_threshold`; the "
                                     "surviving mutants are listed",
        "coverage.not_applicable": "the verifier produced no mutants: nothing to measure (passes)",
    },
    "discrimination": {
        "discrimination.gap_too_small": "strong minus weak pass rate over `k` samples is below `min_gap` (the run's "
                                        "`admission.min_gap` or the env's, the larger)",
    },
    "learnability": {
        "learnability.solved": "the learnability policy always passes (rejects only with `filter_learnability`)",
        "learnability.unsolved": "the learnability policy never passes (rejects only with `filter_learnability`)",
    },
}


def meaning(code: str) -> str:
    """What a reason code means; ``KeyError`` for a code the table does not list."""
    check, _, reason = code.partition(".")
    if code in EVERY_CHECK:
        return EVERY_CHECK[code]
    if check in REASON_CODES and reason in ("ok", "skipped"):
        return EVERY_CHECK[f"<check>.{reason}"]
    codes = REASON_CODES.get(check, {})
    family = code.split(":", 1)[0] + ":<" if ":" in code else None
    for listed, text in codes.items():
        if listed == code or (family and listed.startswith(family) and listed.endswith(">")):
            return text
    raise KeyError(f"reason code {code!r} is not listed in posttrain/admission/reasons.py")


def markdown_table() -> str:
    """Every reason code as a Markdown table: check, code, meaning."""
    rows = [("every check", code, text) for code, text in EVERY_CHECK.items()]
    rows += [(check, code, text) for check, codes in REASON_CODES.items() for code, text in codes.items()]
    lines = ["| check | reason code | meaning |", "|---|---|---|"]
    lines += [f"| {check} | `{code}` | {text} |" for check, code, text in rows]
    return "\n".join(lines)


def with_table(text: str) -> str:
    """``text`` with the block between ``BEGIN`` and ``END`` replaced by the current table."""
    return with_block(text, BEGIN, END, markdown_table(), "reason-codes")


def write_table(path: str | Path) -> bool:
    """Rewrite the reason-codes block of the file at ``path``; whether it changed."""
    return write_block(path, BEGIN, END, markdown_table(), "reason-codes")
