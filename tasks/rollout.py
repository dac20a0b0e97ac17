"""Flyte tasks: everything that needs policy v_k in one vLLM engine lifetime, and the engine's release.

``sample`` decodes the eval split with v_k (when this version is evaluated: greedy, and sampled at the rollout
temperature) and rolls out iteration k+1 from v_k (unless v_k is the last version; or only a dynamic-sampling refill
round of it), on one engine: the process's live engine (``posttrain.rollout.live``), swapped to v_k in place. In a
local ``pyflyte run`` every task runs in one process and the engine serves the whole run (``warm_engine`` starts it
in the background while admission runs); in a task pod it ends with the task.
``release_engines`` (the live engine, the live trainer, ``posttrain.training.live``, and the live sandbox,
``posttrain.sandbox.live``) is the workflows' final step and failure handler.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, NamedTuple, Optional

from flytekit import FlyteContextManager, task
from flytekit.types.error import FlyteError

from posttrain.config import EvalConfig, LoopConfig, RolloutConfig
from posttrain.envs.table import envs_from_table
from posttrain.evaluation.greedy import decode_eval
from posttrain.memory import peak_memory
from posttrain.rollout import live, settled
from posttrain.rollout.collect import RolloutStats, rollout_with
from posttrain.rollout.context import context_length
from posttrain.sandbox import live as live_sandbox
from posttrain.schemas import EnvHistory, Envs, EvalTrajectories, Trajectories, empty
from posttrain.timing import timed
from posttrain.tracking.metrics import rollout_metrics, sample_times
from posttrain.training import live as live_trainer
from tasks.policy import PolicyDir
from tasks.resources import CACHE_VERSION, stage
from tasks.tables import Table

Sampled = NamedTuple("Sampled", [("trajectories", Table[Trajectories]), ("metrics", dict[str, float]),
                                 ("eval_trajectories", Table[EvalTrajectories]), ("times", dict[str, float])])


@task(cache=True, cache_version=CACHE_VERSION, **stage("rollout"))
def sample(policy: PolicyDir, envs: Table[Envs], cfg: RolloutConfig, eval_cfg: EvalConfig, policy_version: int,
           rollout: bool, evaluate: bool, env_ids: Optional[list[str]] = None, seed_offset: int = 0,
           iteration: Optional[int] = None, history: Optional[Table[EnvHistory]] = None) -> Sampled:
    """Policy v_k (``policy_version``): its eval decode (greedy and sampled) if ``evaluate``, the rollout of iteration
    k+1 if ``rollout`` (empty tables otherwise). ``metrics``: the rollout's (``rollout/*``, logged with the iteration
    it trains), with the times of the engine start or swap, both decodes and the whole task; ``times``: where this
    task's time went (``time/*``, logged with v_k: ``tracking.metrics.sample_times``).

    A dynamic-sampling refill round names its envs (``env_ids``) and how many samples the iteration drew before it
    (``seed_offset``, so its samples get seeds of their own). ``iteration``: the one whose rollout this is, when not
    k+1 (bounded staleness: iteration k+1 samples from an older version, ``posttrain.rollout.staleness``).

    With ``rollout.settled_cooldown``: ``history`` (written by the previous iteration's ``reward``) says which envs
    settled lately; the pick leaves them out (``posttrain.rollout.settled``).
    """
    clock = timed()
    specs = envs_from_table(envs)
    with engine_lifetime(), peak_memory() as memory:
        policy_dir = policy.download()
        # before an engine starts: every completion fits in the context (rollout's, and the eval's when it decodes)
        context_length(policy_dir, cfg, {"eval.max_new_tokens": eval_cfg.max_new_tokens} if evaluate else None)
        engine, start_s, swap_s = live.acquire_timed(policy_dir, cfg, version=policy_version)
        with timed() as decode:
            eval_table = decode_eval(engine, specs, eval_cfg, cfg) if evaluate else empty(EvalTrajectories)
        for_iteration = policy_version + 1 if iteration is None else iteration
        rest = settled.resting(history, for_iteration, cfg.settled_cooldown) if env_ids is None else None
        table, stats = (rollout_with(engine, list(specs.values()), cfg, for_iteration, env_ids, seed_offset, rest)
                        if rollout else (empty(Trajectories), RolloutStats()))
    stats.engine_start_s, stats.engine_swap_s, stats.eval_seconds = start_s, swap_s, decode.seconds
    stats.wall_s, stats.memory_peak_mb = clock.seconds, memory.peak_mb
    return Sampled(trajectories=table, metrics=rollout_metrics(stats), eval_trajectories=eval_table,
                   times=sample_times(stats))


@task(cache=True, cache_version=CACHE_VERSION, **stage("track"))
def warm_engine(policy: PolicyDir, cfg: RolloutConfig, suite_digest: str) -> None:
    """Locally, start the live engine on v0 in the background: it is ready when the first ``sample`` needs it,
    its start-up overlapped with admission. In a task pod there is no later task to serve: nothing to do.

    Cached on (policy, rollout config, suite digest): a rerun, identical or resuming a killed run, finds it in the
    cache and starts no engine -- its admission is cached too, so there is nothing to overlap, and an identical rerun
    would never use the engine."""
    if in_process_run():
        live.prestart(policy.download(), cfg, version=0)


@task(**stage("track"))
def release_engines(cfg: LoopConfig, err: Optional[FlyteError] = None) -> None:
    """Stop the process's live vLLM engine, trainer and sandbox: the workflows' last step, and their failure handler
    (``err`` set)."""
    live.shutdown_all()
    live_trainer.shutdown()
    live_sandbox.shutdown()


@contextmanager
def engine_lifetime(*release: Callable[[], None]) -> Iterator[None]:
    """Keep what a task made live for the next task when every task runs in this process (local ``pyflyte run``):
    the vLLM engine (the default), DeepSpeed's trainer (``training.live.shutdown``), the sandbox backend
    (``sandbox.live.shutdown``); in a task pod, ``release`` them with the task. A background engine start
    (``warm_engine``) ends first: its imports must not race this task's (``live.settle``)."""
    live.settle()
    try:
        yield
    finally:
        if not in_process_run():
            for stop in release or (live.shutdown_all,):
                stop()


def in_process_run() -> bool:
    """Whether every task of this run executes in this process (a local ``pyflyte run``, or a test)."""
    return FlyteContextManager.current_context().execution_state.is_local_execution()

