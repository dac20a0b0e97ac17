"""Solution policies for admission: scripted ones (test doubles and probes) and any policy through vLLM.

All share one small protocol, ``SolutionPolicy``: ``solutions(spec, k, seed)`` returns k solutions for one env,
already passed through the env verifier's ``extract_solution`` (ready for ``verify_many``), and
``solutions_many(specs, k, seed)`` does the same for many envs at once (one vLLM call for all prompts).

- ``ReferencePolicy`` (strong): always the reference solution.
- ``DegeneratePolicy("identity" | "noop")`` (weak): a Python entry point that returns its first argument, or does
  nothing; for envs without a Python entry point, the empty solution.
- ``NoisyReferencePolicy(p)``: each sample is the reference with probability p, else one of the verifier's mutants
  of it (seeded by env id, seed and sample index: the same call gives the same samples).
- ``VLLMPolicy(policy_dir)``: samples a checkpoint on the process's live vLLM engine (``posttrain.rollout.live``).
``make_policy(name)`` builds one from its config string: ``reference``, ``identity``, ``noop``, ``noisy:P``, or a
local checkpoint directory. A policy reference (``demo``, ``models:/posttrain-policy@champion``, a URI) is resolved
to one before admission by its entry points (``posttrain.tracking.policies.resolved``: the registry and the demo
builders sit above this layer); ``config_policy(cfg, field)`` builds the one an ``AdmissionConfig`` field names, and
one that is not a checkpoint raises ``ConfigError`` naming the field.

Example:
    >>> from posttrain.envs.spec import EnvSpec
    >>> spec = EnvSpec(id="t/add_1", prompt="# add_1(x)\\n", entry_point="add_1",
    ...                reference="def add_1(x):\\n    return x + 1\\n",
    ...                verifier={"kind": "python_tests", "cases": [{"args": [1], "expected": 2}]})
    >>> make_policy("reference").solutions(spec, 2, seed=0) == [spec.reference] * 2
    True
    >>> print(make_policy("identity").solutions(spec, 1, seed=0)[0], end="")
    def add_1(*args, **kwargs):
        return args[0] if args else None
    >>> noisy = make_policy("noisy:0.5")
    >>> noisy.solutions(spec, 8, seed=1) == noisy.solutions(spec, 8, seed=1), noisy.name
    (True, 'noisy:0.5')
    >>> scripted_policy("models:/posttrain-policy@champion") is None  # a reference: sampled through vLLM
    True
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Iterator, Protocol, Sequence

from posttrain.config import SCRIPTED_POLICIES, AdmissionConfig, ConfigError, RolloutConfig, noisy_probability
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import get_verifier
from posttrain.training.checkpoints import check_policy_dir, policy_version

SCRIPTED = SCRIPTED_POLICIES
POLICY_FIELDS = ("weak_policy", "strong_policy", "learnability_policy")  # the AdmissionConfig fields naming a policy


class SolutionPolicy(Protocol):
    name: str

    def solutions(self, spec: EnvSpec, k: int, seed: int) -> list[str]:
        """k solutions for ``spec`` (extracted, ready to verify)."""

    def solutions_many(self, specs: Sequence[EnvSpec], k: int, seed: int) -> list[list[str]]:
        """k solutions for each of ``specs``, in order."""

    def close(self) -> None: ...


class ScriptedSolutionPolicy:
    """Base of the scripted policies: ``solutions_many`` loops over ``solutions``; nothing to close."""

    name = "scripted"

    def solutions(self, spec: EnvSpec, k: int, seed: int) -> list[str]:
        raise NotImplementedError

    def solutions_many(self, specs: Sequence[EnvSpec], k: int, seed: int) -> list[list[str]]:
        return [self.solutions(spec, k, seed) for spec in specs]

    def close(self) -> None:
        pass


class ReferencePolicy(ScriptedSolutionPolicy):
    """The strong scripted policy: answers every env with its reference solution."""

    name = "reference"

    def solutions(self, spec: EnvSpec, k: int, seed: int) -> list[str]:
        return [spec.reference] * k


class DegeneratePolicy(ScriptedSolutionPolicy):
    """The weak scripted policy: a trivial program (``identity`` returns the first argument, ``noop`` nothing)."""

    MODES = ("identity", "noop")

    def __init__(self, mode: str = "identity"):
        if mode not in self.MODES:
            raise ValueError(f"DegeneratePolicy mode {mode!r}: expected one of {self.MODES}")
        self.mode = self.name = mode

    def program(self, spec: EnvSpec) -> str:
        entry = spec.entry_point
        if spec.runtime != "python" or not entry.isidentifier():
            return ""
        body = "return args[0] if args else None" if self.mode == "identity" else "pass"
        return f"def {entry}(*args, **kwargs):\n    {body}\n"

    def solutions(self, spec: EnvSpec, k: int, seed: int) -> list[str]:
        return [self.program(spec)] * k


class NoisyReferencePolicy(ScriptedSolutionPolicy):
    """The reference with probability ``p``, else a mutant of it (a policy of tunable, known quality)."""

    def __init__(self, p: float):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"noisy:P with P={p:g}: must be in [0, 1]")
        self.p = p
        self.name = f"noisy:{p:g}"
        self._fallback = DegeneratePolicy("noop")

    def solutions(self, spec: EnvSpec, k: int, seed: int) -> list[str]:
        rng = random.Random(f"{seed}:{spec.id}")
        mutants = None
        out = []
        for _ in range(k):
            if rng.random() < self.p:
                out.append(spec.reference)
                continue
            if mutants is None:
                mutants = list(get_verifier(spec.verifier_kind).mutants(spec)) or [self._fallback.program(spec)]
            out.append(rng.choice(mutants))
        return out


class VLLMPolicy:
    """Any checkpoint (HF dir) sampled with vLLM, on the process's live engine (``posttrain.rollout.live``).

    The engine starts on first use, or is the one already serving another policy of the same architecture, swapped
    in place; sampling is seeded per call, so the same call gives the same samples. The engine outlives the
    policy (the next stage, e.g. the rollout, reuses it); ``live.shutdown_all`` or the end of the process stops it.
    """

    def __init__(self, policy_dir: str, temperature: float = 1.0, max_new_tokens: int = 64,
                 rollout: RolloutConfig | None = None):
        self.policy_dir = str(policy_dir)
        self.name = self.policy_dir
        self.temperature, self.max_new_tokens = temperature, max_new_tokens
        self.rollout = rollout or RolloutConfig()

    def solutions_many(self, specs: Sequence[EnvSpec], k: int, seed: int) -> list[list[str]]:
        from posttrain.rollout import live

        if not specs:
            return []
        engine = live.acquire(self.policy_dir, self.rollout, version=policy_version(self.policy_dir))
        groups = engine.generate([spec.prompt for spec in specs], n=k, temperature=self.temperature,
                                 max_tokens=self.max_new_tokens, top_p=self.rollout.top_p, seed=seed)
        return [[get_verifier(spec.verifier_kind).extract_solution(sample.text) for sample in group]
                for spec, group in zip(specs, groups)]

    def solutions(self, spec: EnvSpec, k: int, seed: int) -> list[str]:
        return self.solutions_many([spec], k, seed)[0]

    def close(self) -> None:
        pass  # the live engine is shared by the process; it is not this policy's to stop


def scripted_policy(name: str) -> ScriptedSolutionPolicy | None:
    """The scripted policy a config string names (``SCRIPTED``); None for any other string (a policy reference)."""
    if name == "reference":
        return ReferencePolicy()
    if name in DegeneratePolicy.MODES:
        return DegeneratePolicy(name)
    p = noisy_probability(name)
    return None if p is None else NoisyReferencePolicy(p)


def make_policy(name: str, temperature: float = 1.0, max_new_tokens: int = 64,
                rollout: RolloutConfig | None = None) -> SolutionPolicy:
    """The policy a config string names: a scripted one (``SCRIPTED``), else the checkpoint directory it names (a
    reference resolved first: ``posttrain.tracking.policies.resolved``) sampled through vLLM."""
    return scripted_policy(name) or VLLMPolicy(str(check_policy_dir(name)), temperature=temperature,
                                               max_new_tokens=max_new_tokens, rollout=rollout)


@contextmanager
def naming(field: str) -> Iterator[None]:
    """Errors resolving the policy of ``AdmissionConfig.<field>`` raised as a ``ConfigError`` that names the field."""
    try:
        yield
    except (ValueError, OSError) as error:  # no such alias or version, not a checkpoint dir, nothing to fetch
        raise ConfigError(f"admission.{field}: {error}") from error


def config_policy(cfg: AdmissionConfig, field: str, rollout: RolloutConfig | None = None) -> SolutionPolicy:
    """The policy ``cfg.<field>`` names, a checkpoint's sampled with ``cfg``'s settings and served and prompted as
    ``rollout`` says; one that cannot be resolved raises ``ConfigError`` naming the field."""
    with naming(field):
        return make_policy(getattr(cfg, field), temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                           rollout=rollout)
