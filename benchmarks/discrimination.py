"""Benchmark: admission's discrimination check with model policies: the demo's starting policy (v0) as the weak
policy, a version trained from it as the strong one, both sampled through vLLM, on the demo suite.

It runs what admission runs (``posttrain.admission.admit`` with checks ``solvability`` and ``discrimination``: the
reference must pass, then each policy samples ``--k`` completions per env and every one is verified in the sandbox)
and reports how many envs the gap rejects at ``--min-gap`` (default: ``AdmissionConfig().min_gap``, what a spec
without its own ``min_gap`` needs), and how many it would reject at other thresholds. Each env is put in one class by
its two pass rates, so that what is rejected can be checked against what carries no signal for GRPO (a group whose
samples all pass or all fail has zero advantage everywhere):

- ``both_unsolved``: neither policy passes a sample; ``both_solved``: both pass every sample;
- ``tie_between``: the same rate strictly between 0 and 1 (variance, but training did not move it);
- ``regressed``: the strong policy passes less often; ``improved``: more often.

The last line is one JSON object: envs, admitted and rejected at ``--min-gap`` (overall and per split), envs per
class with how many of each were rejected, rejections per threshold, and ``examples``: up to ``--examples`` envs of
each class with both rates and the verdict, for reading by hand (also printed one per line before it; ``--examples
1000`` lists every env). Policies are sampled as the loop's rollout samples (its temperature and token budget: the
distribution GRPO's groups come from) unless ``--temperature`` / ``--max-new-tokens`` say otherwise. About a minute
for 410 envs at k = 8 or 16 once the trained version exists.

The strong policy is any policy reference; a registered version needs the MLflow store it was registered in. The
default is the latest registered version (``candidate``): in the demo, ``champion`` stays at v0, since the regression
gate fails a version that breaks any env v0 passes. A trained version in ~3-5 minutes on a 2-core CPU machine
(``make demo`` runs the same loop for 30 iterations):

    export DS_ACCELERATOR=cpu MLFLOW_TRACKING_URI=sqlite:////tmp/disc/mlflow.db
    export POSTTRAIN_ARTIFACT_ROOT=file:///tmp/disc/artifacts
    pyflyte run workflows/rl_loop.py rl_loop --cfg '{"iterations": 10}'
    python benchmarks/discrimination.py --k 8         # weak demo, strong models:/posttrain-policy@candidate
    python benchmarks/discrimination.py --strong models:/posttrain-policy/2 --k 16 --min-gap 0.25
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posttrain.admission import admit  # noqa: E402
from posttrain.admission.discrimination import gap_decision  # noqa: E402
from posttrain.config import DEMO_SUITE, AdmissionConfig, RolloutConfig, SandboxConfig  # noqa: E402
from posttrain.envs.suite import load_suite  # noqa: E402
from posttrain.sandbox import make_sandbox  # noqa: E402
from posttrain.tracking.policies import resolved  # noqa: E402

CLASSES = ("both_unsolved", "both_solved", "tie_between", "regressed", "improved")
THRESHOLDS = (0.0, 0.05, 0.1, 0.125, 0.25, 0.5)
# discrimination_row's detail: "strong 'S' 0.75 - weak 'W' 0.25 = gap 0.50 (min_gap 0.1, k=8/8)"
RATES = re.compile(r"^discrimination\.\w+: strong '.*' (?P<strong>[\d.]+) - weak '.*' (?P<weak>[\d.]+) = gap")


def rates(detail: str) -> tuple[float, float]:
    """(weak, strong) pass rates of one discrimination row, read off its detail (two decimals: enough to tell rates
    of k <= 100 samples apart; the gap itself is the row's value)."""
    match = RATES.match(detail)
    if match is None:
        raise ValueError(f"not a discrimination verdict: {detail!r}")
    return float(match["weak"]), float(match["strong"])


def signal_class(weak: float, strong: float) -> str:
    """Which of ``CLASSES`` an env falls in by its two pass rates."""
    if weak == strong:
        return "both_unsolved" if strong == 0 else "both_solved" if strong == 1 else "tie_between"
    return "improved" if strong > weak else "regressed"


class Env(NamedTuple):
    """One env's discrimination verdict."""

    env_id: str
    split: str
    weak: float
    strong: float
    gap: float
    admitted: bool

    @property
    def signal(self) -> str:
        return signal_class(self.weak, self.strong)


def summarize(details, splits: dict[str, str], min_gap: float, examples: int) -> dict:
    """The figures of one admission's discrimination rows (``details``: ``AdmissionDetails``)."""
    rows = details[details["check"] == "discrimination"]
    envs = [Env(row.env_id, splits[row.env_id], *rates(row.detail), row.value, bool(row.passed))
            for row in rows[rows["code"] != "infra"].itertuples()]
    rejected = [env for env in envs if not env.admitted]

    def by_class(items: list[Env]) -> dict[str, int]:
        return {name: sum(env.signal == name for env in items) for name in CLASSES}

    def listed(signal: str) -> list[dict]:  # spread over the suite, not its first few (one family of names)
        members = [env._asdict() for env in envs if env.signal == signal]
        return members[::max(1, len(members) // examples)][:examples] if examples else []

    return {
        "envs": len(envs), "infra": int((rows["code"] == "infra").sum()), "min_gap": min_gap,
        "admitted": len(envs) - len(rejected), "rejected": len(rejected),
        "envs_by_split": dict(Counter(env.split for env in envs)),
        "rejected_by_split": dict(Counter(env.split for env in rejected)),
        "classes": by_class(envs), "rejected_by_class": by_class(rejected),
        "rejected_at": {f"{t:g}": sum(not gap_decision(0.0, env.gap, t)[0] for env in envs) for t in THRESHOLDS},
        "examples": {signal: listed(signal) for signal in CLASSES},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", default=DEMO_SUITE)
    parser.add_argument("--weak", default="demo", help="a policy reference or scripted policy (default: demo, v0)")
    parser.add_argument("--strong", default="models:/posttrain-policy@candidate",
                        help="a policy reference (default: the latest registered version)")
    parser.add_argument("--k", type=int, default=8, help="samples per env and policy")
    parser.add_argument("--min-gap", type=float, default=AdmissionConfig().min_gap)
    parser.add_argument("--temperature", type=float, default=RolloutConfig().temperature)
    parser.add_argument("--max-new-tokens", type=int, default=RolloutConfig().max_new_tokens)
    parser.add_argument("--examples", type=int, default=5, help="envs listed per class")
    parser.add_argument("--backend", default=SandboxConfig().backend)
    args = parser.parse_args(argv)
    cfg = AdmissionConfig(checks=["solvability", "discrimination"], weak_policy=args.weak, strong_policy=args.strong,
                          k=args.k, min_gap=args.min_gap, temperature=args.temperature,
                          max_new_tokens=args.max_new_tokens)
    sandbox_cfg = SandboxConfig(backend=args.backend)
    splits = {spec.id: spec.split for spec in load_suite(args.suite).envs}
    box = make_sandbox(sandbox_cfg)
    try:
        started = time.perf_counter()
        result = admit(args.suite, box, sandbox_cfg, resolved(cfg), rollout=RolloutConfig())
        seconds = time.perf_counter() - started
    finally:
        box.close()
    out = summarize(result.details, splits, args.min_gap, args.examples)
    for signal, listed in out["examples"].items():
        for env in listed:
            verdict = "admitted" if env["admitted"] else "rejected"
            print(f"{signal:13} {env['env_id']:28} {env['split']:5} weak {env['weak']:.2f} strong {env['strong']:.2f} "
                  f"{verdict}")
    print(json.dumps({"weak": args.weak, "strong": args.strong, "k": args.k, "temperature": args.temperature,
                      "max_new_tokens": args.max_new_tokens, "seconds": round(seconds, 1), **out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
