"""Shared fixtures (``tiny_policy``: a real demo policy, HF dir, built once per session; ``family_policy``: tiny
checkpoints of the Mistral, Qwen2 and Llama 3 families; the process's live vLLM engine, shut down when the session
ends; the process's verdict cache, emptied before each test) and the kind rule.

Tests mirror the library (``tests/<package>/test_<module>.py``); what kind a test is, is a marker, never a folder:
every test carries exactly one of ``unit``, ``integration``, ``e2e`` (``pytest -m unit`` runs the fast ones), and
collection fails on a test that has none or several.
"""

from __future__ import annotations

import os

import pytest
import torch

from posttrain.config import DEMO_SUITE, DemoPolicyConfig

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache for vLLM's CPU backend
if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # read when deepspeed is first imported

TINY_POLICY = DemoPolicyConfig(sft_steps=12, sft_batch_size=8)  # seconds to build; output is near random


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory):
    """Path of a tiny demo policy trained for a few steps on the demo suite's train split."""
    from posttrain.envs.suite import load_suite
    from posttrain.training.demo_policy import build_demo_policy

    pairs = [(env.prompt, env.reference) for env in load_suite(DEMO_SUITE).envs if env.split == "train"]
    return build_demo_policy(tmp_path_factory.mktemp("tiny_policy") / "policy", TINY_POLICY, pairs)


@pytest.fixture(scope="session")
def family_policy(tmp_path_factory):
    """``family_policy(name)``: the path of a tiny random checkpoint of model family ``name`` (``mistral``, ``qwen2``,
    ``llama3``: ``posttrain.training.families``), built once per session."""
    from posttrain.training.families import build_family_checkpoint

    built: dict = {}

    def get(family: str):
        if family not in built:
            built[family] = build_family_checkpoint(family, tmp_path_factory.mktemp(f"family-{family}") / "policy")
        return built[family]

    return get


@pytest.fixture
def flyte_cache(tmp_path, monkeypatch):
    """Flyte's local cache in a fresh folder for this test (flytekit keeps it in ``~/.flyte/local-cache``): a task
    called twice runs once, and never comes from an earlier test's cache."""
    from flytekit.core import local_cache

    monkeypatch.setenv("FLYTE_LOCAL_CACHE_ENABLED", "true")
    monkeypatch.setattr(local_cache, "CACHE_LOCATION", str(tmp_path / "flyte-local-cache"))
    monkeypatch.setattr(local_cache.LocalTaskCache, "_cache", getattr(local_cache.LocalTaskCache, "_cache", None),
                        raising=False)  # restored (or removed) after the test, with _initialized
    monkeypatch.setattr(local_cache.LocalTaskCache, "_initialized", False)


@pytest.fixture(autouse=True)
def _empty_verdict_cache():
    """Each test starts with no verdict kept by an earlier one (``posttrain.envs.verifiers.cache``): what a test's
    sandboxes run, and measure, is its own."""
    from posttrain.envs.verifiers.cache import VERDICTS

    VERDICTS.clear()


@pytest.fixture(scope="session", autouse=True)
def _shutdown_live_engine():
    """Tests share the process's live vLLM engine (``posttrain.rollout.live``): the first that needs one starts it,
    later ones swap weights in place; it stops here, before pytest closes the streams its shutdown logs to. So do
    they the live sandbox (``posttrain.sandbox.live``), which stops here too."""
    yield
    from posttrain.rollout import live
    from posttrain.sandbox import live as live_sandbox

    live.shutdown_all()
    live_sandbox.shutdown()


KINDS = ("unit", "integration", "e2e")

# With pytest-xdist (``PYTEST_WORKERS=2 make test``: ``-n 2 --dist loadscope``) tests run in groups, one worker each:
# a module's tests together (its module fixtures are built once), and modules that share a costly session fixture
# (one ``pyflyte run`` each) or the process's live vLLM engine (~30 s per start) together, so that it is made once.
# Groups go by module path (``worker_group``): the scheduler sees node ids only. pytest 9.2 ignores xdist's own
# ``xdist_group`` marks (pytest-xdist#1386), hence ``pytest_xdist_make_scheduler`` below.
SHARED_RUNS = ("smoke_run", "stale_tiers_run")  # the session fixtures whose readers must share a worker
LIVE_ENGINE_MODULES = (
    "tests/agent/test_exact_tokens.py", "tests/benchmarks/test_gpu_check.py", "tests/evaluation/test_greedy.py", "tests/rollout/test_collect.py",
    "tests/rollout/test_engine.py", "tests/rollout/test_engine_host.py", "tests/rollout/test_live.py",
    "tests/tasks/test_agent_task.py", "tests/training/test_data_parallel.py", "tests/workflows/test_admit.py",
)
GROUPS = {
    **dict.fromkeys(("tests/workflows/test_rl_loop.py", "tests/workflows/test_mlflow_browser.py"), "smoke_run"),
    **dict.fromkeys(("tests/workflows/test_agent_tier.py", "tests/workflows/test_staleness.py"), "stale_tiers_run"),
    **dict.fromkeys(LIVE_ENGINE_MODULES, "live-engine"),
}
# The longest groups first (minutes of the serial suite here): groups are handed out in collection order, so a long
# one left for last would run alone on one worker while the other idles.
LONGEST_FIRST = ("smoke_run", "live-engine", "tests/sandbox/attacks/test_attacks.py", "tests/workflows/test_resume.py",
                 "tests/admission/test_anti_hacking.py", "stale_tiers_run", "tests/sandbox/test_runner.py",
                 "tests/workflows/test_evaluate.py")


def worker_group(nodeid: str) -> str:
    """The worker group of a test, by its node id: its module's shared group, else its module."""
    module = nodeid.split("::", 1)[0]
    return GROUPS.get(module, module)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadscope``, with scopes made of ``worker_group``s and handed out in collection order."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    config.option.loadscopereorder = False  # by test count otherwise
    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Refuse to run a test whose kind is missing or ambiguous (a new test module must say what it needs), or a reader
    of a shared run outside its group; put the longest groups first."""
    wrong = [f"{item.nodeid}: {kinds or 'no kind marker'}" for item in items
             if len(kinds := [k for k in KINDS if item.get_closest_marker(k)]) != 1]
    if wrong:
        raise pytest.UsageError("every test needs exactly one of the markers " + ", ".join(KINDS) + " "
                                "(pytestmark = pytest.mark.<kind> at module level):\n  " + "\n  ".join(wrong))
    shared = [f"{item.nodeid}: reads {name}; add its module to GROUPS[{name!r}]" for item in items
              for name in SHARED_RUNS if name in item.fixturenames and worker_group(item.nodeid) != name]
    if shared:
        raise pytest.UsageError("tests of a shared run must share its worker group (tests/conftest.py):\n  "
                                + "\n  ".join(shared))
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(worker_group(item.nodeid), len(rank)))  # stable: the rest keep their order
