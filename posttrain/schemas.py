"""Pandera models of every table that crosses a stage boundary (parquet via pyarrow between Flyte tasks).

Sequence-valued fields (token ids, logprobs) are stored as JSON text columns: readable in MLflow artifacts and
HTML previews (which cannot render list cells), and exact (``encode_floats`` keeps float64 round-trips exact).

Example:
    >>> import pandas as pd
    >>> df = pd.DataFrame({"env_id": ["demo/add_1"], "check": ["solvability"], "passed": [True], "detail": [""]})
    >>> AdmissionReport.validate(df).shape
    (1, 4)
    >>> decode_ints(encode_ints([1, 2, 3]))
    [1, 2, 3]
    >>> len(empty(Trajectories)), "decoding" in empty(EvalTrajectories).columns
    (0, True)
"""

from __future__ import annotations

import json

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series


def encode_ints(values) -> str:
    return json.dumps([int(v) for v in values])


def decode_ints(text: str) -> list[int]:
    return [int(v) for v in json.loads(text)]


def encode_floats(values) -> str:
    return json.dumps([float(v) for v in values])


def decode_floats(text: str) -> list[float]:
    return [float(v) for v in json.loads(text)]


UNACCOUNTED = -1.0  # a resource column's value where nothing was measured (no program ran, or not accounted)


def measured(value: float | None) -> float:
    """A resource measure (CPU seconds, peak MiB) as a table holds it: ``UNACCOUNTED`` for None, keeping tables
    free of NaN.

    >>> measured(0.25), measured(None)
    (0.25, -1.0)
    """
    return UNACCOUNTED if value is None else float(value)


def measured_or_unaccounted(values: pd.Series) -> pd.Series:
    """The check of a resource column: a measure (>= 0) or ``UNACCOUNTED``, never NaN."""
    return (values >= 0) | (values == UNACCOUNTED)


def all_tests_passed(scored: pd.DataFrame) -> pd.Series:
    """Per row of a Scored table, the verdict's ``passed``: every test passed (``tests_passed == tests_total > 0``).
    What pass rates, solve rates and pass@k count, rather than ``reward >= 1``: an env's reward layers may withhold
    reward from a solution whose tests all pass (a lint layer) or give it in part (docs/env-spec.md, Reward layers).

    >>> all_tests_passed(pd.DataFrame({"tests_passed": [3, 2, 0], "tests_total": [3, 3, 0]})).tolist()
    [True, False, False]
    """
    return (scored["tests_total"] > 0) & (scored["tests_passed"] == scored["tests_total"])


def _is_signals(text: str) -> bool:
    try:
        signals = json.loads(text)
    except ValueError:
        return False
    return isinstance(signals, dict) and all(type(v) in (int, float) and 0.0 <= v <= 1.0 for v in signals.values())


def empty(model: type[pa.DataFrameModel]) -> pd.DataFrame:
    """A validated table of ``model`` without rows (e.g. the eval decode of a version that is not evaluated)."""
    return model.validate(pd.DataFrame(columns=list(model.to_schema().columns)))


def _is_json_list(series) -> bool:
    return series.map(lambda s: isinstance(json.loads(s), list)).all()


class AdmissionReport(pa.DataFrameModel):
    """One row per (env, check): the admission verdict and why."""

    env_id: Series[str]
    check: Series[str]
    passed: Series[bool]
    detail: Series[str]

    class Config:
        strict = True
        coerce = True


class Envs(pa.DataFrameModel):
    """Admitted envs; ``spec_json`` is the full ``EnvSpec`` (``EnvSpec.from_json``)."""

    env_id: Series[str] = pa.Field(unique=True)
    split: Series[str] = pa.Field(isin=["train", "eval"])
    domain: Series[str]
    difficulty: Series[int] = pa.Field(ge=0)
    kind: Series[str]  # single_turn, or agent (the agent tier: tasks.agent)
    spec_json: Series[str]

    class Config:
        coerce = True


class Trajectories(pa.DataFrameModel):
    """One row per sampled completion; ``group_id`` groups the n samples of one env prompt."""

    env_id: Series[str]
    group_id: Series[str]
    sample_idx: Series[int] = pa.Field(ge=0)
    policy_version: Series[int] = pa.Field(ge=0)
    prompt: Series[str]
    completion: Series[str]
    prompt_token_ids: Series[str]
    completion_token_ids: Series[str]
    behavior_logprobs: Series[str]  # of the tempered distribution each token was drawn from
    temperature: Series[float] = pa.Field(ge=0.0)  # the sampling temperature (0: greedy); the trainer's too
    steps: Series[int] = pa.Field(ge=1)
    tool_calls: Series[int] = pa.Field(ge=0)
    finish_reason: Series[str]
    tokens: Series[int] = pa.Field(ge=0)

    @pa.dataframe_check
    def sequences_are_json_lists(cls, df) -> bool:
        return all(_is_json_list(df[c]) for c in ("prompt_token_ids", "completion_token_ids", "behavior_logprobs"))

    @pa.dataframe_check
    def one_logprob_per_completion_token(cls, df):
        return df.apply(
            lambda r: len(json.loads(r["completion_token_ids"])) == len(json.loads(r["behavior_logprobs"])), axis=1
        )

    class Config:
        coerce = True


class Scored(Trajectories):
    """Trajectories plus the sandbox verdict. ``infra_error`` rows are excluded from the update, never reward 0."""

    reward: Series[float] = pa.Field(ge=0.0, le=1.0)
    compiled: Series[bool]
    tests_passed: Series[int] = pa.Field(ge=0)
    tests_total: Series[int] = pa.Field(ge=0)
    exit_code: Series[int]  # -1 when the program was killed or never ran
    timed_out: Series[bool]
    infra_error: Series[str]  # empty string: no infra error
    sandbox_ms: Series[float] = pa.Field(ge=0.0)
    sandbox_cpu_s: Series[float]  # what the verification's program used (docs/sandboxes.md); UNACCOUNTED: no
    sandbox_memory_peak_mb: Series[float]  # sandbox ran (a host-only verifier), or the backend does not account
    signals: Series[str]  # JSON object: the verdict's signals, name -> value in [0, 1] (reward layers compose them)

    @pa.check("sandbox_cpu_s", "sandbox_memory_peak_mb")
    def sandbox_usage_measured_or_unaccounted(cls, values):
        return measured_or_unaccounted(values)

    @pa.check("signals")
    def signals_are_json_objects_of_fractions(cls, values):
        return values.map(_is_signals)


class EnvHistory(pa.DataFrameModel):
    """Per train env, the last iteration whose rollout had its group and whether the group settled (no reward
    variance): what ``rollout.settled_cooldown`` picks by (``posttrain.rollout.settled``)."""

    env_id: Series[str] = pa.Field(unique=True)
    iteration: Series[int] = pa.Field(ge=1)
    settled: Series[bool]

    class Config:
        strict = True
        coerce = True


EVAL_DECODINGS = ("greedy", "sampled")


class EvalTrajectories(Trajectories):
    """An eval decode of one policy version: per eval env its greedy completion (``decoding`` "greedy") and n
    completions at the rollout temperature ("sampled"; ``EvalConfig.samples``)."""

    decoding: Series[str] = pa.Field(isin=list(EVAL_DECODINGS))


class EvalResults(pa.DataFrameModel):
    """One row per verified eval completion of a policy version: per eval env the greedy one (greedy pass@1) and
    the sampled ones (sampled pass@1, ``sample_idx`` 0..n-1)."""

    env_id: Series[str]
    domain: Series[str]
    difficulty: Series[int]
    decoding: Series[str] = pa.Field(isin=list(EVAL_DECODINGS))
    sample_idx: Series[int] = pa.Field(ge=0)
    policy_version: Series[int] = pa.Field(ge=0)
    steps: Series[int] = pa.Field(ge=1)
    passed: Series[bool]
    reward: Series[float] = pa.Field(ge=0.0, le=1.0)
    infra_error: Series[str]
    assertions: Series[str]  # JSON object: assertion name -> true / false, or null (not applicable)

    class Config:
        coerce = True


class TrainRows(Scored):
    """Scored plus each sample's ``advantage`` (``TrainConfig.advantage_estimator``): the table the update trains on.

    Advantages are computed over the trainable rows only; an ``infra_error`` row has none (NaN).
    """

    advantage: Series[float] = pa.Field(nullable=True)

    @pa.dataframe_check
    def advantage_exactly_on_trainable_rows(cls, df):
        return df["advantage"].isna() == (df["infra_error"] != "")


class AgentTrajectories(Trajectories):
    """Agent episodes (``posttrain.agent``): one row per context window of an episode (a window closes when the
    context budget compresses old observations). ``completion_token_ids`` holds model tokens and masked template /
    observation tokens; ``loss_mask`` (JSON list, one 0/1 per completion token) marks the model's; masked tokens
    carry a behavior logprob of 0.0."""

    window: Series[int] = pa.Field(ge=0)
    loss_mask: Series[str]

    @pa.dataframe_check
    def one_mask_bit_per_completion_token(cls, df):
        return df.apply(lambda r: len(json.loads(r["completion_token_ids"])) == len(json.loads(r["loss_mask"]))
                        and set(json.loads(r["loss_mask"])) <= {0, 1}, axis=1)


class AgentScored(AgentTrajectories, Scored):
    """Agent episodes with the verifier's verdict on their final workspace (every window of an episode carries its
    episode's). ``reward`` = ``verifier_reward`` plus the shaping terms, clipped to [0, 1]; ``shaping`` (JSON object,
    term name -> value) logs each term separately."""

    verifier_reward: Series[float] = pa.Field(ge=0.0, le=1.0)
    shaping: Series[str]


class Steps(pa.DataFrameModel):
    """One row per tool call of an agent episode, linked to its ``AgentTrajectories`` rows by (group_id,
    sample_idx). ``tool`` is "" for a turn without a call; ``error`` says why a call was rejected. ``cpu_s`` and
    ``memory_peak_mb``: what the call's sandbox steps used (CPU seconds summed, the largest memory peak, from their
    cgroups; docs/sandboxes.md), ``UNACCOUNTED`` (-1) where no program ran (a rejected call, ``submit``) or the
    backend does not account it. The last six columns are what its episode ran under (``Episode.config``: its env's
    ``agent:`` settings over the run's ``AgentConfig``), the same on every row of an episode."""

    env_id: Series[str]
    group_id: Series[str]
    sample_idx: Series[int] = pa.Field(ge=0)
    policy_version: Series[int] = pa.Field(ge=0)
    step: Series[int] = pa.Field(ge=0)  # index of the call in the episode
    turn: Series[int] = pa.Field(ge=0)
    tool: Series[str]
    arguments: Series[str]  # JSON object
    ok: Series[bool]
    exit_code: Series[int]  # -1 when no program ran or it was killed
    error: Series[str]
    infra_error: Series[str]
    duration_ms: Series[float] = pa.Field(ge=0.0)
    tokens_in: Series[int] = pa.Field(ge=0)  # prompt tokens the engine received for this turn
    tokens_cached: Series[int] = pa.Field(ge=0)  # of those, served by the engine's prefix cache
    tokens_out: Series[int] = pa.Field(ge=0)  # model tokens of this turn
    observation_bytes: Series[int] = pa.Field(ge=0)
    message: Series[str]  # the model's text of the call's turn (on each call of the turn), clipped: agent.table
    observation: Series[str]  # what the call gave back, the text the model read, clipped the same way
    compressed_at_turn: Series[int] = pa.Field(ge=-1)  # turn at which the observation became a summary; -1: never
    cpu_s: Series[float]  # >= 0, or UNACCOUNTED
    memory_peak_mb: Series[float]  # >= 0, or UNACCOUNTED
    allowed_tools: Series[str]  # JSON list: the tools the episode could call (a call of another was rejected)
    max_steps: Series[int] = pa.Field(ge=1)
    max_new_tokens: Series[int] = pa.Field(ge=1)
    token_budget: Series[int] = pa.Field(ge=1)
    context_budget: Series[int] = pa.Field(ge=1)
    deadline_s: Series[float] = pa.Field(gt=0.0)

    @pa.check("cpu_s", "memory_peak_mb")
    def usage_measured_or_unaccounted(cls, values):
        return measured_or_unaccounted(values)

    class Config:
        strict = True
        coerce = True


class EpisodeSnapshots(pa.DataFrameModel):
    """Workspace snapshots of agent episodes (``Episode.snapshots``: ``AgentConfig.snapshot_every``), one row per
    snapshot, linked to their ``Steps`` rows by (group_id, sample_idx): ``archive`` is the workspace as a tar after
    turn ``turn`` (-1: before the first). The agent eval keeps its failed episodes' (``agent_eval_snapshots``, at most
    ``snapshot_keep_mb``); ``posttrain replay`` shows their diffs, ``posttrain.agent.rollback`` restarts from one."""

    env_id: Series[str]
    group_id: Series[str]
    sample_idx: Series[int] = pa.Field(ge=0)
    turn: Series[int] = pa.Field(ge=-1)
    archive: Series[bytes]

    class Config:
        strict = True
        coerce = True


ADMISSION_STATUSES = ("pass", "fail", "infra", "skipped", "not_applicable", "reported")


class AdmissionDetails(AdmissionReport):
    """The admission report plus each row's status, reason code and measured value (``posttrain.admission.report``):
    what ``posttrain admit`` writes and MLflow stores."""

    status: Series[str] = pa.Field(isin=list(ADMISSION_STATUSES))
    code: Series[str]
    value: Series[float] = pa.Field(nullable=True)  # mutation score, pass-rate gap, ...; NaN: the check has none


class AdmissionCheckStats(pa.DataFrameModel):
    """Per admission check: envs, rows by status, pass rate among judged rows, mean value, wall seconds (NaN: none)."""

    check: Series[str] = pa.Field(unique=True)
    envs: Series[int] = pa.Field(ge=0)
    passed_rows: Series[int] = pa.Field(ge=0, alias="pass")
    fail: Series[int] = pa.Field(ge=0)
    infra: Series[int] = pa.Field(ge=0)
    skipped: Series[int] = pa.Field(ge=0)
    not_applicable: Series[int] = pa.Field(ge=0)
    reported: Series[int] = pa.Field(ge=0)
    pass_rate: Series[float] = pa.Field(nullable=True, ge=0.0, le=1.0)
    value_mean: Series[float] = pa.Field(nullable=True)
    seconds: Series[float] = pa.Field(nullable=True, ge=0.0)

    class Config:
        strict = True
        coerce = True
