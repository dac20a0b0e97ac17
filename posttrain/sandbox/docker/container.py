"""What the Docker backends share: the client, the hardened container config, the cold launcher, OOM counts, and
the host uid each container's programs run as.

Container config (``host_config``): no network, read-only root filesystem, tmpfs ``/work`` (owned by the programs'
uid), ``/tmp``, ``/dev/shm``, ``/trusted`` and ``/run/posttrain`` (root's) with size and inode caps, every capability
dropped but the few the container's first process needs (``LAUNCHER_CAPS`` or ``AGENT_CAPS``), ``no-new-privileges``,
the seccomp policy bwrap loads too (``seccomp.docker_security_opt()``), memory without swap, one CPU, a pid limit,
ulimits, no logs on disk, and labels naming the owner process (``lifecycle.owner_labels``) and the programs' uid.

Two users: a container's first process (the cold launcher, or the pool's agent) runs as root with only those
capabilities; every program runs as the sandbox user with no capability and an empty bounding set. So no program
can reach a process above it (signal, ptrace, ``prlimit``, renice, ...) nor write what root wrote:
``Execution.trusted_files``, unpacked as root into ``/trusted`` (files 0444, directories not writable, ``/trusted``
itself 0111: its entries can be opened by name, not listed).

The sandbox user is a host uid of the container's own (``lease_uid``: from the host uid range, ``uids.py``, held
from before the container is created until it is gone), so no two live containers share the kernel's per-user
limits (inotify instances, POSIX message-queue bytes, ...): dockerd runs containers in the host's user namespace,
where a container's uid is the host's. The first process writes the account at start, before any program runs:
the image's ``/etc/passwd`` and ``/etc/group`` link into ``ACCOUNTS`` (a root-owned tmpfs), filled with the image's
accounts (``/etc/posttrain``) plus ``sandbox`` as that uid, so ``whoami``, ``getpass`` and node's ``userInfo`` name
it, and the workspace driver finds the uid the host chose for its programs there.

Files reach the tmpfs mounts through stdin: ``docker cp``/``put_archive`` write to the container's root filesystem,
which is read-only and under the tmpfs anyway. In a cold container the launcher (``LAUNCHER``, a ``sh -c`` script)
writes the accounts, reads exactly T bytes of tar from stdin (``head -c``) and unpacks them as root into
``/trusted`` (then read-only), reads N more bytes and unpacks them as the sandbox user into ``/work``, prints
``READY`` on stdout and ``exec``s the program as the sandbox user (``setpriv``); the program's stdin continues right
after the archives. The marker proves the program started (it cannot write to stdout before it exists), so an
unpacking failure is an infra error and a program cannot make its own failure look like one. (Pooled containers get
their files from their agent, ``posttrain/trusted/container_agent.py``, the same way: on stdin, before the program
exists.)

Example:
    >>> launcher_argv(0, 3, 1900000000, ["/usr/bin/python3", "main.py"])[-5:]
    ['0', '3', '1900000000', '/usr/bin/python3', 'main.py']
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
from posttrain.sandbox.backend import Prepared
from posttrain.sandbox.base import SandboxStartError, tmpfs_inodes
from posttrain.sandbox.uids import SHARED_UID, UidLease, UidPool
from posttrain.sandbox.workspace import TRUSTED_DIR, WORKDIR, tar_archive

log = logging.getLogger(__name__)

DOCKER_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)
READY = b"READY\n"

ROOT = "0:0"  # the user of a container's first process; programs run as the container's leased uid
LAUNCHER_CAPS = ("SETUID", "SETGID", "SETPCAP")  # become the sandbox user with an empty capability bounding set
AGENT_CAPS = (*LAUNCHER_CAPS, "KILL")  # ... and kill the programs' processes (another uid's)
UID_LABEL = "posttrain.uid"  # the host uid a container's programs run as
ACCOUNTS = "/run/posttrain"  # root's tmpfs: /etc/passwd and /etc/group of the image link to its passwd and group
DROP = 'setpriv --reuid="$u" --regid="$u" --clear-groups --bounding-set=-all --'
LAUNCHER = ('t=$1; n=$2; u=$3; shift 3; '
            '{ cat /etc/posttrain/passwd && echo "sandbox:x:$u:$u:sandbox:' + WORKDIR + ':/usr/sbin/nologin"; } '
            '> ' + ACCOUNTS + '/passwd && { cat /etc/posttrain/group && echo "sandbox:x:$u:"; } > ' + ACCOUNTS +
            '/group || { echo "posttrain: could not write the accounts (make sandbox-image)" >&2; exit 125; }; '
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


def host_config(api: docker.APIClient, *, uid: int, memory_mb: int, cpus: float, max_processes: int,
                max_open_files: int, max_file_mb: int, workspace_mb: int, tmp_mb: int, shm_mb: int = 16,
                init: bool = True, auto_remove: bool = False, caps: tuple[str, ...]) -> dict:
    """The hardened host config. ``uid``: the programs' (and gid's), who own ``/work``. ``init``: docker-init as
    pid 1 (cold containers; pooled ones have the agent). ``caps``: the only capabilities of the container's first
    process (root), never of a program."""
    limits = [docker.types.Ulimit(name="nofile", soft=max_open_files, hard=max_open_files),
              docker.types.Ulimit(name="fsize", soft=max_file_mb << 20, hard=max_file_mb << 20),
              docker.types.Ulimit(name="core", soft=0, hard=0)]
    return api.create_host_config(
        network_mode="none", read_only=True, init=init, auto_remove=auto_remove, mem_limit=f"{memory_mb}m",
        memswap_limit=f"{memory_mb}m", pids_limit=max_processes, nano_cpus=int(cpus * 1e9), cap_drop=["ALL"],
        cap_add=list(caps), security_opt=["no-new-privileges", seccomp.docker_security_opt()],
        ulimits=limits, log_config={"type": "none"}, oom_score_adj=500,
        tmpfs={WORKDIR: f"{capped(workspace_mb)},uid={uid},gid={uid},mode=0755,exec,nosuid,nodev",
               "/tmp": f"{capped(tmp_mb)},mode=1777,exec,nosuid,nodev",
               "/dev/shm": f"{capped(shm_mb)},mode=1777,noexec,nosuid,nodev",  # in place of docker's uncapped one
               TRUSTED_DIR: f"{capped(workspace_mb)},mode=0700,noexec,nosuid,nodev",
               ACCOUNTS: f"{capped(1)},mode=0755,noexec,nosuid,nodev"})


def capped(size_mb: int) -> str:
    """The size and inode cap of a tmpfs mount of ``size_mb``: empty files cost kernel memory that no size cap
    bounds (``base.tmpfs_inodes``), the same cap as bwrap's mounts.

    >>> capped(16)
    'size=16m,nr_inodes=4096'
    """
    return f"size={size_mb}m,nr_inodes={tmpfs_inodes(size_mb)}"


def archives(prepared: Prepared) -> tuple[bytes, bytes]:
    """The workspace tar (the sandbox user's files) and the trusted files' tar (root's; empty when there are none)."""
    trusted = tar_archive(prepared.trusted_files, uid=0, gid=0) if prepared.trusted_files else b""
    return tar_archive(prepared.files), trusted


def launcher_argv(trusted_size: int, archive_size: int, uid: int, argv: list[str]) -> list[str]:
    """The command that makes ``uid`` (and the gid of that number) the sandbox user, unpacks ``trusted_size`` bytes
    of stdin into ``/trusted`` and ``archive_size`` more into the workspace, then runs ``argv`` as that user."""
    return ["/bin/sh", "-c", LAUNCHER, "posttrain-launch", str(trusted_size), str(archive_size), str(uid), *argv]


def lease_uid(api: docker.APIClient, uids: UidPool) -> UidLease:
    """A host uid for one container's programs, leased from ``uids`` (``uids.py``) and run as by no container on
    this daemon: containers a dead owner left running as it (its lease died with it) are removed first; a uid a live
    process's container runs as (one that keeps its leases in another lock directory) is passed over.

    Example (at most one process of the uid's range has the daemon):
        >>> with lease_uid(api, UidPool(range(1_900_000_000, 1_900_000_002))) as lease:   # doctest: +SKIP
        ...     lease.uid
        1900000000
    """
    passed_over: list[UidLease] = []
    try:
        while True:
            lease = uids.lease()
            if lease.uid == SHARED_UID:  # the range is not mapped here: every container shares this one
                return lease
            try:
                holders = api.containers(all=True, filters={"label": f"{UID_LABEL}={lease.uid}"})
                free = (not any(lifecycle.owner_alive(info.get("Labels") or {}) for info in holders)
                        and all(remove_container(api, info["Id"]) for info in holders))
            except BaseException:
                lease.release()
                raise
            if free:
                return lease
            passed_over.append(lease)
    finally:
        for held in passed_over:
            held.release()


def remove_container(api: docker.APIClient, cid: str) -> bool:
    """Force-remove container ``cid``; True once it is gone, and with it every process it ran (its pid 1 exits only
    after the kernel has reaped every other process of its pid namespace); False when that is not known."""
    try:
        api.remove_container(cid, force=True)
        return True
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: its removal is in progress (auto_remove): wait for it
            return False
    except DOCKER_ERRORS:
        return False
    try:
        api.wait(cid, timeout=api.timeout, condition="removed")
        return True
    except docker.errors.NotFound:
        return True
    except DOCKER_ERRORS:
        return False


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
