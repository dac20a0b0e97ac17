"""The closed RL loop: admit -> (rollout -> reward -> update -> evaluate) x iterations, tracked in MLflow.

Run it locally (embedded Flyte, real vLLM/bwrap/DeepSpeed/MLflow):
    pyflyte run workflows/rl_loop.py rl_loop                      # the demo: 30 iterations
    pyflyte run workflows/rl_loop.py rl_smoke                     # 1 iteration, tiny sizes
    pyflyte run workflows/rl_loop.py rl_loop --cfg '{"iterations": 2, "suite": "my_suite/"}'

Policy versions: v0 is the starting policy; iteration k rolls out with v_{k-1} and trains v_k. Everything that needs
one policy version runs in one vLLM engine lifetime (``tasks.rollout.sample``): the evaluation of v_k and the
rollout of iteration k+1 from it. Locally every task runs in this process and one live engine serves the whole run,
swapped to each new version in place; ``release_engines`` stops it at the end, or when the run fails. Versions are
evaluated every ``eval.every`` (v0 and the last always): greedy and sampled pass@1. With ``rollout.dynamic_sampling``
the scored rollout passes through ``refill`` (DAPO): groups without reward variance are dropped and refilled by
further ``sample`` + ``reward`` rounds from the same version; off, the DAG is the one without it. With
``max_staleness`` s > 0 the rollout that trains v_{k+1} samples from v_{k-s} (``posttrain.rollout.staleness``) in a
node of its own: on a cluster it runs while the update that makes v_k trains.

Resume: every compute stage (admission, sample, reward, eval scoring, update) is cached by Flyte, keyed on content:
policies (``PolicyDir``) and tables (``tasks.tables.Table``) carry a digest, so the same inputs give the same key on
every run (an offloaded parquet or directory has a new random URI each time). Running the same command again after
an interrupted execution takes every finished stage from the cache (with ``FLYTE_SDK_LOGGING_LEVEL=20`` flytekit
logs ``Cache hit`` for each) and computes only the rest; an identical rerun of a finished one computes no stage and
starts no engine (``warm_engine`` is cached too). MLflow tracking is not cached but idempotent
(``tasks.track``): the rerun resumes the first execution's parent run (found by the run identity of config, suite
digest, starting policy digest and cache version), skips its finished iterations and registers no policy version
twice; ``--overwrite-cache`` recomputes every stage into a new parent run.
"""

from __future__ import annotations

from typing import NamedTuple

from flytekit import dynamic, workflow

from posttrain.config import LoopConfig
from posttrain.envs.table import envs_from_table
from posttrain.evaluation.greedy import evaluates
from posttrain.reward import RewardStats
from posttrain.rollout import dynamic_sampling
from posttrain.rollout.collect import RolloutStats
from posttrain.rollout.dynamic_sampling import DynamicSamplingStats
from posttrain.rollout.staleness import rollout_source
from posttrain.schemas import Envs, Scored
from tasks.admit import admit_suite, fingerprint_suite
from tasks.agent import agent_sample, join_results, join_scored
from tasks.evaluate import score_eval
from tasks.policy import PolicyDir, prepare_policy
from tasks.reward import add_round, reward
from tasks.rollout import release_engines, sample, warm_engine
from tasks.tables import Table
from tasks.track import finish_tracking, log_baseline, log_iteration, start_tracking
from tasks.update import update_node

Refilled = NamedTuple("Refilled", [("scored", Table[Scored]), ("rollout_stats", RolloutStats),
                                   ("reward_stats", RewardStats), ("dynamic", DynamicSamplingStats)])


@dynamic
def refill(policy: PolicyDir, envs: Table[Envs], cfg: LoopConfig, policy_version: int, scored: Table[Scored],
           rollout_stats: RolloutStats, reward_stats: RewardStats, rounds: int = 0, refilled: int = 0) -> Refilled:
    """DAPO dynamic sampling of the rollout from v_k (``policy_version``), given its ``scored`` rows so far (after
    ``rounds`` refill rounds that sampled ``refilled`` groups): while fewer than ``rollout.envs_per_iteration``
    groups are learnable and rounds are left, sample the missing number of unused train envs from v_k, score them
    and recurse; then keep only the learnable groups, and say what happened (``DynamicSamplingStats``)."""
    env_ids = dynamic_sampling.refill_envs(envs, scored, cfg.rollout, policy_version + 1, rounds)
    if not env_ids:
        kept, stats = dynamic_sampling.keep_learnable(scored, cfg.rollout.envs_per_iteration, rounds, refilled)
        return Refilled(scored=kept, rollout_stats=rollout_stats, reward_stats=reward_stats, dynamic=stats)
    more = sample(policy=policy, envs=envs, cfg=cfg.rollout, eval_cfg=cfg.eval, policy_version=policy_version,
                  rollout=True, evaluate=False, env_ids=env_ids, seed_offset=len(scored))
    rewarded = reward(trajectories=more.trajectories, envs=envs, sandbox=cfg.sandbox)
    joined = add_round(so_far=scored, so_far_rollout=rollout_stats, so_far_reward=reward_stats,
                       more=rewarded.scored, more_rollout=more.stats, more_reward=rewarded.stats)
    return refill(policy=policy, envs=envs, cfg=cfg, policy_version=policy_version, scored=joined.scored,
                  rollout_stats=joined.rollout_stats, reward_stats=joined.reward_stats, rounds=rounds + 1,
                  refilled=refilled + len(env_ids))


@dynamic
def iterate(cfg: LoopConfig, envs: Table[Envs], policy: PolicyDir, run_id: str) -> PolicyDir:
    """Unroll ``cfg.iterations`` RL iterations into a DAG: per policy version v_k, one ``sample`` node (evaluate v_k,
    roll out iteration k+1), then ``score_eval`` and ``reward`` (sandboxes), ``refill`` (dynamic sampling, when on)
    and ``update`` (v_{k+1}). A suite with agent envs adds the agent tier: per version one ``agent_sample`` node
    beside ``sample`` (its own pod on a cluster, so long episodes never hold up the single-turn groups), whose
    rewarded episodes join the update and whose eval rows join the version's results."""
    kinds = {spec.kind for spec in envs_from_table(envs).values()}
    single_turn, agents = kinds != {"agent"}, "agent" in kinds  # the single-turn tier runs unless all are agent envs
    reference = policy  # the frozen policy of the KL penalty (train.kl_coef)
    versions = [policy]  # v_0, v_1, ...: a rollout may sample from an older one (cfg.max_staleness)
    logged = None
    previous = None  # the results of the last evaluated version: per-env flips against it
    trained = None  # the rollout stats, rewards and update that made v_k: logged with v_k's evaluation
    for k in range(cfg.iterations + 1):
        # step 1. one engine lifetime for v_k: its eval decode (greedy and sampled), and the rollout of iteration k+1
        # (on-policy); with staleness s > 0 that rollout samples from v_{k-s} in its own node, which does not wait
        # for the update that makes v_k. The agent tier does the same for agent envs in nodes of its own.
        evaluated = evaluates(cfg.eval, k, last=cfg.iterations)
        source = rollout_source(k, cfg.max_staleness) if k < cfg.iterations else k
        here = evaluated or source == k
        sampled = sample(policy=policy, envs=envs, cfg=cfg.rollout, eval_cfg=cfg.eval, policy_version=k,
                         rollout=k < cfg.iterations and source == k, evaluate=evaluated) \
            if single_turn and here else None
        rollout = sampled if source == k else \
            sample(policy=versions[source], envs=envs, cfg=cfg.rollout, eval_cfg=cfg.eval, policy_version=source,
                   rollout=True, evaluate=False, iteration=k + 1) if single_turn else None
        agent_here = agent_sample(policy=policy, envs=envs, cfg=cfg.agent, sandbox=cfg.sandbox,
                                  rollout_cfg=cfg.rollout, policy_version=k, rollout=k < cfg.iterations and source == k,
                                  evaluate=evaluated) if agents and here else None
        agent_rollout = agent_here if source == k else \
            agent_sample(policy=versions[source], envs=envs, cfg=cfg.agent, sandbox=cfg.sandbox,
                         rollout_cfg=cfg.rollout, policy_version=source, rollout=True, evaluate=False,
                         iteration=k + 1) if agents else None
        # step 2. verify v_k's eval completions in sandboxes; with agent envs, join their episodes' verdicts
        evaluation = score_eval(trajectories=sampled.eval_trajectories, envs=envs, sandbox=cfg.sandbox,
                                previous=previous) if single_turn and evaluated else None
        results = evaluation.results if evaluation is not None else None
        if agents and evaluated:
            results = join_results(agent_results=agent_here.eval_results, results=results)
        agent_eval = (agent_here.eval_stats, agent_here.eval_steps) if agents and evaluated else (None, None)
        # step 3. log iteration k (k = 0: the baseline)
        if trained is None:
            this_log = log_baseline(run_id=run_id, results=results, policy=policy, promotion=cfg.promotion,
                                    agent_eval=agent_eval[0], agent_eval_steps=agent_eval[1])
        else:
            rollout_stats, reward_stats, dynamic, updated, agent_trained = trained
            this_log = log_iteration(run_id=run_id, iteration=k, rollout_stats=rollout_stats, scored=updated.train_rows,
                                     reward_stats=reward_stats, train_stats=updated.stats, policy=policy,
                                     results=results, dynamic=dynamic,
                                     window=(sampled or rollout).stats if single_turn else None,
                                     eval_s=evaluation.seconds if evaluation is not None else 0.0,
                                     previous=previous if results is not None else None, promotion=cfg.promotion,
                                     agent=agent_trained.stats if agents else None,
                                     agent_steps=agent_trained.steps if agents else None,
                                     agent_eval=agent_eval[0], agent_eval_steps=agent_eval[1])
            logged >> this_log  # MLflow iteration runs are written in order
        logged = this_log
        previous = results if results is not None else previous
        if k < cfg.iterations:
            # step 4. score the rollout of iteration k+1; with dynamic sampling, keep and refill the learnable groups;
            # the agent tier's episodes come scored (the verifier ran on each final workspace) and join them
            batch = (None, RolloutStats(), RewardStats(), None)
            if single_turn:
                scored = reward(trajectories=rollout.trajectories, envs=envs, sandbox=cfg.sandbox)
                batch = (scored.scored, rollout.stats, scored.stats, None)
                if cfg.rollout.dynamic_sampling:
                    batch = refill(policy=policy, envs=envs, cfg=cfg, policy_version=k, scored=scored.scored,
                                   rollout_stats=rollout.stats, reward_stats=scored.stats)
            train_on, rollout_stats, reward_stats, dynamic = batch
            if agents:
                train_on = join_scored(agent_scored=agent_rollout.scored, scored=train_on)
            # step 5. train v_{k+1} on it
            updated = update_node(policy=policy, scored=train_on, cfg=cfg.train, policy_version=k + 1,
                                  reference=reference)  # data parallel (torch elastic) when train.nproc_per_node > 1
            trained, policy = (rollout_stats, reward_stats, dynamic, updated, agent_rollout), updated.policy
            versions.append(policy)
    return policy


@workflow(on_failure=release_engines)
def rl_loop(cfg: LoopConfig = LoopConfig()) -> PolicyDir:
    """Admit the suite, then run the RL iterations; returns the final policy directory."""
    policy = prepare_policy(policy=cfg.policy)
    digest = fingerprint_suite(suite=cfg.suite)
    warm_engine(policy=policy, cfg=cfg.rollout, suite_digest=digest)  # locally: vLLM starts while admission runs
    admission = admit_suite(suite=cfg.suite, digest=digest, sandbox=cfg.sandbox, cfg=cfg.admission)
    run_id = start_tracking(cfg=cfg, report=admission.report, suite_digest=digest, policy=policy)
    final = iterate(cfg=cfg, envs=admission.envs, policy=policy, run_id=run_id)
    finished = finish_tracking(run_id=run_id, final_policy=final)
    finished >> release_engines(cfg=cfg)  # the live vLLM engine would keep `pyflyte run` from exiting
    return final


@workflow(on_failure=release_engines)
def rl_smoke(cfg: LoopConfig = LoopConfig.smoke()) -> PolicyDir:
    """The quick end-to-end check: one iteration, tiny sizes (``make smoke``)."""
    return rl_loop(cfg=cfg)


@workflow(on_failure=release_engines)
def rl_agent_demo(cfg: LoopConfig = LoopConfig.agent_demo()) -> PolicyDir:
    """RL on agent episodes: the demo agent policy on the agent_repo suite (``make demo-agent``)."""
    return rl_loop(cfg=cfg)
