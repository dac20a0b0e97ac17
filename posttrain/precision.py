"""Which float precision training and rollout compute in: what the hardware does natively, unless the config says.

bf16 halves memory traffic, but only hardware with bf16 arithmetic turns that into speed: a GPU that supports it, or
a CPU with AVX512-BF16 or AMX-BF16. On a CPU without either (AVX2 only, e.g. older EPYC and Xeon parts) every bf16
operation is converted to fp32 and back, and the update ran ~5x slower in bf16 than in fp32. ``"auto"`` (the default
of ``TrainConfig.precision`` and ``RolloutConfig.dtype``) therefore picks bf16 where it is native and fp32 elsewhere;
``"bf16"`` / ``"fp32"`` (``"bfloat16"`` / ``"float32"`` for vLLM) force one.

The choice is read from the hardware's capabilities, not timed: a timed probe could pick differently from one run
to the next on a loaded machine, and the same config must give the same run (the loop is seeded and cached by its
inputs). The choice and its reason are logged with every update and engine start.

Example (pure: the CPU flags are given):
    >>> choose("auto", cuda=None, cpu_flags={"avx2", "fma"}).precision
    'fp32'
    >>> choose("auto", cuda=None, cpu_flags={"avx2", "avx512_bf16"}).precision
    'bf16'
    >>> choose("bf16", cuda=None, cpu_flags={"avx2"}).reason
    'forced by the config (bf16 is emulated on this CPU: no avx512_bf16 or amx_bf16)'
    >>> engine_dtype("auto", cuda=None, cpu_flags={"avx2"}), engine_dtype("float16", cuda=None, cpu_flags=set())
    ('float32', 'float16')
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

PRECISIONS = ("auto", "bf16", "fp32")  # TrainConfig.precision
ENGINE_DTYPES = ("auto", "bfloat16", "float32", "float16")  # RolloutConfig.dtype (vLLM's names)
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of CPUs with bf16 arithmetic


@dataclass(frozen=True)
class Choice:
    precision: str  # "bf16" or "fp32"
    reason: str  # why, for the log and MLflow


@functools.lru_cache(maxsize=1)
def host_cpu_flags() -> frozenset[str]:
    """The flags of this machine's CPU (Linux ``/proc/cpuinfo``; empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def cuda_bf16() -> bool | None:
    """Whether the CUDA device supports bf16; None when training and rollout run on CPU."""
    import torch

    return torch.cuda.is_bf16_supported() if torch.cuda.is_available() else None


def native_bf16(cuda: bool | None, cpu_flags: frozenset[str] | set[str]) -> tuple[bool, str]:
    """Whether bf16 arithmetic is native here, and what says so."""
    if cuda is not None:
        return cuda, "the GPU supports bf16" if cuda else "the GPU has no bf16"
    found = [flag for flag in NATIVE_BF16_FLAGS if flag in cpu_flags]
    if found:
        return True, f"the CPU has {' and '.join(found)}"
    return False, "bf16 is emulated on this CPU: no avx512_bf16 or amx_bf16"


def choose(requested: str, cuda: bool | None = None, cpu_flags: frozenset[str] | set[str] | None = None) -> Choice:
    """The precision for ``requested`` (``PRECISIONS``) on this hardware (or the one described by the arguments)."""
    if requested not in PRECISIONS:
        raise ValueError(f"precision {requested!r}: must be one of {list(PRECISIONS)}")
    native, why = native_bf16(cuda, host_cpu_flags() if cpu_flags is None else cpu_flags)
    if requested != "auto":
        return Choice(requested, f"forced by the config ({why})")
    return Choice("bf16" if native else "fp32", f"auto: {why}")


def here(requested: str) -> Choice:
    """``choose`` on this process's hardware (its CUDA device if any, else its CPU)."""
    return choose(requested, cuda=cuda_bf16())


def engine_dtype(requested: str, cuda: bool | None = None, cpu_flags: frozenset[str] | set[str] | None = None) -> str:
    """vLLM's ``dtype`` for ``RolloutConfig.dtype``: ``auto`` resolved as ``choose`` does, any other name as is."""
    if requested != "auto":
        return requested
    precision = choose("auto", cuda, cpu_flags).precision
    return "bfloat16" if precision == "bf16" else "float32"
