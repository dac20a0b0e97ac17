"""The Docker backend: one throwaway container per execution, through the Docker SDK (never the CLI).

Each container runs the sandbox image (``containers/build-sandbox-image.sh``) as the unprivileged ``sandbox`` user
with no network, a memory cgroup without swap, a pid limit, one CPU, every capability dropped and
``no-new-privileges``. Files are put into ``/work`` before start; stdout and stderr are read, capped, from an attach
stream opened before start (the container logs nothing to disk). The deadline kills the container; the container is
always removed. Anything Docker itself fails at (daemon unreachable, image missing, API error) is an
``infra_error``; a command that does not exist in the image is a program failure with exit code 127, as under bwrap.

Containers carry the labels ``posttrain.sandbox=1`` and ``posttrain.owner=<our pid>``, so leftovers of a crashed
process can be found: ``docker ps -a --filter label=posttrain.sandbox=1``.

Example:
    >>> from posttrain.sandbox.docker_backend import DockerSandbox
    >>> from posttrain.sandbox.base import Execution
    >>> box = DockerSandbox("posttrain-sandbox:latest")                                   # doctest: +SKIP
    >>> r = box.run(Execution(files={"main.py": "print(6 * 7)"}, command=["python3", "main.py"]))  # doctest: +SKIP
    >>> r.exit_code, r.stdout                                                             # doctest: +SKIP
    (0, '42\\n')
"""

from __future__ import annotations

import math
import os
import re
import socket
import struct
import threading
import time

import docker
import requests

from posttrain.sandbox.base import Execution, ExecutionResult, SandboxStartError
from posttrain.sandbox.capture import CHUNK, CappedBuffer, feed
from posttrain.sandbox.workspace import (SANDBOX_GID, SANDBOX_UID, WORKDIR, checked_files, resolve_command,
                                         sandbox_env, tar_archive)

NOT_FOUND = re.compile(r'exec: "[^"]*": (executable file not found|stat [^:]*: no such file or directory)')
FRAME_HEADER = struct.Struct(">BxxxL")  # attach stream frames: stream id (1 stdout, 2 stderr), 3 pad, length
STDERR = 2
DRAIN_GRACE_S = 5.0  # how long to wait for the attach stream to end once the container stopped
DOCKER_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)


class DockerSandbox:
    """Runs executions in fresh containers of ``image``; thread-safe, one container per ``run`` call."""

    name = "docker"

    def __init__(self, image: str = "posttrain-sandbox:latest", *, base_url: str | None = None,
                 cpus: float = 1.0, max_processes: int = 64, max_open_files: int = 256, max_file_mb: int = 64,
                 api_timeout_s: float = 60.0):
        """``base_url``: the daemon socket (default: ``DOCKER_HOST`` or the local socket); the client is made
        lazily, so constructing a sandbox never fails, and an unreachable daemon is each run's ``infra_error``."""
        self.image, self.base_url, self.cpus = image, base_url, cpus
        self.max_processes, self.max_open_files, self.max_file_mb = max_processes, max_open_files, max_file_mb
        self.api_timeout_s = api_timeout_s
        self._client: docker.APIClient | None = None
        self._live: set[str] = set()
        self._lock = threading.Lock()

    def run(self, execution: Execution) -> ExecutionResult:
        """Run ``execution`` in a new container to completion or its deadline, then remove the container."""
        t0 = time.monotonic()
        try:
            env = sandbox_env(execution)
            argv = resolve_command(execution)
            archive = tar_archive(checked_files(execution.files))
        except ValueError as exc:
            return self._infra(f"invalid execution: {exc}", t0)
        cid = None
        try:
            api = self._api()
            cid = self._create(api, execution, argv, env)
            if not api.put_archive(cid, WORKDIR, archive):
                raise SandboxStartError(f"could not put the workspace files into {WORKDIR}")
            return self._start_and_wait(api, cid, execution, t0)
        except (SandboxStartError, OSError, *DOCKER_ERRORS) as exc:
            return self._infra(f"docker sandbox failed: {type(exc).__name__}: {exc}", t0)
        finally:
            if cid is not None:
                self._remove(cid)

    def close(self) -> None:
        """Remove containers still running (from other threads) and close the client."""
        with self._lock:
            live, client, self._client = list(self._live), self._client, None
        for cid in live:
            self._remove(cid, client)
        if client is not None:
            client.close()

    def _infra(self, message: str, t0: float) -> ExecutionResult:
        return ExecutionResult(exit_code=None, infra_error=message, start_ms=_ms_since(t0),
                               extra={"backend": self.name})

    def _api(self) -> docker.APIClient:
        with self._lock:
            if self._client is None:
                try:
                    timeout = int(self.api_timeout_s)
                    self._client = (docker.APIClient(base_url=self.base_url, timeout=timeout) if self.base_url
                                    else docker.from_env(timeout=timeout).api)
                except docker.errors.DockerException as exc:
                    raise SandboxStartError(f"docker daemon unreachable: {exc}") from exc
            return self._client

    def _create(self, api: docker.APIClient, execution: Execution, argv: list[str], env: dict[str, str]) -> str:
        cpu = math.ceil(execution.timeout_s) + 1
        limits = [docker.types.Ulimit(name="cpu", soft=cpu, hard=cpu + 1),
                  docker.types.Ulimit(name="nofile", soft=self.max_open_files, hard=self.max_open_files),
                  docker.types.Ulimit(name="fsize", soft=self.max_file_mb << 20, hard=self.max_file_mb << 20),
                  docker.types.Ulimit(name="core", soft=0, hard=0)]
        host_config = api.create_host_config(
            network_mode="none", mem_limit=f"{execution.memory_mb}m", memswap_limit=f"{execution.memory_mb}m",
            pids_limit=self.max_processes, nano_cpus=int(self.cpus * 1e9), cap_drop=["ALL"],
            security_opt=["no-new-privileges"], ulimits=limits, log_config={"type": "none"},
            tmpfs={"/tmp": f"size={self.max_file_mb}m"})
        container = api.create_container(
            self.image, argv, user=f"{SANDBOX_UID}:{SANDBOX_GID}", working_dir=WORKDIR, hostname="sandbox",
            environment=env, stdin_open=bool(execution.stdin), host_config=host_config,
            labels={"posttrain.sandbox": "1", "posttrain.owner": str(os.getpid())})
        cid = container["Id"]
        with self._lock:
            self._live.add(cid)
        return cid

    def _start_and_wait(self, api: docker.APIClient, cid: str, execution: Execution, t0: float) -> ExecutionResult:
        params = {"stdout": 1, "stderr": 1, "stream": 1, "stdin": int(bool(execution.stdin))}
        stream = api.attach_socket(cid, params=params)
        raw = getattr(stream, "_sock", stream)  # the SDK wraps the socket; half-closing needs the real one
        raw.settimeout(execution.timeout_s + self.api_timeout_s)
        out, err = CappedBuffer(execution.max_output_bytes), CappedBuffer(execution.max_output_bytes)
        reader = threading.Thread(target=_read_frames, args=(raw, out, err), daemon=True)
        try:
            reader.start()
            try:
                api.start(cid)
            except docker.errors.APIError as exc:
                if NOT_FOUND.search(str(exc.explanation)):
                    return ExecutionResult(exit_code=127, stderr=str(exc.explanation), start_ms=_ms_since(t0),
                                           extra={"backend": self.name})
                raise
            t_start = time.monotonic()
            if execution.stdin:
                feed(raw.sendall, lambda: raw.shutdown(socket.SHUT_WR), execution.stdin.encode("utf-8"))
            timed_out = False
            try:
                status = api.wait(cid, timeout=execution.timeout_s)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                if time.monotonic() - t_start < execution.timeout_s:
                    raise  # the daemon went away: an infra error, not a deadline
                timed_out = True
                _kill(api, cid)
                status = api.wait(cid, timeout=self.api_timeout_s)
            run_ms = _ms_since(t_start)
            reader.join(DRAIN_GRACE_S)
        finally:
            stream.close()
            raw.close()
        oom = bool(api.inspect_container(cid)["State"].get("OOMKilled"))
        stdout, out_cut = out.result()
        stderr, err_cut = err.result()
        return ExecutionResult(exit_code=None if timed_out else status["StatusCode"], stdout=stdout, stderr=stderr,
                               timed_out=timed_out, output_truncated=out_cut or err_cut,
                               start_ms=(t_start - t0) * 1000, run_ms=run_ms,
                               extra={"backend": self.name, "oom_killed": oom})

    def _remove(self, cid: str, client: docker.APIClient | None = None) -> None:
        """Force-remove a container; a container already gone is fine, other failures leave it labelled."""
        client = client or self._client
        try:
            if client is not None:
                client.remove_container(cid, force=True)
        except DOCKER_ERRORS:
            pass  # already removed, or the daemon is gone: ``docker ps --filter label=posttrain.sandbox=1`` finds it
        finally:
            with self._lock:
                self._live.discard(cid)


def _read_frames(sock: socket.socket, out: CappedBuffer, err: CappedBuffer) -> None:
    """Demultiplex the attach stream (8-byte headers: stream id, 3 pad bytes, big-endian length) until it ends."""
    pending = bytearray()
    try:
        while chunk := sock.recv(CHUNK):
            pending += chunk
            while len(pending) >= FRAME_HEADER.size:
                stream_id, size = FRAME_HEADER.unpack_from(pending)
                end = FRAME_HEADER.size + size
                if len(pending) < end:
                    break
                (err if stream_id == STDERR else out).write(bytes(pending[FRAME_HEADER.size:end]))
                del pending[:end]
    except OSError:
        pass  # closed under us or timed out: what was read is kept


def _kill(api: docker.APIClient, cid: str) -> None:
    try:
        api.kill(cid)
    except docker.errors.APIError:
        pass  # it exited on its own between the deadline and the kill


def _ms_since(t: float) -> float:
    return (time.monotonic() - t) * 1000
