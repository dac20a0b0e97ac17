"""The lines an RL run prints while it runs: where to open its MLflow run, then per policy version v_k one line for
the iteration that trained it and one for its evaluation (``run_summary`` prints the table at the end).

Each line is made from the metrics dict the iteration logs to MLflow (``tracking.metrics.iteration_metrics`` plus
what the tracking task adds), so an iteration an earlier execution logged is shown from what its nested run holds. A
part whose metrics are missing is left out: no eval line for a version that was not evaluated, no single-turn reward
when the suite has agent envs only, no refill counts without dynamic sampling, no stage that took no time. Plain
text, one line per event (no ANSI codes, no carriage returns): a terminal and a log file (``pyflyte run > run.log``, a
pod's log) read the same, and ``write_lines`` writes each line with one write and a flush.

Example:
    >>> metrics = {"reward/samples": 128, "reward/mean": 0.41, "reward/learnable_fraction": 0.59375,
    ...            "rollout/prompts": 32, "time/sample_s": 0.52, "time/reward_s": 1.6, "time/update_s": 0.94,
    ...            "time/eval_score_s": 0.0, "time/iteration_s": 3.21}
    >>> print(iteration_line(7, metrics))
    v7  reward 0.410  learnable 19/32  |  sample 0.5s  reward 1.6s  update 0.9s  |  iteration 3.2s
    >>> print(eval_line(10, {"eval/pass_at_1": 0.553, "eval/pass_at_1_sampled": 0.386, "eval/envs": 103}))
    v10 eval  greedy 0.553  sampled 0.386  (103 envs)
    >>> print(mlflow_line("ab12", "1", "posttrain", "sqlite:////w/mlflow.db", local_default="sqlite:////w/mlflow.db"))
    MLflow run ab12 (experiment posttrain): make mlflow-ui, then open http://127.0.0.1:5000/#/experiments/1/runs/ab12
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import TextIO

from posttrain.tracking.metrics import STAGE_TIMES

LOCAL_UI = "http://127.0.0.1:5000"  # where `make mlflow-ui` serves the UI
RESUMED = "(resumed: logged by an earlier execution)"

Metrics = Mapping[str, float]


def version_lines(version: int, metrics: Metrics, resumed: bool = False) -> list[str]:
    """What policy version v_k prints: the line of the iteration that trained it (none for v_0, the starting policy),
    then its evaluation's (none when it was not evaluated); ``resumed``: an earlier execution logged them.

    >>> version_lines(0, {"eval/pass_at_1": 0.25, "eval/envs": 12}, resumed=True)
    ['v0 eval  greedy 0.250  (12 envs)  (resumed: logged by an earlier execution)']
    >>> len(version_lines(3, {"time/update_s": 2.0}))   # trained, not evaluated
    1
    """
    lines = [iteration_line(version, metrics)] if version > 0 else []
    evaluation = eval_line(version, metrics)
    lines += [evaluation] if evaluation is not None else []
    return [f"{line}  {RESUMED}" for line in lines] if resumed else lines


def iteration_line(version: int, metrics: Metrics) -> str:
    """The iteration that trained v_k: its rollout's mean reward and learnable groups (single-turn tier), the agent
    tier's mean reward and solve rate, then each stage's wall seconds and the iteration's.

    >>> print(iteration_line(2, {"agent/episodes": 8, "agent/reward_mean": 0.3, "agent/solve_rate": 0.25,
    ...                          "time/agent_s": 41.0, "time/update_s": 9.25}))
    v2  agent reward 0.300  solved 0.250  |  agent 41.0s  update 9.2s
    """
    parts = [f"v{version}", *_rollout(metrics), *_agent(metrics)]
    times = [f"{label} {metrics[key]:.1f}s" for label, key in STAGE_TIMES.items() if metrics.get(key)]
    total = [f"iteration {metrics['time/iteration_s']:.1f}s"] if metrics.get("time/iteration_s") else []
    return "  |  ".join(part for part in ("  ".join(parts), "  ".join(times), *total) if part)


def _rollout(metrics: Metrics) -> list[str]:
    """The single-turn rollout's parts, when it had samples: mean reward, learnable groups, infra errors."""
    if not metrics.get("reward/samples"):
        return []
    parts = [f"reward {metrics['reward/mean']:.3f}", *_learnable(metrics)]
    return parts + _infra(metrics.get("reward/infra_errors"))


def _learnable(metrics: Metrics) -> list[str]:
    """Groups with reward variance (what a group-relative advantage learns from) of the groups sampled. With dynamic
    sampling they are counted exactly and its target and refill rounds follow; without, the count is the learnable
    fraction of the groups with a usable sample, times the groups (exact unless a group had none).

    >>> _learnable({"rollout/prompts": 10, "rollout/learnable_groups": 5, "rollout/target_groups": 4,
    ...             "rollout/resample_rounds": 1})
    ['learnable 5/10 (target 4, 1 refill round)']
    """
    groups = int(metrics.get("rollout/prompts", 0))
    if "rollout/learnable_groups" in metrics:
        rounds = int(metrics.get("rollout/resample_rounds", 0))
        refills = f", {_count(rounds, 'refill round')}" if rounds else ""
        target = f" (target {int(metrics.get('rollout/target_groups', 0))}{refills})"
        return [f"learnable {int(metrics['rollout/learnable_groups'])}/{groups}{target}"]
    if "reward/learnable_fraction" in metrics and groups:
        return [f"learnable {round(metrics['reward/learnable_fraction'] * groups)}/{groups}"]
    return []


def _agent(metrics: Metrics) -> list[str]:
    """The agent tier's rollout, when it had episodes: mean (shaped) reward, solve rate, infra errors."""
    if not metrics.get("agent/episodes"):
        return []
    parts = [f"agent reward {metrics['agent/reward_mean']:.3f}", f"solved {metrics['agent/solve_rate']:.3f}"]
    return parts + _infra(metrics.get("agent/infra_errors"))


def _infra(count: float | None) -> list[str]:
    return [_count(count, "infra error")] if count else []


def _count(n: float, noun: str) -> str:
    return f"{int(n)} {noun}{'' if int(n) == 1 else 's'}"


def eval_line(version: int, metrics: Metrics) -> str | None:
    """v_k's evaluation: greedy and sampled pass@1 over the eval envs (both tiers), the envs, infra errors and the
    envs that flipped since the previous evaluation; the agent tier's greedy solve rate. None when not evaluated.

    >>> print(eval_line(4, {"eval/pass_at_1": 0.5, "eval/envs": 12, "eval/infra_errors": 1, "eval/flips/fixed": 2,
    ...                     "eval/flips/broken": 0, "agent_eval/episodes": 4, "agent_eval/solve_rate": 0.25}))
    v4 eval  greedy 0.500  (12 envs, 1 infra error, 2 fixed, 0 broken)  agent solved 0.250 (4 episodes)
    >>> eval_line(5, {"reward/mean": 0.5}) is None
    True
    """
    if "eval/pass_at_1" not in metrics:
        return None
    parts = [f"v{version} eval", f"greedy {metrics['eval/pass_at_1']:.3f}"]
    if "eval/pass_at_1_sampled" in metrics:
        parts.append(f"sampled {metrics['eval/pass_at_1_sampled']:.3f}")
    counts = [_count(metrics.get("eval/envs", 0), "env"), *_infra(metrics.get("eval/infra_errors"))]
    if "eval/flips/fixed" in metrics:
        counts += [f"{int(metrics['eval/flips/fixed'])} fixed", f"{int(metrics.get('eval/flips/broken', 0))} broken"]
    parts.append(f"({', '.join(counts)})")
    if metrics.get("agent_eval/episodes"):
        parts.append(f"agent solved {metrics['agent_eval/solve_rate']:.3f} "
                     f"({_count(metrics['agent_eval/episodes'], 'episode')})")
    return "  ".join(parts)


def mlflow_line(run_id: str, experiment_id: str, experiment: str, tracking_uri: str, local_default: str,
                resumed: bool = False) -> str:
    """Where to open the run: an http(s) tracking server serves its own UI; any other store (sqlite, a database, a
    folder) is opened by ``make mlflow-ui``, told the store's URI unless it is ``local_default`` (what
    ``make mlflow-ui`` opens by default from here).

    >>> print(mlflow_line("ab12", "3", "posttrain", "https://mlflow.example.com/", local_default="", resumed=True))
    MLflow run ab12 (experiment posttrain, resumed): open https://mlflow.example.com/#/experiments/3/runs/ab12
    >>> print(mlflow_line("ab12", "1", "posttrain", "sqlite:////tmp/m.db", local_default="sqlite:////w/mlflow.db"))
    MLflow run ab12 (experiment posttrain): MLFLOW_TRACKING_URI=sqlite:////tmp/m.db make mlflow-ui, then open \
http://127.0.0.1:5000/#/experiments/1/runs/ab12
    """
    head = f"MLflow run {run_id} (experiment {experiment}{', resumed' if resumed else ''})"
    page = f"#/experiments/{experiment_id}/runs/{run_id}"
    if tracking_uri.startswith(("http://", "https://")):
        return f"{head}: open {tracking_uri.rstrip('/')}/{page}"
    store = "" if tracking_uri == local_default else f"MLFLOW_TRACKING_URI={tracking_uri} "
    return f"{head}: {store}make mlflow-ui, then open {LOCAL_UI}/{page}"


def write_lines(lines: Iterable[str], stream: TextIO | None = None) -> None:
    """Each line to ``stream`` (default stdout) with one write and a flush: it shows as the event happens, and a log
    that interleaves other writers never splits it."""
    stream = stream or sys.stdout
    for line in lines:
        stream.write(f"{line}\n")
        stream.flush()
