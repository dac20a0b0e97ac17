"""Benchmark: the multi-domain demo (``make demo-multi``) against a run on each of its domains alone.

Each run is ``pyflyte run workflows/rl_loop.py rl_loop`` with ``LoopConfig.multi_domain_demo()`` (whole, as
``--cfg``), into a fresh MLflow store under ``/tmp``: once on ``multi_domain`` (code, finance, scene and terminal
envs together) and once per member suite with ``suite`` set to it, the same policy, iterations and evaluation. A
single-turn domain's run alone rolls out as many of its envs an iteration as the multi-domain run gives it
(``rollout.envs_per_iteration`` times its share, rounded up: 11 of the preset's 32 among three domains), so the
comparison asks whether training beside the other domains hurts one, at the same data of its own; the agent tier
(terminal) is the same in both. ``--alone-batch preset`` runs it on the preset's whole batch instead (three times the
domain's data in the same iterations: what a user who trains one domain only would run). From each run's iteration
runs: every domain's greedy pass@1 (``eval/pass_at_1/domain_<d>``) and, for the single-turn domains, sampled pass@1
at each evaluated version, and the run's wall seconds.

Targets (issue 25): in the multi-domain run, every domain's greedy pass@1 rises by >= 0.10 from v0 to the last
version, in a run of <= 25 min; and no domain ends more than 0.03 below the run trained on that domain alone.

    python benchmarks/multi_domain.py                      # the multi-domain run, then the four single-domain ones
    python benchmarks/multi_domain.py --runs multi_domain  # one of them (comma-separated suite names)
    python benchmarks/multi_domain.py --policy /tmp/curve/policy-step2000   # from another warm start
    python benchmarks/multi_domain.py --runs multi_domain --cfg '{"train": {"learning_rate": 2e-4}}'
    python benchmarks/multi_domain.py --runs demo_python --alone-batch preset   # code alone, on the whole batch

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # loop.py, when run from elsewhere

from loop import merged, run_loop  # noqa: E402

from posttrain.config import LoopConfig  # noqa: E402
from posttrain.envs.suite import load_suite  # noqa: E402
from posttrain.locations import local_copy  # noqa: E402

SUITES = ("multi_domain", "demo_python", "finance_facts", "scene_layouts", "terminal_tasks")
GREEDY, SAMPLED = "eval/pass_at_1/domain_", "eval/pass_at_1_sampled/domain_"


def domain_curves(uri: str) -> dict[str, dict[int, dict[str, float]]]:
    """Per domain, per evaluated version: its greedy (and, where sampled, sampled) pass@1, from the latest rl_loop
    run's iteration runs in ``uri``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiments = [experiment.experiment_id for experiment in client.search_experiments()]
    curves: dict[str, dict[int, dict[str, float]]] = {}
    for run in client.search_runs(experiments, "tags.`posttrain.iteration` != ''", max_results=50000):
        version = int(run.data.tags["posttrain.iteration"])
        for name, value in run.data.metrics.items():
            for prefix, kind in ((GREEDY, "greedy"), (SAMPLED, "sampled")):
                if name.startswith(prefix):
                    curves.setdefault(name[len(prefix):], {}).setdefault(version, {})[kind] = round(value, 3)
    return {domain: dict(sorted(points.items())) for domain, points in sorted(curves.items())}


def summary(curves: dict[str, dict[int, dict[str, float]]]) -> dict[str, dict]:
    """Per domain: greedy pass@1 at the first and last evaluated versions and the gain between them.

    >>> summary({"finance": {0: {"greedy": 0.1, "sampled": 0.05}, 20: {"greedy": 0.3, "sampled": 0.2}}})
    {'finance': {'first': 0.1, 'last': 0.3, 'gain': 0.2, 'last_sampled': 0.2}}
    """
    out = {}
    for domain, points in curves.items():
        first, last = points[min(points)], points[max(points)]
        out[domain] = {"first": first.get("greedy"), "last": last.get("greedy"),
                       "gain": round(last.get("greedy", 0.0) - first.get("greedy", 0.0), 3),
                       "last_sampled": last.get("sampled")}
    return out


def alone_envs_per_iteration(per_iteration: int, domains: set[str], weights: dict[str, float],
                             domain: str) -> int:
    """Single-turn envs an iteration of ``domain``'s run alone: its share of ``per_iteration`` in the multi-domain
    run (``rollout.balance_domains`` over ``domains``, by ``weights``; a domain not named weighs 1), rounded up.

    >>> alone_envs_per_iteration(32, {"python", "finance", "scene"}, {}, "finance")
    11
    >>> alone_envs_per_iteration(32, {"python", "finance", "scene"}, {"python": 2}, "python")
    16
    """
    total = sum(weights.get(d, 1.0) for d in domains)
    return math.ceil(per_iteration * weights.get(domain, 1.0) / total)


def suite_settings(preset: dict, suite: str, alone_batch: str) -> dict:
    """The loop settings of the run on ``suite``: the preset with ``suite`` set, and for a single-turn member suite
    run alone with ``alone_batch`` "share", its domain's share of the preset's single-turn batch."""
    settings = {**preset, "suite": f"posttrain:envs/suites/{suite}"}
    if suite == "multi_domain" or alone_batch == "preset":
        return settings
    single = {e.domain for e in load_suite(local_copy(settings["suite"])).split("train") if e.kind == "single_turn"}
    if not single:  # the agent tier only: the same envs an iteration as in the multi-domain run
        return settings
    members = {e.domain for e in load_suite(local_copy("posttrain:envs/suites/multi_domain")).split("train")
               if e.kind == "single_turn"}
    (domain,), rollout = single, preset["rollout"]  # a member suite is one domain
    share = alone_envs_per_iteration(rollout["envs_per_iteration"], members, rollout["domain_weights"], domain)
    return merged(settings, {"rollout": {"envs_per_iteration": share}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", default=",".join(SUITES), help="suites to run the preset on (comma-separated)")
    parser.add_argument("--policy", help="the starting policy (default: the preset's, the demo-multi recipe's)")
    parser.add_argument("--cfg", default="{}", help="loop settings (JSON) merged over the preset's, in every run")
    parser.add_argument("--alone-batch", choices=("share", "preset"), default="share",
                        help="a single-turn domain's run alone: its share of the multi-domain batch, or the whole")
    args = parser.parse_args()
    preset = merged(asdict(LoopConfig.multi_domain_demo()), json.loads(args.cfg))
    if args.policy:
        preset["policy"] = str(Path(args.policy).resolve())
    runs = {}
    for suite in args.runs.split(","):
        work = Path(tempfile.mkdtemp(prefix=f"bench-multi-{suite}-"))
        wall_s, uri = run_loop(work, suite_settings(preset, suite, args.alone_batch))
        curves = domain_curves(uri)
        runs[suite] = {"wall_s": round(wall_s, 1), "mlflow": uri, "curves": curves, "summary": summary(curves)}
        print(json.dumps({suite: runs[suite]["summary"], "wall_s": runs[suite]["wall_s"]}), flush=True)
    report = {"runs": runs}
    if "multi_domain" in runs:
        multi = runs["multi_domain"]["summary"]
        alone = {domain: runs[suite]["summary"][domain] for suite in runs if suite != "multi_domain"
                 for domain in runs[suite]["summary"]}
        report["table"] = [{"domain": domain, **row, "alone_last": alone.get(domain, {}).get("last")}
                           for domain, row in multi.items()]
        report["target_gain_met"] = all(row["gain"] >= 0.10 for row in multi.values())
        report["target_time_met"] = runs["multi_domain"]["wall_s"] <= 25 * 60
        report["target_vs_alone_met"] = (all(domain in alone for domain in multi) and all(
            multi[domain]["last"] >= alone[domain]["last"] - 0.03 for domain in multi)) if alone else None
    print(json.dumps(report))


if __name__ == "__main__":
    main()
