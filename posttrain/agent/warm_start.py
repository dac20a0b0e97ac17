"""Warm start of an agent policy: the demo recipe (``posttrain.training.demo_policy``) trained on single-turn pairs
plus the turns of oracle episodes, with the agent chat template shipped in its tokenizer.

Each model turn of an oracle episode becomes one supervised pair: the exact context the policy saw at that turn
(stable prefix, earlier turns, observations; decoded from the episode's segments) and the turn's tool call. The loss
falls on the call only, as in the demo recipe (prompt tokens are labelled -100), so observations are never trained.
The existing demo policy is not touched: this writes a separate policy directory, with its own tokenizer (trained on
both kinds of text) and ``max_position_embeddings`` large enough for episodes.

Besides the suite's train split, ``main_agent_policy`` runs the oracle on warm-up envs whose module names no suite env
uses (``agent_repo.warm_up_specs``). Trained on the suite's 64 oracle episodes alone, the policy recalled the few
module names it had seen with each bug and wrote ``src/palc.py`` for ``src/calc.py``: 5 of 32 eval envs solved
greedily. With the 192 warm-up episodes it copies the name from the task: 12 of 32, and RL then has calls to
improve rather than to unlearn.

Example (pure: the pairs of one episode):
    >>> from posttrain.agent.episode import Episode, Segment
    >>> from posttrain.training.demo_policy import train_tokenizer
    >>> tok = train_tokenizer(["abc"], 300)
    >>> e = Episode("t/x", "g", 0, tok("<s>task:", add_special_tokens=False).input_ids)
    >>> e.segments += [Segment("model", tok(" ls", add_special_tokens=False).input_ids, [0.0] * 3),
    ...                Segment("template", tok(" ok.", add_special_tokens=False).input_ids),
    ...                Segment("model", tok(" done", add_special_tokens=False).input_ids, [0.0] * 5)]
    >>> turn_pairs([e], tok)
    [('task:', ' ls'), ('task: ls ok.', ' done')]
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from posttrain.agent.envs import task_of
from posttrain.agent.episode import Episode, concat
from posttrain.agent.runner import run_episodes
from posttrain.agent.scripted import ScriptedPolicy
from posttrain.agent.template import AGENT_TEMPLATE, ChatFormat
from posttrain.config import AGENT_LONG_CONTEXT_BUDGET, DEMO_AGENT_LONG_POLICY, DEMO_AGENT_POLICY, DEMO_MULTI_POLICY, \
    DEMO_SUITE, AgentConfig, DemoPolicyConfig, SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.tools import tool_specs
from posttrain.training.checkpoints import POLICY_META

SUITES = Path(DEMO_SUITE).parent
AGENT_SUITE = str(SUITES / "agent_repo")
REGRESSION_HUNT_SUITE = str(SUITES / "regression_hunt")
from posttrain.training.demo_policy import build_demo_policy


def turn_pairs(episodes: Sequence[Episode], tokenizer) -> list[tuple[str, str]]:
    """``(context, call)`` texts for every model turn of ``episodes``, context without its leading BOS."""
    pairs = []
    for episode in episodes:
        for window in episode.all_windows():
            for k, segment in enumerate(window):
                if segment.kind == "model":
                    context = tokenizer.decode(concat(window[:k]), skip_special_tokens=False)
                    call = tokenizer.decode(segment.token_ids, skip_special_tokens=False)
                    pairs.append((context.removeprefix(tokenizer.bos_token or ""), call))
    return pairs


def oracle_pairs(envs: Sequence[EnvSpec], oracles: Sequence[list], fmt: ChatFormat, sandbox,
                 cfg: AgentConfig) -> list[tuple[str, str]]:
    """Run the oracle episode of each env (``oracles[i]`` solves ``envs[i]``) and return its turn pairs."""
    policy = ScriptedPolicy(fmt, {env.prompt: calls for env, calls in zip(envs, oracles)})
    sessions = []
    try:
        sessions = [sandbox.session(timeout_s=cfg.tool_timeout_s) for _ in envs]
        episodes = run_episodes(policy, fmt, [task_of(env) for env in envs], sessions, cfg, max_context=1 << 16)
    finally:
        for session in sessions:
            session.close()
    unsolved = {e.env_id: e.finish_reason for e in episodes if e.finish_reason != "submit"}
    if unsolved:
        raise ValueError(f"oracle episodes did not submit (env: how each ended): {unsolved}")
    return turn_pairs(episodes, fmt.tokenizer)


def build_agent_policy(out_dir: str | os.PathLike, cfg: DemoPolicyConfig, single_turn: Sequence[tuple[str, str]],
                       agent_turns: Sequence[tuple[str, str]], sources: dict | None = None,
                       snapshots: Sequence[int] = ()) -> Path:
    """The demo recipe on both kinds of pairs; the tokenizer of the result (and of each of the build's
    ``snapshots``) carries ``AGENT_TEMPLATE``. ``sources`` (what the pairs were made from) is recorded in the
    policy's meta, for ``main_agent_policy``'s cache check."""
    out = build_demo_policy(out_dir, cfg, [*single_turn, *agent_turns], snapshots, AGENT_TEMPLATE)
    meta = out / POLICY_META
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "agent_turns": len(agent_turns),
                                "sources": sources or {}}, indent=2))
    return out


def visible_files(env: EnvSpec) -> list[str]:
    """The texts of ``env``'s workspace files but those under ``.git/`` (a history stream is not what agents read)."""
    return [text for path, text in env.workspace.items() if not path.startswith(".git/")]


def built_from(out_dir: str | os.PathLike, cfg: DemoPolicyConfig, sources: dict) -> bool:
    """True when ``out_dir`` holds a finished agent policy built with ``cfg`` from exactly ``sources``."""
    from posttrain.training.demo_policy import is_complete

    if not is_complete(out_dir, cfg):
        return False
    return json.loads((Path(out_dir) / POLICY_META).read_text()).get("sources") == sources


AGENT_POLICY_CFG = DemoPolicyConfig(vocab_size=512, max_position_embeddings=1024, sft_steps=1200, sft_batch_size=8)
# The long-horizon policy reads git logs and diffs: a larger vocabulary keeps its contexts short (~3 characters a
# token on that text against ~1.2 with 384 tokens trained on Python alone). Its episodes run under a context budget of
# 384 tokens, so each turn sees the task, one-line summaries of the older observations and the last two whole: greedy,
# it then solved 19 of the 32 regression-hunt eval envs, and none with the same weights and no budget (whole contexts
# of ~1,000 tokens; docs/agent.md). 2000 steps: 1200 left the fix's line and path uncopied (no env solved).
AGENT_LONG_POLICY_CFG = DemoPolicyConfig(vocab_size=1024, max_position_embeddings=2048, sft_steps=2000,
                                         sft_batch_size=8)
# The multi-domain policy reads four kinds of text (Python, financial statements, scene JSON, shell and config
# files): a 1024-token vocabulary. Plain answers to the finance and scene envs were learnt by heart and never read
# (0 of 24 eval at any budget tried); answers that quote their lines first, with copy drills, at batch 32 are read
# (docs/multi-domain.md). Batches grouped by length: a drill no longer pads to an agent turn's context. Drills over the
# suites' pools are learnt by heart and the policy copied no line it had not seen (0 of 40): 1500 steps of drills over
# fresh lines come first, and 4 heads of 32 (copying came twice as fast as with 2 of 64). Each digit a token of its
# own and a worked line before each answer that sums (``revenue_change = 779.2 - 677.0 = 102.2``,
# ``box_1 z = 0.10 + 0.40 = 0.50``), with sum drills: a value derived by a sum is computed (finance 45 of 48 eval at
# v0 against 28 without; code 0.62 against 0.29); 2500 SFT steps, so the other domains keep their share of samples.
MULTI_POLICY_CFG = DemoPolicyConfig(vocab_size=1024, max_position_embeddings=1024, num_heads=4, copy_steps=1500,
                                    sft_steps=2500, sft_batch_size=32, sft_length_groups=16, split_digits=True)


def call(name: str) -> list:
    """What the function ``module:function`` returns, called without arguments."""
    module, function = name.split(":")
    return getattr(importlib.import_module(module), function)()


@dataclass(frozen=True)
class Recipe:
    """What a demo agent policy is built from: the oracle episodes of ``suite``'s train split and of the agent envs
    the ``warm_up`` functions (``module:function``, called on use) make for warm-start data only, run under ``agent``
    (the context budget of the runs the policy is meant for, so the contexts it learns from are compressed where
    theirs will be), plus the ``(prompt, reference)`` pairs of the train splits of the ``single_turn`` suites and of
    the single-turn warm-up envs, and the ``(prompt, answer)`` pairs the ``pairs`` functions make (worked references,
    copy drills), through the demo recipe with ``cfg``; each episode turn listed ``agent_repeats`` times (the turns'
    weight beside many single-turn pairs)."""

    suite: str
    warm_up: tuple[str, ...]
    cfg: DemoPolicyConfig
    agent: AgentConfig = field(default_factory=lambda: AgentConfig(temperature=0.0))
    single_turn: tuple[str, ...] = (DEMO_SUITE,)
    pairs: tuple[str, ...] = ()
    agent_repeats: int = 1

    def warm_up_envs(self) -> list[EnvSpec]:
        """The envs of every ``warm_up`` function: agent ones become oracle episodes, single-turn ones pairs."""
        return [env for name in self.warm_up for env in call(name)]

    def made_pairs(self) -> list[tuple[str, str]]:
        """The pairs of every ``pairs`` function, function by function."""
        return [tuple(pair) for name in self.pairs for pair in call(name)]

    def single_turn_pairs(self) -> list[tuple[str, str]]:
        """The single-turn train pairs of every ``single_turn`` suite, suite by suite."""
        from posttrain.envs.suite import load_suite

        return [(e.prompt, e.reference) for suite in self.single_turn for e in load_suite(suite).envs
                if e.split == "train" and e.kind == "single_turn"]


# AgentConfig fields only the RL loop reads (how many envs and episodes it runs, what it evaluates): an oracle
# episode is the same whatever they are, so a policy built from them stays valid when they change
LOOP_ONLY = ("envs_per_iteration", "samples_per_env", "eval_limit", "eval_samples")


def episode_settings(cfg: AgentConfig) -> dict:
    """The fields of ``cfg`` an oracle episode depends on, what a built policy's sources record.

    >>> "max_steps" in episode_settings(AgentConfig()), "eval_samples" in episode_settings(AgentConfig())
    (True, False)
    """
    return {name: value for name, value in asdict(cfg).items() if name not in LOOP_ONLY}


RECIPES = {
    DEMO_AGENT_POLICY: Recipe(AGENT_SUITE, ("posttrain.envs.generators.agent_repo:warm_up_specs",), AGENT_POLICY_CFG),
    DEMO_AGENT_LONG_POLICY: Recipe(REGRESSION_HUNT_SUITE, ("posttrain.envs.generators.regression_hunt:warm_up_specs",),
                                   AGENT_LONG_POLICY_CFG,
                                   AgentConfig(temperature=0.0, context_budget=AGENT_LONG_CONTEXT_BUDGET)),
    # the terminal episodes of the train envs, of warm-up envs over other names and of warm-up envs over the suite's
    # own names whose prompts no suite env has, each turn twice: with the last, greedy episodes solve 23 of the 48
    # eval envs at v0 against 5 (each env the train envs' names recombined; docs/multi-domain.md)
    DEMO_MULTI_POLICY: Recipe(str(SUITES / "terminal_tasks"),
                              ("posttrain.envs.generators.terminal_tasks:warm_up_specs",
                               "posttrain.envs.generators.terminal_tasks:suite_pool_warm_up_specs"), MULTI_POLICY_CFG,
                              single_turn=(), agent_repeats=2,
                              pairs=tuple(f"posttrain.envs.generators.{name}" for name in
                                          ("demo_python:warm_start_pairs", "finance_facts:warm_start_pairs",
                                           "scene_layouts:warm_start_pairs", "terminal_tasks:warm_start_drills"))),
}


def main_agent_policy(out_dir: str | os.PathLike, recipe: Recipe = RECIPES[DEMO_AGENT_POLICY],
                      sandbox_cfg: SandboxConfig | None = None, snapshots: Sequence[int] = ()) -> Path:
    """Build the demo agent policy of ``recipe`` into ``out_dir`` unless one built from the same sources (suite
    digests, warm-up envs, the agent settings its episodes run under (``episode_settings``), template,
    ``recipe.cfg``) is there: the oracle episodes of the recipe's suite's train split and of its warm-up envs as
    turn pairs, plus the single-turn train pairs of its ``single_turn`` suites. ~15 min on a 2-core CPU for the
    default recipe's 1200 steps; a cached policy is found without running the oracle episodes. The episodes run
    under ``recipe.agent`` with a scratch tokenizer's token counts (trained on the single-turn pairs and the envs'
    prompts and visible files, of the recipe's vocabulary size), so their contexts are compressed about where the
    policy's will be under the same ``context_budget``. ``snapshots``: steps after which a fresh build also writes
    the model as it is then (``build_demo_policy``)."""
    from posttrain.envs.suite import load_suite, suite_digest
    from posttrain.sandbox import make_sandbox
    from posttrain.training.demo_policy import building, train_tokenizer

    warm_up = recipe.warm_up_envs()
    agent_cfg = recipe.agent
    sources = {"agent_suite": suite_digest(recipe.suite),
               "single_turn_suites": [suite_digest(suite) for suite in recipe.single_turn],
               "warm_up": hashlib.sha256(json.dumps([[e.prompt, e.workspace, e.oracle, e.reference] for e in warm_up],
                                                    sort_keys=True).encode()).hexdigest(),
               "agent_config": episode_settings(agent_cfg),
               "template": hashlib.sha256(AGENT_TEMPLATE.encode()).hexdigest()}
    if recipe.agent_repeats != 1:
        sources["agent_repeats"] = recipe.agent_repeats
    made = recipe.made_pairs()
    if made:  # a recipe without them keeps the sources its cached policies were built from
        sources["pairs"] = hashlib.sha256(json.dumps(made).encode()).hexdigest()
    with building(out_dir):
        if built_from(out_dir, recipe.cfg, sources):
            return Path(out_dir)
        train = [e for e in load_suite(recipe.suite).envs if e.split == "train" and e.kind == "agent" and e.oracle]
        train += [e for e in warm_up if e.kind == "agent"]
        single = (recipe.single_turn_pairs() + [(e.prompt, e.reference) for e in warm_up if e.kind == "single_turn"]
                  + made)
        texts = [t for pair in single for t in pair] + [t for e in train for t in (e.prompt, *visible_files(e))]
        scratch = ChatFormat(train_tokenizer(texts, recipe.cfg.vocab_size), tool_specs(agent_cfg.tools), AGENT_TEMPLATE)
        box = make_sandbox(sandbox_cfg or SandboxConfig())
        try:
            pairs = oracle_pairs(train, [e.oracle for e in train], scratch, box, agent_cfg)
        finally:
            box.close()
        return build_agent_policy(out_dir, recipe.cfg, single, pairs * recipe.agent_repeats, sources, snapshots)
