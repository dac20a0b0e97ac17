"""An agent episode step by step, for a person: what the model wrote, each tool call with its arguments, what it
gave back, and how the workspace changed since the snapshot before (``posttrain replay RUN_ID``).

The tables are an iteration run's in MLflow (``load_tables``): ``agent_eval_steps`` (``Steps``: the turn's message
and each call's observation, clipped), ``agent_eval_snapshots`` (``EpisodeSnapshots``: the workspace tars of the
failed eval episodes, when ``agent.snapshot_every`` is on) and ``eval_results`` (which episodes failed). A snapshot
is read as ``{path: text}`` (``workspace_files``; a binary file is named only) and two are compared as a unified
diff (``workspace_diff``). Plain text, for a terminal and a log alike.

Example:
    >>> import io, tarfile
    >>> def tar(files):
    ...     out = io.BytesIO()
    ...     with tarfile.open(fileobj=out, mode="w") as archive:
    ...         for path, data in files.items():
    ...             info = tarfile.TarInfo(path)
    ...             info.size = len(data)
    ...             archive.addfile(info, io.BytesIO(data))
    ...     return out.getvalue()
    >>> before, after = tar({"./a.py": b"x = 1\\n", "./logo.png": b"\\x89PNG\\x00"}), tar({"./a.py": b"x = 2\\n"})
    >>> workspace_files(before)
    {'a.py': 'x = 1\\n', 'logo.png': None}
    >>> print("\\n".join(workspace_diff(workspace_files(before), workspace_files(after))))
    --- a/a.py
    +++ b/a.py
    @@ -1 +1 @@
    -x = 1
    +x = 2
    deleted: logo.png (binary)
"""

from __future__ import annotations

import difflib
import io
import json
import tarfile
import tempfile
from pathlib import Path

import pandas as pd

from posttrain import tracking
from posttrain.agent.table import clip
from posttrain.evaluation.greedy import group_decoding

TABLES = {"steps": "agent_eval_steps", "snapshots": "agent_eval_snapshots", "results": tracking.EVAL_RESULTS}
OUTPUT_CHARS = 600  # characters of a call's observation shown per step


def workspace_files(archive: bytes) -> dict[str, str | None]:
    """The regular files of a workspace tar, path -> text (None: not UTF-8 text)."""
    files = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            if member.isfile():
                data = tar.extractfile(member).read()
                try:
                    files[member.name.removeprefix("./")] = None if b"\0" in data else data.decode()
                except UnicodeDecodeError:
                    files[member.name.removeprefix("./")] = None
    return dict(sorted(files.items()))


def workspace_diff(before: dict[str, str | None], after: dict[str, str | None]) -> list[str]:
    """Lines of a unified diff from ``before`` to ``after`` (``workspace_files``); binary files are named only."""
    lines = []
    for path in sorted(before.keys() | after.keys()):
        old, new = before.get(path), after.get(path)
        if path in before and path in after and old == new:
            continue
        if (path in before and old is None) or (path in after and new is None):
            change = "added" if path not in before else "deleted" if path not in after else "changed"
            lines.append(f"{change}: {path} (binary)")
            continue
        lines += [line.rstrip("\n") for line in difflib.unified_diff(
            (old or "").splitlines(True), (new or "").splitlines(True),
            "/dev/null" if path not in before else f"a/{path}", "/dev/null" if path not in after else f"b/{path}")]
    return lines


def episode_lines(steps: pd.DataFrame, snapshots: pd.DataFrame, group_id: str, sample_idx: int = 0) -> list[str]:
    """One episode of ``steps`` (``Steps``) turn by turn: the model's message, each call (tool, arguments, ok or
    exit code, output clipped to ``OUTPUT_CHARS``) and, where the turn was snapshotted (``snapshots``:
    ``EpisodeSnapshots``), the workspace diff since the snapshot before."""
    rows = steps[(steps.group_id == group_id) & (steps.sample_idx == sample_idx)].sort_values("step")
    if rows.empty:
        return [f"no steps of episode {group_id} sample {sample_idx}"]
    mine = snapshots[(snapshots.group_id == group_id) & (snapshots.sample_idx == sample_idx)]
    archives = dict(zip(mine.turn, mine.archive))
    last = workspace_files(archives[-1]) if -1 in archives else None
    lines = [f"episode {group_id} sample {sample_idx}: {rows.turn.nunique()} turns, {len(rows)} calls"]
    for turn, calls in rows.groupby("turn", sort=True):
        lines += ["", f"== turn {turn} ==", "model:", *_indented(calls.message.iloc[0])]
        for call in calls.itertuples():
            outcome = call.error or ("ok" if call.ok else "failed") + ("" if call.exit_code < 0 else
                                                                       f", exit {call.exit_code}")
            lines += [f"call: {call.tool or '(none)'} {_arguments(call.arguments)} -> {outcome}",
                      "output:", *_indented(clip(call.observation, OUTPUT_CHARS))]
        if turn in archives:
            files = workspace_files(archives[turn])
            diff = workspace_diff(last, files) if last is not None else [f"(no earlier snapshot) {len(files)} files"]
            lines += ["workspace:", *_indented("\n".join(diff) or "(unchanged)")]
            last = files
    return lines


def replay_lines(tables: dict[str, pd.DataFrame], run_id: str, episode: str | None = None,
                 sample_idx: int = 0) -> list[str]:
    """What ``posttrain replay`` prints: ``episode`` (a group id) step by step, or without one the run's failed eval
    episodes, one line each, and how to replay one."""
    steps, snapshots = tables["steps"], tables["snapshots"]
    if steps.empty:
        return [f"run {run_id} logged no agent_eval_steps table: pass the run of an evaluated version (an iteration "
                f"run, a child of the loop's run)"]
    if episode is not None:
        return episode_lines(steps, snapshots, episode, sample_idx)
    failed = failed_episodes(steps, tables["results"])
    if failed.empty:
        return [f"run {run_id}: no failed eval episode ({steps.groupby(['group_id', 'sample_idx']).ngroups} ran)"]
    kept = set(zip(snapshots.group_id, snapshots.sample_idx))
    return [f"run {run_id}: {len(failed)} failed eval episodes",
            *(f"  {row.group_id}  sample {row.sample_idx}  {row.calls} calls"
              f"{'  snapshots' if (row.group_id, row.sample_idx) in kept else ''}" for row in failed.itertuples()),
            f"replay one: posttrain replay {run_id} --episode GROUP_ID [--sample N]"]


def failed_episodes(steps: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    """The eval episodes of ``steps`` that did not pass, by their own ``results`` row (``EvalResults``: env, decoding
    and sample; an episode's decoding is its group id's), one row each: group_id, sample_idx, env_id, calls.

    >>> steps = pd.DataFrame({"group_id": ["eval-v2/a", "eval-sampled-v2/a", "eval-sampled-v2/a"],
    ...                       "sample_idx": [0, 0, 1], "env_id": "a"})
    >>> results = pd.DataFrame({"env_id": "a", "decoding": ["greedy", "sampled", "sampled"], "sample_idx": [0, 0, 1],
    ...                         "passed": [True, False, True]})
    >>> failed_episodes(steps, results).values.tolist()
    [['eval-sampled-v2/a', 0, 'a', 1]]
    """
    failing = results[~results.passed.astype(bool)]
    failed = set(zip(failing.env_id, failing.decoding, failing.sample_idx.astype(int)))
    own = [(env_id, group_decoding(group), int(idx)) in failed
           for env_id, group, idx in zip(steps.env_id, steps.group_id, steps.sample_idx)]
    rows = steps[pd.Series(own, index=steps.index, dtype=bool)]
    return (rows.groupby(["group_id", "sample_idx", "env_id"]).size().rename("calls").reset_index())


def load_tables(run_id: str) -> dict[str, pd.DataFrame]:
    """The iteration run's tables a replay reads, by ``TABLES`` key; one the run did not log is empty."""
    client = tracking.client()
    tables = {}
    with tempfile.TemporaryDirectory() as tmp:
        logged = {Path(a.path).name for a in client.list_artifacts(run_id, "tables")}
        for key, name in TABLES.items():
            if f"{name}.parquet" in logged:
                tables[key] = pd.read_parquet(client.download_artifacts(run_id, f"tables/{name}.parquet", tmp))
            else:
                tables[key] = pd.DataFrame(columns=["group_id", "sample_idx", "env_id", "turn", "archive", "passed"])
    return tables


def _arguments(arguments: str) -> str:
    return clip(json.dumps(json.loads(arguments or "{}"), ensure_ascii=False), 300)


def _indented(text: str) -> list[str]:
    return ["    " + line for line in (text.splitlines() or [""])]
