"""One live vLLM engine per process, swapped to each new policy version in place instead of restarted.

Starting vLLM costs ~30 s here (engine process, weights, compile warm-up); swapping the weights of a running engine
costs ~20 ms. ``acquire(policy_dir, cfg, version)`` returns the process's live engine serving ``policy_dir``:

- the same weights already loaded: the engine as it is;
- the same engine (``engine_key``: architecture from ``config.json`` minus how weights are stored, tokenizer and
  its chat template, ``dtype``, ``max_model_len``, prefix caching): weights reloaded in place, prefix cache reset;
- anything else: the old engine is shut down and a new one started; the log says which part differed.

Either way the engine renders text prompts as ``cfg`` says (``chat_template``, ``system_prompt``: no restart).

``prestart`` does the same in a background thread, so the ~30 s start overlaps other work (locally: admission);
``settle`` waits for it.

The engine records the policy version it serves (``engine.version``) and ``collect`` writes it on every sample.
Use an acquired engine right away: the next ``acquire`` in the process may swap its weights.

``shutdown_all()`` stops the live engine: a live engine keeps ``pyflyte run`` from exiting. It runs at interpreter
exit (registered with ``atexit`` when the first engine starts, after vLLM's own handlers, so it runs before them;
and with ``threading``'s exit hooks, which run before non-daemon threads are joined), and the workflows call it in
a final step and on failure.

Example (real vLLM; tests/rollout/test_live.py runs it):
    >>> from posttrain.config import RolloutConfig
    >>> engine = acquire("policy-v0", RolloutConfig(), version=0)       # starts vLLM          # doctest: +SKIP
    >>> engine = acquire("policy-v1", RolloutConfig(), version=1)       # same arch: ~20 ms    # doctest: +SKIP
    >>> engine.version, counters()["starts"], counters()["reloads"]                          # doctest: +SKIP
    (1, 1, 1)
    >>> shutdown_all()                                                                         # doctest: +SKIP

Without vLLM, what decides between a swap and a restart:
    >>> import json, tempfile, pathlib
    >>> from posttrain.config import RolloutConfig
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "config.json").write_text(json.dumps({"hidden_size": 128, "torch_dtype": "float32",
    ...                                                "max_position_embeddings": 256}))
    >>> a = engine_key(str(d), RolloutConfig())
    >>> _ = (d / "config.json").write_text(json.dumps({"hidden_size": 128, "torch_dtype": "bfloat16",
    ...                                                "max_position_embeddings": 256}))
    >>> engine_key(str(d), RolloutConfig()) == a        # how the weights are stored does not matter
    True
    >>> _ = (d / "config.json").write_text(json.dumps({"hidden_size": 256, "max_position_embeddings": 256}))
    >>> differences(a, engine_key(str(d), RolloutConfig(max_model_len=128)))
    ['architecture.hidden_size: 128 -> 256', 'engine.max_model_len: 256 -> 128']
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
from pathlib import Path

from posttrain.config import RolloutConfig
from posttrain.rollout.context import context_length
from posttrain.rollout.engine import STORAGE_KEYS, VLLMEngine
from posttrain.timing import timed

log = logging.getLogger(__name__)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")
# Keys transformers adds when it saves a tokenizer (how it was loaded, not what it does): every trainer save adds them.
TOKENIZER_LOAD_KEYS = ("local_files_only", "is_local", "name_or_path", "_commit_hash", "cache_dir", "revision")

_lock = threading.RLock()
_live: VLLMEngine | None = None
_live_key: dict | None = None
_live_weights: tuple | None = None
_exit_hooks_registered = False
_prestarted: threading.Thread | None = None
_counters = {"starts": 0, "reloads": 0, "start_s": 0.0, "reload_s": 0.0}


def engine_key(policy_dir: str, cfg: RolloutConfig) -> dict:
    """What a running engine fixes at start: two policies with equal keys can be swapped in place."""
    source = Path(policy_dir)
    config = json.loads((source / "config.json").read_text())
    tokenizer = {}
    for name in TOKENIZER_FILES:
        if (source / name).is_file() and name.endswith(".jinja"):
            tokenizer[name] = (source / name).read_text()
        elif (source / name).is_file():
            content = json.loads((source / name).read_text())
            tokenizer[name] = {k: v for k, v in content.items() if k not in TOKENIZER_LOAD_KEYS}
    return {
        "architecture": {k: v for k, v in config.items() if k not in STORAGE_KEYS},
        "tokenizer": tokenizer,
        "engine": {"dtype": cfg.dtype, "max_model_len": context_length(policy_dir, cfg),
                   "enable_prefix_caching": cfg.enable_prefix_caching, "replicas": cfg.replicas,
                   "gpu_memory_utilization": cfg.gpu_memory_utilization},
    }


def weights_key(policy_dir: str) -> tuple:
    """Identity of the weights in ``policy_dir``: resolved path, and size and mtime of each weights file."""
    source = Path(policy_dir).resolve()
    files = sorted(source.glob("*.safetensors"))
    return (str(source), tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files))


def differences(old: dict, new: dict) -> list[str]:
    """Human-readable ``part.field: old -> new`` lines between two ``engine_key``s (the tokenizer by file)."""
    lines = []
    for part in ("architecture", "engine", "tokenizer"):
        a, b = old.get(part, {}), new.get(part, {})
        for field in sorted(set(a) | set(b)):
            if a.get(field) != b.get(field):
                lines.append(f"{part}.{field} changed" if part == "tokenizer"
                             else f"{part}.{field}: {a.get(field)} -> {b.get(field)}")
    return lines


def acquire(policy_dir: str, cfg: RolloutConfig, version: int) -> VLLMEngine:
    """The live engine, serving the weights of ``policy_dir`` as policy version ``version`` (see module doc)."""
    global _live, _live_key, _live_weights
    policy_dir = str(policy_dir)
    key, weights = engine_key(policy_dir, cfg), weights_key(policy_dir)
    with _lock:
        if _live is not None and _live_key == key:
            if _live_weights != weights:
                with timed() as swap:
                    _live.reload(policy_dir)
                _count("reloads", swap.seconds)
                log.info("vLLM engine: policy v%d swapped in place from %s (%.3f s)", version, policy_dir,
                         swap.seconds)
                _live_weights = weights
            _live.version = version
            _live.use_prompts(cfg)
            return _live
        if _live is not None:
            log.warning("vLLM engine: restarting for policy v%d, the engine differs: %s", version,
                        "; ".join(differences(_live_key, key)))
            _close_live()
        with timed() as start:
            engine = VLLMEngine(policy_dir, cfg)
        _count("starts", start.seconds)
        log.info("vLLM engine: started for policy v%d from %s (%.1f s)", version, policy_dir, start.seconds)
        _register_exit_hooks()  # after vLLM (and multiprocessing) registered theirs: ours run first
        engine.version = version
        _live, _live_key, _live_weights = engine, key, weights
        return engine


def prestart(policy_dir: str, cfg: RolloutConfig, version: int) -> threading.Thread:
    """Start ``acquire`` in a background thread (e.g. while admission runs); the next ``acquire`` waits for it.

    A failed background start is logged, and the next ``acquire`` tries again and raises.
    """
    def run() -> None:
        try:
            acquire(policy_dir, cfg, version)
        except Exception:  # noqa: BLE001 - reported where it matters: the next acquire retries and raises
            log.exception("vLLM engine: background start failed; the next acquire retries")

    global _prestarted
    _prestarted = threading.Thread(target=run, name="posttrain-engine-prestart", daemon=True)
    _prestarted.start()
    return _prestarted


def settle() -> None:
    """Wait for a background start (``prestart``) to end. Work that first-imports what vLLM imports (the trainer:
    transformers) must not run beside it: two threads importing one package at once can fail ("cannot import name
    'AutoModelForCausalLM' from 'transformers'"), which a resumed run, whose first uncached stage may be an update,
    would otherwise hit."""
    if _prestarted is not None:
        _prestarted.join()


def shutdown_all() -> None:
    """Stop the live engine, if any (idempotent). The next ``acquire`` starts a new one."""
    with _lock:
        _close_live()


def live_engine() -> VLLMEngine | None:
    """The process's live engine, or None."""
    return _live


def counters() -> dict[str, float]:
    """Engine starts and in-place reloads in this process so far, and the seconds they took."""
    return dict(_counters)


def acquire_timed(policy_dir: str, cfg: RolloutConfig, version: int) -> tuple[VLLMEngine, float, float]:
    """``acquire``, and how long the caller waited for an engine start (also one ``prestart`` began) and for a swap.

    Returns ``(engine, start_s, swap_s)``: what this stage lost to starting things, for its timing stats.
    """
    before = counters()
    with timed() as waited:
        engine = acquire(policy_dir, cfg, version)
    now = counters()
    if now["starts"] > before["starts"]:
        return engine, waited.seconds, 0.0
    return engine, 0.0, waited.seconds if now["reloads"] > before["reloads"] else 0.0


def _count(kind: str, seconds: float) -> None:
    _counters[kind] += 1
    _counters[kind.removesuffix("s") + "_s"] += seconds


def _close_live() -> None:
    global _live, _live_key, _live_weights
    engine, _live, _live_key, _live_weights = _live, None, None, None
    if engine is not None:
        try:
            engine.close()
        except Exception:  # an engine already gone (its process died) must not hide the error that ended the run
            log.exception("vLLM engine: shutdown failed")


def _register_exit_hooks() -> None:
    global _exit_hooks_registered
    if _exit_hooks_registered:
        return
    _exit_hooks_registered = True
    atexit.register(shutdown_all)
    register = getattr(threading, "_register_atexit", None)  # runs before non-daemon threads are joined
    if register is not None:
        try:
            register(shutdown_all)
        except RuntimeError:  # the interpreter is already shutting down
            pass
