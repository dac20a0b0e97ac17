"""A vLLM general plugin (entry point ``vllm.general_plugins``): how long vLLM's processes spin when idle.

vLLM's engine and its worker process exchange work through a shared-memory queue whose readers busy-wait for
``busy_loop_s`` (1 s) after every message before they sleep on a socket. On a GPU box that is a free CPU core; on
this 2-core CPU machine it is half the machine, taken from the reward stage's sandboxes for a second after every
generate. vLLM loads general plugins in each of its processes (the worker is spawned, so a patch in our process
would not reach it); this one sets that spin time from ``POSTTRAIN_VLLM_BUSY_LOOP_S`` where the variable is set
(``rollout.engine_host`` sets it before starting vLLM; it matters where vLLM runs its own processes: on GPU, or
on CPU with ``VLLM_ENABLE_V1_MULTIPROCESSING=1``), and does nothing otherwise. The writer notifies readers
on every message, so a short spin only adds a socket wake-up (tens of microseconds) to the first read after idle.

Example:
    >>> import os
    >>> os.environ["POSTTRAIN_VLLM_BUSY_LOOP_S"] = "0.01"
    >>> configure_idle_spin()                                        # doctest: +SKIP
    >>> from vllm.distributed.device_communicators.shm_broadcast import SpinCondition  # doctest: +SKIP
    >>> SpinCondition.__init__.__defaults__                          # doctest: +SKIP
    (0.01,)
"""

from __future__ import annotations

import os

ENV = "POSTTRAIN_VLLM_BUSY_LOOP_S"


def configure_idle_spin() -> None:
    """Set vLLM's shared-memory queue readers to spin ``$POSTTRAIN_VLLM_BUSY_LOOP_S`` seconds (when set)."""
    value = os.environ.get(ENV)
    if not value:
        return
    from vllm.distributed.device_communicators.shm_broadcast import SpinCondition

    SpinCondition.__init__.__defaults__ = (float(value),)
