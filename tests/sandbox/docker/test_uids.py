"""Docker containers and host uids (issue 22, finding 15): each container's programs run as a host uid of its own,
leased for the container's life (``container.lease_uid``), named ``sandbox`` in the container's accounts and owner of
its ``/work``; a uid goes back only once its container is gone, a dead owner's container still running as one is
removed before the uid serves again, and the workspace driver runs tests only as the uid the host chose.

Skipped only when dockerd is unreachable or the sandbox image is absent (build it: containers/build-sandbox-image.sh).
"""

from __future__ import annotations

import json
import subprocess
import threading

import docker
import pytest

from posttrain import trusted
from posttrain.config import DockerPoolConfig, SandboxConfig
from posttrain.envs.verifiers.base import harness_records
from posttrain.sandbox import Execution, lifecycle, run_many
from posttrain.sandbox.docker import DockerPool, DockerSandbox
from posttrain.sandbox.docker.container import UID_LABEL, lease_uid
from posttrain.sandbox.uids import UidPool
from tests.sandbox.cases import docker_reason

REASON = docker_reason()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(bool(REASON), reason=REASON)]
IMAGE = DockerPoolConfig().image
FIRST = SandboxConfig().host_uid_first
HOST_UIDS = range(FIRST, FIRST + SandboxConfig().host_uids)
NONCE = "a1b2c3d4"
OWN = range(FIRST + 60_000, FIRST + 60_001)  # one uid, far above what concurrent tests lease from the range's start

# Who the program is, by every route a program asks: uid, account name (coreutils, python, node), /work's owner.
WHO = ("sleep 1; echo $(id -u) $(id -g) $(whoami) $(stat -c %u /work) "
       "$(python3 -c 'import getpass; print(getpass.getuser())') "
       "$(node -e 'console.log(require(\"os\").userInfo().username)')")


def who(**kw) -> Execution:
    return Execution(files={}, command=["bash", "-c", WHO], runtime="bash", timeout_s=20, **kw)


def test_concurrent_containers_run_as_distinct_leased_uids_named_sandbox():
    cold_result = []
    with DockerPool(DockerPoolConfig(size=2, max_size=2)) as pool, DockerSandbox(IMAGE) as cold:
        assert pool.wait_ready(2, timeout_s=120), pool.last_error
        cold_run = threading.Thread(target=lambda: cold_result.append(cold.run(who())))
        cold_run.start()
        pooled = run_many(pool, [who(), who()], concurrency=2)
        cold_run.join(60)
    results = [*pooled, *cold_result]
    assert len(results) == 3, results
    assert all(r.exit_code == 0 for r in results), results
    uids = set()
    for r in results:
        uid, gid, name, work_owner, py_name, node_name = r.stdout.split()
        assert uid == gid == work_owner, r.stdout
        assert name == py_name == node_name == "sandbox", r.stdout
        uids.add(int(uid))
    assert len(uids) == 3, uids
    assert uids <= set(HOST_UIDS), uids  # one each, none shared while they all ran


def test_a_uid_serves_one_container_at_a_time_and_comes_back_once_it_is_gone():
    with DockerPool(DockerPoolConfig(size=1, max_size=1), host_uids=OWN) as pool:
        first = pool.run(who())
        assert first.stdout.split()[0] == str(OWN.start), first
        taken = DockerSandbox(IMAGE, host_uids=OWN).run(who())  # the pool's container holds the only uid
        assert taken.exit_code is None, taken
        assert "leased" in taken.infra_error, taken
    again = DockerSandbox(IMAGE, host_uids=OWN).run(who())  # the pool's container is gone: its uid is free
    assert again.exit_code == 0, again
    assert again.stdout.split()[0] == str(OWN.start), again


@pytest.mark.parametrize("owner", ["dead", "alive"])
def test_a_container_still_running_as_a_uid_is_removed_or_passed_over(owner, tmp_path):
    api = docker.from_env().api
    labels = {**lifecycle.owner_labels(), UID_LABEL: str(OWN.start)}
    if owner == "dead":
        labels[lifecycle.OWNER] = "999999999"  # its holder died: its lock is free, its container still runs
    cid = api.create_container(IMAGE, ["sleep", "300"], user=f"{OWN.start}:{OWN.start}", labels=labels,
                               host_config=api.create_host_config(network_mode="none", init=True))["Id"]
    try:
        api.start(cid)
        uids = UidPool(OWN, lock_dir=str(tmp_path))  # a lock directory that does not know that container
        if owner == "dead":
            with lease_uid(api, uids) as lease:
                assert lease.uid == OWN.start
                with pytest.raises(docker.errors.NotFound):
                    api.inspect_container(cid)  # removed, with its processes, before the uid serves again
        else:
            with pytest.raises(BlockingIOError):  # a live process's container runs as it: passed over
                lease_uid(api, uids)
            assert api.inspect_container(cid)["State"]["Running"]
    finally:
        try:
            api.remove_container(cid, force=True)
        except docker.errors.NotFound:
            pass
        api.close()


@pytest.mark.parametrize("user, runs", [("0:0", False), ("12345:12345", False), ("10001:10001", True)])
def test_the_workspace_driver_runs_tests_only_as_the_uid_the_host_chose(user, runs):
    """A container started by hand: its image's accounts name 10001 ``sandbox``; ``--init`` keeps the driver from
    being pid 1, so only the account's uid lets it run (never root, never another uid)."""
    request = {"nonce": NONCE, "solution": None, "solution_timeout_s": 1, "test_timeout_s": 5, "tests_dir": "/tmp",
               "env": {"PATH": "/usr/bin:/bin"}, "tests": [{"name": "t", "argv": ["true"]}]}
    out = subprocess.run(["docker", "run", "-i", "--rm", "--init", "--network", "none", "--user", user, IMAGE,
                          "python3", "-I", "-c", trusted.source("workspace_driver")],
                         input=json.dumps(request), capture_output=True, text=True, timeout=60)
    records = harness_records(out.stdout, NONCE)
    assert [r["phase"] for r in records if "phase" in r] == (["done"] if runs else ["refused"]), (out, records)
    assert any(r.get("test") == 0 and r.get("exit") == 0 for r in records) == runs
