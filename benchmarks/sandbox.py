"""Benchmark: the same programs, the same run, five ways: an unisolated subprocess (baseline), bwrap, warm bwrap
slots (``bwrap-warm``), Docker cold (one ``containers.run``-style container per execution) and the Docker warm pool.

Workload: the ``python_tests`` verifier's real executions (trusted harness + reference solution) for the first
demo envs, sent through ``run_many`` (the scheduler) at concurrency 1 and 2. Because this machine may be shared,
the modes are measured in interleaved rounds (baseline, bwrap, warm pool, cold, then again) and each mode's
throughput is its executions over its summed wall time. Start latency is the wall time of a no-op program
(``true``): everything a backend adds around a program; ``backend_start_ms`` is the backend's own "environment
ready" time (``ExecutionResult.start_ms``), and the pool reports how long taking a warm container took
(``acquire_ms``). Targets: bwrap >= 0.7x the baseline's throughput, warm pool >= 4x Docker cold's, pool p50
acquire <= 10 ms.

Reward-stage throughput (``reward_stage``): what the RL loop's reward stage does with one iteration's completions,
``verify_many`` of ``--samples`` demo completions (half the reference, half a wrong program) at the default
``batch_concurrency``, host side included, per bwrap backend. Target: >= 100 verifications/s (issue 9).

    python benchmarks/sandbox.py                       # everything, ~3-6 minutes
    python benchmarks/sandbox.py --quick               # fewer rounds
    python benchmarks/sandbox.py --skip-docker         # baseline and bwrap only

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posttrain.config import DEMO_SUITE, SandboxConfig  # noqa: E402
from posttrain.envs.suite import load_suite  # noqa: E402
from posttrain.envs.verifiers import python_tests, verify_many  # noqa: E402
from posttrain.sandbox import Execution, ExecutionResult, Scheduler, make_sandbox  # noqa: E402
from posttrain.sandbox.workspace import checked_files, resolve_command, sandbox_env, write_tree  # noqa: E402

CFG = SandboxConfig()
NOOP = Execution(files={}, command=["true"], runtime="bash")


class Unisolated:
    """The baseline: a temp dir with the files, the program as a plain subprocess; no isolation at all."""

    name = "unisolated"

    def run(self, execution: Execution) -> ExecutionResult:
        t0 = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix="pt-bench-"))
        try:
            write_tree(work / "w", checked_files(execution.files))
            env = {**sandbox_env(execution), "HOME": str(work)}
            t_start = time.monotonic()
            try:
                done = subprocess.run(resolve_command(execution), cwd=work / "w", env=env,
                                      input=execution.stdin.encode(), capture_output=True,
                                      timeout=execution.timeout_s)
                code, out, err, late = done.returncode, done.stdout, done.stderr, False
            except subprocess.TimeoutExpired as exc:
                code, out, err, late = None, exc.stdout or b"", exc.stderr or b"", True
            return ExecutionResult(exit_code=code, stdout=out.decode(errors="replace"),
                                   stderr=err.decode(errors="replace"), timed_out=late,
                                   start_ms=(t_start - t0) * 1000, run_ms=(time.monotonic() - t_start) * 1000)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def close(self) -> None:
        pass


def workload(n: int) -> list[Execution]:
    specs = [s for s in load_suite(DEMO_SUITE).envs if s.verifier_kind == "python_tests"][:n]
    return [python_tests.build_execution(s, s.reference, CFG, f"{i:032d}") for i, s in enumerate(specs)]


def reward_stage(box, samples: int) -> dict:
    """Verifications per second of ``samples`` demo completions through ``verify_many``, as the reward stage runs."""
    specs = [s for s in load_suite(DEMO_SUITE).envs if s.verifier_kind == "python_tests"]
    pairs = [(spec, spec.reference if i % 2 == 0 else f"def {spec.entry_point}(x):\n    return 0\n")
             for i, spec in enumerate(specs[i % len(specs)] for i in range(samples))]
    verify_many(pairs[:4], box, CFG)  # warm-up
    t0 = time.perf_counter()
    verdicts = verify_many(pairs, box, CFG)
    seconds = time.perf_counter() - t0
    return {"verifications_per_s": round(samples / seconds, 1), "samples": samples,
            "concurrency": CFG.batch_concurrency, "infra_errors": sum(bool(v.infra_error) for v in verdicts),
            "passed": sum(v.passed for v in verdicts)}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def measure(box, executions: list[Execution], concurrency: int) -> tuple[float, list[ExecutionResult]]:
    scheduler = Scheduler(max_concurrency=concurrency)
    t0 = time.perf_counter()
    results = scheduler.run_many(box, executions, concurrency=concurrency, start_retries=0)
    return time.perf_counter() - t0, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=12, help="demo envs in the workload (default 12)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per concurrency (default 3)")
    parser.add_argument("--cold-programs", type=int, default=6, help="executions per round for Docker cold")
    parser.add_argument("--noops", type=int, default=20, help="no-op executions per mode for start latency")
    parser.add_argument("--quick", action="store_true", help="1 round, fewer programs")
    parser.add_argument("--skip-docker", action="store_true")
    parser.add_argument("--samples", type=int, default=192, help="completions of the reward-stage figure")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.programs, args.cold_programs, args.noops = 1, 8, 4, 10

    modes: dict[str, object] = {"unisolated": Unisolated(), "bwrap": make_sandbox("bwrap"),
                                "bwrap_warm": make_sandbox("bwrap-warm")}
    docker_error = ""
    if not args.skip_docker:
        try:
            from posttrain.sandbox.docker import DockerPool, DockerSandbox

            pool = DockerPool(replace(CFG.docker, size=4, max_size=4), memory_mb=CFG.memory_mb)
            if not pool.wait_ready(4, timeout_s=180):
                raise RuntimeError(f"the warm pool did not fill: {pool.last_error}")
            modes["docker_warm"] = pool
            modes["docker_cold"] = DockerSandbox(CFG.docker.image)
        except Exception as exc:  # noqa: BLE001 - report it and benchmark what we can
            docker_error = f"{type(exc).__name__}: {exc}"
            print(f"docker skipped: {docker_error}", file=sys.stderr)

    programs = workload(args.programs)
    wall = {(m, c): 0.0 for m in modes for c in (1, 2)}
    count = {(m, c): 0 for m in modes for c in (1, 2)}
    failures: dict[str, int] = {m: 0 for m in modes}
    backend_start: dict[str, list[float]] = {m: [] for m in modes}
    acquire: list[float] = []
    try:
        for name, box in modes.items():  # warm-up: page cache, images, interpreters
            measure(box, programs[:2], 1)
        for rnd in range(args.rounds):
            for concurrency in (1, 2):
                for name, box in modes.items():
                    batch = programs[:args.cold_programs] if name == "docker_cold" else programs
                    seconds, results = measure(box, batch, concurrency)
                    wall[name, concurrency] += seconds
                    count[name, concurrency] += len(batch)
                    failures[name] += sum(not r.ok for r in results)
                    backend_start[name] += [r.start_ms for r in results]
                    acquire += [r.extra["acquire_ms"] for r in results if "acquire_ms" in r.extra]
                    print(f"round {rnd + 1} c={concurrency} {name:11s} {len(batch) / seconds:7.2f} exec/s "
                          f"({len(batch)} in {seconds:.2f} s)", file=sys.stderr, flush=True)
        latency: dict[str, list[float]] = {}
        for name, box in modes.items():
            samples = []
            for _ in range(args.noops if name != "docker_cold" else max(4, args.noops // 4)):
                t0 = time.perf_counter()
                r = box.run(NOOP)
                samples.append((time.perf_counter() - t0) * 1000)
                failures[name] += not r.ok
                if "acquire_ms" in r.extra:
                    acquire.append(r.extra["acquire_ms"])
            latency[name] = samples
        stage = {name: reward_stage(modes[name], args.samples) for name in ("bwrap", "bwrap_warm")}
    finally:
        for box in modes.values():
            box.close()

    report: dict = {"benchmark": "sandbox", "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0],
                    "workload": f"{len(programs)} python_tests harness runs (demo envs, reference solutions)",
                    "rounds": args.rounds, "modes": {}}
    for name in modes:
        report["modes"][name] = {
            "exec_per_s_c1": round(count[name, 1] / wall[name, 1], 2),
            "exec_per_s_c2": round(count[name, 2] / wall[name, 2], 2),
            "start_latency_p50_ms": round(percentile(latency[name], 50), 1),
            "start_latency_p99_ms": round(percentile(latency[name], 99), 1),
            "backend_start_p50_ms": round(percentile(backend_start[name], 50), 1),
            "backend_start_p99_ms": round(percentile(backend_start[name], 99), 1),
            "executions": count[name, 1] + count[name, 2], "not_ok": failures[name]}
    m = report["modes"]
    ratios = {f"{name}_vs_unisolated_c{c}": round(m[name][f"exec_per_s_c{c}"] / m["unisolated"][f"exec_per_s_c{c}"],
                                                  3) for name in ("bwrap", "bwrap_warm") for c in (1, 2)}
    targets = {f"{name}_ge_0.7x_unisolated": all(ratios[f"{name}_vs_unisolated_c{c}"] >= 0.7 for c in (1, 2))
               for name in ("bwrap", "bwrap_warm")}
    report["reward_stage"] = stage
    targets["reward_stage_ge_100_per_s"] = stage["bwrap_warm"]["verifications_per_s"] >= 100
    if "docker_warm" in m:
        m["docker_warm"]["acquire_p50_ms"] = round(percentile(acquire, 50), 3)
        m["docker_warm"]["acquire_p99_ms"] = round(percentile(acquire, 99), 3)
        for c in (1, 2):
            ratios[f"warm_vs_cold_c{c}"] = round(m["docker_warm"][f"exec_per_s_c{c}"]
                                                 / m["docker_cold"][f"exec_per_s_c{c}"], 2)
        targets["warm_ge_4x_cold"] = all(ratios[f"warm_vs_cold_c{c}"] >= 4 for c in (1, 2))
        targets["warm_acquire_p50_le_10ms"] = m["docker_warm"]["acquire_p50_ms"] <= 10
    else:
        report["docker_skipped"] = docker_error or "--skip-docker"
    report["ratios"], report["targets_met"] = ratios, targets
    print(json.dumps(report))


if __name__ == "__main__":
    main()
