"""Benchmark: rollout throughput of the posttrain engine (vLLM) against transformers ``generate``, and what the engine
saves around it: prefix caching, in-place reloads instead of restarts, vLLM's CPU thread binding; plus agent steps/s.

Model: an 18M-parameter Llama (the demo-policy recipe at width 512, depth 6: the project's tokenizer and a short SFT
warm start, built once and cached in ``~/.cache/posttrain`` under a name keyed by its config; throughput does not
depend on what it learned). Workload: ``--prompts`` demo train prompts (32), each behind one shared system prefix of
about ``--prefix-tokens`` tokens (120), ``n`` = 8 samples each at temperature 1.0, exactly ``--max-new-tokens`` (128)
new tokens per sample (vLLM ``ignore_eos``; transformers ``min_new_tokens``), so both sides generate the same number
of tokens. Throughput is generated tokens over the wall time of the whole batched call, prefill included.

All engine figures come from one child process with at most two engines alive, compared in interleaved rounds
(the engines take turns, ``--repeats`` rounds), so that the load of a shared machine falls on both sides of a ratio
alike; an engine's tokens/s is its tokens over its summed seconds (its best call is reported too), and a ratio of
two engines is the median over rounds of the ratio within a round. Every timed call starts from an empty prefix
cache, as after each reload in the loop.

- engine: the project's ``VLLMEngine``, started through ``rollout.live.acquire`` as the loop starts it (bf16,
  prefix caching on, its default layout: one engine process per core, vLLM in-process in each, the batch split
  between them by prompt; ``posttrain.rollout.engine_host``). The benchmark sends the engine's own requests
  (``engine.sampling_params``: sampled log-probabilities included, texts decoded at the end) plus ``ignore_eos``
  through ``VLLMEngine.request_outputs``, the path ``generate`` takes.
- prefix caching: that engine against a second one with ``enable_prefix_caching`` off. vLLM's CPU backend uses
  128-token KV blocks and caches full blocks only: the first block of each prompt is shared by its n samples, while
  a prefix shorter than a block is not shared between prompts (``workload.kv_block_size``).
- reload vs restart: ``--reloads`` in-place swaps (``live.acquire`` of the weights and of a copy of them, in turns:
  another weights identity, the same engine key; ``live.counters`` counts them) against a restart, what ``acquire``
  does when the engine key changes: an engine's shutdown plus a start (the second engine's, compile cache warm).
- engine layout (``--bindings``): the default against, in turns, ``one_engine`` (``rollout.replicas=1``: one
  in-process engine with a thread on each core), ``one_core`` (one engine, one thread on core 0) and
  ``vllm_processes`` (``VLLM_ENABLE_V1_MULTIPROCESSING=1``: vLLM's own scheduler and worker processes, which bind
  the worker to core 0 and reserve core 1, logged as ``reserved_cpus=[1]``; copied from its log into
  ``engine.vllm_binding_log``). Each engine reports its processes' cores (``engine_processes``).
- transformers: ``AutoModelForCausalLM.generate`` (sampling, ``num_return_sequences`` = n, one batch, left padding,
  torch threads = cores) in fp32 and bf16, each in its own child process after a warm-up, on the engine's workload:
  all 256 sequences in one batch (~70 s in fp32 on an idle machine; ``--hf-prompts`` times fewer, whose tokens/s
  differs: 64 sequences ran bf16 1.6x faster per token than 256 here, fp32 alike). transformers' threads span both
  cores, so another job on either core slows it several-fold (fp32 142 tokens/s under load against 473-481 idle):
  compare figures taken on a quiet machine (``load_avg_1m_before`` of each side).
- agent: oracle episodes on the whole ``agent_repo`` suite in warm bwrap sessions (``agent_oracle.run_suite``):
  tool calls per second of episode wall time.
- tier isolation: ``tiers.measure`` (``benchmarks/tiers.py``, its own child processes and engines, after the rest):
  the short tier's tokens/s with a concurrent agent-episode load over its tokens/s alone, each tier confined to its
  own core as its pod would be (median over interleaved rounds; ``null`` with ``--skip-tiers``).

Targets: engine >= 10x transformers fp32 and >= 3x bf16, prefix caching >= 1.5x, a reload <= 1% of a restart, tier
isolation >= 0.9.

Four engine starts in all (two of them for the default ``--bindings``), plus the two of the tiers; about 12-14
minutes on an idle 2-core machine once the models are cached (the first build of each takes ~1 minute, each first
engine start compiles for ~1 minute more).

    python benchmarks/rollout.py
    python benchmarks/rollout.py --repeats 1 --bindings "" --skip-agent --skip-tiers   # quicker: two engine starts

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from single_turn import (KV_CACHE_GIB, MAX_MODEL_LEN, TEMPERATURE, N, fixed_length, model_config,  # noqa: E402
                         policy_dir, timed_batch, workload)

# Other layouts of the engine than its default (one in-process vLLM replica per core, the batch split between them):
# environment variables and RolloutConfig fields of each
BINDINGS = {"one_engine": ({}, {"replicas": 1}),  # one in-process engine, a thread on each core
            "one_core": ({"VLLM_CPU_OMP_THREADS_BIND": "0"}, {}),  # one in-process engine, one thread, core 0
            # vLLM's own layout: scheduler and worker processes, the worker on core 0, core 1 reserved for the other
            "vllm_processes": ({"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}, {"replicas": 1})}
TARGETS = {"engine_vs_hf_fp32": 10.0, "engine_vs_hf_bf16": 3.0, "prefix_caching_speedup": 1.5,
           "reload_over_restart": 0.01, "tier_isolation": 0.9}


# --- the engine side (a child process) ---------------------------------------------------------------------------


def interleaved(engines: dict, prompts: list[str], max_tokens: int, repeats: int) -> dict:
    """Each engine's tokens/s over ``repeats`` rounds in which the engines take turns, so that the load of a shared
    machine falls on all of them alike: its tokens over its summed seconds, and its best call."""
    for engine in engines.values():
        fixed_length(engine, prompts, 8)  # warm-up at the batch's shapes (a smaller one left the first round slow)
    runs: dict[str, list[dict]] = {name: [] for name in engines}
    for _ in range(repeats):
        for name, engine in engines.items():
            runs[name].append(timed_batch(engine, prompts, max_tokens))
    return {name: {"tokens_per_s": round(sum(r["tokens"] for r in timed) / sum(r["seconds"] for r in timed), 1),
                   "best_tokens_per_s": max(r["tokens_per_s"] for r in timed), "runs": timed}
            for name, timed in runs.items()}


@contextmanager
def environment(variables: dict[str, str]) -> Iterator[None]:
    """``variables`` set in ``os.environ`` meanwhile (vLLM's processes read their CPU binding from it at start)."""
    old = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def reload_times(policy: str, cfg, count: int) -> dict:
    """``count`` in-place swaps by ``live.acquire``, alternating between ``policy`` and a copy of it (another weights
    identity, the same engine key)."""
    from posttrain.rollout import live

    copy = Path(tempfile.mkdtemp(prefix="rollout-bench-")) / "v1"
    shutil.copytree(policy, copy)
    before, seconds = live.counters(), []
    try:
        for i in range(count):
            started = time.perf_counter()
            live.acquire(str(copy) if i % 2 == 0 else policy, cfg, version=i + 1)
            seconds.append(time.perf_counter() - started)
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)
    after = live.counters()
    return {"reloads": int(after["reloads"] - before["reloads"]), "starts": int(after["starts"] - before["starts"]),
            "reload_ms_median": round(statistics.median(seconds) * 1000, 1),
            "reload_ms": [round(s * 1000, 1) for s in seconds]}


def run_engines(policy: str, prompts: list[str], max_tokens: int, repeats: int, reloads: int,
                bindings: list[str]) -> dict:
    """Every engine figure, in one process with at most two engines alive (one start each; see module doc)."""
    from posttrain.config import RolloutConfig
    from posttrain.rollout import live
    from posttrain.rollout.engine import VLLMEngine

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
    cached, uncached = (RolloutConfig(max_model_len=MAX_MODEL_LEN, temperature=TEMPERATURE, enable_prefix_caching=on)
                        for on in (True, False))
    result: dict = {}
    other = None
    try:
        # step 1. the live engine (prefix caching on, vLLM's default binding), started as the loop starts it
        started = time.perf_counter()
        engine = live.acquire(policy, cached, version=0)
        result["start_s"] = round(time.perf_counter() - started, 2)
        result["kv_block_size"] = engine.info[0]["block_size"]
        result["engine_processes"] = engine.info
        # step 2. prefix caching on vs off, in turns
        started = time.perf_counter()
        other = VLLMEngine(policy, uncached)
        second_start_s = time.perf_counter() - started
        result["prefix_caching"] = interleaved({"on": engine, "off": other}, prompts, max_tokens, repeats)
        # step 3. in-place reloads vs a restart: what acquire does when the engine key changes (shutdown + start)
        result["reload"] = reload_times(policy, cached, reloads)
        started = time.perf_counter()
        other.close()
        shutdown_s = time.perf_counter() - started
        result["restart"] = {"restart_s": round(shutdown_s + second_start_s, 2), "shutdown_s": round(shutdown_s, 2),
                             "start_s": round(second_start_s, 2)}
        # step 4. vLLM's CPU binding: the default (the live engine) vs each other binding, in turns
        result["binding"] = {}
        for name in bindings:
            variables, fields = BINDINGS[name]
            with environment(variables):
                other = VLLMEngine(policy, replace(cached, **fields))
            result["binding"][name] = interleaved({"default": engine, name: other}, prompts, max_tokens, repeats)
            result["binding"][name]["engine_processes"] = other.info
            other.close()
    finally:
        if other is not None:
            other.close()
        live.shutdown_all()
    return result


# --- the transformers side (a child process) ---------------------------------------------------------------------


def run_hf(policy: str, prompts: list[str], max_tokens: int, dtype: str) -> dict:
    """One ``generate`` call over ``prompts`` x n samples of exactly ``max_tokens`` new tokens, after a warm-up."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(os.cpu_count() or 1)
    tokenizer = AutoTokenizer.from_pretrained(policy, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(policy, dtype=getattr(torch, dtype)).eval()

    def generate(texts: list[str], new_tokens: int):
        batch = tokenizer(texts, return_tensors="pt", padding=True)
        out = model.generate(**batch, do_sample=True, temperature=TEMPERATURE, top_k=0, top_p=1.0,
                             num_return_sequences=N, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             pad_token_id=tokenizer.pad_token_id)
        return out.shape[0] * (out.shape[1] - batch.input_ids.shape[1])

    with torch.inference_mode():
        generate(prompts[:2], 4)  # warm-up
        started = time.perf_counter()
        tokens = generate(prompts, max_tokens)
        seconds = time.perf_counter() - started
    return {"prompts": len(prompts), "seconds": round(seconds, 2), "tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1), "torch_threads": torch.get_num_threads()}


# --- the parent --------------------------------------------------------------------------------------------------


def side(args: argparse.Namespace, name: str) -> dict:
    """Run one side in a child process (``--side name``); its result, or the error it ended with."""
    command = [sys.executable, __file__, "--side", name, "--policy", args.policy, "--prompts", str(args.prompts),
               "--prefix-tokens", str(args.prefix_tokens), "--max-new-tokens", str(args.max_new_tokens),
               "--repeats", str(args.repeats), "--reloads", str(args.reloads), "--hf-prompts", str(args.hf_prompts),
               "--bindings", args.bindings]
    env = {k: v for k, v in os.environ.items() if k not in {var for b, _ in BINDINGS.values() for var in b}}
    print(f"{name} ...", file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env={**env, "PYTHONUNBUFFERED": "1"})
    lines = done.stdout.strip().splitlines()  # vLLM logs to stdout too; the result is the last JSON line
    results = [line for line in lines if line.startswith("{")]
    if done.returncode != 0 or not results:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-1500:]}"}
    result = json.loads(results[-1])
    binding = binding_log(lines)
    if binding:
        result["vllm_binding_log"] = binding
    result["load_avg_1m_before"] = round(load, 2)
    print(f"  {json.dumps(result)[:400]}", file=sys.stderr, flush=True)
    return result


def binding_log(lines: list[str]) -> list[str]:
    """What vLLM says it bound (its ``core ids=`` / ``reserved_cpus=`` log lines, without their prefix).

    >>> binding_log(["(EngineCore pid=7) INFO 12-01 09:21:10 [ompmultiprocessing.py:185] \tlocal_rank=0, core ids=[0]",
    ...              "other line"])
    ['local_rank=0, core ids=[0]']
    """
    return sorted({line.split("]", 1)[-1].strip() for line in lines if "core ids=" in line or "reserved_cpus=" in line})


def agent_steps(policy: str) -> dict:
    """Oracle episodes on the ``agent_repo`` suite (``agent_oracle.run_suite``), in the model's chat format."""
    from agent_oracle import run_suite  # benchmarks/ is this script's sys.path[0]

    try:
        return run_suite("bwrap-warm", tokenizer_dir=policy, noop=False)["oracle"]
    except Exception as exc:  # noqa: BLE001 - the throughput figures stand without it
        return {"error": f"{type(exc).__name__}: {exc}"}


def ratio(a: float | None, b: float | None, digits: int = 2) -> float | None:
    return round(a / b, digits) if a and b else None


def paired_ratio(turns: dict, a: str, b: str, digits: int = 3) -> float | None:
    """The median over rounds of engine ``a``'s tokens/s over engine ``b``'s in the same round (``interleaved``): a
    round that the machine's other load slowed down moves it less than it moves summed seconds."""
    if a not in turns or b not in turns:
        return None
    rounds = zip(turns[a]["runs"], turns[b]["runs"])
    return round(statistics.median(x["tokens_per_s"] / y["tokens_per_s"] for x, y in rounds), digits)


def tier_isolation(policy: str) -> dict | None:
    """``tiers.measure`` with this script's policy as the short tier's, at ``tiers.py``'s defaults (16 prompts)."""
    from tiers import measure  # benchmarks/ is this script's sys.path[0]

    print("tiers ...", file=sys.stderr, flush=True)
    try:
        return measure(policy)
    except Exception as exc:  # noqa: BLE001 - the other figures stand without it
        return {"error": f"{type(exc).__name__}: {str(exc)[-1500:]}"}


def summary(engines: dict, hf: dict, tiers: dict | None = None) -> tuple[dict, dict]:
    """The ratios the issue asks for (the engine: prefix caching on, vLLM's default binding; engine against engine:
    ``paired_ratio``; tier isolation: ``tiers.isolation``), and each target's verdict (None: not measured)."""
    caching = engines.get("prefix_caching", {})
    on = caching.get("on", {}).get("tokens_per_s")
    restart_s = engines.get("restart", {}).get("restart_s")
    ratios = {"engine_vs_hf_fp32": ratio(on, hf.get("fp32", {}).get("tokens_per_s")),
              "engine_vs_hf_bf16": ratio(on, hf.get("bf16", {}).get("tokens_per_s")),
              "prefix_caching_speedup": paired_ratio(caching, "on", "off"),
              "reload_over_restart": ratio(engines.get("reload", {}).get("reload_ms_median"),
                                           restart_s * 1000 if restart_s else None, 5),
              "tier_isolation": (tiers or {}).get("ratio")}
    for name, turns in engines.get("binding", {}).items():
        ratios[f"binding_{name}_vs_default"] = paired_ratio(turns, name, "default")
    met = {}
    for name, target in TARGETS.items():
        at_most = name == "reload_over_restart"
        value = ratios[name]
        met[f"{name}_{'le' if at_most else 'ge'}_{target:g}"] = (
            None if value is None else value <= target if at_most else value >= target)
    return ratios, met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--prefix-tokens", type=int, default=120, help="tokens of the shared system prefix")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved timed rounds of each engine comparison")
    parser.add_argument("--reloads", type=int, default=6)
    parser.add_argument("--hf-prompts", type=int, default=0,
                        help="prompts in transformers' timed batch (x n sequences); 0: all, the engine's workload")
    parser.add_argument("--bindings", default="one_engine,vllm_processes",
                        help=f"comma-separated vLLM CPU bindings compared with the default, of {sorted(BINDINGS)}")
    parser.add_argument("--skip-agent", action="store_true")
    parser.add_argument("--skip-tiers", action="store_true", help="no tier-isolation figure (benchmarks/tiers.py)")
    parser.add_argument("--policy", help="an HF causal-LM dir with a tokenizer, instead of the benchmark model")
    parser.add_argument("--side", choices=["engines", "hf-float32", "hf-bfloat16"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.hf_prompts = args.hf_prompts or args.prompts
    bindings = [b for b in args.bindings.split(",") if b]
    if any(b not in BINDINGS for b in bindings):
        parser.error(f"--bindings: names of {sorted(BINDINGS)}")
    model = args.policy or asdict(model_config())
    args.policy = str(Path(args.policy).resolve()) if args.policy else policy_dir()
    prompts, shape = workload(args.policy, args.prompts, args.prefix_tokens)
    if args.side == "engines":
        print(json.dumps(run_engines(args.policy, prompts, args.max_new_tokens, args.repeats, args.reloads, bindings)))
        return
    if args.side:
        print(json.dumps(run_hf(args.policy, prompts[:args.hf_prompts], args.max_new_tokens, args.side[3:])))
        return

    import rl_step  # its parameter_count; benchmarks/ is this script's sys.path[0]

    load_start = os.getloadavg()[0]
    engines = side(args, "engines")
    hf = {"fp32": side(args, "hf-float32"), "bf16": side(args, "hf-bfloat16")}
    agent = None if args.skip_agent else agent_steps(args.policy)
    tiers = None if args.skip_tiers else tier_isolation(args.policy)
    ratios, met = summary(engines, hf, tiers)
    print(json.dumps({
        "benchmark": "rollout", "parameters": rl_step.parameter_count(args.policy), "model": model,
        "workload": {**shape, "max_new_tokens": args.max_new_tokens, "temperature": TEMPERATURE,
                     "hf_prompts": min(args.hf_prompts, shape["prompts"]),
                     "kv_block_size": engines.get("kv_block_size"), "kv_cache_gib": float(KV_CACHE_GIB)},
        "cpus": os.cpu_count(), "load_avg_1m_start": round(load_start, 2),
        "load_avg_1m_end": round(os.getloadavg()[0], 2),
        "engine": engines, "hf": hf, "agent_oracle": agent,
        "tier_isolation": tiers,
        "ratios": ratios, "targets_met": met}))

if __name__ == "__main__":
    main()
