"""Per-execution cgroups: detection from mountinfo/cgroup text (v1, v2, containers), and on this host real groups
that cap several processes together (memory, memfd and tmpfs pages, inodes, tasks, CPU), are killed, removed, and
reaped when their owner died."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from posttrain.sandbox import cgroup, lifecycle
from posttrain.sandbox.base import Usage
from posttrain.sandbox.cgroup import CgroupHost, ExecutionGroup, Layout, parse_layout, parse_mountinfo

PY = "/usr/bin/python3"  # a system interpreter the unprivileged host user can run
NOBODY = (65534, 65534)
MB = 1 << 20

HYBRID_MOUNTINFO = """\
23 1 0:21 / /sys rw,relatime - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_CGROUP = """\
9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/process_api/bef44c
2:cpuacct:/
1:cpu:/
0::/
"""
SYSTEMD_V1_MOUNTINFO = """\
25 18 0:22 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
28 25 0:25 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:10 - cgroup cgroup rw,cpu,cpuacct
29 25 0:26 / /sys/fs/cgroup/memory rw,nosuid shared:11 - cgroup cgroup rw,memory
30 25 0:27 / /sys/fs/cgroup/pids rw,nosuid shared:12 - cgroup cgroup rw,pids
"""
SYSTEMD_V1_CGROUP = """\
4:pids:/system.slice/trainer.service
3:memory:/system.slice/trainer.service
2:cpu,cpuacct:/system.slice/trainer.service
1:name=systemd:/system.slice/trainer.service
"""
V2_MOUNTINFO = """\
22 1 0:20 / /sys rw,nosuid - sysfs sysfs rw
27 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
"""
V2_CGROUP = "0::/user.slice/user-1000.slice/session-3.scope\n"


def v1_host(layout_dirs: dict[str, Path]) -> CgroupHost:
    return CgroupHost(Layout(1, layout_dirs))


# ---- detection (pure) ------------------------------------------------------------------------------------------------
@pytest.mark.unit
def test_hybrid_v1_uses_one_directory_per_controller_and_ignores_the_empty_cgroup2():
    layout = parse_layout(HYBRID_MOUNTINFO, HYBRID_CGROUP)
    assert layout.version == 1
    assert not layout.reason
    assert {name: str(path) for name, path in layout.dirs.items()} == {
        "memory": "/sys/fs/cgroup/memory/process_api/bef44c", "pids": "/sys/fs/cgroup/pids",
        "cpu": "/sys/fs/cgroup/cpu", "cpuacct": "/sys/fs/cgroup/cpuacct"}


@pytest.mark.unit
def test_systemd_v1_with_comounted_cpu_and_cpuacct():
    layout = parse_layout(SYSTEMD_V1_MOUNTINFO, SYSTEMD_V1_CGROUP)
    assert layout.version == 1
    service = "/sys/fs/cgroup/cpu,cpuacct/system.slice/trainer.service"
    assert str(layout.dirs["cpu"]) == str(layout.dirs["cpuacct"]) == service
    assert str(layout.dirs["memory"]) == "/sys/fs/cgroup/memory/system.slice/trainer.service"


@pytest.mark.unit
def test_v1_in_a_container_whose_mounts_show_only_its_own_subtree():
    mountinfo = "".join(f"{40 + i} 30 0:{50 + i} /docker/abc /sys/fs/cgroup/{c} ro,nosuid - cgroup cgroup rw,{c}\n"
                        for i, c in enumerate(("memory", "pids", "cpu")))
    cgroup_text = "5:memory:/docker/abc\n4:pids:/docker/abc/worker\n3:cpu:/docker/abc\n"
    layout = parse_layout(mountinfo, cgroup_text)
    assert {c: str(p) for c, p in layout.dirs.items()} == {
        "memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids/worker", "cpu": "/sys/fs/cgroup/cpu"}


@pytest.mark.unit
def test_unified_v2_maps_every_controller_to_our_one_cgroup():
    layout = parse_layout(V2_MOUNTINFO, V2_CGROUP)
    assert layout.version == 2
    assert {str(p) for p in layout.dirs.values()} == {"/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope"}
    assert set(layout.dirs) == set(cgroup.CONTROLLERS)
    in_namespace = parse_layout(V2_MOUNTINFO, "0::/\n")  # a container with its own cgroup namespace
    assert str(in_namespace.dirs["memory"]) == "/sys/fs/cgroup"


@pytest.mark.unit
def test_missing_controllers_or_filesystems_say_why():
    no_pids = "".join(line for line in HYBRID_MOUNTINFO.splitlines(keepends=True)
                      if "pids" not in line and "cgroup2" not in line)
    layout = parse_layout(no_pids, HYBRID_CGROUP)
    assert layout.version == 0
    assert "pids" in layout.reason
    nothing = parse_layout("22 1 0:20 / /sys rw - sysfs sysfs rw\n", "")
    assert nothing.version == 0
    assert "no cgroup filesystem" in nothing.reason


@pytest.mark.unit
def test_mountinfo_octal_escapes_are_decoded():
    (mount,) = parse_mountinfo(r"40 31 0:37 / /sys/fs/cgroup/my\040dir rw - cgroup cgroup rw,memory" + "\n")
    assert mount == ("cgroup", "/sys/fs/cgroup/my dir", "/", ["rw", "memory"])


@pytest.mark.unit
def test_unavailable_host_refuses_to_create_groups_with_its_reason():
    with pytest.raises(OSError, match="unavailable: not root"):
        ExecutionGroup.create(MB, 8, 1.0, cgroups=CgroupHost(Layout(0, reason="not root")))


def fake_v2(tmp_path: Path, procs: str) -> CgroupHost:
    base = tmp_path / "job.scope"
    base.mkdir()
    (base / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (base / "cgroup.subtree_control").write_text("")
    (base / "cgroup.procs").write_text(procs)
    return CgroupHost(Layout(2, {c: base for c in cgroup.CONTROLLERS}))


def busy_subtree_control(monkeypatch, base: Path) -> list[tuple[Path, str]]:
    """Writes as v2 does them: enabling controllers on ``base`` is EBUSY while our pid is still in it."""
    writes: list[tuple[Path, str]] = []

    def write(path: Path, value: str) -> None:
        if path == base / "cgroup.subtree_control" and str(os.getpid()) in (base / "cgroup.procs").read_text().split():
            raise OSError(errno.EBUSY, "Device or resource busy")
        if path.name == "cgroup.procs" and path.parent.name == cgroup.HOST_LEAF:
            (base / "cgroup.procs").write_text("")
        writes.append((path, value))
        path.write_text(value)

    monkeypatch.setattr(cgroup, "_write", write)
    return writes


@pytest.mark.unit
def test_v2_moves_this_process_into_a_leaf_when_it_is_alone_in_its_cgroup(tmp_path, monkeypatch):
    cgroups = fake_v2(tmp_path, f"{os.getpid()}\n")
    base = cgroups.bases["memory"]
    writes = busy_subtree_control(monkeypatch, base)
    assert cgroups._prepare_v2() == ""
    assert writes == [(base / cgroup.HOST_LEAF / "cgroup.procs", str(os.getpid())),
                      (base / "cgroup.subtree_control", "+memory +pids +cpu")]


@pytest.mark.unit
def test_v2_with_other_processes_in_our_cgroup_is_unavailable(tmp_path, monkeypatch):
    cgroups = fake_v2(tmp_path, f"1\n{os.getpid()}\n")
    writes = busy_subtree_control(monkeypatch, cgroups.bases["memory"])
    assert "holds 1 other process" in cgroups._prepare_v2()
    assert writes == []


@pytest.mark.unit
def test_v2_without_delegated_controllers_is_unavailable(tmp_path):
    cgroups = fake_v2(tmp_path, "")
    (cgroups.bases["memory"] / "cgroup.controllers").write_text("cpu io\n")
    assert "memory, pids controller(s) are not available" in cgroups._prepare_v2()


def fake_host(tmp_path: Path, version: int, hierarchies: dict[str, str]) -> CgroupHost:
    """A host whose parent groups are plain directories (a write makes a file), one per hierarchy name."""
    cgroups = CgroupHost(Layout(version, {c: tmp_path / h for c, h in hierarchies.items()}))
    cgroups.parents = {c: tmp_path / h / "posttrain-1-1-1" for c, h in hierarchies.items()}
    for parent in cgroups.parents.values():
        parent.mkdir(parents=True, exist_ok=True)
    return cgroups


def limit_files(group: ExecutionGroup) -> dict[str, str]:
    return {f"{path.parent.parent.parent.name}/{path.name}": path.read_text()
            for directory in CgroupHost.unique(group.dirs) for path in sorted(directory.iterdir())}


@pytest.mark.unit
def test_v1_limits_are_written_per_hierarchy_with_swap_capped_too(tmp_path):
    cgroups = fake_host(tmp_path, 1, {"memory": "memory", "pids": "pids", "cpu": "cpu,cpuacct",
                                      "cpuacct": "cpu,cpuacct"})
    group = ExecutionGroup.create(200 * MB, 20, 1.5, name="x", cgroups=cgroups)
    assert limit_files(group) == {"memory/memory.limit_in_bytes": str(200 * MB), "pids/pids.max": "20",
                                  "cpu,cpuacct/cpu.cfs_period_us": "100000", "cpu,cpuacct/cpu.cfs_quota_us": "150000"}
    swap = cgroups.parents["memory"] / "z"  # a kernel with swap accounting
    swap.mkdir()
    (swap / "memory.memsw.limit_in_bytes").write_text("")
    ExecutionGroup(1, {"memory": swap, "pids": swap, "cpu": swap})._limit(64 * MB, None, None)
    assert (swap / "memory.memsw.limit_in_bytes").read_text() == str(64 * MB)


@pytest.mark.unit
def test_v2_limits_are_written_in_one_group(tmp_path):
    cgroups = fake_host(tmp_path, 2, {c: "unified" for c in cgroup.CONTROLLERS})
    group = ExecutionGroup.create(200 * MB, 20, 0.5, name="x", cgroups=cgroups)
    assert limit_files(group) == {"unified/memory.max": str(200 * MB), "unified/pids.max": "20",
                                  "unified/cpu.max": "50000 100000"}
    assert group.procs_files() == [str(tmp_path / "unified" / "posttrain-1-1-1" / "x" / "cgroup.procs")]
    (group.dirs["memory"] / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n")
    (group.dirs["cpu"] / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    assert group.oom_killed()
    assert group.cpu_seconds() == 2.5


@pytest.mark.unit
def test_usage_reads_cpu_seconds_and_the_memory_peak_and_says_none_where_not_accounted(tmp_path):
    v1 = fake_host(tmp_path, 1, {"memory": "memory", "pids": "pids", "cpu": "cpu", "cpuacct": "cpuacct"})
    group = ExecutionGroup.create(None, None, None, name="x", cgroups=v1)
    assert group.usage() == Usage(cpu_s=None, memory_peak_mb=None)  # the kernel wrote neither
    (group.dirs["cpuacct"] / "cpuacct.usage").write_text("1500000000\n")
    (group.dirs["memory"] / "memory.max_usage_in_bytes").write_text(f"{3 * MB // 2}\n")
    assert group.usage() == Usage(cpu_s=1.5, memory_peak_mb=1.5)
    no_cpuacct = ExecutionGroup(1, {c: group.dirs[c] for c in cgroup.CONTROLLERS})  # v1 without cpuacct mounted
    assert no_cpuacct.usage() == Usage(cpu_s=None, memory_peak_mb=1.5)


@pytest.mark.unit
@pytest.mark.parametrize("version", [1, 2])
def test_a_meter_gives_the_cpu_time_and_the_peak_since_it_was_made(tmp_path, version):
    hierarchies = {"memory": "memory", "pids": "pids", "cpu": "cpu", "cpuacct": "cpuacct"} if version == 1 else \
        {c: "unified" for c in cgroup.CONTROLLERS}
    group = ExecutionGroup.create(None, None, None, name="x", cgroups=fake_host(tmp_path, version, hierarchies))
    cpu, peak = (("cpuacct", "cpuacct.usage", 10**9), ("memory", "memory.max_usage_in_bytes", 1)) if version == 1 \
        else (("cpu", "cpu.stat", 10**6), ("memory", "memory.peak", 1))

    def write(which, value):  # as the kernel shows it
        controller, name, unit = which
        text = f"usage_usec {value * unit}\n" if name == "cpu.stat" else f"{value * unit}\n"
        (group.dirs[controller] / name).write_text(text)

    write(cpu, 7)
    write(peak, 300 * MB)  # an earlier execution's
    with cgroup.UsageMeter(group) as meter:
        if version == 1:  # reset to the usage now (the kernel takes the write of 0 so)
            assert (group.dirs["memory"] / "memory.max_usage_in_bytes").read_text() == "0"
        write(cpu, 9)
        write(peak, 20 * MB)  # v2: what reads through the meter's own descriptor show after its reset
        assert meter.usage() == Usage(cpu_s=2.0, memory_peak_mb=20.0)


@pytest.mark.unit
def test_a_meter_that_cannot_reset_the_peak_reports_none_rather_than_an_earlier_one(tmp_path):
    group = ExecutionGroup.create(None, None, None, name="x",
                                  cgroups=fake_host(tmp_path, 2, {c: "unified" for c in cgroup.CONTROLLERS}))
    (group.dirs["cpu"] / "cpu.stat").write_text("usage_usec 1000000\n")  # no memory.peak: before 5.19
    with cgroup.UsageMeter(group) as meter:
        assert meter.usage() == Usage(cpu_s=0.0, memory_peak_mb=None)


@pytest.mark.unit
@pytest.mark.parametrize("version", [1, 2])
def test_a_nested_group_has_limits_of_its_own_inside_its_parent(tmp_path, version):
    hierarchies = {"memory": "memory", "pids": "pids", "cpu": "cpu", "cpuacct": "cpu"} if version == 1 else \
        {c: "unified" for c in cgroup.CONTROLLERS}
    cgroups = fake_host(tmp_path, version, hierarchies)
    slot = ExecutionGroup.create(None, 40, None, name="slot", cgroups=cgroups)
    if version == 2:
        (slot.dirs["memory"] / "cgroup.subtree_control").write_text("")
    run = slot.nest(100 * MB, 32, 1.0, name="run")
    assert {c: str(path.relative_to(tmp_path)) for c, path in run.dirs.items()} == {
        c: f"{h}/posttrain-1-1-1/slot/run" for c, h in hierarchies.items()}
    limits = {path.name: path.read_text() for directory in CgroupHost.unique(run.dirs) for path in directory.iterdir()}
    assert limits["pids.max"] == "32"
    assert limits.get("memory.limit_in_bytes", limits.get("memory.max")) == str(100 * MB)
    if version == 2:  # the parent's children get the controllers (and the parent keeps no process of its own)
        assert (slot.dirs["memory"] / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert set(slot._subtree()) == {*CgroupHost.unique(slot.dirs), *CgroupHost.unique(run.dirs)}


@pytest.mark.unit
def test_join_command_joins_every_hierarchy_then_drops_to_the_user():
    group = ExecutionGroup(1, {"memory": Path("/cg/memory/p/x"), "pids": Path("/cg/pids/p/x"),
                               "cpu": Path("/cg/cpu,cpuacct/p/x"), "cpuacct": Path("/cg/cpu,cpuacct/p/x")})
    assert group.procs_files() == ["/cg/memory/p/x/cgroup.procs", "/cg/pids/p/x/cgroup.procs",
                                   "/cg/cpu,cpuacct/p/x/cgroup.procs"]
    cmd = group.join_command(["/usr/bin/bwrap", "--", "true"], user=(65534, 65534))
    assert cmd[:2] == ["/bin/sh", "-c"]
    assert "/cg/cpu,cpuacct/p/x/cgroup.procs" in cmd[2]
    assert cmd[3:] == ["sh", cgroup.SETPRIV, "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                       "/usr/bin/bwrap", "--", "true"]


# ---- real cgroups on this host ---------------------------------------------------------------------------------------
def real_cgroups():
    reason = cgroup.limits_unavailable_reason()
    if reason:
        pytest.skip(f"aggregate cgroup limits are unavailable on this host: {reason}")
    return cgroup.host()


@pytest.fixture
def make_group():
    cgroups = real_cgroups()
    groups: list[ExecutionGroup] = []

    def make(memory_bytes=None, max_pids=None, cpus=None) -> ExecutionGroup:
        groups.append(ExecutionGroup.create(memory_bytes, max_pids, cpus, cgroups=cgroups))
        return groups[-1]

    yield make
    for group in groups:
        assert group.remove()
        assert not any(path.exists() for path in group.dirs.values())


def run_in(group: ExecutionGroup, code: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """Run python ``code`` as nobody inside ``group``."""
    return subprocess.run(group.join_command([PY, "-c", textwrap.dedent(code)], user=NOBODY), check=False,
                          capture_output=True, text=True, timeout=timeout, env={}, **kw)


@pytest.mark.integration
def test_a_joined_process_is_in_every_hierarchy_as_the_dropped_user(make_group):
    group = make_group(64 * MB, 16, 1.0)
    r = run_in(group, "import os\nprint(os.getuid(), os.getgid(), os.getgroups())\n"
                      "print(open('/proc/self/cgroup').read(), end='')")
    assert r.returncode == 0, r.stderr
    uid_line, *lines = r.stdout.splitlines()
    assert uid_line == "65534 65534 []"
    name = group.dirs["memory"].name
    joined = {c for line in lines for c in line.split(":")[1].split(",") if line.endswith("/" + name)}
    assert set(group.dirs) <= joined


@pytest.mark.integration
def test_three_processes_of_100mb_under_a_200mb_group_are_oom_killed(make_group):
    group = make_group(200 * MB, 64, None)
    r = run_in(group, """
        import os, time
        kids = []
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                block = bytearray(100 << 20)
                block[::4096] = b"x" * len(block[::4096])  # touch every page
                time.sleep(2)
                os._exit(0)
            kids.append(pid)
        print(sorted(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in kids))
        """)
    assert r.returncode == 0, r.stderr
    assert eval(r.stdout)[0] == -signal.SIGKILL  # at least one child was killed
    assert group.oom_killed()
    assert group.memory_peak_bytes() <= 200 * MB


@pytest.mark.integration
def test_memfd_pages_count_and_a_write_beyond_the_cap_fails(make_group):
    group = make_group(128 * MB, 16, None)
    r = run_in(group, """
        import os
        fd = os.memfd_create("fill")
        chunk = b"x" * (1 << 20)
        for i in range(512):
            os.write(fd, chunk)
        print("wrote 512 MB")
        """)
    assert "wrote 512 MB" not in r.stdout
    assert r.returncode == -signal.SIGKILL or "MemoryError" in r.stderr or "Errno 12" in r.stderr, r
    assert group.memory_peak_bytes() <= 128 * MB


@pytest.mark.integration
@pytest.mark.parametrize("what", ["file", "inodes"])
def test_a_sandbox_tmpfs_is_capped_by_the_group_in_bytes_and_in_empty_files(make_group, what):
    """bwrap's own tmpfs (size cap far above the group's): one big file, or empty files until the inodes fill it."""
    group = make_group(96 * MB, 16, None)
    fill = {"file": "with open('/tmp/f', 'wb') as f:\n    for i in range(1024):\n        f.write(b'x' * (1 << 20))\n",
            "inodes": "for i in range(2_000_000):\n    open(f'/tmp/{i}', 'w').close()\n"}[what]
    code = f"print('started', flush=True)\n{fill}print('filled')\n"
    cmd = ["/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--size", str(2 << 30),
           "--tmpfs", "/tmp", "--unshare-all", "--unshare-user", "--die-with-parent", "--", PY, "-c", code]
    r = subprocess.run(group.join_command(cmd, user=NOBODY), check=False, capture_output=True, text=True, timeout=120,
                       env={})
    assert r.stdout == "started\n", r
    assert r.returncode != 0, r
    assert group.oom_killed()
    assert group.memory_peak_bytes() <= 96 * MB


@pytest.mark.integration
def test_an_oom_kill_in_a_nested_group_picks_only_its_processes(make_group):
    """A warm slot's layout: a big process in one nested group (the zygote's), a small one in another (an
    execution's) that fills memory no process holds (memfd pages): the OOM kill takes the small one, never the big
    one, and removing the parent removes both groups."""
    slot = make_group(None, 32, None)
    zygote, run = slot.nest(name="zygote"), slot.nest(96 * MB, 16, None)
    big = subprocess.Popen(zygote.join_command([PY, "-c", "import time\nb = bytearray(200 << 20)\nb[::4096] = "
                                                "b'x' * len(b[::4096])\nprint('ready', flush=True)\ntime.sleep(60)"],
                                               user=NOBODY), stdout=subprocess.PIPE, text=True, env={})
    try:
        assert big.stdout.readline() == "ready\n"
        r = run_in(run, "import os\nfd = os.memfd_create('x')\nfor _ in range(512):\n"
                        "    os.write(fd, b'x' * (1 << 20))\nprint('wrote 512 MB')\n")
        assert r.stdout == "", r
        assert r.returncode == -signal.SIGKILL or "Errno 12" in r.stderr, r
        assert not zygote.oom_killed()
        assert big.poll() is None
        assert set(slot.pids()) >= set(zygote.pids())
        assert zygote.pids()
    finally:
        big.kill()
        big.wait()
    assert slot.remove()
    assert not any(path.exists() for group in (zygote, run) for path in group.dirs.values())


@pytest.mark.integration
def test_pids_max_stops_a_fork_loop(make_group):
    group = make_group(256 * MB, 20, None)
    r = run_in(group, """
        import os, time
        started = 0
        try:
            for _ in range(200):
                if os.fork() == 0:
                    null = os.open("/dev/null", os.O_WRONLY)
                    os.dup2(null, 1), os.dup2(null, 2)  # the parent's run ends at its exit
                    time.sleep(30)
                    os._exit(0)
                started += 1
        except BlockingIOError as exc:
            print(started, exc.errno)
        """, timeout=60)
    assert r.returncode == 0, r.stderr
    started, err = map(int, r.stdout.split())
    assert started < 20
    assert err == errno.EAGAIN
    assert 0 < len(group.pids()) < 20  # the sleepers outlive their parent, until killed
    assert group.kill()
    assert group.pids() == []


@pytest.mark.integration
def test_a_cpu_quota_of_one_core_holds_two_spinning_processes_to_one_core(make_group):
    group = make_group(None, 16, 1.0)
    spin = "import os, time\nos.fork()\nend = time.monotonic() + 2\nwhile time.monotonic() < end:\n    pass\n"
    t0, before = time.monotonic(), group.cpu_seconds()
    r = run_in(group, spin)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    cores = (group.cpu_seconds() - before) / wall
    assert 0.3 < cores < 1.3, cores


@pytest.mark.integration
def test_usage_is_the_groups_and_a_meter_gives_each_execution_of_a_reused_group_its_own(make_group):
    group = make_group(512 * MB, 16, 1.0)
    big = "x = bytearray(100 << 20)\nx[::4096] = b'x' * len(x[::4096])\n"
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\n"
    assert run_in(group, big).returncode == 0
    assert run_in(group, burn).returncode == 0
    usage = group.usage()
    assert usage.memory_peak_mb > 100, usage
    assert 0.3 <= usage.cpu_s < 1.0, usage
    with cgroup.UsageMeter(group) as meter:  # as a pooled container's is: the group lives on
        assert run_in(group, "pass").returncode == 0
        small = meter.usage()
    assert small.memory_peak_mb < 30, small
    assert small.cpu_s < 0.2, small


@pytest.mark.integration
def test_kill_empties_the_group_and_remove_leaves_nothing(make_group):
    cgroups = real_cgroups()
    group = ExecutionGroup.create(64 * MB, 32, None, cgroups=cgroups)
    tree = "for i in 1 2 3 4; do setsid sleep 300 & done; sleep 300"
    proc = subprocess.Popen(group.join_command(["/bin/sh", "-c", tree], user=NOBODY), env={})
    deadline = time.monotonic() + 10
    while len(group.pids()) < 6 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(group.pids()) >= 6
    t0 = time.monotonic()
    assert group.kill()
    kill_ms = (time.monotonic() - t0) * 1000
    assert group.pids() == []
    assert kill_ms < 1000  # our child's zombie is not counted
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert group.remove()
    assert not any(path.exists() for path in group.dirs.values())
    assert all(parent.is_dir() for parent in cgroups.parents.values())  # the parent stays for the next group


@pytest.mark.integration
def test_create_and_remove_are_fast():
    cgroups = real_cgroups()
    t0 = time.monotonic()
    for _ in range(20):
        ExecutionGroup.create(64 * MB, 32, 1.0, cgroups=cgroups).remove()
    per_group_ms = (time.monotonic() - t0) / 20 * 1000
    assert per_group_ms < 50, per_group_ms


@pytest.mark.integration
def test_groups_of_a_dead_owner_are_reaped_with_their_processes(tmp_path):
    cgroups = real_cgroups()
    owner = textwrap.dedent("""
        import os, subprocess, sys, time
        from posttrain.sandbox.cgroup import ExecutionGroup
        group = ExecutionGroup.create(64 << 20, 16, 1.0)
        subprocess.Popen(group.join_command(["/bin/sleep", "300"], user=(65534, 65534)), start_new_session=True)
        while not group.pids():
            time.sleep(0.01)
        print(group.pids()[0], flush=True)
        print(group.dirs["memory"].parent.name, flush=True)
        time.sleep(300)
        """)
    proc = subprocess.Popen([sys.executable, "-c", owner], stdout=subprocess.PIPE, text=True, cwd=str(Path.cwd()))
    sleeper, parent_name = int(proc.stdout.readline()), proc.stdout.readline().strip()
    proc.kill()  # no atexit: the groups and the sleeper are left behind
    proc.wait()
    left = [base / parent_name for base in CgroupHost.unique(cgroups.bases)]
    assert all(path.is_dir() for path in left)
    assert lifecycle.process_start(sleeper)
    assert cgroup.reap_groups(cgroups) == len(left)
    assert not any(path.exists() for path in left)
    deadline = time.monotonic() + 5
    while lifecycle.process_start(sleeper) and time.monotonic() < deadline:  # killed; reaped by init
        time.sleep(0.02)
    assert not lifecycle.process_start(sleeper)
