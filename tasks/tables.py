"""Content-addressed tables: ``Table[Schema]`` is ``DataFrame[Schema]`` whose Flyte literal carries a digest of the
rows (``HashMethod``), so a cached task keys on what a table holds, not on the random parquet URI it was offloaded to
(a new one on every run, which made every rerun miss the cache).

Every ``DataFrame[Schema]`` that crosses a task boundary is validated against its pandera model by
``ValidatingTransformer``: the pandera plugin's transformer without the HTML report it renders for every table (a
great_tables page, built even where decks are off and then dropped). That report cost ~0.15 s per table, half of a
table's way through a task boundary, and a demo iteration passes five tables.

Example:
    >>> import pandas as pd
    >>> a = pd.DataFrame({"env_id": ["a", "b"], "reward": [0.0, 1.0]})
    >>> table_digest(a) == table_digest(a.copy()), table_digest(a) == table_digest(a.iloc[::-1])
    (True, False)
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, TypeVar

import pandas as pd
import pandera.typing
from flytekit import FlyteContext, HashMethod
from flytekit.extend import TypeEngine
from flytekit.models.literals import Literal
from flytekit.models.types import LiteralType
from flytekitplugins.pandera import PanderaPandasTransformer
from pandera.typing import DataFrame

Schema = TypeVar("Schema")


def table_digest(table: pd.DataFrame) -> str:
    """SHA-256 over the column names, their dtypes and pandas' hash of every row (index included, so order counts)."""
    digest = hashlib.sha256(json.dumps([[str(c), str(t)] for c, t in table.dtypes.items()]).encode())
    digest.update(pd.util.hash_pandas_object(table, index=True).to_numpy().tobytes())
    return digest.hexdigest()


Table = Annotated[DataFrame[Schema], HashMethod(table_digest)]


class ValidatingTransformer(PanderaPandasTransformer):
    """A ``DataFrame[Schema]`` to and from its Flyte literal (parquet), validated by the pandera model, raising
    pandera's error (it names each failing column and check) on a bad table; no HTML report.

    A table converted here by a local run is not validated again when the next task reads it back.
    """

    def to_literal(self, ctx: FlyteContext, python_val: pd.DataFrame, python_type: type,
                   expected: LiteralType) -> Literal:
        if not isinstance(python_val, pd.DataFrame):
            raise TypeError(f"a task returned {type(python_val).__name__} where a pandas DataFrame is expected")
        schema, _ = self._get_pandera_schema(python_type)
        literal = self._sd_transformer.to_literal(ctx, schema.validate(python_val, lazy=True), pd.DataFrame, expected)
        self._VALIDATION_MEMO.add((literal.scalar.structured_dataset.uri, schema.name))
        return literal

    def to_python_value(self, ctx: FlyteContext, lv: Literal, expected_python_type: type) -> pd.DataFrame:
        table = self._sd_transformer.to_python_value(ctx, lv, pd.DataFrame)
        schema, _ = self._get_pandera_schema(expected_python_type)
        if (lv.scalar.structured_dataset.uri, schema.name) in self._VALIDATION_MEMO:
            return table
        return schema.validate(table, lazy=True)


TypeEngine.register_additional_type(ValidatingTransformer(), pandera.typing.DataFrame, override=True)
