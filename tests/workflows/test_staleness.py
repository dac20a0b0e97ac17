"""Bounded staleness as a Flyte DAG: with ``max_staleness = 1`` no rollout waits for the update just before it, and
every sample an update trains on comes from at most one version back; with 0 the loop is on-policy as before. The
same compiled DAG shows the tiers apart: no single-turn node waits for the agent node of its version, nor the
reverse."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from posttrain.config import EvalConfig, LoopConfig, RolloutConfig


def compiled_iterations(cfg: LoopConfig, policy_dir: Path, envs: pd.DataFrame | None = None) -> list:
    """The nodes ``iterate`` compiles to on a cluster (its dynamic job spec) for ``envs`` (an Envs table; default
    empty), without running any of them."""
    from flytekit.configuration import Image, ImageConfig, SerializationSettings
    from flytekit.core.context_manager import ExecutionState, FlyteContextManager
    from flytekit.core.type_engine import TypeEngine
    from flytekit.models.literals import LiteralMap
    from flytekit.types.directory import FlyteDirectory

    from posttrain.schemas import Envs, empty
    from tasks.policy import PolicyDir
    from tasks.tables import Table
    from workflows.rl_loop import iterate

    settings = SerializationSettings(image_config=ImageConfig(default_image=Image(name="default", fqn="x", tag="y")))
    ctx = FlyteContextManager.current_context().with_serialization_settings(settings)
    with FlyteContextManager.with_context(ctx) as ctx:
        state = ctx.execution_state.with_params(mode=ExecutionState.Mode.TASK_EXECUTION)
        with FlyteContextManager.with_context(ctx.with_execution_state(state)) as ctx:
            inputs = {"cfg": (cfg, LoopConfig), "envs": (empty(Envs) if envs is None else envs, Table[Envs]),
                      "policy": (FlyteDirectory(str(policy_dir)), PolicyDir), "run_id": ("run", str)}
            literals = {name: TypeEngine.to_literal(ctx, value, kind, TypeEngine.to_literal_type(kind))
                        for name, (value, kind) in inputs.items()}
            iterate._wf = None  # flytekit keeps a dynamic's compiled workflow per task object: compile afresh
            return iterate.dispatch_execute(ctx, LiteralMap(literals=literals)).nodes


def rollouts_and_updates(nodes: list) -> tuple[list, list]:
    """The nodes that sample rollouts (``sample`` with rollout=True) and the update nodes, in iteration order."""
    def task(node) -> str:
        return node.task_node.reference_id.name if node.task_node else ""

    def rolls_out(node) -> bool:
        return any(b.var == "rollout" and b.binding.scalar.primitive.boolean for b in node.inputs)

    return ([n for n in nodes if task(n) == "tasks.rollout.sample" and rolls_out(n)],
            [n for n in nodes if task(n) == "tasks.update.update"])


@pytest.mark.integration
@pytest.mark.parametrize("staleness,cooldown", [(0, 0), (1, 0), (2, 0), (0, 3), (2, 3)])
def test_a_rollout_never_waits_for_the_updates_it_may_lag_behind(tmp_path, staleness, cooldown):
    """With ``rollout.settled_cooldown`` each rollout also reads the scores of the one before it (which envs
    settled): that wait is for the reward, never for an update it may lag behind."""
    (tmp_path / "policy").mkdir()
    cfg = LoopConfig(iterations=4, max_staleness=staleness, eval=EvalConfig(every=0),
                     rollout=RolloutConfig(settled_cooldown=cooldown))
    nodes = compiled_iterations(cfg, tmp_path / "policy")
    rollouts, updates = rollouts_and_updates(nodes)
    rewards = [n for n in nodes if n.task_node and n.task_node.reference_id.name == "tasks.reward.reward"]
    assert len(rollouts) == len(updates) == len(rewards) == 4
    for k, rollout in enumerate(rollouts):  # iteration k's rollout trains v_{k+1}; update j makes v_{j+1}
        waits_for = {j for j, update in enumerate(updates) if update.id in rollout.upstream_node_ids}
        assert waits_for == ({k - staleness - 1} if k - staleness - 1 >= 0 else set()), (k, waits_for)
        reads = {j for j, scores in enumerate(rewards) if scores.id in rollout.upstream_node_ids}
        assert reads == ({k - 1} if cooldown and k else set()), (k, reads)


@pytest.mark.e2e
@pytest.mark.slow
def test_with_staleness_one_each_update_trains_on_samples_one_version_back(stale_tiers_run):
    """``conftest.stale_tiers_run``: three iterations with ``max_staleness = 1``, both tiers; every trained row, of
    either tier, comes from the version the staleness bound names."""
    by_iteration = stale_tiers_run.iterations()
    for k, expected in ((1, 0.0), (2, 1.0), (3, 1.0)):  # iteration k made v_k from v_{k-1}, sampled by v_{k-2}
        run = by_iteration[k]
        assert run.data.metrics["train/staleness_max"] == expected, (k, run.data.metrics)
        table = stale_tiers_run.table(run, "scored")
        assert set(table["policy_version"]) == {max(0, k - 2)}, k
        assert table["loss_mask"].notna().any(), k
        assert table["loss_mask"].isna().any(), k  # both tiers trained


@pytest.mark.integration
@pytest.mark.parametrize("staleness", [0, 1])
def test_the_single_turn_tier_never_waits_for_the_agent_tier(tmp_path, staleness):
    """Tier isolation in the DAG: with agent envs in the suite, each policy version gets ``sample`` and
    ``agent_sample`` nodes, and neither waits, directly or through other nodes, for the other tier's node of the same
    or a later version (only the update joins them): on a cluster each is its own pod, so long episodes never hold up
    the short groups of their version. Their throughput side is ``benchmarks/tiers.py``."""
    from posttrain.config import DEMO_SUITE
    from posttrain.envs.generators.agent_repo import specs
    from posttrain.envs.suite import load_suite
    from posttrain.envs.table import envs_to_table

    (tmp_path / "policy").mkdir()
    envs = envs_to_table([*load_suite(DEMO_SUITE).envs[:6], *specs()[:6]])
    cfg = LoopConfig(iterations=3, max_staleness=staleness, eval=EvalConfig(every=1))
    nodes = compiled_iterations(cfg, tmp_path / "policy", envs)
    by_id = {n.id: n for n in nodes}

    def task(node) -> str:
        return node.task_node.reference_id.name if node.task_node else ""

    def version(node) -> int:
        return next(b.binding.scalar.primitive.integer for b in node.inputs if b.var == "policy_version")

    def ancestors(node) -> set[str]:
        seen, todo = set(), list(node.upstream_node_ids)
        while todo:
            upstream = todo.pop()
            if upstream not in seen and upstream in by_id:
                seen.add(upstream)
                todo.extend(by_id[upstream].upstream_node_ids)
        return seen

    tiers = {"short": [n for n in nodes if task(n) == "tasks.rollout.sample"],
             "agent": [n for n in nodes if task(n) == "tasks.agent.agent_sample"]}
    assert len(tiers["short"]) == len(tiers["agent"]) >= cfg.iterations + 1
    joined = 0  # nodes that wait for an earlier version of the other tier: through the update both train
    for mine, other in (("short", "agent"), ("agent", "short")):
        for node in tiers[mine]:
            waits_for = {version(n) for n in tiers[other] if n.id in ancestors(node)}
            assert all(v < version(node) for v in waits_for), (mine, version(node), waits_for)
            joined += bool(waits_for)
    assert joined > 0  # the walk does see across tiers


@pytest.mark.e2e
@pytest.mark.slow
def test_with_a_settled_cooldown_no_rollout_picks_an_env_that_settled_in_the_two_before(stale_tiers_run):
    """``conftest.stale_tiers_run`` (12 single-turn envs, 2 a round, cooldown 2): an env whose group had no reward
    variance in iteration j is not rolled out in j+1 or j+2, and each iteration logs how many envs rested."""
    by_iteration = stale_tiers_run.iterations()
    groups = {}
    for k in (1, 2, 3):
        table = stale_tiers_run.table(by_iteration[k], "scored")
        single_turn = table[table["loss_mask"].isna()]
        groups[k] = single_turn.groupby("env_id")["reward"].nunique()
        assert len(groups[k]) == 2, k
    settled = {k: set(g[g == 1].index) for k, g in groups.items()}
    assert settled[1], groups  # the tiny policy's groups of 2 settle often: iteration 2 has envs to leave out
    for k in (2, 3):
        resting = set().union(*(settled[j] for j in range(max(1, k - 2), k)))
        assert not resting & set(groups[k].index), (k, resting, list(groups[k].index))
        assert by_iteration[k].data.metrics["rollout/resting_envs"] == len(resting), k
    assert by_iteration[1].data.metrics["rollout/resting_envs"] == 0
