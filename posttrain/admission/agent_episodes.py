"""Admission's agent episodes: for envs of kind ``agent``, scripted policies (``posttrain.agent.scripted``) run as
episodes in real sandbox sessions of the configured backend, and the env's own verifier scores each final workspace.

- solvability: the env's ``oracle`` (its tool calls) must solve it, reward 1, within the env's own ``agent:`` tools,
  ``max_steps`` and ``deadline_s`` (``oracle_verdicts``; an episode cut short says how in the verdict's detail);
- anti-hacking: the agent probes must fail like the verifier's probes (``probe_verdicts``): the ``no-op agent``
  submits at once; the ``test-editing agent`` overwrites the visible test files (workspace paths naming a test) with
  passing stubs, runs them and submits. Probes run with every tool and admission's own limits, whatever the env's
  ``agent:`` settings: they test the verifier, which must not be fooled by any tool a run could grant.

An env's token budgets (``max_new_tokens``, ``token_budget``, ``context_budget``) count the policy's tokens, which
admission's own tokenizer does not: the run enforces them, admission never does (``scripted_task``).

Steps, top to bottom (``run_scripted``): (1) the episodes are split into rounds whose task prompts differ (a scripted
policy tells its tasks apart by their prompt) and batches of ``AdmissionConfig.agent_batch``; (2) each batch runs
together (``agent.runner.run_episodes``: one batched turn, tool calls concurrent), one session per episode; (3) each
final workspace is captured as the agent rollout captures it (``agent.envs.final_workspaces``; the text of the
verifier's answer file where it has one: ``final_solution``) and its session closed
(so scoring holds no docker container); (4) every captured workspace of the check is scored in one
``SandboxBatches`` batch. A session that cannot start or a tool call that hits a sandbox failure makes the verdict
infra, never a reward of 0; a final workspace that cannot be captured fails its own episode
(``agent.envs.uncaptured``: infra only if the sandbox failed). The scripted policies speak the engine protocol
(token ids in and out) through any tokenizer; admission has no policy of its own, so ``chat_format`` trains a small
byte-level one.

Example:
    >>> spec = EnvSpec(id="t/fix", prompt="Fix a.py", kind="agent", reference="", verifier={"kind": "workspace_tests"},
    ...                workspace={"a.py": "x = 1\\n", "tests/test_a.py": "import a\\nassert a.x == 2\\n"})
    >>> [(c["name"], c["arguments"].get("command")) for c in agent_probes(spec)[TEST_EDITING]]
    [('write_file', None), ('bash', 'python3 tests/test_a.py'), ('submit', None)]
    >>> sorted(agent_probes(spec)), visible_tests(spec)
    (['no-op agent', 'test-editing agent'], ['tests/test_a.py'])
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Sequence
from pathlib import PurePosixPath

from dataclasses import replace

from posttrain.admission.batch import SandboxBatches
from posttrain.agent.envs import final_solution, final_workspaces, task_of
from posttrain.agent.runner import AgentTask, run_episodes
from posttrain.agent.scripted import SUBMIT, ScriptedPolicy
from posttrain.agent.template import AGENT_TEMPLATE, ChatFormat
from posttrain.config import AdmissionConfig, AgentConfig, SandboxConfig
from posttrain.envs.agent_settings import AgentSettings
from posttrain.envs.spec import EnvSpec
from posttrain.envs.tools import TOOLS, tool_specs
from posttrain.envs.verifiers.base import Verdict

NOOP, TEST_EDITING = "no-op agent", "test-editing agent"
MAX_CONTEXT = 1 << 22  # scripted policies allocate nothing: their calls are never cut
_STUBS = {".py": ('print("ok")\n', "python3"), ".js": ('console.log("ok");\n', "node"),
          ".cjs": ('console.log("ok");\n', "node"), ".mjs": ('console.log("ok");\n', "node"),
          ".sh": ("echo ok\nexit 0\n", "bash")}
_RUNTIME_STUBS = {"python": ".py", "node": ".js", "bash": ".sh"}


@functools.lru_cache(maxsize=1)
def chat_format() -> ChatFormat:
    """A chat format over a small byte-level tokenizer (any text round-trips) and every registered tool."""
    from posttrain.training.demo_policy import train_tokenizer  # torch is imported only when agent envs are admitted

    corpus = [AGENT_TEMPLATE, *(f"{t.name} {t.description} {' '.join(t.arguments)}" for t in TOOLS.values())]
    return ChatFormat(train_tokenizer(corpus, 512), tool_specs(list(TOOLS)), AGENT_TEMPLATE)


def visible_tests(spec: EnvSpec) -> list[str]:
    """Workspace files an agent could take for the tests: every path naming a test."""
    return sorted(path for path in spec.workspace if "test" in path.lower())


def agent_probes(spec: EnvSpec) -> dict[str, list[dict]]:
    """The agent probes of ``spec`` by name: tool calls that must not solve it."""
    probes = {NOOP: [SUBMIT]}
    writes, runs = [], []
    for path in visible_tests(spec):
        stub, runner = _STUBS.get(PurePosixPath(path).suffix, _STUBS[_RUNTIME_STUBS.get(spec.runtime, ".sh")])
        writes.append({"name": "write_file", "arguments": {"path": path, "content": stub}})
        runs.append({"name": "bash", "arguments": {"command": f"{runner} {shlex.quote(path)}"}})
    if writes:
        probes[TEST_EDITING] = [*writes, *runs, SUBMIT]
    return probes


def scripted_task(spec: EnvSpec, own_settings: bool) -> AgentTask:
    """The task of a scripted episode of ``spec``: with the env's own tools, ``max_steps`` and ``deadline_s``
    (``own_settings``: an oracle must solve the env within them), else with none of its settings (a probe).

    >>> spec = EnvSpec(id="t/x", prompt="p", reference="", verifier={}, kind="agent",
    ...                agent={"tools": ["bash", "submit"], "max_steps": 2, "token_budget": 50})
    >>> [scripted_task(spec, own_settings=own).settings.given() for own in (True, False)]
    [{'tools': ['bash', 'submit'], 'max_steps': 2}, {}]
    """
    task = task_of(spec)
    kept = {key: getattr(task.settings, key) for key in ("tools", "max_steps", "deadline_s")} if own_settings else {}
    return replace(task, settings=AgentSettings(**kept))


def _cut_short(verdict: Verdict, finish_reason: str) -> Verdict:
    """``verdict`` saying that its episode ended without submitting (its limits cut it), when it did."""
    if finish_reason in ("submit", "infra"):
        return verdict
    return replace(verdict, detail=f"the episode ended by {finish_reason} before submitting; {verdict.detail}")


def _infra(message: str) -> Verdict:
    return Verdict(reward=0.0, passed=False, compiled=False, tests_passed=0, tests_total=0, infra_error=message,
                   detail=f"infra: {message}")


def _rounds(jobs: Sequence[tuple[EnvSpec, list]], size: int) -> list[list[int]]:
    """Job indices in batches of at most ``size`` whose prompts differ (order kept within a prompt)."""
    rounds: list[list[int]] = []
    seen: dict[str, int] = {}
    for i, (spec, _) in enumerate(jobs):
        k = seen.get(spec.prompt, -1) + 1
        seen[spec.prompt] = k
        while len(rounds) <= k:
            rounds.append([])
        rounds[k].append(i)
    return [r[at:at + size] for r in rounds for at in range(0, len(r), size)]


def _episode_batch(jobs: Sequence[tuple[EnvSpec, list]], sandbox, sandbox_cfg: SandboxConfig,
                   agent_cfg: AgentConfig, own_settings: bool) -> list[tuple[str | Verdict, str]]:
    """Run one episode per job (distinct prompts) together: the final workspace of each as a verifier solution, or
    its verdict (infra, or a workspace that could not be captured), with the episode's finish reason."""
    fmt = chat_format()
    policy = ScriptedPolicy(fmt, {spec.prompt: calls for spec, calls in jobs})
    sessions = []
    try:
        for spec, _ in jobs:
            sessions.append(sandbox.session(timeout_s=min(spec.limits.timeout_s, sandbox_cfg.timeout_s),
                                            memory_mb=min(spec.limits.memory_mb, sandbox_cfg.memory_mb)))
        tasks = [scripted_task(spec, own_settings) for spec, _ in jobs]
        episodes = run_episodes(policy, fmt, tasks, sessions, agent_cfg, MAX_CONTEXT)
        finals = [final_solution(spec, final) for (spec, _), final in zip(jobs, final_workspaces(sessions))]
        return [(_infra(f"agent episode: {e.sandbox_failure}") if e.sandbox_failure else final, e.finish_reason)
                for e, final in zip(episodes, finals)]
    except Exception as error:  # noqa: BLE001 - a session that does not start is the sandbox's fault
        return [(_infra(f"agent episode: {type(error).__name__}: {error}"), "infra")] * len(jobs)
    finally:
        for session in sessions:
            session.close()


def run_scripted(batches: SandboxBatches, check: str, sandbox, sandbox_cfg: SandboxConfig, cfg: AdmissionConfig,
                 jobs: Sequence[tuple[EnvSpec, list]], own_settings: bool = False) -> list[Verdict]:
    """The verdict on the final workspace of one scripted episode per ``(env, tool calls)`` job, in order;
    ``own_settings``: each under its env's own tools, max_steps and deadline (``scripted_task``)."""
    if not jobs:
        return []
    size = cfg.agent_batch or (sandbox_cfg.docker.max_size if sandbox_cfg.backend == "docker" else len(jobs))
    agent_cfg = AgentConfig(max_steps=max(len(calls) for _, calls in jobs) + 1, max_new_tokens=MAX_CONTEXT,
                            token_budget=MAX_CONTEXT, context_budget=MAX_CONTEXT, deadline_s=cfg.agent_deadline_s,
                            tool_concurrency=max(1, batches.cfg.batch_concurrency), temperature=0.0)
    solutions: list[str | Verdict] = [""] * len(jobs)
    endings = [""] * len(jobs)

    def run(chosen: list[int]) -> None:  # the episodes of jobs[chosen], in rounds of distinct prompts
        for batch in _rounds([jobs[i] for i in chosen], max(1, size)):
            ran = _episode_batch([jobs[chosen[k]] for k in batch], sandbox, sandbox_cfg, agent_cfg, own_settings)
            for k, (solution, ending) in zip(batch, ran):
                solutions[chosen[k]], endings[chosen[k]] = solution, ending

    with batches.time(check):
        batches.bar.set_description(f"{check}: agent episodes")
        run(list(range(len(jobs))))
        # an episode whose session could not be prepared (a setup that timed out on a busy host) runs once more,
        # after the rest, as the batches re-run stalled verdicts (admission.batch); its second outcome is kept
        again = [i for i, solution in enumerate(solutions) if isinstance(solution, Verdict) and solution.excluded]
        batches.reruns[check] += len(again)
        run(again)
    todo = [i for i, s in enumerate(solutions) if isinstance(s, str)]
    scored = batches.run(check, [(jobs[i][0], solutions[i]) for i in todo], fresh=True)
    verdicts = list(solutions)
    for i, verdict in zip(todo, scored):
        verdicts[i] = _cut_short(verdict, endings[i])
    return verdicts


def oracle_calls(spec: EnvSpec) -> list[dict]:
    """The tool calls of ``spec``'s oracle episode: its ``oracle``; without one, its reference script run as one
    ``bash`` call in the session (what the verifier would run, now through the agent's tools), then ``submit``.

    >>> oracle_calls(EnvSpec(id="t/x", prompt="p", reference="make", verifier={}, kind="agent"))[0]
    {'name': 'bash', 'arguments': {'command': 'make'}}
    """
    return spec.oracle or [{"name": "bash", "arguments": {"command": spec.reference}},
                           {"name": "submit", "arguments": {}}]


def oracle_verdicts(batches: SandboxBatches, sandbox, sandbox_cfg: SandboxConfig, cfg: AdmissionConfig,
                    envs: Sequence[EnvSpec]) -> dict[str, Verdict]:
    """Env id -> the verdict of its oracle episode (``oracle_calls``), for the agent envs."""
    chosen = [spec for spec in envs if spec.kind == "agent"]
    verdicts = run_scripted(batches, "solvability", sandbox, sandbox_cfg, cfg,
                            [(s, oracle_calls(s)) for s in chosen], own_settings=True)
    return {spec.id: verdict for spec, verdict in zip(chosen, verdicts)}


def probe_verdicts(batches: SandboxBatches, sandbox, sandbox_cfg: SandboxConfig, cfg: AdmissionConfig,
                   envs: Sequence[EnvSpec]) -> dict[str, dict[str, Verdict]]:
    """Env id -> {agent probe name: verdict}, for the agent envs."""
    jobs = [(spec, name, calls) for spec in envs if spec.kind == "agent" for name, calls in agent_probes(spec).items()]
    verdicts = run_scripted(batches, "anti_hacking", sandbox, sandbox_cfg, cfg, [(s, calls) for s, _, calls in jobs])
    out: dict[str, dict[str, Verdict]] = {}
    for (spec, name, _), verdict in zip(jobs, verdicts):
        out.setdefault(spec.id, {})[name] = verdict
    return out
