"""Benchmark: one ``rl_loop`` iteration at real size, full fine-tune and LoRA: seconds, peak memory and bytes per stage.

The policy is a user's checkpoint (``--policy DIR``) or, by default, a random checkpoint of Qwen2-0.5B's published
shape (``posttrain.training.families.SHAPES["qwen2-0.5b"]``: 494M parameters, bf16, the family's chat template and
a BPE padded to its 151,936-entry vocabulary; built once into ``~/.cache/posttrain``, ~1 minute). For each mode
(``--modes``: ``full``, ``lora``), ``pyflyte run workflows/rl_loop.py rl_loop`` runs one iteration on the demo suite
(``--envs`` envs x ``--samples`` samples, ``--max-new-tokens``, evaluation of v0 and v1 on ``--eval-envs`` envs,
admission cut to its consistency check) against a fresh MLflow store, and the report takes from it:

- seconds per stage (``time/*``: engine start, sampling, reward, update, evaluation) and the workflow's wall time;
- peak memory per stage (``rollout/memory_peak_mb``, ``reward/...``, ``train/...``: the stage's processes, the live
  engine and trainer included, as a local run keeps them; ``posttrain.memory``);
- tokens/s of the rollout (``rollout/tokens_per_s``) and of the update (trained tokens over its seconds);
- bytes written: v1's directory (weights, LoRA adapter, training state) and what MLflow stored, against the bf16
  weights.

A random model earns no reward, so the loop's update finds no learnable group and takes no step (it still builds the
trainer and saves v1 with its state). The update's own cost is therefore also measured on the iteration's real
samples (its ``scored`` table) with advantages set to +1/-1 within each group: ``PolicyTrainer.train_on`` and
``save``, as the update task runs them, in a process of its own (``update_with_signal``).

On a GPU machine (``pip install -e ".[gpu]"``, ``DS_ACCELERATOR=cuda``) the same script is ``make gpu-check``: vLLM and
DeepSpeed take the GPU, and ``train/behavior_kl`` (vLLM's log-probs against the trainer's, k3 per token) is the
agreement of the two.

    python benchmarks/one_iteration.py                        # qwen2-0.5b shape, full and LoRA (~15 min on 2 cores)
    python benchmarks/one_iteration.py --policy /models/my-qwen2 --modes lora --lora-rank 16

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loop import run_loop  # noqa: E402  (benchmarks/ is this script's sys.path[0])

STAGE_TIMES = ("time/iteration_s", "time/engine_start_s", "time/sample_s", "time/rollout_s", "time/engine_swap_s",
               "time/reward_s", "time/update_s", "time/eval_decode_s", "time/eval_score_s")
STAGE_MEMORY = ("rollout/memory_peak_mb", "reward/memory_peak_mb", "train/memory_peak_mb")
SHAPE = "qwen2-0.5b"


def default_policy() -> Path:
    """The random checkpoint of ``SHAPE``, built once (bf16)."""
    from posttrain.training.families import SHAPES, build_family_checkpoint

    out = Path.home() / ".cache" / "posttrain" / f"{SHAPE}-random"
    if not (out / "model.safetensors").is_file():
        build_family_checkpoint(SHAPES[SHAPE]["family"], out, shape=SHAPE, dtype="bfloat16")
    return out


def loop_config(policy: Path, args: argparse.Namespace, lora_rank: int) -> dict:
    return {"policy": str(policy), "iterations": 1, "admission": {"checks": ["consistency"]},
            "rollout": {"envs_per_iteration": args.envs, "samples_per_env": args.samples,
                        "max_new_tokens": args.max_new_tokens, "max_model_len": args.max_model_len},
            "eval": {"limit": args.eval_envs, "samples": 0, "max_new_tokens": args.max_new_tokens},
            "train": {"micro_batch_size": args.micro_batch_size, "lora_rank": lora_rank}}


def dir_bytes(path: Path, within: str | None = None) -> int:
    """Bytes of the files under ``path`` (only those under its subfolder ``within`` when given)."""
    root = path / within if within else path
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0


def version_bytes(version: Path) -> dict[str, int]:
    """Bytes of a saved version's parts: its weights (and the files beside them), LoRA adapter, training state."""
    adapter, state = dir_bytes(version, "adapter"), dir_bytes(version, "train_state")
    return {"weights": dir_bytes(version) - adapter - state, "adapter": adapter, "train_state": state}


def iteration_report(uri: str, work: Path) -> tuple[dict, Path, str]:
    """Iteration 1's stage times, memory peaks and throughput; v1's directory; the scored table (a local parquet)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    [run] = [run for experiment in client.search_experiments()
             for run in client.search_runs([experiment.experiment_id], "tags.`posttrain.iteration` = '1'")]
    metrics = run.data.metrics
    v1 = Path(run.data.tags["posttrain.policy_uri"])
    update_s = metrics.get("time/update_s", 0.0)
    report = {
        "stage_s": {name.removeprefix("time/"): round(metrics[name], 2) for name in STAGE_TIMES if name in metrics},
        "memory_peak_mb": {name.split("/")[0]: round(metrics[name]) for name in STAGE_MEMORY if name in metrics},
        "rollout_tokens_per_s": round(metrics.get("rollout/tokens_per_s", 0.0), 1),
        "rollout_tokens": metrics.get("rollout/tokens"),
        "train_steps": metrics.get("train/steps"), "train_tokens": metrics.get("train/num_tokens"),
        "update_tokens_per_s": round(metrics.get("train/num_tokens", 0.0) / update_s, 1) if update_s else None,
        "behavior_kl": metrics.get("train/behavior_kl"),
        "bytes": {**{f"v1_{part}": size for part, size in version_bytes(v1).items()},
                  "mlflow_artifacts": dir_bytes(work / "artifacts")},
    }
    scored = client.download_artifacts(run.info.run_id, "tables/scored.parquet", tempfile.mkdtemp())
    return report, v1, scored


def update_with_signal(policy: Path, scored_path: str, train: dict) -> dict:
    """The update on the iteration's real samples with +1/-1 advantages alternating within each group: trainer start,
    ``train_on`` and ``save`` timed, the process's peak memory, the bytes saved."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import pandas as pd

    from posttrain.config import TrainConfig
    from posttrain.memory import peak_memory
    from posttrain.reward import trainable_rows
    from posttrain.training.samples import train_samples
    from posttrain.training.trainer import PolicyTrainer

    rows = trainable_rows(pd.read_parquet(scored_path)).copy()
    rows["advantage"] = [1.0 if i % 2 == 0 else -1.0 for i in rows.groupby("group_id").cumcount()]
    samples = train_samples(rows)
    cfg = TrainConfig(**train)
    out = Path(tempfile.mkdtemp(prefix="bench-one-iteration-v1-"))
    with peak_memory() as memory:
        started = time.perf_counter()
        trainer = PolicyTrainer(policy, cfg, reference_dir=policy if cfg.lora_rank else None)
        start_s = time.perf_counter() - started
        try:
            stats = trainer.train_on(samples)
            saved = time.perf_counter()
            trainer.save(out / "v1", metadata={"version": 1})
            save_s = time.perf_counter() - saved
        finally:
            trainer.close()
    v1 = out / "v1"
    return {"samples": len(samples), "steps": stats.steps, "tokens": stats.num_tokens, "bf16": stats.bf16,
            "trainer_start_s": round(start_s, 1), "train_on_s": round(stats.seconds, 1), "save_s": round(save_s, 1),
            "tokens_per_s": round(stats.num_tokens / stats.seconds, 1), "memory_peak_mb": round(memory.peak_mb),
            "bytes": version_bytes(v1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", help=f"an HF causal-LM checkpoint dir (default: a random {SHAPE})")
    parser.add_argument("--modes", default="full,lora", help="comma-separated: full, lora")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--eval-envs", type=int, default=4)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from posttrain import precision
    from posttrain.training.checkpoints import checkpoint_dtype, stored_parameters

    policy = Path(args.policy) if args.policy else default_policy()
    parameters = stored_parameters(policy)
    result = {"benchmark": "one_iteration", "policy": str(policy), "parameters": parameters,
              "dtype": checkpoint_dtype(policy), "bf16_weight_bytes": 2 * parameters,
              "precision": precision.here("auto").__dict__, "modes": {}}
    for mode in args.modes.split(","):
        lora_rank = args.lora_rank if mode == "lora" else 0
        work = Path(tempfile.mkdtemp(prefix=f"bench-one-iteration-{mode}-"))
        wall_s, uri = run_loop(work, loop_config(policy, args, lora_rank))
        report, _, scored = iteration_report(uri, work)
        train = {"micro_batch_size": args.micro_batch_size, "lora_rank": lora_rank}
        # in a process of its own: its peak is the update's alone, and its memory is back before the next workflow
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
            with_signal = child.submit(update_with_signal, policy, scored, train).result()
        result["modes"][mode] = {"workflow_wall_s": round(wall_s, 1), "iteration": report,
                                 "update_with_signal": with_signal}
        print(json.dumps({mode: result["modes"][mode]}), flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
