"""Benchmark: short-task latency under a long-task flood, with and without long work yielding the CPU
(``SandboxConfig.deprioritise_long``, ``posttrain.sandbox.priority``).

Reserved slots keep a short execution from waiting for a *slot* behind long ones, but not for the *cores*: a flood
of CPU-bound long executions shares them with it. Here ``--flood`` long executions (a Python busy loop each, 1 core
of quota, a deadline in the long tier) run throughout, while a stream of ``--shorts`` short executions goes through
the same scheduler one after another: the real ``python_tests`` harness runs of the demo envs' reference solutions
(``benchmarks/sandbox.py``'s workload). A short execution's latency is its wall time from ``submit`` to its result.

Modes, in interleaved rounds (``alone``, ``flood_off``, ``flood_on``, then reversed, ...) because the machine may be
shared: ``alone`` (no flood: the baseline), ``flood_off`` (the flood, long work keeps its CPU weight) and
``flood_on`` (the flood, long work yields while a short execution runs: the default). Per mode: p50 and p99 latency
of the short executions; for the flood, the cores it kept (``long_cores``: the long executions' CPU seconds over
their run time, which is the stream's plus a warm-up) and how long each long execution yielded on average. The
long executions are held running by a gate (a host directory bound read-only in the sandbox; the benchmark creates
the file they wait for once the stream is done). Target: under the flood with yielding on, the short p50 within
1.5x of its p50 alone.

    python benchmarks/preemption.py                       # warm bwrap slots (the default backend), ~15 s
    python benchmarks/preemption.py --backend bwrap       # one bwrap per execution
    python benchmarks/preemption.py --rounds 1 --shorts 12

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sandbox import percentile, workload  # noqa: E402  (benchmarks/sandbox.py)

from posttrain.config import SandboxConfig  # noqa: E402
from posttrain.sandbox import Execution, Scheduler, cgroup  # noqa: E402
from posttrain.sandbox.bwrap import BwrapSandbox  # noqa: E402
from posttrain.sandbox.warm import WarmBwrapSandbox  # noqa: E402

CFG = SandboxConfig()
MODES = ("alone", "flood_off", "flood_on")
BUSY = "import os\nwhile not os.path.exists('/gate/{0}'):\n    sum(range(20000))\n"  # a core's worth until released
LONG_TIMEOUT_S = 600.0  # far into the long tier; the gate ends them long before


def make_box(backend: str, gate: Path, flood: int):
    """The backend with the gate bound at ``/gate``: a slot per execution in flight for warm slots."""
    options = {"extra_ro_binds": [(str(gate), "/gate")], "cpus": CFG.cpus}
    if backend == "bwrap-warm":
        return WarmBwrapSandbox(slots=flood + 2, **options)
    return BwrapSandbox(**options)


def run_mode(box, mode: str, shorts: list[Execution], flood: int, gate: Path, label: str) -> dict:
    """One stream of ``shorts`` through a scheduler of its own, beside ``flood`` long executions (none ``alone``)."""
    sched = Scheduler(max_concurrency=flood + 2, long_slots=flood, short_timeout_s=CFG.short_timeout_s,
                      deprioritise_long=mode == "flood_on")
    stop = f"stop-{label}"
    longs = [sched.submit(box, Execution(files={"main.py": BUSY.format(stop)}, command=["python3", "main.py"],
                                         timeout_s=LONG_TIMEOUT_S)) for _ in range(flood if mode != "alone" else 0)]
    for execution in shorts[:2]:  # warm-up, and the flood's slots started and burning before the stream
        sched.submit(box, execution).result()
    latencies, failures = [], 0
    for execution in shorts:
        t = time.perf_counter()
        result = sched.submit(box, execution).result()
        latencies.append((time.perf_counter() - t) * 1000)
        failures += not result.ok
    (gate / stop).touch()
    long_results = [future.result() for future in longs]
    return {"latencies_ms": latencies, "failures": failures, "long_not_ok": sum(not r.ok for r in long_results),
            "long_cpu_s": sum(r.cpu_s or 0.0 for r in long_results),
            "long_wall_s": max((r.run_ms / 1000 for r in long_results), default=0.0),
            "deprioritised_s": [r.extra.get("deprioritised_s", 0.0) for r in long_results]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("bwrap-warm", "bwrap"), default="bwrap-warm")
    parser.add_argument("--flood", type=int, default=2 * (os.cpu_count() or 1),
                        help="long CPU-bound executions running throughout (default: 2 per core)")
    parser.add_argument("--shorts", type=int, default=24, help="short executions per mode and round (default 24)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds of the three modes (default 4)")
    args = parser.parse_args()
    if reason := cgroup.limits_unavailable_reason():
        sys.exit(f"no cgroups for executions here, nothing to weight: {reason}")

    programs = workload(12)
    shorts = [programs[i % len(programs)] for i in range(args.shorts)]
    gate = Path(tempfile.mkdtemp(prefix="posttrain-gate-"))
    gate.chmod(0o755)  # the sandboxes' host uids read it
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    try:
        with make_box(args.backend, gate, args.flood) as box:
            for rnd in range(args.rounds):
                for mode in MODES if rnd % 2 == 0 else tuple(reversed(MODES)):
                    run = run_mode(box, mode, shorts, args.flood, gate, f"{mode}-{rnd}")
                    runs[mode].append(run)
                    print(f"round {rnd + 1} {mode:9s} p50 {percentile(run['latencies_ms'], 50):7.1f} ms  "
                          f"p99 {percentile(run['latencies_ms'], 99):7.1f} ms", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(gate, ignore_errors=True)

    report: dict = {"benchmark": "preemption", "backend": args.backend, "cpus": os.cpu_count(),
                    "load_avg_1m": round(os.getloadavg()[0], 2), "flood": args.flood, "rounds": args.rounds,
                    "shorts_per_round": args.shorts, "cgroup_version": cgroup.host().version,
                    "workload": "python_tests harness runs (demo envs, reference solutions), one at a time",
                    "modes": {}}
    for mode in MODES:
        latencies = [ms for run in runs[mode] for ms in run["latencies_ms"]]
        report["modes"][mode] = {
            "p50_ms": round(percentile(latencies, 50), 1), "p99_ms": round(percentile(latencies, 99), 1),
            "mean_ms": round(statistics.fmean(latencies), 1), "executions": len(latencies),
            "not_ok": sum(run["failures"] for run in runs[mode])}
        if mode != "alone":
            yielded = [s for run in runs[mode] for s in run["deprioritised_s"]]
            report["modes"][mode].update(
                long_cores=round(sum(run["long_cpu_s"] for run in runs[mode])
                                 / sum(run["long_wall_s"] for run in runs[mode]), 2),
                long_not_ok=sum(run["long_not_ok"] for run in runs[mode]),
                long_yielded_s_mean=round(statistics.fmean(yielded), 2),
                long_run_s_mean=round(statistics.fmean(run["long_wall_s"] for run in runs[mode]), 2))
    m = report["modes"]
    report["ratios"] = {f"{mode}_vs_alone_{q}": round(m[mode][f"{q}_ms"] / m["alone"][f"{q}_ms"], 2)
                        for mode in ("flood_off", "flood_on") for q in ("p50", "p99")}
    report["targets_met"] = {"flood_on_p50_le_1.5x_alone": report["ratios"]["flood_on_vs_alone_p50"] <= 1.5}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
