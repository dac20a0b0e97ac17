"""The Docker backend: a warm pool of hardened containers (what ``make_sandbox("docker")`` returns) and a cold
one-container-per-execution variant. Importing this package imports the Docker SDK.

- ``pool.py``: ``DockerPool``, the warm pool, configured by one ``DockerPoolConfig`` (``SandboxConfig.docker``).
- ``box.py``: ``Box``, one pooled container: ``run`` a program through its agent, ``reset`` it.
- ``session.py``: ``DockerSession``, one container held for a multi-step agent.
- ``agent_client.py``: the host side of the in-container agent (``posttrain/trusted/container_agent.py``).
- ``host_view.py``: a local container's processes seen (and killed) from the host.
- ``container.py``: the client, the hardened container config, the cold launcher, OOM counts.
- ``cold.py``: ``DockerSandbox``, a fresh container per execution (the benchmark's baseline).

Modules depend downwards only: pool -> session -> box -> agent_client, host_view, container.

Example:
    >>> from posttrain.config import DockerPoolConfig
    >>> from posttrain.sandbox.base import Execution
    >>> from posttrain.sandbox.docker import DockerPool
    >>> with DockerPool(DockerPoolConfig(size=1)) as pool:                                   # doctest: +SKIP
    ...     pool.run(Execution(files={"main.py": "print(6 * 7)"}, command=["python3", "main.py"])).stdout
    '42\\n'
"""

from posttrain.sandbox.docker.cold import DockerSandbox
from posttrain.sandbox.docker.pool import DockerPool

__all__ = ["DockerPool", "DockerSandbox"]
