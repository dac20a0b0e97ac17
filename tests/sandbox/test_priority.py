"""Long work yields the CPU to short work (``posttrain.sandbox.priority``), on this host's cgroups, with real
executions: a long CPU-bound execution's cgroup weight drops while a short one runs and comes back after, its result
says for how long, the bound ends the yielding for good; without short work, or with the feature off, nothing
changes. Plain bwrap, warm bwrap slots (the slot's group is weighted) and the Docker pool (the container's).

bwrap programs are held running by a gate: a host directory bound read-only at ``/gate``, in which the test creates
the file a program waits for; so every state is checked while it holds, and no assertion depends on timing.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from posttrain.config import DockerPoolConfig
from posttrain.sandbox import Execution, Scheduler, cgroup
from posttrain.sandbox.bwrap import BwrapSandbox
from posttrain.sandbox.docker import DockerPool
from posttrain.sandbox.docker.container import docker_unavailable_reason
from posttrain.sandbox.warm import WarmBwrapSandbox

WHY_NOT = cgroup.limits_unavailable_reason()
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"),
              pytest.mark.skipif(bool(WHY_NOT), reason=f"no cgroups for executions here: {WHY_NOT}")]

DEFAULT, LOWERED = {1: (1024, 10), 2: (100, 1)}[cgroup.host().version]  # a new group's weight; 1% of it
BUSY = "import os\nwhile not os.path.exists('/gate/{0}'):\n    sum(range(20000))\n"  # burns a core until released
WAIT = "import os, time\nwhile not os.path.exists('/gate/{0}'):\n    time.sleep(0.01)\n"


def py(code: str, timeout_s: float) -> Execution:
    return Execution(files={"main.py": code}, command=["python3", "main.py"], timeout_s=timeout_s)


@pytest.fixture(scope="module")
def gate():
    path = Path(tempfile.mkdtemp(prefix="posttrain-gate-"))
    path.chmod(0o755)  # the sandboxes' host uids read it
    yield path
    shutil.rmtree(path)


@pytest.fixture(scope="module")
def box(gate):
    with BwrapSandbox(extra_ro_binds=[(str(gate), "/gate")]) as sandbox:
        yield sandbox


def wait_for(predicate, what: str, timeout_s: float = 60.0):
    """``predicate()``'s first truthy value, polled; fails naming ``what`` if none comes within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)
    return value


def groups() -> set[str]:
    """The groups in this process's parent cgroup (executions', warm slots')."""
    return {path.name for path in cgroup.host().parents["cpu"].iterdir() if path.is_dir()}


def group_named(name: str) -> cgroup.Cgroup:
    host = cgroup.host()
    return cgroup.Cgroup(host.version, {c: parent / name for c, parent in host.parents.items()})


def new_group(before: set[str], what: str) -> cgroup.Cgroup:
    """The one group made since ``before`` was listed."""
    [name] = wait_for(lambda: groups() - before, what)
    return group_named(name)


def burning(group: cgroup.Cgroup) -> bool:
    """Whether the group's program has started burning CPU (its processes used some)."""
    return (group.cpu_seconds() or 0.0) > 0.05


def submitted(sched: Scheduler, box, program: str, timeout_s: float, what: str):
    """Submit ``program`` and wait for the one group its dispatch makes: (the job, that group)."""
    before = groups()
    job = sched.submit(box, py(program, timeout_s=timeout_s))
    return job, new_group(before, what)


def burning_long_job(sched: Scheduler, box, stop: str):
    """A long execution burning CPU until the gate file ``stop`` appears: (the job, its group), once it burns."""
    job, group = submitted(sched, box, BUSY.format(stop), 120, "the long execution's cgroup")
    wait_for(lambda: burning(group), "the long program burning CPU")
    return job, group


def waiting_short_job(sched: Scheduler, box, go: str, what: str = "the short execution's cgroup"):
    """A short execution waiting for the gate file ``go``: (the job, its group)."""
    return submitted(sched, box, WAIT.format(go), 30, what)


def test_a_long_execution_yields_while_a_short_one_runs_and_gets_its_weight_back(box, gate):
    sched = Scheduler(max_concurrency=4, long_slots=2, short_timeout_s=30.0)
    long_job, long_group = burning_long_job(sched, box, "stop-1")
    assert long_group.cpu_weight() == DEFAULT  # no short work yet

    short_job, short_group = waiting_short_job(sched, box, "go-1")  # made after the short job was dispatched
    assert long_group.cpu_weight() == LOWERED
    assert short_group.cpu_weight() == DEFAULT

    (gate / "go-1").touch()
    short = short_job.result()
    assert short.ok, short
    assert long_group.cpu_weight() == DEFAULT  # given back before the short job's caller hears of its end
    assert "deprioritised_s" not in short.extra  # short work never yields

    (gate / "stop-1").touch()
    long = long_job.result()
    assert long.ok, long
    assert long.extra["tier"] == "long"
    assert long.extra["deprioritised_s"] > 0
    assert "deprioritise_limit_hit" not in long.extra


def test_without_short_work_a_long_execution_keeps_its_weight(box, gate):
    sched = Scheduler(max_concurrency=4, long_slots=2, short_timeout_s=30.0)
    long_job, long_group = burning_long_job(sched, box, "stop-2")
    assert long_group.cpu_weight() == DEFAULT
    other_long = sched.submit(box, py("print('a second long one')", timeout_s=120)).result()  # long work is no cause
    assert other_long.ok, other_long
    assert long_group.cpu_weight() == DEFAULT

    (gate / "stop-2").touch()
    long = long_job.result()
    assert long.ok, long
    assert long.extra["deprioritised_s"] == 0
    assert other_long.extra["deprioritised_s"] == 0


def test_switched_off_a_long_execution_keeps_its_weight_beside_short_work(box, gate):
    sched = Scheduler(max_concurrency=4, long_slots=2, short_timeout_s=30.0, deprioritise_long=False)
    long_job, long_group = burning_long_job(sched, box, "stop-3")
    short_job, _ = waiting_short_job(sched, box, "go-3")
    assert long_group.cpu_weight() == DEFAULT

    (gate / "go-3").touch()
    (gate / "stop-3").touch()
    short, long = short_job.result(), long_job.result()
    assert short.ok, short
    assert long.ok, long
    assert "deprioritised_s" not in long.extra


def test_a_long_execution_yields_for_its_bound_at_most(box, gate):
    """deprioritise_max 0.01 of a 120 s deadline: it yields 1.2 s, then keeps its weight beside short work, also
    beside short work that starts later."""
    sched = Scheduler(max_concurrency=4, long_slots=2, short_timeout_s=30.0, deprioritise_max=0.01)
    long_job, long_group = burning_long_job(sched, box, "stop-4")
    short_job, _ = waiting_short_job(sched, box, "go-4")
    assert long_group.cpu_weight() == LOWERED
    wait_for(lambda: long_group.cpu_weight() == DEFAULT, "the bound giving the long execution its weight back")
    assert not short_job.done()  # the short one still runs: the bound, not its end, gave the weight back

    later_short, _ = waiting_short_job(sched, box, "go-4", "a later short execution's cgroup")
    assert long_group.cpu_weight() == DEFAULT

    (gate / "go-4").touch()
    (gate / "stop-4").touch()
    long = long_job.result()
    assert long.ok, long
    assert long.extra["deprioritise_limit_hit"] is True
    assert long.extra["deprioritised_s"] >= 1.2
    assert short_job.result().ok
    assert later_short.result().ok


def test_a_warm_slot_yields_on_its_own_group_and_serves_again_with_its_weight(gate):
    """Weights count among sibling groups: a warm execution's group is nested in its slot's, so the slot's group is
    the one weighted; the slot (kept for its next execution) gets its weight back."""
    sched = Scheduler(max_concurrency=4, long_slots=2, short_timeout_s=30.0)
    with WarmBwrapSandbox(slots=2, extra_ro_binds=[(str(gate), "/gate")]) as warm:
        before = groups()
        long_job = sched.submit(warm, py(BUSY.format("stop-5"), timeout_s=120))
        slot_group = new_group(before, "the long execution's slot group")
        [run] = wait_for(lambda: [p.name for p in slot_group.dirs["cpu"].iterdir() if p.is_dir()
                                  and p.name != "zygote"], "the long execution's own group, in its slot's")
        run_group = cgroup.Cgroup(slot_group.version, {c: path / run for c, path in slot_group.dirs.items()})
        wait_for(lambda: burning(run_group), "the long program burning CPU")
        assert slot_group.cpu_weight() == DEFAULT

        before = groups()
        short_job = sched.submit(warm, py(WAIT.format("go-5"), timeout_s=30))
        new_group(before, "the short execution's slot group")
        assert slot_group.cpu_weight() == LOWERED

        (gate / "go-5").touch()
        assert short_job.result().ok
        assert slot_group.cpu_weight() == DEFAULT
        (gate / "stop-5").touch()
        long = long_job.result()
        assert long.ok, long
        assert long.extra["deprioritised_s"] > 0
        assert slot_group.cpu_weight() == DEFAULT  # the idle slot serves its next execution at its own weight


NO_DOCKER = docker_unavailable_reason(DockerPoolConfig().image)


@pytest.mark.skipif(bool(NO_DOCKER), reason=NO_DOCKER)
def test_a_pooled_container_yields_on_its_cgroup_and_serves_again_with_its_weight():
    """The Docker pool weights the long execution's container (through the host's view of it) while a short one
    runs elsewhere; the weight is lowered when the short job is submitted (the scheduler does it before ``submit``
    returns), and given back before the short job's caller hears of its end. No gate reaches a container: the
    programs run for a few seconds instead (the short one 3 s, the long one 6 s), and every check happens inside
    those windows with seconds to spare."""
    sched = Scheduler(max_concurrency=4, long_slots=2, short_timeout_s=10.0)
    with DockerPool(DockerPoolConfig(size=2, max_size=2)) as pool:
        assert pool.wait_ready(2), pool.last_error
        boxes = list(pool._boxes.values())
        assert all(box.view is not None for box in boxes)  # a local daemon, as root
        started = {box.cid: box.view.group.cpu_seconds() for box in boxes}  # their agents' CPU time so far
        long_job = sched.submit(pool, py("import time\nt = time.time()\nwhile time.time() - t < 6:\n    pass\n",
                                         timeout_s=60))
        [container] = wait_for(lambda: [box.view.group for box in boxes
                                        if box.view.group.cpu_seconds() - started[box.cid] > 0.2],
                               "the long program burning CPU in its container")
        assert container.cpu_weight() == DEFAULT

        short_job = sched.submit(pool, py("import time\ntime.sleep(3)\n", timeout_s=10))
        assert container.cpu_weight() == LOWERED
        short = short_job.result()
        assert short.ok, short
        assert container.cpu_weight() == DEFAULT

        long = long_job.result()
        assert long.ok, long
        assert long.extra["deprioritised_s"] > 0
        assert container.cpu_weight() == DEFAULT  # the container serves its next execution at its own weight
