"""Benchmark: tier isolation. Single-turn groups and agent episodes run in separate tiers (the loop's ``sample`` and
``agent_sample`` Flyte tasks: on a cluster separate pods, each with its own engine and CPU request), so that long
episodes never stall short ones. Target: with a concurrent long-episode load, the short tier's throughput stays
>= 90% of what it is alone.

Method (real engines and sandboxes, nothing mocked). Each tier is its own child process, confined to its own core the
way a pod's cpuset would confine it: ``os.sched_setaffinity`` before anything starts (every process it spawns, the
engine process and the sandbox's tool processes included, inherits it; the engine process puts one compute thread on
each core it may use: here, that one). The short tier runs on core 0 (by default), the agent tier on core 1. The
output reports the cores each engine process chose (``engine_processes``) and the CPUs every process of each tier may
run on (sampled during the concurrent phases).

- short tier: the single-turn workload and timed call that ``rollout.py`` runs (``single_turn.py``: ``workload``,
  ``timed_batch``): ``--prompts`` demo train prompts behind the shared system prefix, n = 8, exactly
  ``--max-new-tokens`` new tokens each (``ignore_eos``), from an empty prefix cache, on the 18M-parameter benchmark
  model.
- agent tier: a continuous load of real agent episodes (``posttrain.agent.runner.run_episodes``: batched turns on
  its own ``VLLMEngine``, tool calls in warm bwrap sessions) on the train envs of the ``agent_repo`` suite,
  ``--episodes`` at a time, batch after batch, in the chat format of the policy's tokenizer (``AGENT_TEMPLATE`` when
  it has none). Its policy is the benchmark model's recipe with 1024 positions (the suite's prompts are ~510 tokens
  in its tokenizer; the 512-position model cannot hold one), built once and cached like it; ``--agent-policy``
  takes another (e.g. ``.posttrain/agent-policy``, the warm-started agent policy). The benchmark model was never
  trained on tool calls: most of its turns are malformed calls (their observation is the parser's error, no
  sandbox run), so its load is mostly the engine's, with sessions opened, prepared and closed per episode. The
  figures say how many calls did run in the sandbox.
- rounds: the short tier's batch alone (agent tier paused: it finishes the episodes in flight first) and with the
  agent load running, in ``--rounds`` rounds of one of each, in ABBA order (alone, concurrent | concurrent, alone |
  ...), so that drift and a shared machine's other load fall on both alike. The figure is the median over rounds of
  concurrent tokens/s over alone tokens/s within a round (``isolation``); the raw runs are reported. Agent turns,
  steps (tool calls, malformed ones included), tool calls run in the sandbox and model tokens per second are counted
  over the agent load's batches (its wall time, sessions included).

About 3-4 minutes on an idle 2-core machine once both models are cached (the 1024-position model's first build takes
~1 minute, each model's first engine start compiles for ~1 minute more). Needs 2 cores and bubblewrap.

    python benchmarks/tiers.py
    python benchmarks/tiers.py --rounds 2                              # quicker
    python benchmarks/tiers.py --agent-policy .posttrain/agent-policy  # an agent tier that calls tools
    python benchmarks/tiers.py --cores 0,0 --rounds 2                 # the control: both tiers on one core

``measure`` is the same measurement as a function (``rollout.py`` reports it as ``tier_isolation``). The last line
printed is one JSON object.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # single_turn.py, when this module is imported from elsewhere

from single_turn import (KV_CACHE_GIB, MAX_MODEL_LEN, TEMPERATURE, fixed_length, model_config,  # noqa: E402
                         policy_dir, timed_batch, workload)

TARGET = 0.9  # short tokens/s with the agent load over short tokens/s alone, at least
AGENT_POSITIONS = 1024  # the agent tier's context (RolloutConfig.max_model_len) and its model's positions
MARK = "TIER "  # a child's replies on stdout start with it; every other line there is a log line
READY_TIMEOUT_S, REPLY_TIMEOUT_S = 600, 300


def isolation(alone: list[dict], concurrent: list[dict], target: float = TARGET) -> dict:
    """The short tier's concurrent tokens/s over its alone tokens/s, round by round (run i of each list), their
    median and its verdict.

    >>> isolation([{"tokens_per_s": 100.0}, {"tokens_per_s": 80.0}], [{"tokens_per_s": 95.0}, {"tokens_per_s": 60.0}])
    {'round_ratios': [0.95, 0.75], 'ratio': 0.85, 'target': 0.9, 'met': False}
    """
    ratios = [round(c["tokens_per_s"] / a["tokens_per_s"], 3) for a, c in zip(alone, concurrent, strict=True)]
    ratio = round(statistics.median(ratios), 3)
    return {"round_ratios": ratios, "ratio": ratio, "target": target, "met": ratio >= target}


def agent_policy_dir() -> str:
    """The agent tier's default policy: the benchmark model's recipe with ``AGENT_POSITIONS`` positions."""
    return policy_dir(model_config(AGENT_POSITIONS))


# --- the tiers (child processes, one command per stdin line, one reply each) -------------------------------------


def reply(obj: dict) -> None:
    print(MARK + json.dumps(obj), flush=True)


def confine(core: int) -> None:
    """This process, and whatever it starts from now on, on ``core`` only (a pod's cpuset)."""
    os.sched_setaffinity(0, {core})
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)


def short_tier(args: argparse.Namespace) -> None:
    """Commands: ``batch`` (one timed call, ``single_turn.timed_batch``), ``quit``."""
    confine(args.core)
    from posttrain.config import RolloutConfig
    from posttrain.rollout.engine import VLLMEngine

    prompts, shape = workload(args.policy, args.prompts, args.prefix_tokens)
    started = time.perf_counter()
    engine = VLLMEngine(args.policy, RolloutConfig(max_model_len=MAX_MODEL_LEN, temperature=TEMPERATURE))
    start_s = time.perf_counter() - started
    try:
        fixed_length(engine, prompts, 8)  # warm-up at the batch's shapes, as rollout.interleaved does
        reply({"ready": True, "start_s": round(start_s, 1), "workload": shape, "engine_processes": engine.info})
        for line in sys.stdin:
            if line.strip() == "batch":
                reply(timed_batch(engine, prompts, args.max_new_tokens))
            elif line.strip() == "quit":
                break
    finally:
        engine.close()


class AgentLoad:
    """Batches of ``episodes`` agent episodes, one after another while ``running`` is set; ``pause`` returns once the
    batch in flight has finished. Counters add up over the batches since the last ``take``."""

    def __init__(self, engine, fmt, envs, sandbox, cfg, episodes: int, max_context: int):
        self.engine, self.fmt, self.envs, self.sandbox, self.cfg = engine, fmt, envs, sandbox, cfg
        self.episodes, self.max_context = episodes, max_context
        self.batches = 0
        self.running, self.idle, self.lock = threading.Event(), threading.Event(), threading.Lock()
        self.idle.set()
        self.stopped = False
        self.error = ""
        self.totals: collections.Counter = collections.Counter()
        self.finish: collections.Counter = collections.Counter()

    def batch(self) -> None:
        from posttrain.agent.envs import task_of
        from posttrain.agent.runner import run_episodes

        k, n = self.batches, len(self.envs)
        tasks = [task_of(self.envs[(k * self.episodes + i) % n], group_id=f"b{k}", sample_idx=i)
                 for i in range(self.episodes)]
        started, sessions = time.perf_counter(), []
        try:
            sessions = [self.sandbox.session(timeout_s=self.cfg.tool_timeout_s) for _ in tasks]
            episodes = run_episodes(self.engine, self.fmt, tasks, sessions, replace(self.cfg, seed=k),
                                    self.max_context)
        finally:
            for session in sessions:
                session.close()
        self.batches += 1
        steps = [s for e in episodes for s in e.steps]
        self.totals.update({"batches": 1, "episodes": len(episodes), "turns": sum(len(e.turns) for e in episodes),
                            "steps": len(steps), "tool_calls": sum(not s.error for s in steps),
                            "tool_calls_ok": sum(s.ok and not s.error for s in steps),
                            "model_tokens": sum(e.model_tokens for e in episodes),
                            "seconds": time.perf_counter() - started})
        self.finish.update(e.finish_reason for e in episodes)

    def loop(self) -> None:
        while True:
            self.running.wait()
            with self.lock:
                if self.stopped:
                    return
                if not self.running.is_set():
                    continue
                self.idle.clear()
            try:
                self.batch()
            except Exception as exc:  # noqa: BLE001 - reported with the phase, the load stops
                self.error = f"{type(exc).__name__}: {exc}"
                self.running.clear()
            finally:
                self.idle.set()

    def pause(self) -> None:
        with self.lock:
            self.running.clear()
        self.idle.wait()

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            self.running.set()

    def take(self) -> dict:
        """The counters since the last ``take`` (rates per second of the batches' wall time), then zeroed."""
        totals, finish = dict(self.totals), dict(self.finish)
        self.totals.clear()
        self.finish.clear()
        seconds = totals.get("seconds", 0.0)
        rates = {f"{name}_per_s": round(totals.get(name, 0) / seconds, 2) if seconds else None
                 for name in ("turns", "steps", "tool_calls", "model_tokens")}
        return {**{k: round(v, 2) if isinstance(v, float) else v for k, v in totals.items()}, **rates,
                "finish_reasons": finish, **({"error": self.error} if self.error else {})}


def agent_tier(args: argparse.Namespace) -> None:
    """Commands: ``run`` (the load starts), ``pause`` (it stops after its batch in flight; reply: its counters since
    ``run``), ``quit``."""
    confine(args.core)
    from posttrain.agent.tier import chat_format
    from posttrain.agent.warm_start import AGENT_SUITE
    from posttrain.config import AgentConfig, RolloutConfig, SandboxConfig
    from posttrain.envs.suite import load_suite
    from posttrain.rollout.engine import VLLMEngine
    from posttrain.sandbox import make_sandbox

    from transformers import AutoTokenizer

    from posttrain.rollout.prompts import own_template

    # the policy's own chat template; the agent template for a base model (the benchmark recipe has none)
    cfg = AgentConfig(chat_template="auto" if own_template(AutoTokenizer.from_pretrained(args.agent_policy)) else "agent")
    started = time.perf_counter()
    engine = VLLMEngine(args.agent_policy, RolloutConfig(max_model_len=AGENT_POSITIONS, temperature=cfg.temperature))
    start_s = time.perf_counter() - started
    box = make_sandbox(SandboxConfig(backend="bwrap-warm"))
    try:
        fmt = chat_format(args.agent_policy, cfg)
        envs = [e for e in load_suite(AGENT_SUITE).envs if e.kind == "agent" and e.split == "train"]
        load = AgentLoad(engine, fmt, envs, box, cfg, args.episodes, AGENT_POSITIONS)
        load.batch()  # warm-up: engine shapes, sandbox
        warmup = load.take()
        thread = threading.Thread(target=load.loop, daemon=True)
        thread.start()
        reply({"ready": True, "start_s": round(start_s, 1), "engine_processes": engine.info,
               "envs": len(envs), "episodes": args.episodes,
               "own_chat_template": bool(fmt.tokenizer.chat_template), "warmup": warmup})
        for line in sys.stdin:
            command = line.strip()
            if command == "run":
                load.running.set()
                reply({"running": True})
            elif command == "pause":
                load.pause()
                reply(load.take())
            elif command == "quit":
                break
        load.stop()
        load.pause()
    finally:
        box.close()
        engine.close()


# --- the parent --------------------------------------------------------------------------------------------------


class Tier:
    """A tier's child process: commands on its stdin, replies (``MARK`` lines) from its stdout; its other lines
    (logs) are kept for an error's tail."""

    def __init__(self, name: str, argv: list[str]):
        self.name = name
        env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_OMP_THREADS_BIND"}  # the affinity decides
        self.proc = subprocess.Popen([sys.executable, __file__, "--tier", name, *argv], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                     env={**env, "PYTHONUNBUFFERED": "1"})
        self.replies: queue.Queue = queue.Queue()
        self.log: collections.deque = collections.deque(maxlen=60)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith(MARK):
                self.replies.put(json.loads(line[len(MARK):]))
            else:
                self.log.append(line.rstrip())
        self.replies.put(None)  # the process ended

    def wait(self, timeout: float = REPLY_TIMEOUT_S) -> dict:
        try:
            got = self.replies.get(timeout=timeout)
        except queue.Empty:
            got = None
        if got is None:
            raise RuntimeError(f"{self.name} tier: no reply (exit {self.proc.poll()}): " + "\n".join(self.log))
        return got

    def ask(self, command: str, timeout: float = REPLY_TIMEOUT_S) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.wait(timeout)

    def cpus(self) -> dict:
        """The CPUs this tier's processes (the child and all its descendants) may run on, and how many there are."""
        import psutil

        allowed, count = set(), 0
        try:
            procs = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return {}
        for proc in procs:
            try:
                allowed |= set(os.sched_getaffinity(proc.pid))
                count += 1
            except OSError:  # it ended meanwhile
                pass
        return {"processes": count, "cpus_allowed": sorted(allowed)}

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=120)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def measure(policy: str | None = None, agent_policy: str | None = None, prompts: int = 16, prefix_tokens: int = 120,
            max_new_tokens: int = 128, rounds: int = 6, episodes: int = 8, cores: tuple[int, int] = (0, 1)) -> dict:
    """The tier-isolation figure (see the module doc): two tiers on their own cores, rounds of the short tier's
    batch alone and with the agent load."""
    if len(cores) != 2 or not set(cores) <= os.sched_getaffinity(0):
        raise ValueError(f"cores {cores}: two cores of this process's {sorted(os.sched_getaffinity(0))}")
    policy = str(Path(policy).resolve()) if policy else policy_dir()
    agent_policy = str(Path(agent_policy).resolve()) if agent_policy else agent_policy_dir()
    load_before, started = os.getloadavg()[0], time.perf_counter()
    short = Tier("short", ["--core", str(cores[0]), "--policy", policy, "--prompts", str(prompts),
                           "--prefix-tokens", str(prefix_tokens), "--max-new-tokens", str(max_new_tokens)])
    agent = Tier("agent", ["--core", str(cores[1]), "--agent-policy", agent_policy, "--episodes", str(episodes)])
    runs: dict[str, list] = {"alone": [], "concurrent": []}
    phases, affinity = [], {"short": [], "agent": []}
    try:
        ready = {"short": short.wait(READY_TIMEOUT_S), "agent": agent.wait(READY_TIMEOUT_S)}
        running = False
        for i in range(rounds):
            for phase in ("alone", "concurrent") if i % 2 == 0 else ("concurrent", "alone"):  # ABBA
                if (phase == "concurrent") != running:
                    if running:
                        phases.append(agent.ask("pause"))
                    else:
                        agent.ask("run")
                    running = not running
                runs[phase].append(short.ask("batch"))
                if phase == "concurrent":
                    affinity["short"].append(short.cpus())
                    affinity["agent"].append(agent.cpus())
        if running:
            phases.append(agent.ask("pause"))
    finally:
        short.close()
        agent.close()
    total = collections.Counter()
    for phase in phases:
        total.update({k: v for k, v in phase.items() if isinstance(v, (int, float)) and not k.endswith("_per_s")})
    seconds = total.get("seconds", 0.0)
    agent_load = {**{k: round(v, 2) for k, v in total.items()},
                  **{f"{name}_per_s": round(total[name] / seconds, 2) if seconds else None
                     for name in ("turns", "steps", "tool_calls", "model_tokens")},
                  "phases": phases}
    return {"benchmark": "tiers", "model": asdict(model_config()), "policy": policy, "agent_policy": agent_policy,
            "cores": {"short": cores[0], "agent": cores[1]}, "isolated": cores[0] != cores[1], "cpus": os.cpu_count(),
            "workload": {**ready["short"]["workload"], "max_new_tokens": max_new_tokens, "rounds": rounds,
                         "agent_episodes_per_batch": episodes, "agent_max_model_len": AGENT_POSITIONS},
            "short": {"alone_tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in runs["alone"]), 1),
                      "concurrent_tokens_per_s": round(statistics.median(r["tokens_per_s"]
                                                                         for r in runs["concurrent"]), 1),
                      "runs": runs},
            **isolation(runs["alone"], runs["concurrent"]),
            "agent": {**agent_load, "ready": ready["agent"]},
            "engine_processes": {name: ready[name]["engine_processes"] for name in ("short", "agent")},
            "affinity": {name: {"cpus_allowed": sorted({c for s in samples for c in s.get("cpus_allowed", [])}),
                                "processes_max": max((s.get("processes", 0) for s in samples), default=0)}
                         for name, samples in affinity.items()},
            "engine_start_s": {"short": ready["short"]["start_s"], "agent": ready["agent"]["start_s"]},
            "load_avg_1m_before": round(load_before, 2), "load_avg_1m_after": round(os.getloadavg()[0], 2),
            "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16, help="the short tier's prompts (x n = 8 samples)")
    parser.add_argument("--prefix-tokens", type=int, default=120, help="tokens of the shared system prefix")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=6, help="rounds of one alone and one concurrent short batch")
    parser.add_argument("--episodes", type=int, default=8, help="agent episodes per batch of the agent load")
    parser.add_argument("--cores", default="0,1",
                        help="the short tier's core and the agent tier's (the same twice: the control, no isolation)")
    parser.add_argument("--policy", help="the short tier's policy dir, instead of the benchmark model")
    parser.add_argument("--agent-policy", help="the agent tier's policy dir, instead of the benchmark recipe at "
                                               f"{AGENT_POSITIONS} positions")
    parser.add_argument("--tier", choices=["short", "agent"], help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tier == "short":
        return short_tier(args)
    if args.tier == "agent":
        return agent_tier(args)
    cores = tuple(int(c) for c in args.cores.split(","))
    if len(cores) != 2:
        parser.error("--cores: two core ids, e.g. 0,1")
    print(json.dumps(measure(args.policy, args.agent_policy, args.prompts, args.prefix_tokens, args.max_new_tokens,
                             args.rounds, args.episodes, cores)))


if __name__ == "__main__":
    main()
