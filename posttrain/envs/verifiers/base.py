"""What every verifier kind provides, and the ``Verdict`` it returns for one scored execution.

A verifier turns (env spec, candidate solution) into a sandbox ``Execution`` and turns the ``ExecutionResult``
back into a ``Verdict``. The verdict is always decided on the host from values the trusted harness reported,
never from what the untrusted program claims; ``nonce`` ties the harness's result lines to one execution.

Example:
    >>> v = Verdict(reward=0.0, passed=False, compiled=False, tests_passed=0, tests_total=0,
    ...             infra_error="sandbox did not start", detail="infra: sandbox did not start")
    >>> v.excluded          # infra failures are flagged and left out of rewards, never counted as a 0
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Callable, NamedTuple

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers.typed_config import Problems, config_problems, json_schema, parse
from posttrain.sandbox.base import Execution, ExecutionResult


@dataclass
class Verdict:
    """The host's judgement of one solution of one env."""

    reward: float  # fraction of cases passed, in [0, 1]; 0.0 when ``excluded``
    passed: bool  # every case passed
    compiled: bool  # the solution parsed (the harness got past compiling it)
    tests_passed: int
    tests_total: int
    exit_code: int | None = None
    timed_out: bool = False  # the execution hit its deadline (workspace_tests: or its solution phase did)
    tests_timed_out: int = 0  # tests stopped at their own deadline (verifiers with a deadline per test)
    infra_error: str = ""  # non-empty: the sandbox failed, not the solution; see ``excluded``
    detail: str = ""  # short human-readable reason
    sandbox_ms: float = 0.0  # sandbox start plus run time
    sandbox_cpu_s: float | None = None  # what the execution used (``ExecutionResult``); None: no sandbox ran, or
    sandbox_memory_peak_mb: float | None = None  # the backend does not account it
    # per test, in the order of ``Verifier.test_labels``: "" where it passed, else why it failed (verifiers that
    # report tests one by one and label them; empty otherwise)
    failures: tuple[str, ...] = ()
    # what the verifier measured, by name, each in [0, 1] (``Verifier.signals``): what an env's reward layers compose
    # (``reward_layers``); empty for an infra failure
    signals: dict[str, float] = field(default_factory=dict)

    @property
    def hit_deadline(self) -> bool:
        """The execution, its solution phase or one of its tests was stopped at a deadline: on a loaded machine a
        sign of the load as much as of the solution (admission re-runs these: ``admission.batch``)."""
        return self.timed_out or self.tests_timed_out > 0

    @property
    def excluded(self) -> bool:
        """True for infra failures: callers drop these from rewards and metrics instead of scoring them 0."""
        return bool(self.infra_error)

    @classmethod
    def infra(cls, result: ExecutionResult, tests_total: int) -> "Verdict":
        """The verdict for an execution the sandbox itself failed to carry out."""
        return cls(reward=0.0, passed=False, compiled=False, tests_passed=0, tests_total=tests_total,
                   exit_code=result.exit_code, timed_out=result.timed_out, infra_error=result.infra_error,
                   detail=f"infra: {result.infra_error}", **sandbox_fields(result))


def sandbox_fields(result: ExecutionResult) -> dict:
    """A verdict's account of its execution: the sandbox's time (start plus run) and what the program used.

    >>> sandbox_fields(ExecutionResult(exit_code=0, start_ms=2.0, run_ms=30.0, cpu_s=0.02, memory_peak_mb=3.5))
    {'sandbox_ms': 32.0, 'sandbox_cpu_s': 0.02, 'sandbox_memory_peak_mb': 3.5}
    """
    return {"sandbox_ms": result.start_ms + result.run_ms, "sandbox_cpu_s": result.cpu_s,
            "sandbox_memory_peak_mb": result.memory_peak_mb}


def harness_records(stdout: str, nonce: str) -> list[dict]:
    """The JSON records on lines that start with ``nonce``; every other line is the program's and is ignored.

    Never raises: the program controls this text (it may have stolen the nonce), so a line that does not parse
    (malformed, nested deeper than the parser goes, a number too long to convert) is ignored like any other
    (``stdout`` itself is already cut to the execution's ``max_output_bytes``).

    >>> harness_records('N {"a": 1}\\nX {"a": 2}\\nN [3]\\nN nope\\nN ' + '[' * 3000 + '\\n', "N")
    [{'a': 1}]
    """
    prefix = nonce + " "
    records = []
    for line in stdout.splitlines():
        if line.startswith(prefix):
            try:
                record = json.loads(line[len(prefix):])
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def first_record_per_index(records: list[dict], key: str, total: int) -> dict[int, dict]:
    """The first record whose ``key`` is an index in ``range(total)``, per index: the harness's own line comes
    first, so later look-alikes (a program printing after it with the stolen nonce) are ignored.

    >>> first_record_per_index([{"case": 0, "v": 1}, {"case": 0, "v": 9}, {"case": 5}, {"case": "0"}], "case", 2)
    {0: {'case': 0, 'v': 1}}
    """
    first: dict[int, dict] = {}
    for record in records:
        index = record.get(key)
        if type(index) is int and 0 <= index < total:
            first.setdefault(index, record)
    return first


class HostOnlyError(TypeError):
    """A sandbox function was called on a verifier that scores on the host (``needs_sandbox=False``)."""


class TrustedSource(NamedTuple):
    """One piece of trusted test code in a spec's verifier config, for admission's consistency check."""

    field: str  # where it is, e.g. ``verifier.asserts[2]``
    text: str
    language: str  # a key of ``LANGUAGES``' values, or "" (not scanned)


LANGUAGES = {".py": "python", ".sh": "shell", ".bash": "shell", ".js": "javascript", ".cjs": "javascript",
             ".mjs": "javascript"}
RUNTIME_LANGUAGES = {"python": "python", "bash": "shell", "node": "javascript"}


def language_of(name: str) -> str:
    """``python`` / ``shell`` / ``javascript`` from a file name's suffix, or ``""`` (not scanned).

    >>> language_of("tests/check.py"), language_of("notes.txt")
    ('python', '')
    """
    return LANGUAGES.get(PurePosixPath(name).suffix, "")


def runtime_language(spec: EnvSpec) -> str:
    """The language of a solution program run by ``spec.runtime`` (the default ``solution_language``)."""
    return RUNTIME_LANGUAGES.get(spec.runtime, "")


def answer_is_data(spec: EnvSpec) -> str:
    """``solution_language`` of verifiers whose solution is an answer, not a program: nothing to scan."""
    return ""


def empty_probe(spec: EnvSpec) -> dict[str, str]:
    """Default ``probes``: the empty solution must fail."""
    return {"empty solution": ""}


UNTOUCHED = "untouched workspace"  # the probe that changes nothing: a verifier with ``test_labels`` must give it


def no_test_labels(spec: EnvSpec) -> list[tuple[str, bool]]:
    """Default ``test_labels``: the tests carry no labels."""
    return []


def no_mutants(spec: EnvSpec) -> list[str]:
    """Default ``mutants``: none (the coverage check then has nothing to kill)."""
    return []


def no_test_sources(spec: EnvSpec) -> list[TrustedSource]:
    """Default ``test_sources``: the tests are data (values, constraints), not code."""
    return []


def no_vacuous_tests(spec: EnvSpec) -> list[str]:
    """Default ``vacuous_tests``: every test can fail."""
    return []


def any_kind(spec: EnvSpec) -> str:
    """Default ``agent_only``: a single completion can be graded."""
    return ""


def workspace_is_solution(spec: EnvSpec) -> str:
    """Default ``answer_file``: an agent episode's final workspace is itself the solution."""
    return ""


def no_own_files(spec: EnvSpec) -> frozenset[str]:
    """Default ``own_files``: the verifier writes nothing into the sandbox besides the workspace."""
    return frozenset()


def entry_point_only(spec: EnvSpec) -> tuple[str, ...]:
    """Default ``entry_point_names``: the tests call the entry point by its own name."""
    return (spec.entry_point,) if spec.entry_point else ()


def reference_as_is(spec: EnvSpec) -> str:
    """Default ``reference_program``: the reference is the whole program."""
    return spec.reference


def every_signal_measured(spec: EnvSpec) -> dict[str, str]:
    """Default ``unmeasured``: the verdicts of every env carry every signal of the kind."""
    return {}


def no_spec_problems(spec: EnvSpec) -> Problems:
    """Default ``check_spec`` / ``check_config``: nothing beyond the config's declared types."""
    return []


@dataclass(frozen=True)
class Verifier:
    """One verifier kind: the functions the suite loader, admission and the reward stage call.

    Scoring:

    - ``extract_solution(completion)`` -> the solution (program, edit script or answer text) from a completion.
    - ``build_execution(spec, solution, cfg, nonce)`` -> the sandbox execution; never contains expected answers.
    - ``score(spec, result, nonce)`` -> the ``Verdict``, computed on the host.
    - ``needs_sandbox``: False for verifiers whose solution is data, not code (``numeric``, ``scene``); those
      provide ``score_on_host(spec, solution)`` and ``verify_many`` never starts a sandbox for them (their
      ``build_execution`` and ``score`` raise ``HostOnlyError``).
    - ``runs_setup``: True for verifiers whose execution runs the spec's ``setup`` on the written workspace before
      the solution (``workspace_tests``); ``validate`` rejects a ``setup`` on any other kind.

    The config: ``config`` is the dataclass declaring the ``verifier:`` mapping (``typed_config``); ``validate``,
    ``config_schema`` and ``settings`` (a valid spec's mapping as a ``config`` instance) come from it.
    ``check_spec(spec)`` adds what the config's types cannot say about the rest of the spec (runtime, entry point,
    reserved files), ``check_config(spec)`` what they cannot say about a well-typed config (formulas that
    contradict the values, duplicate names); it runs only when the types fit.

    Admission's questions (defaults in parentheses):

    - ``probes(spec)`` -> degenerate or cheating solutions by name (already extracted, ready for ``verify_many``);
      the anti-hacking check requires every one of them to fail (an empty solution).
    - ``test_labels(spec)`` -> each test's name and whether it is a ``guard`` (behaviour the untouched workspace
      already has), in the order of ``Verdict.failures``; the anti-hacking check reads them off the verdict of the
      ``UNTOUCHED`` probe, which the verifier must then give: a guard must pass there, any other test fail (none).
    - ``mutants(spec)`` -> wrong-but-plausible variants of the reference (AST mutants, perturbed values, moved
      objects, reverted edits); the coverage check wants most of them killed (none).
    - ``test_sources(spec)`` -> the trusted test code in the config, as ``TrustedSource``s (none: data tests).
    - ``vacuous_tests(spec)`` -> names of tests that pass whenever they run (none).
    - ``agent_only(spec)`` -> why only an agent episode can be graded, e.g. "without a solution_file grades an
      agent's edit script"; "" when a single completion can ("").
    - ``answer_file(spec)`` -> the workspace file whose text is the solution of an agent episode (its final
      workspace otherwise: "").
    - ``feedback``: None, or ``(spec, solution)`` -> (all checks passed, a report an agent may read: which checks
      fail, never an expected value), what the agent's ``check`` tool says of its answer file (``agent.check``).
    - ``own_files(spec)`` -> files the verifier writes into the sandbox besides the workspace (none).
    - ``solution_language(spec)`` -> the language of a solution program, for scanning the files it reads; ""
      when the solution is data (the runtime's language).
    - ``reference_program(spec)`` -> the program the reference runs as (the reference).
    - ``entry_point_names(spec)`` -> the names under which the tests may call the entry point (its own name).

    Scoring, ``check_config``, ``probes`` and ``mutants`` read the typed config (``settings``), so defaults live only
    in ``config``. ``test_sources``, ``vacuous_tests``, ``agent_only``, ``own_files`` and ``solution_language``
    read the raw ``spec.verifier`` mapping defensively instead: admission may ask them about any spec (one of
    another kind, or one whose config failed validation), and they answer from whatever is well-formed in it.

    Reward layers (``reward_layers``; an env's ``reward:`` composes these):

    - ``signals``: every signal the kind's verdicts may carry (``Verdict.signals``), name -> what it measures.
    - ``unmeasured(spec)`` -> the signals a valid spec's verdicts lack, name -> why (none).
    - ``on_demand``: signals computed only when a layer names them, name -> ``(spec, solution)`` -> (value, note:
      why it is below 1, or ""); ``verify_many`` calls them after scoring (none).
    """

    kind: str
    config: type
    extract_solution: Callable[[str], str]
    build_execution: Callable[[EnvSpec, str, SandboxConfig, str], Execution]
    score: Callable[[EnvSpec, ExecutionResult, str], Verdict]
    probes: Callable[[EnvSpec], dict[str, str]] = empty_probe
    mutants: Callable[[EnvSpec], list[str]] = no_mutants
    test_labels: Callable[[EnvSpec], list[tuple[str, bool]]] = no_test_labels
    needs_sandbox: bool = True
    runs_setup: bool = False
    score_on_host: Callable[[EnvSpec, str], Verdict] | None = None
    check_spec: Callable[[EnvSpec], Problems] = no_spec_problems
    check_config: Callable[[EnvSpec], Problems] = no_spec_problems
    test_sources: Callable[[EnvSpec], list[TrustedSource]] = no_test_sources
    vacuous_tests: Callable[[EnvSpec], list[str]] = no_vacuous_tests
    agent_only: Callable[[EnvSpec], str] = any_kind
    own_files: Callable[[EnvSpec], frozenset[str]] = no_own_files
    solution_language: Callable[[EnvSpec], str] = runtime_language
    reference_program: Callable[[EnvSpec], str] = reference_as_is
    entry_point_names: Callable[[EnvSpec], tuple[str, ...]] = entry_point_only
    signals: Mapping[str, str] = field(default_factory=dict)
    unmeasured: Callable[[EnvSpec], dict[str, str]] = every_signal_measured
    on_demand: Mapping[str, Callable[[EnvSpec, str], tuple[float, str]]] = field(default_factory=dict)
    answer_file: Callable[[EnvSpec], str] = workspace_is_solution
    feedback: Callable[[EnvSpec, str], tuple[bool, str]] | None = None

    def validate(self, spec: EnvSpec) -> Problems:
        """Problems with a spec's verifier config, as (field, reason) pairs; empty when valid. The suite loader
        turns each into a ``Rejection`` naming the field."""
        typed = config_problems(self.config, spec.verifier, self.kind)
        setup = [("setup", f"the {self.kind} verifier runs no setup (workspace_tests does)")] \
            if spec.setup and not self.runs_setup else []
        return setup + self.check_spec(spec) + typed + ([] if typed else self.check_config(spec))

    def settings(self, spec: EnvSpec):
        """The ``verifier`` mapping of a valid spec as a ``config`` instance, absent keys set to their defaults.
        Parsed on every call (tens of microseconds; about 0.5 ms for 100 cases), never cached: specs are mutable
        and the ids of dead objects are reused."""
        return parse(self.config, spec.verifier)

    @property
    def config_schema(self) -> dict:
        """The JSON Schema of this kind's ``verifier`` mapping (used by ``envs.spec_json_schema``)."""
        return json_schema(self.config)


def host_only(kind: str):
    """``build_execution`` / ``score`` stand-ins for a host-only verifier: calling them is a programming error."""

    def refuse(*_args, **_kwargs):
        raise HostOnlyError(f"the {kind!r} verifier scores on the host: call score_on_host(spec, solution) "
                            "(verify_many does this) instead of building a sandbox execution")

    return refuse
