"""The engine processes (``posttrain.rollout.engine_host``) on real vLLM: the caller's RNGs, threads and
``torch.set_num_threads`` stay its own while vLLM runs in-process over there; replicas split a batch by prompt and
it comes back in order; texts decoded once at the end equal vLLM's incremental detokenizer's; a bad request raises
in the caller and the engine serves on; a dead engine process is an error that names it; a core list binds the
engine's threads; a start that takes longer than ``rollout.engine_start_timeout_s`` is stopped and raises; a script
that starts an engine without ``if __name__ == "__main__":`` fails in seconds with an error that says to add it."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from posttrain.config import RolloutConfig
from posttrain.rollout.engine import VLLMEngine, sampling_params
from posttrain.rollout.engine_host import EngineHostError

pytestmark = pytest.mark.integration

pytest.importorskip("vllm", reason="vLLM is not installed (make install with EXTRA=cpu or gpu)")

UNGUARDED_SCRIPT = """
from posttrain.config import RolloutConfig
from posttrain.rollout.engine import VLLMEngine

engine = VLLMEngine({policy!r}, RolloutConfig(max_model_len=256))
print("served")
engine.close()
"""
PROMPTS = ["# Write a function add_2(x) that returns x plus 2.\n", "def is_even(n):\n"]


def _rng_states() -> tuple:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()


def _same(a: tuple, b: tuple) -> bool:
    return torch.equal(a[0], b[0]) and a[1] == b[1] and bool((a[2] == b[2]).all())


@pytest.fixture(scope="module")
def caller_before() -> tuple:
    """The caller's RNG states (seeded) and torch threads, taken before the module's engine starts."""
    import vllm.outputs  # noqa: F401 - what unpickling the engine's outputs imports here (its import draws from random)

    torch.manual_seed(11), random.seed(11), np.random.seed(11)
    return _rng_states(), torch.get_num_threads()


@pytest.fixture(scope="module")
def engine(tiny_policy, caller_before):
    """One engine (a replica per core) for the module's tests; its processes must end cleanly when it closes."""
    with VLLMEngine(str(tiny_policy), RolloutConfig(max_model_len=256), seed=0) as engine:
        processes = [host.process for host in engine.hosts]
        yield engine
    assert [(p.is_alive(), p.exitcode) for p in processes] == [(False, 0)] * len(processes)


def test_the_callers_rngs_threads_and_set_num_threads_are_untouched(engine, caller_before, tiny_policy):
    before, threads = caller_before
    assert all(info["in_process"] and info["pid"] != os.getpid() for info in engine.info)
    engine.generate(PROMPTS, n=2, temperature=1.0, max_tokens=8)            # unseeded: the engine's own RNG
    engine.generate(PROMPTS, n=2, temperature=1.0, max_tokens=8, seed=5)
    engine.reload(str(tiny_policy))
    assert _same(before, _rng_states())
    assert torch.get_num_threads() == threads
    torch.set_num_threads(1)  # vLLM's worker makes this a no-op in its own process, never in ours
    assert torch.get_num_threads() == 1
    torch.set_num_threads(threads)


def test_replicas_take_a_core_each_and_the_batch_comes_back_in_order(engine, tiny_policy):
    from transformers import AutoTokenizer

    usable = sorted(os.sched_getaffinity(0))
    assert [info["cores"] for info in engine.info] == [[core] for core in usable]  # replicas=0: one per core
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_policy))
    prompts = [f"# Write a function add_{i}(x) that returns x plus {i}.\n" for i in range(5)]
    first = engine.generate(prompts, n=3, temperature=1.0, max_tokens=12, seed=4)
    again = engine.generate(prompts, n=3, temperature=1.0, max_tokens=12, seed=4)
    assert [s.prompt_token_ids for group in first for s in group] == [tokenizer(p).input_ids for p in prompts
                                                                      for _ in range(3)]
    assert [[s.token_ids for s in g] for g in first] == [[s.token_ids for s in g] for g in again]
    with pytest.raises(ValueError, match=r"rollout.replicas=\d+: more than the \d+ cores"):
        VLLMEngine(str(tiny_policy), RolloutConfig(max_model_len=256, replicas=len(usable) + 1))


def test_texts_decoded_at_the_end_equal_vllms_incremental_detokenizer(engine):
    params = sampling_params(len(PROMPTS), n=4, temperature=1.0, max_tokens=40, seed=17)  # generate's requests
    assert all(p["detokenize"] is False for p in params)
    incremental = engine.request_outputs(PROMPTS, [{**p, "detokenize": True} for p in params])
    at_the_end = engine.request_outputs(PROMPTS, params)
    pairs = [(a, b) for x, y in zip(incremental, at_the_end) for a, b in zip(x.outputs, y.outputs)]
    assert len(pairs) == 8
    assert all(a.token_ids == b.token_ids for a, b in pairs)  # the same seeded samples
    assert all(a.text == b.text for a, b in pairs), [(a.text, b.text) for a, b in pairs if a.text != b.text]
    assert sum(bool(a.text) for a, _ in pairs) >= 6
    samples = engine.generate(PROMPTS, n=4, temperature=1.0, max_tokens=40, seed=17)
    assert [s.text for group in samples for s in group] == [a.text for a, _ in pairs]


def test_stop_strings_end_generation_with_vllms_detokenizer(engine, tiny_policy):
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(tiny_policy))(PROMPTS[0]).input_ids
    (group,) = engine.generate_ids([ids], n=4, temperature=1.0, max_tokens=64, seed=2, stop=["\n"])
    assert any(sample.text.endswith("\n") and sample.finish_reason == "stop" for sample in group)
    for sample in group:  # a stop string ends the text, and stays in it (text and token ids)
        assert "\n" not in sample.text[:-1]


def test_a_bad_request_raises_in_the_caller_and_the_engine_serves_on(engine):
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="maximum context length"):
        engine.generate(["x " * 2000], n=1, temperature=1.0, max_tokens=4)
    (group,) = engine.generate(PROMPTS[:1], n=2, temperature=1.0, max_tokens=4, seed=0)
    assert [len(s.token_ids) for s in group] == [4, 4]


def test_a_core_list_binds_the_engine_and_a_dead_engine_process_is_named(tiny_policy, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    engine = VLLMEngine(str(tiny_policy), RolloutConfig(max_model_len=256))
    try:
        assert [(info["cores"], info["torch_threads"]) for info in engine.info] == [([0], 1)]
        assert os.sched_getaffinity(0) != {0} or os.cpu_count() == 1  # the caller's affinity is its own
        os.kill(engine.hosts[0].process.pid, signal.SIGKILL)
        with pytest.raises(EngineHostError, match=r"vLLM engine process \(pid \d+\) ended, exit code -9"):
            engine.generate(PROMPTS[:1], n=1, temperature=1.0, max_tokens=4)
    finally:
        engine.close()  # a dead process closes quietly
    with pytest.raises(RuntimeError, match="is closed"):
        engine.generate(PROMPTS[:1], n=1, temperature=1.0, max_tokens=4)


def test_a_start_past_its_timeout_is_stopped_and_raises(tiny_policy):
    before, started = set(multiprocessing.active_children()), time.monotonic()  # other tests' engines live on
    with pytest.raises(EngineHostError, match=r"did not start within 0.5 s \(rollout.engine_start_timeout_s\)"):
        VLLMEngine(str(tiny_policy), RolloutConfig(max_model_len=256, replicas=1, engine_start_timeout_s=0.5))
    assert time.monotonic() - started < 60  # the process is terminated, not waited for
    assert set(multiprocessing.active_children()) <= before  # and reaped


def test_a_script_without_the_main_guard_fails_fast_and_says_to_add_it(tiny_policy, tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED_SCRIPT.format(policy=str(tiny_policy)))
    started = time.monotonic()
    # before the guard check this hung: the engine process re-ran the script, whose VLLMEngine waited for the staging
    # lock the script's own VLLMEngine held while waiting for the engine process
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - started
    assert run.returncode == 1, (run.stdout, run.stderr[-3000:])
    assert "served" not in run.stdout, (run.stdout, run.stderr[-3000:])
    error = run.stderr.strip().splitlines()[-1]
    assert error.startswith("posttrain.rollout.engine_host.EngineHostError: starting vLLM for "), run.stderr[-3000:]
    assert f"re-imported {script}, which starts an engine at import; put the code that starts the engine under " \
           '`if __name__ == "__main__":`' in error
    assert elapsed < 120, elapsed  # ~10 s here: the engine processes end once they reach the engine start
