"""Scored rollout rows -> the update's training samples (infra failures already excluded by the caller).

Example:
    >>> import pandas as pd
    >>> row = {"prompt_token_ids": "[1, 5]", "completion_token_ids": "[7, 2]", "behavior_logprobs": "[-0.1, -0.2]",
    ...        "reward": 1.0, "group_id": "it1/demo/add_1"}
    >>> samples_from_scored(pd.DataFrame([row]))[0].completion_token_ids
    [7, 2]
"""

from __future__ import annotations

import pandas as pd

from posttrain.schemas import decode_floats, decode_ints
from posttrain.training.trainer import Sample


def samples_from_scored(scored: pd.DataFrame) -> list[Sample]:
    return [
        Sample(
            prompt_token_ids=decode_ints(row.prompt_token_ids),
            completion_token_ids=decode_ints(row.completion_token_ids),
            behavior_logprobs=decode_floats(row.behavior_logprobs),
            reward=float(row.reward),
            group_id=str(row.group_id),
        )
        for row in scored.itertuples()
    ]
