"""The closed RL loop: admit -> (rollout -> reward -> update -> evaluate) x iterations, tracked in MLflow.

Run it locally (embedded Flyte, real vLLM/bwrap/DeepSpeed/MLflow):
    pyflyte run workflows/rl_loop.py rl_loop                      # the demo: 30 iterations
    pyflyte run workflows/rl_loop.py rl_smoke                     # 1 iteration, tiny sizes
    pyflyte run workflows/rl_loop.py rl_loop --cfg '{"iterations": 2, "suite": "my_suite/"}'

Policy versions: v0 is the starting policy; iteration k rolls out with v_{k-1} and trains v_k. Everything that needs
one policy version runs in one vLLM engine lifetime (``tasks.rollout.sample``): the evaluation of v_k and the
rollout of iteration k+1 from it. Locally every task runs in this process and one live engine serves the whole run,
swapped to each new version in place, beside one live trainer (``warm_trainer`` builds the first in the background)
and one live sandbox backend; ``release_engines`` stops them at the end, or when the run fails. Versions are
evaluated every ``eval.every`` (v0 and the last always): greedy and sampled pass@1. With ``rollout.dynamic_sampling``
the scored rollout passes through ``refill`` (DAPO, ``workflows.tiers``): groups without reward variance are dropped
and refilled by further ``sample`` + ``reward`` rounds from the same version; off, the DAG is the one without it.
With ``max_staleness`` s > 0 the rollout that trains v_{k+1} samples from v_{k-s} (``posttrain.rollout.staleness``)
in a node of its own: on a cluster it runs while the update that makes v_k trains. A suite with agent envs adds the
agent tier (``agent_sample``: its own nodes, pods on a cluster, beside the single-turn ones); each tier is one record
of the nodes it added (``workflows.tiers``), asked the same per version, their outputs joined.

Tracking: each stage task returns its metrics as a dict named as MLflow shows them (``rollout/...``, ``time/...``:
``posttrain.tracking.metrics``), and a version's log task gets the list of its stages' dicts and the tables to log.

Resume: every compute stage (admission, sample, reward, eval scoring, update) is cached by Flyte, keyed on content:
policies (``PolicyDir``) and tables (``tasks.tables.Table``) carry a digest, so the same inputs give the same key on
every run (an offloaded parquet or directory has a new random URI each time). Running the same command again after
an interrupted execution takes every finished stage from the cache (with ``FLYTE_SDK_LOGGING_LEVEL=20`` flytekit
logs ``Cache hit`` for each) and computes only the rest; an identical rerun of a finished one computes no stage and
starts no engine (``warm_engine`` is cached too, as is ``warm_trainer``). MLflow tracking is not cached but idempotent
(``tasks.track``): the rerun resumes the first execution's parent run (found by the run identity of config, suite
digest, starting policy digest and cache version), skips its finished iterations and registers no policy version
twice; ``--overwrite-cache`` recomputes every stage into a new parent run.
"""

from __future__ import annotations

from flytekit import dynamic, workflow

from posttrain.config import LoopConfig, PromotionConfig
from posttrain.evaluation.greedy import evaluates
from posttrain.schemas import Envs
from tasks.admit import admission_rollout, admit_suite, fingerprint_suite, pin_policies
from tasks.policy import PolicyDir, prepare_policy
from tasks.preflight import check_memory
from tasks.rollout import release_engines, warm_engine
from tasks.tables import Table
from tasks.track import finish_tracking, log_baseline, log_iteration, start_tracking
from tasks.update import update_node, warm_trainer
from workflows.tiers import Tiers


@dynamic
def iterate(cfg: LoopConfig, envs: Table[Envs], policy: PolicyDir, run_id: str) -> PolicyDir:
    """Unroll ``cfg.iterations`` RL iterations into a DAG, per policy version v_k: sample from it, score its eval
    completions, log it, score the rollout of iteration k+1 and train v_{k+1} on it. Each tier of the suite
    (``workflows.tiers``: single-turn, agent) adds its own nodes for the sampling and scoring steps, their outputs
    joined: one EvalResults table per evaluated version, one Scored batch per update."""
    tiers = Tiers(cfg, envs)
    versions = [policy]  # v_0, v_1, ...: a rollout may sample from an older one (cfg.max_staleness)
    previous = None  # the results of the last evaluated version: per-env flips against it
    updated = logged = None  # the update that made v_k; the log node of v_{k-1}
    for k in range(cfg.iterations + 1):
        evaluated = evaluates(cfg.eval, k, last=cfg.iterations)
        # step 1. sample from v_k: its eval decode, and the rollout of iteration k+1 (from v_{k-s} under staleness)
        tiers.sample(k, versions, evaluated)
        # step 2. score v_k's eval completions in sandboxes: one EvalResults table of both tiers
        results = tiers.evaluation(k, previous) if evaluated else None
        # step 3. log v_k: the baseline, or the iteration that made it (MLflow iteration runs are written in order)
        logged = log_version(run_id, k, versions[k], tiers, results, previous, updated, cfg.promotion, after=logged)
        previous = results if results is not None else previous
        if k == cfg.iterations:
            break
        # step 4. score the rollout of iteration k+1 (dynamic sampling: keep and refill the learnable groups)
        batch = tiers.batch(k, versions[k])
        # step 5. train v_{k+1} on it (data parallel, torch elastic, when train.nproc_per_node > 1)
        updated = update_node(policy=versions[k], scored=batch, cfg=cfg.train, policy_version=k + 1,
                              reference=versions[0])  # v_0: the frozen policy of the KL penalty (train.kl_coef)
        versions.append(updated.policy)
    return versions[-1]


def log_version(run_id: str, k: int, policy: PolicyDir, tiers: Tiers, results, previous, updated,
                promotion: PromotionConfig, after):
    """The node that logs v_k (``policy``), after ``after`` (v_{k-1}'s): at k = 0 the baseline (its evaluation,
    ``results``), else iteration k, the update that made v_k (``updated``), what the tiers log with it and, when
    it was evaluated, its results with their flips against the last evaluated version's (``previous``)."""
    if updated is None:
        return log_baseline(run_id=run_id, policy=policy, results=results, metrics=tiers.metrics(0),
                            steps=tiers.steps(0), snapshots=tiers.snapshots(0), promotion=promotion)
    this_log = log_iteration(run_id=run_id, iteration=k, policy=policy, metrics=[*tiers.metrics(k), updated.metrics],
                             scored=updated.train_rows, steps=tiers.steps(k), snapshots=tiers.snapshots(k),
                             results=results,
                             previous=previous if results is not None else None, promotion=promotion)
    after >> this_log
    return this_log


@workflow(on_failure=release_engines)
def rl_loop(cfg: LoopConfig = LoopConfig()) -> PolicyDir:
    """Admit the suite, then run the RL iterations; returns the final policy directory."""
    policy = prepare_policy(policy=cfg.policy)
    digest = fingerprint_suite(suite=cfg.suite)
    fits = check_memory(policy=policy, cfg=cfg)  # locally: the update must fit beside the engines, checked first
    engine = warm_engine(policy=policy, cfg=cfg.rollout, suite_digest=digest)  # vLLM starts while admission runs
    fits >> engine >> warm_trainer(policy=policy, cfg=cfg.train)  # then DeepSpeed's first trainer, in the background
    admission = admit_suite(suite=cfg.suite, digest=digest, sandbox=cfg.sandbox, cfg=pin_policies(cfg=cfg.admission),
                            rollout=admission_rollout(rollout=cfg.rollout, cfg=cfg.admission))
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


@workflow(on_failure=release_engines)
def rl_agent_long_demo(cfg: LoopConfig = LoopConfig.agent_long_demo()) -> PolicyDir:
    """RL on long-horizon agent episodes: regression hunts in git histories and finance extractions corrected with
    ``check`` feedback (``make demo-agent-long``)."""
    return rl_loop(cfg=cfg)


@workflow(on_failure=release_engines)
def rl_multi_domain_demo(cfg: LoopConfig = LoopConfig.multi_domain_demo()) -> PolicyDir:
    """RL on code, finance extraction, scene layouts and terminal tasks at once, one curve per domain
    (``make demo-multi``)."""
    return rl_loop(cfg=cfg)
