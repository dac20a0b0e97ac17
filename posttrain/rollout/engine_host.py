"""The process a ``VLLMEngine`` runs vLLM in: one child process per engine, one message per call.

Why a process of our own. vLLM's default on CPU is three processes: the caller, an engine core (scheduler) and a
worker (the model), the last two exchanging every decode step through a shared-memory queue. On this 2-core machine
that hand-off costs a third of the throughput: vLLM binds the worker to one core and reserves the other for the
engine core, which spends most of it waiting (``sched_yield``). Running vLLM's engine core and worker inside the
caller (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) removes the hand-off, but it would also run inside the caller what vLLM
does to its own process: seed Python's, NumPy's and torch's global RNGs at start, replace ``torch.set_num_threads``
with a no-op, freeze vLLM's environment variables and the GC heap, and keep its KV cache in the caller's memory after
close -- in a local ``pyflyte run`` the caller is also the trainer. So the engine gets a process of its own, in which
vLLM runs in-process on CPU (and with its own processes on GPU, where its defaults are right); the caller sends one
message per ``generate`` (the whole batch) and gets the ``RequestOutput``s back, and ``close`` ends the process, its
memory with it.

CPU threads: the host's compute threads run on the cores in ``VLLM_CPU_OMP_THREADS_BIND`` when it names them (``"0"``,
``"0,1"``, ``"2-3"``: one list; vLLM's in-process engine binds nothing itself), else on every core the process may
use, one thread per core. ``VLLM_ENABLE_V1_MULTIPROCESSING=1`` in the environment restores vLLM's own layout and
binding inside the host (``benchmarks/rollout.py`` compares them).

Waits: a start that does not serve within its ``start_timeout_s`` (``rollout.engine_start_timeout_s``) stops the
process and raises ``EngineHostError``; every wait for a reply also watches the process itself, so one that dies
raises at once, naming its pid and exit code. A spawned process first re-imports the caller's main script: a script
that starts an engine without ``if __name__ == "__main__":`` would start one again from there (under ``VLLMEngine``
it would wait forever for the lock its parent holds while the engine loads). ``refuse_unguarded_start`` stops that
re-import at once, and the caller's ``EngineHostError`` says to add the guard.

Texts: ``generate(..., decode=True)`` decodes, once at the end, the texts of requests sent with
``detokenize=False`` (``tokenizer.batch_decode``, special tokens skipped, as vLLM's detokenizer does), instead of
vLLM's incremental detokenizer running on every sample at every step; requests with stop strings need it and keep it.

Example (real vLLM; ``tests/rollout/test_engine_host.py`` runs it):
    >>> host = EngineHost.start("/path/to/staged-policy", {"dtype": "bfloat16", "max_model_len": 256})  # doctest: +SKIP
    >>> (out,) = host.call("generate", prompts=["def f(x):"], params={"max_tokens": 4, "detokenize": False},
    ...                    decode=True)                                                             # doctest: +SKIP
    >>> len(out.outputs[0].token_ids), out.outputs[0].text != ""                                    # doctest: +SKIP
    (4, True)
    >>> host.close()                                                                                # doctest: +SKIP

Which cores a binding names (pure):
    >>> cores("0-1,3", available={0, 1, 2, 3}), cores("auto", available={0, 1}), cores(None, available={2})
    ([0, 1, 3], [0, 1], [2])
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.util  # registers its exit hook (joining child processes) before ours: ours runs first
import os
import pickle
import sys
import threading
import traceback
import weakref
from typing import Any

from posttrain.config import RolloutConfig
from posttrain.rollout.vllm_logs import quiet_swap

log = logging.getLogger(__name__)

BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
CLOSE_TIMEOUT_S = 60.0
UNGUARDED_EXIT = 3  # the exit code of an engine process stopped by refuse_unguarded_start
MAIN_GUARD = 'if __name__ == "__main__":'


_open_hosts: "weakref.WeakSet[EngineHost]" = weakref.WeakSet()


@atexit.register
def _close_open_hosts() -> None:
    """At exit, close the engine processes nobody closed: multiprocessing would wait for them forever."""
    hosts = list(_open_hosts)
    for host in hosts:
        host.request_close()
    for host in hosts:
        host.close()


class EngineHostError(RuntimeError):
    """The engine process failed to start, or ended while the caller waited for it."""


def refuse_unguarded_start() -> None:
    """End this process (exit code ``UNGUARDED_EXIT``) when it is a spawned process still importing its parent's main
    script (multiprocessing's bootstrap): that script starts an engine outside ``if __name__ == "__main__":``.

    In the caller's own process it does nothing:
        >>> refuse_unguarded_start()
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):  # what multiprocessing checks itself
        print(f"posttrain: the main script starts a vLLM engine when an engine process imports it; put the engine "
              f"start under `{MAIN_GUARD}`", file=sys.stderr, flush=True)
        raise SystemExit(UNGUARDED_EXIT)


def _main_script() -> str:
    return getattr(sys.modules.get("__main__"), "__file__", None) or "the main script"


def cores(binding: str | None, available: set[int]) -> list[int]:
    """The cores a ``VLLM_CPU_OMP_THREADS_BIND`` value names (one list: ``"0,2"``, ``"0-3"``); ``auto``, ``nobind``,
    unset: all of ``available``."""
    if not binding or binding in ("auto", "nobind"):
        return sorted(available)
    if "|" in binding:
        raise ValueError(f"{BIND_ENV}={binding!r}: one engine process takes one list of cores (no '|')")
    chosen: list[int] = []
    for part in binding.split(","):
        low, _, high = part.strip().partition("-")
        chosen += range(int(low), int(high or low) + 1)
    return chosen


class EngineHost:
    """The caller's handle on an engine process: ``call(method, **kwargs)`` runs one of ``METHODS`` there."""

    def __init__(self, process: multiprocessing.process.BaseProcess, conn, info: dict):
        self.process, self.conn, self.info = process, conn, info
        self._lock = threading.Lock()  # one call at a time on the connection
        self._closing = False  # "close" sent

    @classmethod
    def start(cls, model_path: str, engine_kwargs: dict, cpus: list[int] | None = None,
              start_timeout_s: float = RolloutConfig.engine_start_timeout_s) -> "EngineHost":
        """Start a process serving ``vllm.LLM(model=model_path, **engine_kwargs)``, on CPU its compute threads on
        ``cpus`` (default: ``cores`` of ``VLLM_CPU_OMP_THREADS_BIND``); returns once it serves, or raises
        ``EngineHostError``: vLLM's error, the process's end, or no start within ``start_timeout_s``."""
        refuse_unguarded_start()
        context = multiprocessing.get_context("spawn")
        conn, child_conn = context.Pipe()
        # not a daemon: on GPU the host starts vLLM's own engine processes, which daemons may not
        process = context.Process(target=serve, args=(child_conn, model_path, engine_kwargs, cpus),
                                  name="posttrain-vllm-engine")
        process.start()
        child_conn.close()
        host = cls(process, conn, info={})
        _open_hosts.add(host)
        try:
            if not host._wait(start_timeout_s):
                _stop(process, conn, grace_s=0)
                raise EngineHostError(f"the vLLM engine for {model_path} did not start within {start_timeout_s:g} s "
                                      "(rollout.engine_start_timeout_s) and was stopped; its log is above")
            host.info = host._receive(f"starting vLLM for {model_path}")
        except BaseException:
            host.close()
            raise
        return host

    def call(self, method: str, **kwargs) -> Any:
        """Run ``METHODS[method](llm, **kwargs)`` in the engine process; its exception is raised here (as itself, with
        the engine process's traceback as a note; as ``EngineHostError`` if it does not pickle)."""
        with self._lock:
            try:
                self.conn.send((method, kwargs))
            except (BrokenPipeError, EOFError, OSError) as exc:
                raise self._ended(method) from exc
            return self._receive(method)

    def request_close(self) -> None:
        """Ask the engine process to shut vLLM down and end, without waiting (``close`` waits): several hosts shut
        down at once instead of one after another (~1.5 s each here)."""
        with self._lock:
            if self.process.is_alive() and not self._closing:
                try:
                    self.conn.send(("close", {}))
                except (BrokenPipeError, EOFError, OSError):
                    pass
                self._closing = True

    def close(self) -> None:
        """End the engine process (vLLM shut down first, for up to ``CLOSE_TIMEOUT_S``); idempotent."""
        self.request_close()
        with self._lock:
            if self.process.is_alive():
                try:
                    if self.conn in self._wait(CLOSE_TIMEOUT_S):
                        self.conn.recv()
                except (BrokenPipeError, EOFError, OSError):
                    pass
            _stop(self.process, self.conn, CLOSE_TIMEOUT_S)
            _open_hosts.discard(self)

    def _wait(self, timeout_s: float | None) -> list:
        """Wait until the engine process replies or ends (or ``timeout_s`` passes); what is ready."""
        return multiprocessing.connection.wait([self.conn, self.process.sentinel], timeout_s)

    def _receive(self, what: str) -> Any:
        """The engine process's reply: its result, or its exception raised here; ``EngineHostError`` if it ends
        first."""
        if self.conn not in self._wait(None):
            raise self._ended(what)
        try:
            status, payload = self.conn.recv()
        except (EOFError, OSError) as exc:
            raise self._ended(what) from exc
        if status == "ok":
            return payload
        error, text = payload
        if error is None:
            raise EngineHostError(f"{what}, in the vLLM engine process:\n{text}")
        error.add_note(f"({what}, in the vLLM engine process:)\n{text}")
        raise error

    def _ended(self, what: str) -> EngineHostError:
        self.process.join(5)
        if self.process.exitcode == UNGUARDED_EXIT:
            return EngineHostError(f"{what}: the vLLM engine process re-imported {_main_script()}, which starts an "
                                   f"engine at import; put the code that starts the engine under `{MAIN_GUARD}` (an "
                                   "engine process is spawned: it imports the main script first)")
        return EngineHostError(f"{what}: the vLLM engine process (pid {self.process.pid}) ended, exit code "
                               f"{self.process.exitcode}; its log is above")


def _stop(process, conn, grace_s: float) -> None:
    """Give ``process`` ``grace_s`` to end, then terminate it, then kill it (10 s each); close ``conn``."""
    process.join(grace_s)
    for end, signal_name in ((process.terminate, "SIGTERM"), (process.kill, "SIGKILL")):
        if not process.is_alive():
            break
        log.warning("vLLM engine process %d did not stop; sending it %s", process.pid, signal_name)
        end()
        process.join(10)
    if process.is_alive():
        log.error("vLLM engine process %d survived SIGKILL (uninterruptible?); leaving it", process.pid)
    conn.close()


# --- the engine process -------------------------------------------------------------------------------------------


def _error(exc: BaseException) -> tuple[BaseException | None, str]:
    """What the caller raises: the exception itself where it pickles (else None), and its traceback here."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - an exception that does not survive pickling: the caller raises EngineHostError
        exc = None
    return exc, traceback.format_exc()


def _generate(llm, prompts: list, params: dict | list[dict], decode: bool = False) -> list:
    """``llm.generate`` with ``SamplingParams(**params)`` (one dict for all prompts, or one per prompt); ``decode``:
    fill in the texts of requests sent with ``detokenize=False``, decoded once from their token ids."""
    from vllm import SamplingParams

    sampling = ([SamplingParams(**p) for p in params] if isinstance(params, list) else SamplingParams(**params))
    outputs = llm.generate(prompts, sampling, use_tqdm=False)
    if decode:
        per_prompt = params if isinstance(params, list) else [params] * len(outputs)
        choices = [c for out, p in zip(outputs, per_prompt) if p.get("detokenize") is False for c in out.outputs]
        texts = llm.get_tokenizer().batch_decode([list(c.token_ids) for c in choices], skip_special_tokens=True)
        for choice, text in zip(choices, texts):
            choice.text = text
    return outputs


def _swap_weights(llm, weights_path: str) -> None:
    llm.collective_rpc("swap_weights", kwargs={"weights_path": weights_path})
    _reset_prefix_cache(llm)


def _reset_prefix_cache(llm) -> None:
    with quiet_swap(tied_head=False):  # its "Successfully reset prefix cache", once per swap
        llm.reset_prefix_cache()


METHODS = {"generate": _generate, "swap_weights": _swap_weights, "reset_prefix_cache": _reset_prefix_cache}


def serve(conn, model_path: str, engine_kwargs: dict, cpus: list[int] | None = None) -> None:
    """The engine process: start vLLM, report, then answer calls until ``close`` or the caller goes away."""
    try:
        info = _prepare(engine_kwargs, cpus)
        from vllm import LLM

        llm = LLM(model=model_path, **engine_kwargs)
        info["block_size"] = llm.llm_engine.vllm_config.cache_config.block_size
    except BaseException as exc:  # noqa: BLE001 - reported to the caller, which raises it
        conn.send(("error", _error(exc)))
        return
    conn.send(("ok", info))
    try:
        while True:
            try:
                method, kwargs = conn.recv()
            except (EOFError, OSError):  # the caller ended without closing us
                break
            if method == "close":
                break
            try:
                conn.send(("ok", METHODS[method](llm, **kwargs)))
            except Exception as exc:  # noqa: BLE001 - reported to the caller, which raises it
                conn.send(("error", _error(exc)))
    finally:
        llm.llm_engine.engine_core.shutdown()
        try:
            conn.send(("ok", None))
        except (BrokenPipeError, OSError):
            pass
    _exit_at_once()


def _exit_at_once() -> None:
    """End the engine process without the interpreter's teardown of vLLM and torch (~3.5 s here, paid at every
    engine stop and restart): vLLM is already shut down, and what the process holds (its KV cache, its weights) goes
    with it. Logs and standard streams are flushed first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


def _prepare(engine_kwargs: dict, cpus: list[int] | None) -> dict:
    """This process's settings for vLLM (before it starts); returns what was chosen, for the caller's log.

    On CPU: vLLM in this process, its threads on ``cpus`` (default: the cores ``VLLM_CPU_OMP_THREADS_BIND`` names,
    else all), one per core; a small KV cache unless the user sets one; and no chunked prefill, which vLLM 0.32's
    CPU sampler does not survive for seeded requests ("CPU Generator does not use offset" when a seeded request's
    prefill is split).
    """
    from posttrain.rollout import vllm_plugin

    # vLLM's multiprocess readers would busy-wait a second after each batch, a core the sandboxes need (vllm_plugin)
    os.environ.setdefault(vllm_plugin.ENV, "0.01")
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return {"pid": os.getpid(), "platform": current_platform.device_name, "in_process": False}
    import torch

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; users with more memory raise it
    # vllm-cpu 0.32's AOT-compiled artifacts fail to reload ("'function' object has no attribute 'finalize_loading'"),
    # so every start recompiled; the Inductor cache path does reload (warm-up of a second start: 43 s -> 16 s here).
    os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
    engine_kwargs.setdefault("enable_chunked_prefill", False)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # "1": vLLM's own processes and binding instead
    if os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0":
        return {"pid": os.getpid(), "platform": "cpu", "in_process": False}
    chosen = cpus or cores(os.environ.get(BIND_ENV), os.sched_getaffinity(0))
    os.sched_setaffinity(0, chosen)
    torch.set_num_threads(len(chosen))
    return {"pid": os.getpid(), "platform": "cpu", "in_process": True, "cores": chosen,
            "torch_threads": torch.get_num_threads()}
