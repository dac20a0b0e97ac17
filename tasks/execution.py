"""The name of the running Flyte execution, unique also for local runs (which are all called "local")."""

from __future__ import annotations

import time

from flytekit import current_context


def execution_name() -> str:
    name = str(current_context().execution_id.name)
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}" if name == "local" else name
