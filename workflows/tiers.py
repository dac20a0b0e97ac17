"""The RL loop's tiers, as the records ``iterate`` (``workflows/rl_loop.py``) builds its DAG with.

A tier is what one kind of env takes of the loop: the single-turn tier (``SingleTurn``: ``sample``, ``score_eval``,
``reward``, and ``refill`` with ``rollout.dynamic_sampling``) and the agent tier (``Agent``: ``agent_sample``, whose
episodes come scored). Each has one shape: per policy version v_k ``iterate`` asks it

- ``sample(k, versions, evaluated)``: add the node that samples from v_k (its eval decode when ``evaluated``, the
  rollout of iteration k+1) and, under bounded staleness (``max_staleness`` s > 0), the node that rolls out iteration
  k+1 from v_{k-s} (``posttrain.rollout.staleness``), which does not wait for the update that makes v_k;
- ``evaluation(k, previous)``: v_k's eval results (``previous``: those of the last evaluated version);
- ``batch(k, policy)``: the scored rollout of iteration k+1, that the update of v_k trains on;
- ``metrics(k)`` and ``steps(k)``: what it logs with v_k, its stages' metrics dicts and its step tables by name.

``Tiers`` holds the tiers a suite has and asks each the same, in that order, joining their answers: one EvalResults
table, one Scored batch (``join_results``, ``join_scored``: the agent tier's rows after the single-turn ones), one
list of metrics dicts, one dict of step tables.

The records hold the promises of the nodes they added and live only while ``iterate`` builds its DAG: plain Python
objects, not Flyte types. A Flyte dataclass cannot hold a ``DataFrame[Schema]`` field, and a ``StructuredDataset``
would lose the digest that ``tasks.tables.Table`` carries, by which a rerun resumes from the cache; so what crosses a
task boundary stays typed by the tasks: ``Table[...]`` tables and ``dict[str, float]`` metrics named as MLflow shows
them.

Example (inside ``iterate``; ``k`` the version, ``versions`` the policies v_0..v_k so far):
    tiers = Tiers(cfg, envs)
    tiers.sample(k, versions, evaluated=True)
    results = tiers.evaluation(k, previous)       # one EvalResults promise, both tiers' rows
    batch = tiers.batch(k, versions[k])            # the Scored promise the update trains v_{k+1} on
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple, Optional

from flytekit import dynamic

from posttrain.config import LoopConfig
from posttrain.envs.table import envs_from_table
from posttrain.rollout import dynamic_sampling
from posttrain.rollout.staleness import rollout_source
from posttrain.schemas import Envs, Scored
from posttrain.tracking.metrics import stage_metrics
from tasks.agent import agent_sample, join_results, join_scored
from tasks.evaluate import score_eval
from tasks.policy import PolicyDir
from tasks.reward import add_round, reward
from tasks.rollout import sample
from tasks.tables import Table

Refilled = NamedTuple("Refilled", [("scored", Table[Scored]), ("metrics", dict[str, float])])


@dynamic
def refill(policy: PolicyDir, envs: Table[Envs], cfg: LoopConfig, policy_version: int, scored: Table[Scored],
           rollout_metrics: dict[str, float], reward_metrics: dict[str, float], rounds: int = 0,
           refilled: int = 0) -> Refilled:
    """DAPO dynamic sampling of the rollout from v_k (``policy_version``), given its ``scored`` rows so far (after
    ``rounds`` refill rounds that sampled ``refilled`` groups): while fewer than ``rollout.envs_per_iteration``
    groups are learnable and rounds are left, sample the missing number of unused train envs from v_k, score them
    and recurse; then keep only the learnable groups. ``metrics``: the rollout's and its reward's, all rounds
    together, and what dynamic sampling did (``DynamicSamplingStats`` as ``rollout/*``)."""
    env_ids = dynamic_sampling.refill_envs(envs, scored, cfg.rollout, policy_version + 1, rounds)
    if not env_ids:
        kept, stats = dynamic_sampling.keep_learnable(scored, cfg.rollout.envs_per_iteration, rounds, refilled)
        return Refilled(scored=kept, metrics={**rollout_metrics, **stage_metrics("rollout", stats), **reward_metrics})
    more = sample(policy=policy, envs=envs, cfg=cfg.rollout, eval_cfg=cfg.eval, policy_version=policy_version,
                  rollout=True, evaluate=False, env_ids=env_ids, seed_offset=len(scored))
    rewarded = reward(trajectories=more.trajectories, envs=envs, sandbox=cfg.sandbox)
    joined = add_round(so_far=scored, so_far_rollout=rollout_metrics, so_far_reward=reward_metrics,
                       more=rewarded.scored, more_rollout=more.metrics, more_reward=rewarded.metrics, envs=envs)
    return refill(policy=policy, envs=envs, cfg=cfg, policy_version=policy_version, scored=joined.scored,
                  rollout_metrics=joined.rollout_metrics, reward_metrics=joined.reward_metrics, rounds=rounds + 1,
                  refilled=refilled + len(env_ids))


class Tier(ABC):
    """One tier's shape. What both share: per version k, the node that samples from v_k (``here``) and the node whose
    rollout trains v_{k+1} (``rollouts``: the same one on-policy), made by the tier's ``node``; and which versions it
    evaluated (``evaluations``: k -> the node that did)."""

    def __init__(self, cfg: LoopConfig, envs: Table[Envs]):
        self.cfg, self.envs = cfg, envs
        self.here: dict = {}  # k -> the node that sampled from v_k at step k (its eval decode, an on-policy rollout)
        self.rollouts: dict = {}  # iteration -> the node whose rollout it trains on
        self.evaluations: dict = {}  # k -> the node that evaluated v_k

    def sample(self, k: int, versions: list, evaluated: bool) -> None:
        """Add v_k's node when it evaluates v_k or rolls out iteration k+1 on-policy, and the node that rolls out
        iteration k+1 from an older version when staleness says so (the last version rolls out nothing)."""
        last = k == self.cfg.iterations
        source = k if last else rollout_source(k, self.cfg.max_staleness)
        if evaluated or source == k:
            self.here[k] = self.node(versions[k], k, rollout=not last and source == k, evaluate=evaluated)
        if not last:
            self.rollouts[k + 1] = self.here[k] if source == k else \
                self.node(versions[source], source, rollout=True, evaluate=False, iteration=k + 1)

    def window(self, k: int):
        """The node that sampled at step k: v_k's own, else the one rolling out iteration k+1 from an older
        version."""
        return self.here[k] if k in self.here else self.rollouts[k + 1]

    @abstractmethod
    def node(self, policy: PolicyDir, version: int, rollout: bool, evaluate: bool, iteration: Optional[int] = None):
        """The tier's sampling node: v_``version``'s eval decode if ``evaluate``, a rollout if ``rollout`` (of
        ``iteration``, when not version + 1)."""

    @abstractmethod
    def evaluation(self, k: int, previous):
        """v_k's EvalResults from this tier's eval envs (``previous``: the last evaluated version's results)."""

    @abstractmethod
    def batch(self, k: int, policy: PolicyDir):
        """The Scored rows of iteration k+1 from this tier (``policy``: v_k)."""

    @abstractmethod
    def metrics(self, k: int) -> list:
        """The metrics dicts this tier logs with v_k."""

    @abstractmethod
    def steps(self, k: int) -> dict:
        """The step tables this tier logs with v_k, by name."""

    def snapshots(self, k: int) -> dict:
        """The workspace snapshot tables this tier logs with v_k, by name: none but the agent tier's."""
        return {}


class SingleTurn(Tier):
    """The single-turn tier: ``sample`` nodes, ``score_eval`` of an evaluated version's completions, ``reward`` of
    each rollout and, with dynamic sampling, ``refill``."""

    def __init__(self, cfg: LoopConfig, envs: Table[Envs]):
        super().__init__(cfg, envs)
        self.trained: dict = {}  # iteration -> the metrics of the batch it trained on (rollout, reward, refill)
        self.histories: dict = {}  # iteration -> which envs settled up to it (its first round's reward writes it)

    def node(self, policy: PolicyDir, version: int, rollout: bool, evaluate: bool, iteration: Optional[int] = None):
        """With ``rollout.settled_cooldown``, a rollout reads which envs settled lately from the reward of the
        iteration before it (``posttrain.rollout.settled``)."""
        before = (version + 1 if iteration is None else iteration) - 1
        return sample(policy=policy, envs=self.envs, cfg=self.cfg.rollout, eval_cfg=self.cfg.eval,
                      policy_version=version, rollout=rollout, evaluate=evaluate, iteration=iteration,
                      history=self.histories.get(before) if rollout else None)

    def evaluation(self, k: int, previous):
        """Verify v_k's eval completions in sandboxes (``previous``: for ``no_regression``)."""
        self.evaluations[k] = score_eval(trajectories=self.here[k].eval_trajectories, envs=self.envs,
                                         sandbox=self.cfg.sandbox, previous=previous)
        return self.evaluations[k].results

    def batch(self, k: int, policy: PolicyDir):
        """Score the rollout of iteration k+1; with dynamic sampling, keep and refill (from ``policy``, v_k) the
        learnable groups."""
        rollout = self.rollouts[k + 1]
        settles = self.cfg.rollout.settled_cooldown > 0  # this reward then writes which envs settled
        rewarded = reward(trajectories=rollout.trajectories, envs=self.envs, sandbox=self.cfg.sandbox,
                          history=self.histories.get(k) if settles else None, iteration=k + 1 if settles else None)
        if settles:
            self.histories[k + 1] = rewarded.history
        if not self.cfg.rollout.dynamic_sampling:
            self.trained[k + 1] = [rollout.metrics, rewarded.metrics]
            return rewarded.scored
        refilled = refill(policy=policy, envs=self.envs, cfg=self.cfg, policy_version=k, scored=rewarded.scored,
                          rollout_metrics=rollout.metrics, reward_metrics=rewarded.metrics)
        self.trained[k + 1] = [refilled.metrics]
        return refilled.scored

    def metrics(self, k: int) -> list:
        """With v_k (k >= 1): the times of its sample task, the metrics of the batch that trained it and, when it was
        evaluated, its eval scoring's time; with the baseline nothing (its eval summary is the log's)."""
        if k == 0:
            return []
        scoring = [self.evaluations[k].metrics] if k in self.evaluations else []
        return [self.window(k).times, *self.trained[k], *scoring]

    def steps(self, k: int) -> dict:
        """No step tables: a single-turn sample is one step."""
        return {}


class Agent(Tier):
    """The agent tier: ``agent_sample`` nodes, in pods of their own on a cluster (long episodes never hold up the
    single-turn groups); their episodes come scored (the verifier ran on each final workspace)."""

    def node(self, policy: PolicyDir, version: int, rollout: bool, evaluate: bool, iteration: Optional[int] = None):
        return agent_sample(policy=policy, envs=self.envs, cfg=self.cfg.agent, sandbox=self.cfg.sandbox,
                            rollout_cfg=self.cfg.rollout, policy_version=version, rollout=rollout,
                            evaluate=evaluate, iteration=iteration)

    def evaluation(self, k: int, previous):
        """v_k's greedy agent episodes' results (scored in v_k's node)."""
        self.evaluations[k] = self.here[k]
        return self.here[k].eval_results

    def batch(self, k: int, policy: PolicyDir):
        """The scored episodes of iteration k+1."""
        return self.rollouts[k + 1].scored

    def metrics(self, k: int) -> list:
        """With v_k: the wall time of the node that sampled at step k (k >= 1: ``time/agent_s``, the agent stage of
        the iteration's window), the episodes of the rollout that trained it (k >= 1) and its greedy eval's, when
        evaluated."""
        trained = [self.window(k).times, self.rollouts[k].metrics] if k > 0 else []
        return trained + ([self.evaluations[k].eval_metrics] if k in self.evaluations else [])

    def steps(self, k: int) -> dict:
        """The step tables of the same episodes: ``agent_steps``, ``agent_eval_steps``."""
        trained = {"agent_steps": self.rollouts[k].steps} if k > 0 else {}
        return {**trained, **({"agent_eval_steps": self.evaluations[k].eval_steps} if k in self.evaluations else {})}

    def snapshots(self, k: int) -> dict:
        """The snapshots of v_k's failed greedy episodes, when it was evaluated: ``agent_eval_snapshots``."""
        return {"agent_eval_snapshots": self.evaluations[k].eval_snapshots} if k in self.evaluations else {}


class Tiers:
    """The tiers of a suite, joined: the single-turn tier unless every env is an agent env, the agent tier when any
    is."""

    def __init__(self, cfg: LoopConfig, envs: Table[Envs]):
        kinds = {spec.kind for spec in envs_from_table(envs).values()}
        self.single_turn = SingleTurn(cfg, envs) if kinds != {"agent"} else None
        self.agent = Agent(cfg, envs) if "agent" in kinds else None
        self.all = [tier for tier in (self.single_turn, self.agent) if tier is not None]

    def sample(self, k: int, versions: list, evaluated: bool) -> None:
        """Each tier's nodes that sample from v_k (and, under staleness, from v_{k-s} for iteration k+1)."""
        for tier in self.all:
            tier.sample(k, versions, evaluated)

    def evaluation(self, k: int, previous):
        """v_k's EvalResults, both tiers' rows."""
        single_turn = self.single_turn.evaluation(k, previous) if self.single_turn is not None else None
        if self.agent is None:
            return single_turn
        return join_results(agent=self.agent.evaluation(k, previous), single_turn=single_turn, previous=previous)

    def batch(self, k: int, policy: PolicyDir):
        """The Scored rows of iteration k+1 from both tiers: what the update of v_k trains on."""
        single_turn = self.single_turn.batch(k, policy) if self.single_turn is not None else None
        if self.agent is None:
            return single_turn
        return join_scored(agent=self.agent.batch(k, policy), single_turn=single_turn)

    def metrics(self, k: int) -> list:
        """What the tiers log with v_k: their stages' metrics dicts."""
        return [metrics for tier in self.all for metrics in tier.metrics(k)]

    def steps(self, k: int) -> dict:
        """The tiers' step tables to log with v_k, by name."""
        return {name: table for tier in self.all for name, table in tier.steps(k).items()}

    def snapshots(self, k: int) -> dict:
        """The tiers' snapshot tables to log with v_k, by name."""
        return {name: table for tier in self.all for name, table in tier.snapshots(k).items()}
