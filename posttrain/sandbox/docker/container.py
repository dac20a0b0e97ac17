"""What the Docker backends share: the client, the hardened container config, the cold launcher, OOM counts.

Container config (``host_config``): no network, read-only root filesystem, tmpfs ``/work`` (owned by the sandbox
user), ``/tmp`` and ``/trusted`` (root's) with size caps, a small ``/dev/shm``, every capability dropped but the few
the container's first process needs (``LAUNCHER_CAPS`` or ``AGENT_CAPS``), ``no-new-privileges``, the seccomp
policy bwrap loads too (``seccomp.docker_security_opt()``), memory without swap, one CPU, a pid limit, ulimits, no logs
on disk, and labels naming the owner process (``lifecycle.owner_labels``).

Two users: a container's first process (the cold launcher, or the pool's agent) runs as root with only those
capabilities; every program runs as the sandbox user (``workspace.SANDBOX_UID``) with no capability and an empty
bounding set. So no program can reach a process above it (signal, ptrace, ``prlimit``, renice, ...) nor write what
root wrote: ``Execution.trusted_files``, unpacked as root into ``/trusted`` (files 0444, directories not writable,
``/trusted`` itself 0111: its entries can be opened by name, not listed).

Files reach the tmpfs mounts through stdin: ``docker cp``/``put_archive`` write to the container's root filesystem,
which is read-only and under the tmpfs anyway. In a cold container the launcher (``LAUNCHER``, a ``sh -c`` script)
reads exactly T bytes of tar from stdin (``head -c``) and unpacks them as root into ``/trusted`` (then read-only),
reads N more bytes and unpacks them as the sandbox user into ``/work``, prints ``READY`` on stdout and ``exec``s the
program as the sandbox user (``setpriv``); the program's stdin continues right after the archives. The marker
proves the program started (it cannot write to stdout before it exists), so an unpacking failure is an infra error
and a program cannot make its own failure look like one. (Pooled containers get their files from their agent,
``posttrain/trusted/container_agent.py``, the same way: on stdin, before the program exists.)

Example:
    >>> launcher_argv(0, 3, ["/usr/bin/python3", "main.py"])[-5:]
    ['posttrain-launch', '0', '3', '/usr/bin/python3', 'main.py']
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

import docker
import requests

from posttrain.sandbox import lifecycle, seccomp
from posttrain.sandbox.base import Prepared, SandboxStartError
from posttrain.sandbox.workspace import SANDBOX_GID, SANDBOX_UID, TRUSTED_DIR, WORKDIR, tar_archive

log = logging.getLogger(__name__)

DOCKER_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)
READY = b"READY\n"

ROOT = "0:0"  # the user of a container's first process; programs run as SANDBOX_UID
LAUNCHER_CAPS = ("SETUID", "SETGID", "SETPCAP")  # become the sandbox user with an empty capability bounding set
AGENT_CAPS = (*LAUNCHER_CAPS, "KILL")  # ... and kill the programs' processes (another uid's)
DROP = f"setpriv --reuid={SANDBOX_UID} --regid={SANDBOX_GID} --clear-groups --bounding-set=-all --"
LAUNCHER = ('t=$1; n=$2; shift 2; '
            'if [ "$t" -gt 0 ]; then head -c "$t" | tar -x -C ' + TRUSTED_DIR + ' -f - '
            '&& chmod -R a-w ' + TRUSTED_DIR + ' && chmod 0111 ' + TRUSTED_DIR + ' '
            '|| { echo "posttrain: could not unpack the trusted files" >&2; exit 125; }; fi; '
            'if [ "$n" -gt 0 ]; then head -c "$n" | ' + DROP + ' tar -x -C ' + WORKDIR + ' -f - '
            '|| { echo "posttrain: could not unpack the workspace" >&2; exit 125; }; fi; '
            'printf "READY\\n"; exec ' + DROP + ' "$@"')


def make_client(base_url: str | None, timeout_s: float, pool_size: int = 32) -> docker.APIClient:
    """A low-level client; reaps containers of dead owners the first time this daemon is used in this process."""
    try:
        api = (docker.APIClient(base_url=base_url, timeout=int(timeout_s), max_pool_size=pool_size) if base_url
               else docker.from_env(timeout=int(timeout_s), max_pool_size=pool_size).api)
        api.ping()
    except DOCKER_ERRORS as exc:
        raise SandboxStartError(f"docker daemon unreachable: {exc}") from exc
    if lifecycle.once(f"containers:{api.base_url}"):
        try:
            lifecycle.reap_containers(api)
        except DOCKER_ERRORS as exc:
            log.warning("could not reap leftover sandbox containers: %s", exc)
    return api


def host_config(api: docker.APIClient, *, memory_mb: int, cpus: float, max_processes: int, max_open_files: int,
                max_file_mb: int, workspace_mb: int, tmp_mb: int, shm_mb: int = 16, init: bool = True,
                auto_remove: bool = False, caps: tuple[str, ...]) -> dict:
    """The hardened host config. ``init``: docker-init as pid 1 (cold containers; pooled ones have the agent).
    ``caps``: the only capabilities of the container's first process (root), never of a program."""
    limits = [docker.types.Ulimit(name="nofile", soft=max_open_files, hard=max_open_files),
              docker.types.Ulimit(name="fsize", soft=max_file_mb << 20, hard=max_file_mb << 20),
              docker.types.Ulimit(name="core", soft=0, hard=0)]
    return api.create_host_config(
        network_mode="none", read_only=True, init=init, auto_remove=auto_remove, mem_limit=f"{memory_mb}m",
        memswap_limit=f"{memory_mb}m", pids_limit=max_processes, nano_cpus=int(cpus * 1e9), cap_drop=["ALL"],
        cap_add=list(caps), security_opt=["no-new-privileges", seccomp.docker_security_opt()],
        ulimits=limits, log_config={"type": "none"}, shm_size=f"{shm_mb}m", oom_score_adj=500,
        tmpfs={WORKDIR: f"size={workspace_mb}m,uid={SANDBOX_UID},gid={SANDBOX_GID},mode=0755,exec,nosuid,nodev",
               "/tmp": f"size={tmp_mb}m,mode=1777,exec,nosuid,nodev",
               TRUSTED_DIR: f"size={workspace_mb}m,mode=0700,noexec,nosuid,nodev"})


def archives(prepared: Prepared) -> tuple[bytes, bytes]:
    """The workspace tar (the sandbox user's files) and the trusted files' tar (root's; empty when there are none)."""
    trusted = tar_archive(prepared.trusted_files, uid=0, gid=0) if prepared.trusted_files else b""
    return tar_archive(prepared.files), trusted


def launcher_argv(trusted_size: int, archive_size: int, argv: list[str]) -> list[str]:
    """The command that unpacks ``trusted_size`` bytes of stdin into ``/trusted`` and ``archive_size`` more into
    the workspace, then runs ``argv`` as the sandbox user."""
    return ["/bin/sh", "-c", LAUNCHER, "posttrain-launch", str(trusted_size), str(archive_size), *argv]


def close_socket(stream, raw_sock) -> None:
    """Close an exec/attach stream; ``shutdown`` first, so a reader blocked in ``recv`` wakes up now."""
    try:
        raw_sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    stream.close()
    raw_sock.close()


def oom_kills(cid: str) -> int | None:
    """How many times the kernel's OOM killer fired in container ``cid``'s memory cgroup (None: unknown).

    Reads the host's cgroup files (cgroup v1 ``memory.oom_control`` or v2 ``memory.events``, cgroupfs or systemd
    driver); works when the daemon runs on this host."""
    candidates = [Path(f"/sys/fs/cgroup/memory/docker/{cid}/memory.oom_control"),
                  Path(f"/sys/fs/cgroup/memory/system.slice/docker-{cid}.scope/memory.oom_control"),
                  Path(f"/sys/fs/cgroup/docker/{cid}/memory.events"),
                  Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/memory.events")]
    for path in candidates:
        try:
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


class Closing:
    """A flag plus the background threads a Docker backend must wait for when it closes."""

    def __init__(self):
        self.closed = False
        self.threads: set[threading.Thread] = set()
        self.lock = threading.Lock()

    def start(self, target, *args, name: str) -> threading.Thread | None:
        with self.lock:
            if self.closed:
                return None
            thread = threading.Thread(target=self._run, args=(target, args), name=name, daemon=True)
            self.threads.add(thread)
        thread.start()
        return thread

    def _run(self, target, args) -> None:
        try:
            target(*args)
        finally:
            with self.lock:
                self.threads.discard(threading.current_thread())

    def close(self, timeout_s: float) -> None:
        with self.lock:
            self.closed = True
            threads = list(self.threads)
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def docker_unavailable_reason(image: str) -> str:
    """Why the docker backend cannot serve ``image`` here ("" when it can): daemon unreachable or image missing."""
    try:
        client = docker.from_env(timeout=10)
        try:
            client.images.get(image)
        finally:
            client.close()
    except Exception as exc:  # any reason docker cannot serve is the answer, not a crash
        return f"docker backend unavailable: {exc}"
    return ""
