"""The update's input: the scored table gains an ``advantage`` column, and its rows become ``TrainSample``s.

``with_advantages`` is the first step of the update stage: it runs ``TrainConfig.advantage_estimator`` over the
trainable rows (infra failures excluded; they keep a NaN advantage) and returns a ``TrainRows`` table, which is
also what MLflow logs. ``train_samples`` decodes trainable rows into what ``PolicyTrainer.train_on`` consumes.

The estimator sees one reward per episode: an agent episode whose context was compressed has one row per context
window (``AgentScored``), all with the episode's reward; the estimate is made over episodes, (group_id,
sample_idx), and every window of an episode gets its episode's advantage. Rows with a ``loss_mask`` (agent windows)
train only their model tokens; a mixed table (single-turn rows beside agent rows) leaves it empty on the former.

Example:
    >>> import pandas as pd
    >>> from posttrain.config import TrainConfig
    >>> row = {"env_id": "demo/add_1", "group_id": "it1/demo/add_1", "sample_idx": 0, "policy_version": 0,
    ...        "prompt": "p", "completion": "c", "prompt_token_ids": "[1, 5]", "completion_token_ids": "[7, 2]",
    ...        "behavior_logprobs": "[-0.1, -0.2]", "temperature": 0.6, "steps": 1, "tool_calls": 0, "finish_reason": "stop",
    ...        "tokens": 2, "reward": 1.0, "compiled": True, "tests_passed": 1, "tests_total": 1, "exit_code": 0,
    ...        "timed_out": False, "infra_error": "", "sandbox_ms": 5.0, "sandbox_cpu_s": 0.02,
    ...        "sandbox_memory_peak_mb": 3.5, "signals": '{"tests": 1.0}'}
    >>> scored = pd.DataFrame([row, {**row, "sample_idx": 1, "reward": 0.0},
    ...                        {**row, "sample_idx": 2, "infra_error": "sandbox did not start"}])
    >>> rows = with_advantages(scored, TrainConfig(advantage_eps=0.0))
    >>> rows["advantage"].tolist()
    [1.0, -1.0, nan]
    >>> train_samples(rows.iloc[:2])[1]
    TrainSample(prompt_token_ids=[1, 5], completion_token_ids=[7, 2], behavior_logprobs=[-0.1, -0.2], \
advantage=-1.0, group_id='it1/demo/add_1', loss_mask=None, temperature=0.6)

An episode with two windows counts once in its group:
    >>> agent = pd.DataFrame([{**row, "window": 0}, {**row, "window": 1}, {**row, "sample_idx": 1, "reward": 0.0,
    ...                                                                     "window": 0}])
    >>> with_advantages(agent, TrainConfig(advantage_eps=0.0))["advantage"].tolist()
    [1.0, 1.0, -1.0]
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from posttrain.config import TrainConfig
from posttrain.reward import trainable_rows
from posttrain.schemas import TrainRows, decode_floats, decode_ints
from posttrain.training.algorithms import get_advantage_estimator


@dataclass
class TrainSample:
    """One scored rollout with its advantage, as the trainer consumes it."""

    prompt_token_ids: list[int]  # includes the BOS token
    completion_token_ids: list[int]  # includes EOS when the generation finished
    behavior_logprobs: list[float]  # one per completion token, from the sampler (vLLM), at ``temperature``
    advantage: float
    group_id: str  # the samples of one env prompt; a group whose advantages are all 0 is skipped
    loss_mask: list[int] | None = None  # one 0/1 per completion token (agent windows); None: all trained
    temperature: float = 1.0  # the sampling temperature: the trainer divides its logits by it (0, greedy: by 1)


def with_advantages(scored: pd.DataFrame, cfg: TrainConfig) -> pd.DataFrame:
    """``scored`` (a ``Scored`` table) plus ``advantage``: validated ``TrainRows``, same rows in the same order."""
    estimate = get_advantage_estimator(cfg.advantage_estimator)
    rows = scored.reset_index(drop=True)
    usable = trainable_rows(rows)
    rows["advantage"] = float("nan")
    if len(usable):
        first = usable["window"].fillna(0) == 0 if "window" in usable else pd.Series(True, index=usable.index)
        episodes = usable[first]  # a single-turn row, or an agent episode's first window
        advantages = estimate(episodes["reward"].astype(float).tolist(), episodes["group_id"].astype(str).tolist(),
                              cfg)
        rows.loc[episodes.index, "advantage"] = advantages.tolist()
        later = usable[~first]  # later windows: their episode's advantage
        of_episode = dict(zip(zip(episodes["group_id"], episodes["sample_idx"]), advantages.tolist()))
        rows.loc[later.index, "advantage"] = [of_episode[key] for key in zip(later["group_id"], later["sample_idx"])]
    return TrainRows.validate(rows)


def train_samples(rows: pd.DataFrame) -> list[TrainSample]:
    """Decode trainable ``TrainRows`` rows (the caller excludes infra failures) into ``TrainSample``s."""
    return [
        TrainSample(
            prompt_token_ids=decode_ints(row.prompt_token_ids),
            completion_token_ids=decode_ints(row.completion_token_ids),
            behavior_logprobs=decode_floats(row.behavior_logprobs),
            advantage=float(row.advantage),
            group_id=str(row.group_id),
            loss_mask=_loss_mask(row),
            temperature=float(row.temperature),
        )
        for row in rows.itertuples()
    ]


def _loss_mask(row) -> list[int] | None:
    mask = getattr(row, "loss_mask", None)
    return decode_ints(mask) if isinstance(mask, str) and mask else None
