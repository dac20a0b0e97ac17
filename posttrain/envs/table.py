"""Admitted envs as a table (``schemas.Envs``) so they can cross Flyte task boundaries, and back.

Example:
    >>> from posttrain.envs.spec import EnvSpec
    >>> env = EnvSpec(id="demo/add_1", prompt="p", verifier={"kind": "python_tests"}, reference="r", split="eval")
    >>> table = envs_to_table([env])
    >>> envs_from_table(table)["demo/add_1"].split
    'eval'
"""

from __future__ import annotations

import pandas as pd

from posttrain.envs.spec import EnvSpec
from posttrain.schemas import Envs


def envs_to_table(envs: list[EnvSpec]) -> pd.DataFrame:
    rows = [{"env_id": e.id, "split": e.split, "domain": e.domain, "difficulty": int(e.difficulty), "kind": e.kind,
             "spec_json": e.to_json()} for e in envs]
    return Envs.validate(pd.DataFrame(rows, columns=list(Envs.to_schema().columns)))


def envs_from_table(table: pd.DataFrame, split: str | None = None) -> dict[str, EnvSpec]:
    """Envs by id, in table order, optionally only one split."""
    rows = table if split is None else table[table["split"] == split]
    return {env_id: EnvSpec.from_json(text) for env_id, text in zip(rows["env_id"], rows["spec_json"])}
