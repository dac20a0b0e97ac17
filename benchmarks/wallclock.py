"""Benchmark: learning per wall-clock second, posttrain's RL loop vs TRL's ``GRPOTrainer`` on the demo.

Both sides train the demo policy (``rl_step.policy_dir("demo")``) on the demo suite's train envs with the loop's
defaults: 32 envs a round x 8 samples at temperature 0.6 (``RolloutConfig``), completions of at most 48 tokens,
learning rate 1e-4 constant (``TrainConfig``), no KL term, the round's 256 completions split into 8 optimizer steps
of 32, the same sandboxed reward (``rl_step.rewards_of``: posttrain's verifiers in sandboxes of the default backend,
copies of one completion verified once, as the loop's reward stage does; the loop also reuses the verdict of a pair
an earlier iteration verified, ``sandbox.verdict_cache_entries``, which TRL's reward function, called once a round,
does not). Both are plotted against *training seconds* and evaluated the same way at the same seconds: after both
have trained, one child process runs posttrain's own evaluation (``evaluation.greedy.evaluate_policy``: greedy and
sampled pass@1, 8 samples at 0.6 seeded alike for every policy, on the demo suite's 103 eval envs) on the starting
policy, on TRL's checkpoints and on posttrain's version at each of their times.

- posttrain: ``pyflyte run workflows/rl_loop.py rl_loop`` (the demo's config but ``--iterations``, default 400: at
  ~2.3 training seconds an iteration here about as long as TRL's 960 s; in-loop evaluation sparse, of v0 and the
  last version only unless ``--eval-every``, since it is not what is compared; admission cut to its consistency
  check, so both sides train on all train envs) into a fresh MLflow store under ``/tmp``, or an earlier run read
  from ``--mlflow-uri`` (its latest ``rl_loop`` run, or ``--run-id``). The loop logs every version v_k in iteration
  k's nested run (``tracking.log_iteration``): its ``time/*`` metrics and where its weights are (the directory the
  update wrote, tag ``posttrain.policy_uri``; an evaluated version's weights also as the run's ``policy`` artifact,
  registered as a version of ``posttrain-policy`` tagged ``policy_version`` = k). The seconds of
  v_k: the wall time from v0's evaluation being logged to v_k's being logged, less the in-loop evaluation in between
  (eval decode and eval scoring of v_1..v_k), i.e. the sum over iterations 1..k of
  ``time/iteration_s - time/eval_decode_s - time/eval_score_s``. That counts k rollouts (iteration j's window rolls
  out iteration j+1's batch), k reward stages, k updates (the first one starts the DeepSpeed trainer), engine swaps
  and the MLflow logging (the weights included); not counted: admission, the vLLM engine start (it overlaps
  admission) and v0's evaluation. At each TRL checkpoint time t (and 0 s) posttrain's version is the latest one whose
  seconds are <= t (past the end of its run its final version, marked ``posttrain_finished``); its weights are
  downloaded from the iteration run, or read where the run says they are, and evaluated with TRL's checkpoints.
- TRL: one process (transformers ``generate``, fp32 on the CPU: TRL's defaults) with
  ``per_device_train_batch_size=32, steps_per_generation=8, num_iterations=1``: one generation of 256 completions,
  then 8 optimizer steps on slices of 32 (GRPOConfig's ``generation_batch_size`` = 32 x 8); ``num_iterations`` is
  the loop's ``train.epochs`` (``--cfg`` included), so a variant with 2 epochs meets TRL taking 16. Its clock runs from
  ``on_train_begin`` to the end of each optimizer step, less the time spent saving checkpoints; model loading and the
  trainer's construction are not counted. Every ``--every`` training seconds, and when ``--seconds`` are spent, the
  policy is saved (HF dir); the starting policy stands for 0 s.

The report: both curves of the aligned evaluation (posttrain's also as evaluated in the loop, ``in_loop_curve``); at
each TRL checkpoint time after 0 s both sides' pass@1; per side the mean greedy and sampled pass@1 over the checkpoint
times both were still training at (``compared_up_to_s``; an area under the curve, steadier than single points, for
information); and the target, per metric, judged at those times.
Target (issue 21): in the same wall time, posttrain's eval pass@1 >= TRL's, at every TRL checkpoint.

    python benchmarks/wallclock.py                   # 960 s of TRL, 400 loop iterations: ~30 min on 2 quiet cores
    python benchmarks/wallclock.py --seconds 60 --every 30 --iterations 2 --eval-every 1      # a quick check
    python benchmarks/wallclock.py --mlflow-uri sqlite:////tmp/run/mlflow.db                 # an existing loop run
    python benchmarks/wallclock.py --trl-from /tmp/bench-wallclock-x --cfg '{"train": {"epochs": 2}}'  # a variant

``--cfg`` merges loop settings over the benchmark's (a variant of posttrain); ``--trl-from`` takes TRL's side (its
checkpoints and their seconds, ``trl.json``) from an earlier run's folder instead of training TRL again; its
checkpoints are evaluated again, beside posttrain's versions, by the same evaluator.

TRL is a benchmark-only dependency (``pip install -e ".[bench]"``). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loop  # noqa: E402  (benchmarks/ is not a package)
import rl_step  # noqa: E402

ROOT = rl_step.ROOT
STEPS_PER_ROUND = 8  # optimizer steps per round: the loop's 256 completions in micro batches of 32, one step each
PASS = ("eval/pass_at_1", "eval/pass_at_1_sampled")  # greedy, sampled


def run_trl(policy: str, seconds: float, every: float, out: Path, epochs: int = 1) -> dict:
    """Train with TRL for ``seconds`` training seconds, saving the policy into ``out`` every ``every`` of them;
    ``epochs`` passes over each round's completions (TRL's ``num_iterations``, the loop's ``train.epochs``)."""
    from transformers import TrainerCallback

    from posttrain.config import RolloutConfig, SandboxConfig, TrainConfig
    from posttrain.rollout.live import TOKENIZER_FILES
    from posttrain.sandbox import make_sandbox

    class Checkpoints(TrainerCallback):
        """Saves the policy at each ``every`` seconds of the training clock and stops it at ``seconds``."""

        def __init__(self):
            self.saved, self.started, self.paused, self.due = [], 0.0, 0.0, every

        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kwargs):
            clock = time.perf_counter() - self.started - self.paused
            if clock >= min(self.due, seconds):
                self.save(model, clock, state.global_step)
                while self.due <= clock:
                    self.due += every
            control.should_training_stop = clock >= seconds

        def save(self, model, clock: float, step: int) -> None:
            began = time.perf_counter()
            target = out / f"step-{step}"
            model.save_pretrained(target)
            # the policy's own config (TRL turns use_cache off) and tokenizer: the eval engine swaps weights in place
            for name in ("config.json", *TOKENIZER_FILES):
                if (Path(policy) / name).is_file():
                    shutil.copy(Path(policy) / name, target / name)
            self.saved.append({"dir": str(target), "seconds": round(clock, 2), "step": step,
                               "round": step / (STEPS_PER_ROUND * epochs)})
            self.paused += time.perf_counter() - began

    rollout, train, sandbox_cfg = RolloutConfig(), TrainConfig(), SandboxConfig()
    checkpoints = Checkpoints()
    began = time.perf_counter()
    with make_sandbox(sandbox_cfg) as box:
        trainer = rl_step.trl_trainer(
            policy, rl_step.demo_envs(), box, sandbox_cfg, callbacks=[checkpoints],
            num_generations=rollout.samples_per_env, temperature=rollout.temperature, top_p=rollout.top_p,
            max_completion_length=rollout.max_new_tokens, learning_rate=train.learning_rate,
            lr_scheduler_type="constant", max_grad_norm=train.max_grad_norm, epsilon=train.clip_eps,
            per_device_train_batch_size=train.micro_batch_size, steps_per_generation=STEPS_PER_ROUND,
            num_iterations=epochs, max_steps=10**7, disable_tqdm=True)
        setup_s = time.perf_counter() - began
        trainer.train()
    last = checkpoints.saved[-1] if checkpoints.saved else {"step": 0, "round": 0}
    return {"setup_s": round(setup_s, 1), "steps": last["step"], "rounds": last["round"],
            "checkpoints": checkpoints.saved}


def evaluate(dirs: list[str]) -> list[dict]:
    """posttrain's evaluation of each policy dir on the demo suite's eval split, on one live engine."""
    from posttrain.config import DEMO_SUITE, EvalConfig, RolloutConfig, SandboxConfig
    from posttrain.envs.suite import load_suite
    from posttrain.evaluation.greedy import evaluate_policy
    from posttrain.evaluation.results import eval_metrics
    from posttrain.rollout import live
    from posttrain.sandbox import live as live_sandbox

    envs = {env.id: env for env in load_suite(DEMO_SUITE).envs}
    results = []
    try:
        for version, policy in enumerate(dirs):
            began = time.perf_counter()
            summary = eval_metrics(evaluate_policy(policy, envs, EvalConfig(), RolloutConfig(), SandboxConfig(),
                                                version=version))
            results.append({"greedy": summary[PASS[0]], "sampled": summary[PASS[1]],
                            "eval_s": round(time.perf_counter() - began, 1)})
    finally:
        live.shutdown_all()
        live_sandbox.shutdown()
    return results


def loop_versions(uri: str, run_id: str | None) -> tuple[str, list[dict]]:
    """The ``rl_loop`` run ``run_id`` (default: the latest) in ``uri``: its id and, per policy version in order, its
    training seconds (see the module docstring), the iteration run that holds its weights, the ``posttrain-policy``
    version it was registered as, and its in-loop pass@1 (``greedy``, ``sampled``) when the loop evaluated it."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiments = [experiment.experiment_id for experiment in client.search_experiments()]
    if run_id is None:
        parents = client.search_runs(experiments, "tags.`posttrain.workflow` = 'rl_loop'",
                                     order_by=["attributes.start_time DESC"], max_results=1)
        if not parents:
            raise SystemExit(f"no rl_loop run in {uri}")
        run_id = parents[0].info.run_id
    children = {int(run.data.tags["posttrain.iteration"]): run
                for run in client.search_runs(experiments, f"tags.mlflow.parentRunId = '{run_id}'",
                                              max_results=50000)
                if "posttrain.iteration" in run.data.tags}
    if 0 not in children:
        raise SystemExit(f"rl_loop run {run_id} in {uri} logged no iterations")
    versions, seconds = [], 0.0
    for version in sorted(children):
        m = children[version].data.metrics
        if version > 0:
            seconds += m.get("time/iteration_s", 0.0) - m.get("time/eval_decode_s", 0.0) \
                - m.get("time/eval_score_s", 0.0)
        point = {"version": version, "seconds": round(seconds, 2), "run_id": children[version].info.run_id,
                 "registered": children[version].data.tags.get("posttrain.registered_version")}
        if PASS[0] in m:
            point.update({"greedy": m[PASS[0]], "sampled": m.get(PASS[1])})
        versions.append(point)
    return run_id, versions


def fetch_policy(uri: str, run_id: str, out: Path) -> str:
    """The policy weights of a loop iteration as an HF dir to evaluate: its ``policy`` artifact (an evaluated,
    registered version) downloaded into ``out``, else the directory its reference names (``tracking.POLICY_URI_TAG``:
    the update's output on this machine), as it is."""
    from mlflow.tracking import MlflowClient

    from posttrain.tracking import POLICY_URI_TAG

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    client = MlflowClient(tracking_uri=uri)
    files = [info.path for info in client.list_artifacts(run_id, "policy") if not info.is_dir]
    if not files:
        reference = client.get_run(run_id).data.tags.get(POLICY_URI_TAG, "")
        if not reference or not (Path(reference) / "config.json").is_file():
            raise SystemExit(f"iteration run {run_id} logged no policy weights, and the directory it references "
                             f"({reference or 'none'}) is not on this machine")
        return reference
    out.mkdir(parents=True, exist_ok=True)
    for path in files:  # each file lands in ``out`` itself
        client.download_artifacts(run_id, path, str(out))
    if not (out / "config.json").is_file():
        raise SystemExit(f"the policy of iteration run {run_id} did not download into {out}")
    return str(out)


def at_or_before(curve: list[dict], seconds: float) -> dict | None:
    """The last point of ``curve`` (sorted by seconds) at or before ``seconds``.

    >>> at_or_before([{"seconds": 0.0}, {"seconds": 10.0}], 9.9)
    {'seconds': 0.0}
    """
    return next((point for point in reversed(curve) if point["seconds"] <= seconds), None)


def compare(ours: list[dict], theirs: list[dict], ours_end_s: float) -> tuple[list[dict], dict]:
    """At each TRL checkpoint time after 0 s, both sides' pass@1: posttrain's is that of its latest version at or
    before then in ``ours`` (the versions evaluated for this comparison, by training seconds); ``posttrain_finished``:
    the loop had stopped training (at ``ours_end_s``) before then, so its final version stands in. And per metric
    whether posttrain's is at least TRL's at every checkpoint time both were still training at (None when there is
    none).

    >>> rows, met = compare([{"version": 0, "seconds": 0.0, "greedy": 0.4, "sampled": 0.3},
    ...                      {"version": 5, "seconds": 50.0, "greedy": 0.7, "sampled": 0.5}],
    ...                     [{"seconds": 0.0, "greedy": 0.4, "sampled": 0.3},
    ...                      {"seconds": 40.0, "greedy": 0.4, "sampled": 0.3},
    ...                      {"seconds": 60.0, "greedy": 0.9, "sampled": 0.9}], ours_end_s=50.0)
    >>> [(row["seconds"], row["posttrain_version"], row["posttrain_finished"]) for row in rows], met
    ([(40.0, 0, False), (60.0, 5, True)], {'greedy': True, 'sampled': True})
    """
    rows = []
    for point in theirs:
        if point["seconds"] <= 0:
            continue
        mine = at_or_before(ours, point["seconds"])
        rows.append({"seconds": point["seconds"], "trl_greedy": point["greedy"], "trl_sampled": point["sampled"],
                     "posttrain_version": mine["version"], "posttrain_seconds": mine["seconds"],
                     "posttrain_greedy": mine["greedy"], "posttrain_sampled": mine["sampled"],
                     "posttrain_finished": point["seconds"] > ours_end_s})
    both = [row for row in rows if not row["posttrain_finished"]]
    met = {name: all(row[f"posttrain_{name}"] is not None and row[f"posttrain_{name}"] >= row[f"trl_{name}"]
                     for row in both) if both else None
           for name in ("greedy", "sampled")}
    return rows, met


def means(rows: list[dict]) -> dict:
    """Per side, the mean greedy and sampled pass@1 over the compared rows of ``compare`` (the checkpoint times both
    were still training at; None when there is none): an area under each curve, less moved by one noisy point.

    >>> means([{"posttrain_finished": False, "trl_greedy": 0.5, "trl_sampled": 0.4, "posttrain_greedy": 0.6,
    ...         "posttrain_sampled": 0.2},
    ...        {"posttrain_finished": False, "trl_greedy": 0.7, "trl_sampled": 0.6, "posttrain_greedy": 0.8,
    ...         "posttrain_sampled": 0.4},
    ...        {"posttrain_finished": True, "trl_greedy": 1.0, "trl_sampled": 1.0, "posttrain_greedy": 0.0,
    ...         "posttrain_sampled": 0.0}])
    {'posttrain': {'greedy': 0.7, 'sampled': 0.3}, 'trl': {'greedy': 0.6, 'sampled': 0.5}}
    """
    both = [row for row in rows if not row["posttrain_finished"]]

    def mean(key: str) -> float | None:
        values = [row[key] for row in both if row[key] is not None]
        return round(sum(values) / len(values), 4) if values else None

    return {side: {name: mean(f"{side}_{name}") for name in ("greedy", "sampled")} for side in ("posttrain", "trl")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=960.0, help="TRL's training seconds")
    parser.add_argument("--every", type=float, default=60.0, help="TRL checkpoint interval, in training seconds")
    parser.add_argument("--iterations", type=int, default=400, help="posttrain loop iterations")
    parser.add_argument("--eval-every", type=int, default=0,
                        help="the loop's own evaluation: every N-th version (0: v0 and the last only)")
    parser.add_argument("--mlflow-uri", help="read an earlier rl_loop run from this store instead of running one")
    parser.add_argument("--run-id", help="with --mlflow-uri: that rl_loop run (default: the latest)")
    parser.add_argument("--cfg", default="{}", help="loop settings (JSON) merged over the benchmark's")
    parser.add_argument("--trl-from", help="an earlier run's folder: reuse its TRL checkpoints (trl.json)")
    parser.add_argument("--side", choices=["trl", "eval"], help=argparse.SUPPRESS)
    parser.add_argument("--policy", help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--dirs", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if args.side:  # a child process: TRL and vLLM each in their own (see rl_step)
        trl = args.side == "trl"
        print(json.dumps(run_trl(args.policy, args.seconds, args.every, Path(args.out), args.epochs) if trl
                         else evaluate(args.dirs)))
        return
    policy = rl_step.policy_dir("demo")
    work = Path(tempfile.mkdtemp(prefix="bench-wallclock-"))
    # 1. posttrain: the loop (or an earlier run of it); its versions' seconds and weights from MLflow
    loop_wall_s = None
    uri = args.mlflow_uri
    if uri is None:
        cfg = loop.merged({"iterations": args.iterations, "eval": {"every": args.eval_every},
                           "admission": {"checks": ["consistency"]}}, json.loads(args.cfg))
        loop_wall_s, uri = loop.run_loop(work, cfg)
    run_id, versions = loop_versions(uri, args.run_id)
    in_loop = [{k: point[k] for k in ("version", "seconds", "greedy", "sampled")}
               for point in versions if "greedy" in point]
    # 2. TRL: train for the budget, saving checkpoints
    script = [sys.executable, __file__, "--policy", policy]
    if args.trl_from:
        trl = json.loads((Path(args.trl_from) / "trl.json").read_text())
    else:
        from posttrain.config import TrainConfig

        epochs = json.loads(args.cfg).get("train", {}).get("epochs", TrainConfig().epochs)  # TRL's passes mirror ours
        trl = rl_step.child(script + ["--side", "trl", "--seconds", str(args.seconds), "--every", str(args.every),
                                      "--out", str(work / "trl"), "--epochs", str(epochs)])
        if "error" in trl:
            raise SystemExit(f"TRL failed: {trl['error']}")
        (work / "trl.json").write_text(json.dumps(trl))
    # 3. at 0 s and each TRL checkpoint time, posttrain's latest version by then: its weights, from its iteration run
    points = [{"dir": policy, "seconds": 0.0, "step": 0, "round": 0}] + trl.pop("checkpoints")
    chosen = {}
    for point in points:
        version = at_or_before(versions, point["seconds"])
        chosen[version["version"]] = version
    mine = [{"dir": fetch_policy(uri, version["run_id"], work / "posttrain" / f"v{k}"),
             **{key: version[key] for key in ("version", "seconds", "registered")}}
            for k, version in sorted(chosen.items())]
    # 4. one evaluator for both: the starting policy (TRL's 0 s), posttrain's versions, TRL's checkpoints
    evaluated = rl_step.child(script + ["--side", "eval", "--dirs"] + [point["dir"] for point in mine + points])
    if "error" in evaluated:
        raise SystemExit(f"evaluation failed: {evaluated['error']}")

    def scored(dirs: list[dict], scores: list[dict]) -> list[dict]:
        return [{**{k: v for k, v in point.items() if k != "dir"}, **score} for point, score in zip(dirs, scores)]

    ours, theirs = scored(mine, evaluated[:len(mine)]), scored(points, evaluated[len(mine):])
    end_s = versions[-1]["seconds"]
    rows, met = compare(ours, theirs, end_s)
    print(json.dumps({
        "benchmark": "wallclock", "cpus": os.cpu_count(), "seconds": args.seconds, "every": args.every,
        "posttrain": {"mlflow_uri": uri, "run_id": run_id, "iterations": args.iterations if loop_wall_s else None,
                      "cfg": json.loads(args.cfg),
                      "eval_every": args.eval_every if loop_wall_s else None, "versions": len(versions) - 1,
                      "training_s": end_s, "workflow_wall_s": round(loop_wall_s, 1) if loop_wall_s else None,
                      "curve": ours, "in_loop_curve": in_loop},
        "trl": {**trl, "curve": theirs, "from": args.trl_from},
        "at_trl_checkpoints": rows,
        "mean_pass_at_1": means(rows),
        "target": "posttrain pass@1 >= TRL's at every TRL checkpoint time (training seconds)",
        "compared_up_to_s": max((row["seconds"] for row in rows if not row["posttrain_finished"]), default=None),
        "target_met": {**met, "both": None if None in met.values() else met["greedy"] and met["sampled"]}}))


if __name__ == "__main__":
    main()
