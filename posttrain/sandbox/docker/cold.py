"""The cold Docker backend: one throwaway container per execution, through the Docker SDK (never the CLI).

Each container is hardened as ``container.host_config`` says (no network, read-only root, tmpfs workspace,
``no-new-privileges``, default seccomp, memory/CPU/pids limits) and runs the launcher (``container.LAUNCHER``): as
root with only the capabilities to change user, it writes the accounts and unpacks ``Execution.trusted_files`` into
``/trusted`` (read-only for the program), then the workspace and the program run as the unprivileged ``sandbox`` user
with no capability (docker-init, pid 1, stays root's: out of the program's reach), a host uid leased for this
execution alone (``container.lease_uid``) and given back once the container is removed. The archives arrive on
stdin, the program's stdin follows them. stdout and stderr are read, capped, from an attach stream opened before
start (the container logs nothing to disk). The deadline kills the container; the container is always removed.
Anything Docker itself fails at (daemon unreachable, image missing, API error, files not unpacked) is an
``infra_error``; a command that does not exist in the image is a program failure with exit code 127, as under bwrap.

This is the slow path (a container start per execution, ~0.5 s): ``DockerPool`` (``pool.py``) keeps
containers warm and is what ``make_sandbox("docker")`` returns. Containers carry owner labels
(``lifecycle.owner_labels``); leftovers of a dead process are reaped by the next one.

Example:
    >>> from posttrain.sandbox.docker import DockerSandbox
    >>> from posttrain.sandbox.base import Execution
    >>> box = DockerSandbox("posttrain-sandbox:latest")                                   # doctest: +SKIP
    >>> r = box.run(Execution(files={"main.py": "print(6 * 7)"}, command=["python3", "main.py"]))  # doctest: +SKIP
    >>> r.exit_code, r.stdout                                                             # doctest: +SKIP
    (0, '42\\n')
"""

from __future__ import annotations

import os
import socket
import threading
import time

import docker
import requests

from posttrain.sandbox import lifecycle
from posttrain.sandbox.backend import Prepared, SandboxBackend
from posttrain.sandbox.base import Execution, ExecutionResult, SandboxStartError
from posttrain.sandbox.capture import CappedBuffer, FrameDemux, RawRun, feed, pump_socket
from posttrain.sandbox.docker.container import (DOCKER_ERRORS, LAUNCHER_CAPS, READY, ROOT, UID_LABEL, archives,
                                                close_socket, host_config, lease_uid, launcher_argv, make_client,
                                                oom_kills, remove_container)
from posttrain.sandbox.uids import UidPool
from posttrain.sandbox.workspace import WORKDIR, prlimit_args

DRAIN_GRACE_S = 5.0  # how long to wait for the attach stream to end once the container stopped


class DockerSandbox(SandboxBackend):
    """Runs executions in fresh containers of ``image``; thread-safe, one container per ``run`` call."""

    name = "docker"

    def __init__(self, image: str = "posttrain-sandbox:latest", *, base_url: str | None = None,
                 cpus: float = 1.0, max_processes: int = 64, max_open_files: int = 256, max_file_mb: int = 64,
                 workspace_mb: int = 64, tmp_mb: int = 64, api_timeout_s: float = 60.0,
                 host_uids: range | None = None):
        """``base_url``: the daemon socket (default: ``DOCKER_HOST`` or the local socket); the client is made
        lazily, so an unreachable daemon is each run's ``infra_error``. ``host_uids``: the host uids programs run
        as, one per container (None: ``SandboxConfig``'s default range; one that holds a user of this host is
        refused here, ``ValueError``)."""
        self.image, self.base_url, self.cpus = image, base_url, cpus
        self.max_processes, self.max_open_files, self.max_file_mb = max_processes, max_open_files, max_file_mb
        self.workspace_mb, self.tmp_mb = workspace_mb, tmp_mb
        self.api_timeout_s = api_timeout_s
        self._client: docker.APIClient | None = None
        self._live: set[str] = set()
        self._lock = threading.Lock()
        self._uids = UidPool(host_uids)
        lifecycle.track(self)

    def _run(self, execution: Execution, prepared: Prepared, t0: float) -> ExecutionResult:
        """Run ``execution`` in a new container to completion or its deadline, then remove the container."""
        argv = prlimit_args("/usr/bin/prlimit", execution, max_open_files=self.max_open_files,
                            max_file_mb=self.max_file_mb) + ["--", *prepared.argv]
        archive, trusted = archives(prepared)
        cid, lease = None, None
        try:
            api = self._api()
            lease = lease_uid(api, self._uids)
            cid = self._create(api, execution, launcher_argv(len(trusted), len(archive), lease.uid, argv),
                               prepared.env, lease.uid)
            return self._start_and_wait(api, cid, execution, trusted + archive, t0).result()
        except (SandboxStartError, OSError, *DOCKER_ERRORS) as exc:
            return self._infra(f"docker sandbox failed: {type(exc).__name__}: {exc}", t0)
        finally:
            if cid is not None:
                self._remove(cid)
            with self._lock:
                gone = cid not in self._live
            if lease is not None and gone:  # else it may still run: its uid stays leased while we live
                lease.release()

    def close(self) -> None:
        """Remove containers still running (from other threads) and close the client."""
        with self._lock:
            live, client, self._client = list(self._live), self._client, None
        for cid in live:
            self._remove(cid, client)
        if client is not None:
            client.close()

    def _api(self) -> docker.APIClient:
        with self._lock:
            if self._client is None:
                self._client = make_client(self.base_url, self.api_timeout_s)
            return self._client

    def _create(self, api: docker.APIClient, execution: Execution, argv: list[str], env: dict[str, str],
                uid: int) -> str:
        config = host_config(api, uid=uid, memory_mb=execution.memory_mb, cpus=self.cpus,
                             max_processes=self.max_processes, max_open_files=self.max_open_files,
                             max_file_mb=self.max_file_mb, workspace_mb=self.workspace_mb, tmp_mb=self.tmp_mb,
                             caps=LAUNCHER_CAPS)
        labels = {**lifecycle.owner_labels(), "posttrain.kind": "cold", UID_LABEL: str(uid)}
        with self._lock:  # registered before it exists, so close() from another thread cannot miss it
            container = api.create_container(
                self.image, argv, user=ROOT, working_dir=WORKDIR, hostname="sandbox", environment=env,
                stdin_open=True, host_config=config, labels=labels)  # attached stdin: StdinOnce
            cid = container["Id"]
            self._live.add(cid)
        return cid

    def _start_and_wait(self, api: docker.APIClient, cid: str, execution: Execution, archive: bytes,
                        t0: float) -> RawRun:
        stream = api.attach_socket(cid, params={"stdout": 1, "stderr": 1, "stream": 1, "stdin": 1})
        raw = getattr(stream, "_sock", stream)  # the SDK wraps the socket; half-closing needs the real one
        raw.settimeout(execution.timeout_s + self.api_timeout_s)
        out, err = CappedBuffer(execution.max_output_bytes), CappedBuffer(execution.max_output_bytes)
        demux = FrameDemux(out, err, READY)
        try:
            reader = pump_socket(raw, demux)
            api.start(cid)
            t_start = time.monotonic()
            feed(raw.sendall, lambda: raw.shutdown(socket.SHUT_WR), archive + execution.stdin.encode("utf-8"))
            timed_out = False
            try:
                status = api.wait(cid, timeout=execution.timeout_s)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                if time.monotonic() - t_start < execution.timeout_s:
                    raise  # the daemon went away: an infra error, not a deadline
                timed_out = True
                _kill(api, cid)
                status = api.wait(cid, timeout=self.api_timeout_s)
            run_ms = (time.monotonic() - t_start) * 1000
            reader.join(DRAIN_GRACE_S)
        finally:
            close_socket(stream, raw)
        state = api.inspect_container(cid)["State"]
        oom = bool(state.get("OOMKilled")) or bool(oom_kills(cid))
        result = RawRun(exit_code=status["StatusCode"], stdout=out, stderr=err, timed_out=timed_out,
                        start_ms=(t_start - t0) * 1000, run_ms=run_ms,
                        extra={"backend": self.name, "oom_killed": oom, "owner": os.getpid()})
        if not timed_out and not demux.ready:
            result.infra_error = (f"the program did not start (exit {status['StatusCode']}): "
                                  f"{err.result()[0].strip()[-1000:]}")
        return result

    def _remove(self, cid: str, client: docker.APIClient | None = None) -> None:
        """Force-remove a container; it stays in ``_live`` unless it is known gone (the daemon is gone: the next
        process's reaper finds it by its labels)."""
        client = client or self._client
        if client is not None and remove_container(client, cid):
            with self._lock:
                self._live.discard(cid)


def _kill(api: docker.APIClient, cid: str) -> None:
    try:
        api.kill(cid)
    except docker.errors.APIError:
        pass  # it exited on its own between the deadline and the kill
