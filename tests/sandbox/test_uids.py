"""Host uid leases (``posttrain/sandbox/uids.py``): exclusive across threads and processes, given back by release
or by the holder's death, refused over ranges the host already uses; and bwrap sandboxes running at once as root
run as distinct host uids, given back when they end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from posttrain.sandbox import Execution, make_sandbox, run_many
from posttrain.sandbox.uids import UidPool, check_unassigned, mapped

pytestmark = pytest.mark.integration
UIDS = range(1_900_000_000, 1_900_000_016)


def test_threads_never_share_a_uid(tmp_path):
    pool = UidPool(UIDS, lock_dir=str(tmp_path))
    barrier = threading.Barrier(8)

    def lease_and_hold(_):
        barrier.wait()
        lease = pool.lease()
        time.sleep(0.05)
        return lease

    with ThreadPoolExecutor(8) as workers:
        leases = list(workers.map(lease_and_hold, range(8)))
    assert len({lease.uid for lease in leases}) == 8
    for lease in leases:
        lease.release()
        lease.release()  # a second release does nothing
    assert pool.lease().uid == UIDS.start


def test_another_process_holds_its_uid_until_it_dies(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom posttrain.sandbox.uids import UidPool\n"
         f"lease = UidPool(range({UIDS.start}, {UIDS.stop}), lock_dir={str(tmp_path)!r}).lease()\n"
         "print(lease.uid, flush=True)\ntime.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    try:
        held = int(holder.stdout.readline())
        pool = UidPool(UIDS, lock_dir=str(tmp_path))
        with pool.lease() as mine:
            assert mine.uid != held
    finally:
        holder.kill()
        holder.wait()
    with pool.lease() as again:  # the kernel dropped the dead holder's lock
        assert again.uid == held


def test_ranges_the_host_uses_are_refused():
    with pytest.raises(ValueError, match=r"host_uid_first/host_uids: 65530-65539 holds (user|group) \w+ \(65534\)"):
        check_unassigned(range(65530, 65540))


@pytest.mark.skipif(os.geteuid() != 0, reason="the lock directory check is about root's")
def test_a_lock_directory_others_may_write_is_refused(tmp_path):
    os.chmod(tmp_path, 0o777)
    with pytest.raises(PermissionError, match="uid lock directory"):
        UidPool(UIDS, lock_dir=str(tmp_path)).lease()


@pytest.mark.skipif(open("/proc/self/uid_map").read().split() != ["0", "0", "4294967295"],
                    reason="in the host's user namespace, whose map is known")
def test_only_the_mapped_part_of_a_range_is_used():
    assert mapped(UIDS) == UIDS
    assert mapped(range(4294967290, 4294967300)) == range(4294967290, 4294967295)  # (uid_t) -1 is never mapped


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether process ``pid`` is ``ancestor`` or one of its descendants (its parent chain in ``/proc``)."""
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            with open(f"/proc/{pid}/stat") as stat:
                pid = int(stat.read().rsplit(")", 1)[1].split()[1])  # the field after the state: the parent's pid
        except (OSError, ValueError, IndexError):
            return False
    return False


HOST_UID = "import os, time\ntime.sleep(1.0)\nprint(os.getuid())\n"  # 10001 inside; the host's is read from /proc


@pytest.mark.skipif(shutil.which("bwrap") is None or os.geteuid() != 0, reason="needs bwrap, as root")
@pytest.mark.parametrize("backend", ["bwrap", "bwrap-warm"])
def test_concurrent_sandboxes_run_as_distinct_host_uids(backend):
    box = make_sandbox(backend)
    seen: set[int] = set()
    stop = threading.Event()

    def watch():  # host uids of this box's processes (ours: other sandboxes may run beside the test) while they run
        while not stop.is_set():
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    uid = os.stat(f"/proc/{pid}").st_uid
                except OSError:
                    continue
                if uid in range(1_900_000_000, 1_900_065_536) and descends_from(int(pid), os.getpid()):
                    seen.add(uid)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        results = run_many(box, [Execution(files={"m.py": HOST_UID}, command=["python3", "m.py"])] * 3,
                           concurrency=3)
    finally:
        stop.set()
        watcher.join()
        box.close()
    assert [r.stdout for r in results] == ["10001\n"] * 3, results
    assert len(seen) == 3, seen
