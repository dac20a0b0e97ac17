"""Benchmark: one demo iteration stage by stage in the real workflow, and the update next to plain PyTorch.

1. The loop: ``pyflyte run workflows/rl_loop.py rl_loop`` on the demo suite and policy with the demo's own batch
   (32 envs x 8 samples), for ``--iterations`` iterations, evaluating only v0 and the last version, against a fresh
   MLflow store in a temporary folder (admission cut to its consistency check: it is not what is measured here).
   Every iteration logs where its time went (``tracking.metrics.time_metrics``: ``time/sample_s``, ``time/reward_s``,
   ``time/update_s``, ``time/iteration_s``, ...); the report gives each stage's median over the iterations that
   evaluated nothing (the first is left out: it starts the engine).
2. The update against plain PyTorch on the same work: the scored batch of iteration 1 (its ``scored`` table) and the
   policy it was sampled from (v0). ``PolicyTrainer.train_on`` (DeepSpeed, the configured precision) is timed warm
   (its second call), next to a plain PyTorch loop over the same micro batches: one no-grad scoring forward per micro
   batch, then per micro batch forward, the PPO-clip loss, backward, gradient clipping and an AdamW step -- in fp32
   and in bf16 (autocast). The baseline is plain PyTorch in the precision the trainer chose.

Targets (issue 21): update <= 2x plain PyTorch; an iteration without evaluation <= 4 s.

    python benchmarks/loop.py                    # 6 iterations (~4 min with engine start and admission)
    python benchmarks/loop.py --precision fp32   # train and roll out in fp32, whatever the hardware offers

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STAGES = ("time/iteration_s", "time/sample_s", "time/rollout_s", "time/engine_swap_s", "time/reward_s",
          "time/update_s", "time/untimed_s")
TARGETS = {"update_vs_plain": 2.0, "iteration_s": 4.0}
RENDEZVOUS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")  # torch.distributed's, per process


def loop_config(iterations: int, precision: str) -> dict:
    """The demo's config, cut to ``iterations`` with evaluation at v0 and the last version only."""
    dtype = {"auto": "auto", "bf16": "bfloat16", "fp32": "float32"}[precision]
    return {"iterations": iterations, "eval": {"every": 0}, "admission": {"checks": ["consistency"]},
            "rollout": {"dtype": dtype}, "train": {"precision": precision}}


def merged(base: dict, override: dict) -> dict:
    """``base`` with ``override``'s keys replaced, nested dicts merged key by key.

    >>> merged({"train": {"learning_rate": 1e-4, "epochs": 1}, "iterations": 20}, {"train": {"learning_rate": 2e-4}})
    {'train': {'learning_rate': 0.0002, 'epochs': 1}, 'iterations': 20}
    """
    out = dict(base)
    for key, value in override.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def run_loop(work: Path, cfg: dict) -> tuple[float, str]:
    """Run ``rl_loop`` with ``cfg`` (a ``--cfg`` dict) into ``work``'s fresh MLflow store; its wall seconds and the
    tracking URI."""
    uri = f"sqlite:///{work}/mlflow.db"
    # the workflow is its own process group: not this process's, if a trainer here set one up (its port is taken)
    inherited = {key: value for key, value in os.environ.items() if key not in RENDEZVOUS}
    env = {**inherited, "MLFLOW_TRACKING_URI": uri, "POSTTRAIN_ARTIFACT_ROOT": (work / "artifacts").as_uri(),
           "DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu")}
    command = [str(Path(sys.executable).parent / "pyflyte"), "run", "--overwrite-cache", "workflows/rl_loop.py",
               "rl_loop", "--cfg", json.dumps(cfg)]
    started = time.perf_counter()
    returncode, stdout, stderr = run_to_end(command, cwd=ROOT, env=env)
    if returncode != 0:
        raise SystemExit(f"the workflow failed (exit {returncode}):\n{stdout[-3000:]}\n{stderr[-6000:]}")
    return time.perf_counter() - started, uri


def run_to_end(command: list[str], grace_s: float = 30, **popen) -> tuple[int, str, str]:
    """Run ``command`` to its end: its exit code, stdout and stderr. Stopped here (Ctrl-C, or ``kill``: SIGTERM
    unwinds like Ctrl-C), it is stopped too -- SIGTERM, SIGKILL after ``grace_s`` -- so a killed benchmark leaves no
    workflow running.

    >>> run_to_end([sys.executable, "-c", "print('hi')"])
    (0, 'hi\n', '')
    """
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen) as process:
        try:
            stdout, stderr = process.communicate()
        except BaseException:
            process.terminate()
            try:
                process.wait(grace_s)
            except subprocess.TimeoutExpired:
                process.kill()
            raise
    return process.returncode, stdout, stderr


def iteration_times(uri: str, iterations: int) -> tuple[dict[str, float], dict[int, dict[str, float]], str]:
    """Per stage, the median over iterations 2..N-1 (no engine start, no evaluation); every iteration's times; and
    the scored table of iteration 1 (a local parquet path)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = {int(run.data.tags["posttrain.iteration"]): run
            for experiment in client.search_experiments()
            for run in client.search_runs([experiment.experiment_id], "tags.`posttrain.iteration` != ''")}
    per_iteration = {k: {name: run.data.metrics[name] for name in STAGES if name in run.data.metrics}
                     for k, run in sorted(runs.items()) if k >= 1}
    plain = [per_iteration[k] for k in range(2, iterations) if k in per_iteration]
    medians = {name: round(statistics.median(times[name] for times in plain), 3)
               for name in STAGES if plain and all(name in times for times in plain)}
    scored = client.download_artifacts(runs[1].info.run_id, "tables/scored.parquet", tempfile.mkdtemp())
    return medians, per_iteration, scored


def trainer_seconds(policy: str, samples: list, precision: str) -> tuple[float, bool]:
    """``PolicyTrainer.train_on`` on ``samples``, warm (the second of two calls); and whether it ran in bf16."""
    from posttrain.config import TrainConfig
    from posttrain.training.trainer import PolicyTrainer

    trainer = PolicyTrainer(policy, TrainConfig(precision=precision))
    try:
        trainer.train_on(samples)
        return trainer.train_on(samples).seconds, trainer.bf16
    finally:
        trainer.close()


def plain_seconds(policy: str, samples: list, bf16: bool, micro_batch_size: int) -> float:
    """The same forward/backward work in plain PyTorch, warm: a scoring forward, then per micro batch forward,
    PPO-clip loss, backward, clipping, AdamW."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posttrain.config import TrainConfig
    from posttrain.training.algorithms import aggregate, get_policy_loss
    from posttrain.training.batching import pad_batch
    from posttrain.training.logprobs import token_logprobs

    cfg = TrainConfig()
    pad = AutoTokenizer.from_pretrained(policy).pad_token_id
    model = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate)
    loss_fn = get_policy_loss(cfg.policy_loss)
    micros = [samples[lo : lo + micro_batch_size] for lo in range(0, len(samples), micro_batch_size)]
    batches = [pad_batch([(s.prompt_token_ids, s.completion_token_ids, s.behavior_logprobs) for s in micro],
                         [s.advantage for s in micro], pad, temperatures=[s.temperature for s in micro])
               for micro in micros]

    def logits(batch):  # [B, L-1, V]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
        return logits / batch.logit_scale[:, None, None]  # the sampling temperature, as the trainer does

    def one_pass() -> float:
        started = time.perf_counter()
        with torch.no_grad():
            for batch in batches:
                token_logprobs(logits(batch), batch.targets)
        for batch in batches:
            logprobs = token_logprobs(logits(batch), batch.targets)  # [B, L-1]
            per_token, _ = loss_fn(logprobs, batch.behavior_logprobs, batch.advantages, batch.mask, cfg)
            aggregate(per_token, batch.mask, cfg.loss_aggregation).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
        return time.perf_counter() - started

    one_pass()
    return one_pass()


def update_comparison(policy: str, scored_path: str, precision: str) -> dict:
    import pandas as pd

    from posttrain.config import TrainConfig
    from posttrain.reward import trainable_rows
    from posttrain.training.samples import train_samples, with_advantages

    cfg = TrainConfig(precision=precision)
    rows = trainable_rows(with_advantages(pd.read_parquet(scored_path), cfg))
    live = {group for group, advantage in zip(rows["group_id"], rows["advantage"]) if advantage != 0.0}
    samples = train_samples(rows[rows["group_id"].isin(live)])  # train_on skips the others too
    update_s, bf16 = trainer_seconds(policy, samples, precision)
    plain = {"fp32": plain_seconds(policy, samples, False, cfg.micro_batch_size),
             "bf16": plain_seconds(policy, samples, True, cfg.micro_batch_size)}
    baseline = plain["bf16" if bf16 else "fp32"]
    return {"samples": len(samples), "update_bf16": bf16, "train_on_s": round(update_s, 3),
            "plain_fp32_s": round(plain["fp32"], 3), "plain_bf16_s": round(plain["bf16"], 3),
            "train_on_vs_plain": round(update_s / baseline, 3),
            "train_on_vs_fastest_plain": round(update_s / min(plain.values()), 3), "baseline_s": round(baseline, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    args = parser.parse_args()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from posttrain import precision
    from posttrain.config import default_policy_dir
    from posttrain.training.demo_policy import main_demo_policy

    policy = str(main_demo_policy(default_policy_dir()))
    work = Path(tempfile.mkdtemp(prefix="bench-loop-"))
    wall_s, uri = run_loop(work, loop_config(args.iterations, args.precision))
    medians, per_iteration, scored = iteration_times(uri, args.iterations)
    update = update_comparison(policy, scored, args.precision)
    # the update stage as the loop runs it (live trainer, train_on, save) against plain PyTorch's same work
    update_vs_plain = round(medians["time/update_s"] / update["baseline_s"], 3) if "time/update_s" in medians else None
    iteration_s = medians.get("time/iteration_s")
    print(json.dumps({
        "benchmark": "loop", "iterations": args.iterations, "precision": args.precision,
        "chosen": precision.here(args.precision).__dict__, "workflow_wall_s": round(wall_s, 1),
        "stage_medians_s": medians, "per_iteration_s": per_iteration, "update": update,
        "update_vs_plain": update_vs_plain, "iteration_s": iteration_s,
        "targets": TARGETS, "targets_met": {"update_vs_plain": update_vs_plain is not None and update_vs_plain <= 2.0,
                                            "iteration_s": iteration_s is not None and iteration_s <= 4.0}}))


if __name__ == "__main__":
    main()
