"""Benchmark: admission wall time of the demo suite and of a generated N-env suite (default 200), all six checks.

The generated suite is written to a temp dir: the bundled suites' specs (demo_python, finance, scene, terminal,
node: whatever ``posttrain/envs/suites`` holds), taken round robin over the suites and cycled with fresh ids
(``bench/<n>/<id>``) until N envs. Each run uses the default ``AdmissionConfig`` and the bwrap sandbox. The last
line printed is one JSON object: the generated suite's envs, seconds, envs/s and per-check seconds, with the demo
suite's figures under ``demo``.

    python benchmarks/admission.py                 # demo + 200 generated envs
    python benchmarks/admission.py --envs 50 --skip-demo
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from itertools import zip_longest
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posttrain.admission import admit  # noqa: E402
from posttrain.config import DEMO_SUITE, AdmissionConfig, SandboxConfig  # noqa: E402
from posttrain.envs.suite import spec_files  # noqa: E402
from posttrain.sandbox import make_sandbox  # noqa: E402

SUITES = ROOT / "posttrain" / "envs" / "suites"


def generate_suite(out: Path, envs: int) -> Counter:
    """Write ``envs`` spec files into ``out`` by cycling over the bundled suites' specs; returns envs per suite."""
    by_suite = [[(suite.name, path) for path in spec_files(suite)]
                for suite in sorted(p for p in SUITES.iterdir() if p.is_dir())]
    sources = [pair for group in zip_longest(*by_suite) for pair in group if pair]  # round robin over suites
    per_suite: Counter = Counter()
    for n in range(envs):
        suite, path = sources[n % len(sources)]
        data = yaml.safe_load(path.read_text())
        data["id"] = f"bench/{n:04d}/{data['id']}"
        (out / f"{n:04d}_{path.name}").write_text(yaml.safe_dump(data, sort_keys=False))
        per_suite[suite] += 1
    return per_suite


def run(suite: str | Path, cfg: AdmissionConfig, sandbox_cfg: SandboxConfig, progress: bool) -> dict:
    box = make_sandbox(sandbox_cfg)
    try:
        started = time.perf_counter()
        result = admit(suite, box, sandbox_cfg, cfg, progress=progress)
        seconds = time.perf_counter() - started
    finally:
        box.close()
    rejected = result.details[result.details["status"].isin(["fail", "infra"])]
    return {"envs": result.envs, "admitted": len(result.admitted), "seconds": round(seconds, 2),
            "envs/s": round(result.envs / seconds, 3),
            "per_check_seconds": {k: round(v, 2) for k, v in result.seconds.items()},
            "executions": dict(result.executions), "executions_total": sum(result.executions.values()),
            "rejected_by_reason": dict(Counter(rejected["code"]).most_common())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, default=200)
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--concurrency", type=int, default=AdmissionConfig().batch_concurrency)
    parser.add_argument("--backend", default=SandboxConfig().backend)
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)
    cfg = AdmissionConfig(batch_concurrency=args.concurrency)
    sandbox_cfg = SandboxConfig(backend=args.backend)
    out: dict = {}
    if not args.skip_demo:
        out["demo"] = run(DEMO_SUITE, cfg, sandbox_cfg, args.progress)
        print(f"demo suite: {out['demo']['envs']} envs in {out['demo']['seconds']} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="posttrain-bench-suite-") as tmp:
        composition = generate_suite(Path(tmp), args.envs)
        generated = run(tmp, cfg, sandbox_cfg, args.progress)
    generated["composition"] = dict(composition)
    generated["concurrency"] = args.concurrency
    print(json.dumps({**generated, **out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
