"""The container agent: pid 1 of a pooled container; runs one program at a time for the host, then cleans up.

Runs inside the container (``python3 -I -S -c <its shipped text> UID GID``, ``posttrain.trusted.source``) as root
with only the capabilities ``posttrain.sandbox.docker.container.AGENT_CAPS`` grants (SETUID, SETGID, SETPCAP: to
become the programs' user with an empty bounding set; KILL: to kill their processes), standard library only. The
host talks to it over the container's attached stdin/stdout (``posttrain.sandbox.docker.agent_client.AgentChannel``):

    host -> agent   4-byte big-endian length, a JSON header, then the payload bytes the header announces
    agent -> host   messages: 1-byte kind, 4-byte execution id, 4-byte length, payload
                    H hello | R started | O stdout | E stderr | X exit (JSON) | C clean | F failure (text)

At start, before any program exists, it writes the accounts (``write_accounts``): the image's ``/etc/passwd`` and
``/etc/group`` link into ``/run/posttrain``, a root-owned tmpfs, which gets the image's accounts plus ``sandbox`` as
UID:GID (the host uid leased for this container), so programs have a name and the workspace driver finds the uid the
host chose for them.

Ops: ``run`` (check the container is as it started, write the trusted files into /trusted, unpack the workspace tar
into /work, start argv with limits, relay its capped output, enforce the deadline, kill whatever it left behind,
report X) and ``reset`` (kill every other process, empty /work unless kept, /tmp, /dev/shm, POSIX queues, SysV IPC
and /trusted, check, report C).

Security model: every program (and everything that touches the programs' files: unpacking /work, the cleanup) runs
as the sandbox user UID:GID, with no capabilities and an empty bounding set (``no-new-privileges`` holds for the
whole container). The agent is another uid, so no program can signal, ptrace, ``prlimit``, renice, re-pin,
reschedule or re-prioritise it, nor open its ``/proc`` entries (it is non-dumpable too); as pid 1 it also never
gets a signal it has no handler for. Its trusted files are root's, read-only (dirs 0755, files 0444): a program
cannot change, add or remove them, nor list ``/trusted`` itself (mode 0111 while a program runs, 0700 between
runs). Belt and braces, before every run and after every reset the agent checks that no process but itself is
left, that /trusted is empty and that everything a program would inherit from it (``inherited()``: rlimits, nice,
CPU affinity, scheduling, I/O priority, timer slack, OOM score) equals what it recorded at start; if not, it says F
and the host discards the container. Programs get fresh pipes, never the agent's channel.
"""

import io
import json
import os
import resource
import select
import signal
import stat
import struct
import sys
import tarfile
import time

from posttrain.trusted.prelude import describe, load_libc, set_dumpable

MSG = struct.Struct(">cII")
HEADER = struct.Struct(">I")
QUIET_S, GRACE_S = 0.2, 2.0  # after the program exited: wait for its pipes this long once quiet, at most GRACE_S
DIRS = {"/work": 0o755, "/tmp": 0o1777, "/dev/shm": 0o1777}  # the programs' directories
TRUSTED = "/trusted"  # root's, read-only for the programs (``posttrain.sandbox.workspace.TRUSTED_DIR``)
ACCOUNTS = "/run/posttrain"  # root's tmpfs behind /etc/passwd and /etc/group (``...docker.container.ACCOUNTS``)
LIMITS = {"cpu": resource.RLIMIT_CPU, "fsize": resource.RLIMIT_FSIZE, "nofile": resource.RLIMIT_NOFILE,
          "core": resource.RLIMIT_CORE, "as": resource.RLIMIT_AS}
RLIMITS = sorted(getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_"))
PR_CAPBSET_READ, PR_CAPBSET_DROP, PR_GET_TIMERSLACK = 23, 24, 30
IOPRIO_GET = {"x86_64": 252, "aarch64": 31}.get(os.uname().machine)  # syscall number; IOPRIO_WHO_PROCESS is 1


def send(kind, xid, payload=b""):
    view = memoryview(MSG.pack(kind, xid, len(payload)) + payload)
    while view:
        view = view[os.write(1, view):]


def read_exact(n):
    parts, left = [], n
    while left:
        chunk = os.read(0, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def others():
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and p != "1"]


def reap():
    """Collect every exited child (orphans of the programs are ours too); returns {pid: status}."""
    done = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done[pid] = status


def kill_all():
    for _ in range(1000):
        try:
            os.kill(-1, signal.SIGKILL)  # every process but ourselves (CAP_KILL: they are another uid)
        except ProcessLookupError:
            pass
        reap()
        if not others():
            return True
        time.sleep(0.002)
    return not others()


def inherited():
    """What a program inherits from the agent and another process could change: compared with the start's."""
    with open("/proc/self/oom_score_adj") as handle:
        oom_score_adj = handle.read().strip()
    return {"rlimits": [resource.getrlimit(r) for r in RLIMITS], "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "affinity": sorted(os.sched_getaffinity(0)), "policy": os.sched_getscheduler(0),
            "priority": os.sched_getparam(0).sched_priority, "timer_slack": LIBC.prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0),
            "ioprio": LIBC.syscall(IOPRIO_GET, 1, 0) if IOPRIO_GET else None, "oom_score_adj": oom_score_adj}


def write_accounts(user):
    """The image's accounts (``/etc/posttrain``) plus the programs' user, "sandbox", into ``ACCOUNTS``."""
    lines = {"passwd": "sandbox:x:%d:%d:sandbox:/work:/usr/sbin/nologin\n" % user, "group": "sandbox:x:%d:\n" % user[1]}
    for name, line in lines.items():
        with open(os.path.join("/etc/posttrain", name)) as handle:
            accounts = handle.read()
        with open(os.path.join(ACCOUNTS, name), "w") as handle:
            handle.write(accounts + line)
        os.chmod(os.path.join(ACCOUNTS, name), 0o644)


def become(user):
    """Turn this (forked) process into the programs' user: no capability left, none in the bounding set."""
    for cap in range(64):
        LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails (EINVAL) past the kernel's last capability
    if any(LIBC.prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1 for cap in range(64)):
        raise OSError("the capability bounding set cannot be emptied")
    os.setgroups([])
    os.setresgid(user[1], user[1], user[1])
    os.setresuid(user[0], user[0], user[0])  # from root to another uid: the kernel clears every capability


def as_user(user, task, *args):
    """``task(*args)`` in a child running as the programs' user (only the agent is alive: nothing can reach it);
    returns its error, "" on success."""
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(0)  # the host's channel stays the agent's alone
            os.close(1)
            become(user)
            task(*args)
        except BaseException as error:  # noqa: B036
            os.write(err_w, describe(error).encode())
            code = 1
        os._exit(code)
    os.close(err_w)
    with os.fdopen(err_r, "rb") as handle:
        error = handle.read().decode(errors="replace")
    status = os.waitpid(pid, 0)[1]
    return error or ("" if status == 0 else "exit status %d" % status)


def wipe(top):
    try:
        os.chmod(top, DIRS.get(top, 0o755))  # a program may have locked its own directory
    except OSError:
        pass  # not ours to chmod (/tmp and /dev/shm are root's), so not the programs' either
    try:
        entries = list(os.scandir(top))
    except OSError:
        return
    for entry in entries:
        remove(entry.path)


def remove(path):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, stat.S_IRWXU)
            for entry in os.scandir(path):
                remove(entry.path)
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        pass


def clean_program_files(keep_work):
    """As the programs' user: empty their directories (``/work`` unless kept), POSIX queues and SysV IPC."""
    tops = [top for top in DIRS if not (top == "/work" and keep_work)]
    for top in tops:
        wipe(top)
    for name in os.listdir("/dev/mqueue") if os.path.isdir("/dev/mqueue") else []:
        remove(os.path.join("/dev/mqueue", name))
    os.waitpid(os.posix_spawn("/usr/bin/ipcrm", ["ipcrm", "--all"], {"PATH": "/usr/bin:/bin"}), 0)
    left = [top for top in tops if os.listdir(top)]
    if left:
        raise OSError("left behind in %s" % (left,))


def extract(archive, top, file_mode=None):
    """Unpack a tar of plain files and directories under ``top``; ``file_mode`` replaces the files' modes."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            target = os.path.join(top, member.name)
            if member.isdir():
                os.makedirs(target, mode=0o755, exist_ok=True)
            elif member.isfile():
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                with open(target, "wb") as handle:
                    handle.write(tar.extractfile(member).read())
                os.chmod(target, member.mode & 0o777 if file_mode is None else file_mode)


def enter_work(archive):
    """As the programs' user: give /work back its mode (a program may have locked it: the next one starts there),
    then unpack the workspace tar (if any) into it."""
    os.chmod("/work", DIRS["/work"])
    if archive:
        extract(archive, "/work")


def child(header, fds, exec_w, user):
    """The program's process until it executes: limits, the programs' user, its pipes. A failure is reported on
    ``exec_w`` as "setup ..." (the sandbox's: nothing ran) or "exec ERRNO ..." (the command's, as a shell would)."""
    step = "setup"
    try:
        os.setsid()
        for name, value in header.get("limits", {}).items():
            resource.setrlimit(LIMITS[name], (value[0], value[1]))
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")  # the kernel's OOM killer takes the program, never the agent
        for sig in (signal.SIGPIPE, signal.SIGCHLD, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)  # the host's channel is gone from here on
        os.closerange(3, exec_w)
        os.closerange(exec_w + 1, 1 << 16)
        become(user)
        os.chdir(header.get("cwd", "/work"))
        step = "exec"
        os.execvpe(header["argv"][0], header["argv"], header["env"])
    except BaseException as error:  # noqa: B036
        os.write(exec_w, ("%s %d %s" % (step, getattr(error, "errno", None) or 0, error)).encode()[:1000])
    os._exit(127)


class Agent:
    """The programs' user, the state recorded at start, and the two ops."""

    def __init__(self, user, wake_r):
        self.user, self.wake_r = user, wake_r
        self.baseline = inherited()

    def problems(self):
        """How the container differs from a fresh one (nothing: it may run the next program)."""
        left = others()
        found = ["processes left: %s" % (left,)] if left else []
        if os.listdir(TRUSTED):
            found.append("trusted files left")
        now = inherited()
        found += ["%s changed: %s -> %s" % (key, self.baseline[key], now[key])
                  for key in sorted(now) if now[key] != self.baseline[key]]
        return found

    def run(self, xid, header):
        archive = read_exact(header["archive"])
        trusted = read_exact(header.get("trusted", 0))
        stdin = read_exact(header["stdin"])
        problems = self.problems()
        if problems:
            send(b"F", xid, ("tainted container: %s" % ("; ".join(problems),)).encode()[:2000])
            return
        try:
            if trusted:
                extract(trusted, TRUSTED, 0o444)
            os.chmod(TRUSTED, 0o111)  # while the program runs: entries can be opened by name, not listed
        except Exception as error:  # noqa: BLE001
            send(b"F", xid, ("could not write the trusted files: %s" % (describe(error),)).encode())
            return
        error = as_user(self.user, enter_work, archive)
        if error:
            send(b"F", xid, ("could not unpack the workspace: %s" % (error,)).encode())
            return
        self.supervise(xid, header, stdin)

    def supervise(self, xid, header, stdin):
        """Start the program and see it through; from here on, whatever happens is the program's outcome."""
        (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
        exec_r, exec_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            child(header, (in_r, out_w, err_w), exec_w, self.user)
        for fd in (in_r, out_w, err_w, exec_w):
            os.close(fd)
        failure = os.read(exec_r, 1000).decode(errors="replace").split(" ", 2)
        os.close(exec_r)
        if failure[0] == "setup":
            os.waitpid(pid, 0)
            for fd in (in_w, out_r, err_r):
                os.close(fd)
            send(b"F", xid, ("could not start the program: %s" % (failure[2],)).encode())
            return
        send(b"R", xid)
        if failure[0]:  # like a shell: 127 when the command is missing, 126 when it cannot be executed
            send(b"E", xid, ("posttrain: cannot execute %s: %s\n" % (header["argv"][0], failure[2])).encode())
        cap = header["max_output"] + 1
        streams = {out_r: b"O", err_r: b"E"}  # still open
        totals = {b"O": 0, b"E": 0}
        os.set_blocking(in_w, False)
        pending = memoryview(stdin)
        if not pending:
            os.close(in_w)
            in_w = None
        deadline = time.monotonic() + header["timeout_s"]
        status, exited_at, last_data, timed_out = None, 0.0, time.monotonic(), False
        while True:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if status is not None and (not streams or now - max(exited_at, last_data) > QUIET_S
                                       or now - exited_at > GRACE_S):
                break  # done; pipes still open here are held by something the program left behind
            wait = deadline - now if status is None else min(deadline - now, QUIET_S / 4)
            ready_r, ready_w, _ = select.select(list(streams) + [self.wake_r, 0],
                                                [in_w] if in_w is not None else [], [], wait)
            if 0 in ready_r:  # the host never writes during a run: this is the end of its channel, so ours too
                kill_all()
                raise EOFError
            if ready_w:
                try:
                    pending = pending[os.write(in_w, pending[:65536]):]
                except BlockingIOError:
                    pass
                except OSError:  # the program closed its stdin or exited
                    pending = pending[:0]
                if not pending:
                    os.close(in_w)
                    in_w = None
            for fd in ready_r:
                if fd == self.wake_r:
                    try:
                        os.read(self.wake_r, 4096)
                    except BlockingIOError:
                        pass
                    continue
                chunk = os.read(fd, 65536)
                kind = streams[fd]
                if not chunk:
                    os.close(fd)
                    del streams[fd]
                    continue
                last_data = time.monotonic()
                room = cap - totals[kind]
                if room > 0:
                    send(kind, xid, chunk[:room])
                totals[kind] += len(chunk)
            for done_pid, done_status in reap().items():
                if done_pid == pid:
                    status, exited_at = done_status, time.monotonic()
        killed = kill_all()  # what the program left behind (or the program itself, at the deadline)
        os.chmod(TRUSTED, 0o700)  # root's alone between runs
        for fd in list(streams) + ([in_w] if in_w is not None else []):
            os.close(fd)
        if failure[0]:
            code = 127 if failure[1] == "2" else 126
        elif status is None:
            code = None
        elif os.WIFSIGNALED(status):
            code = 128 + os.WTERMSIG(status)
        else:
            code = os.WEXITSTATUS(status)
        send(b"X", xid, json.dumps({"exit": None if timed_out else code, "timed_out": timed_out, "clean": killed,
                                    "stdout_bytes": totals[b"O"], "stderr_bytes": totals[b"E"]}).encode())

    def reset(self, xid, header):
        if kill_all():
            error = as_user(self.user, clean_program_files, header.get("keep_work"))
            problems = [error] if error else []
        else:
            problems = ["processes survive: %s" % (others(),)]
        for entry in os.scandir(TRUSTED):
            remove(entry.path)
        problems = problems or self.problems()
        send(b"F" if problems else b"C", xid, "; ".join(problems).encode()[:2000] if problems else b"clean")


LIBC = load_libc()


def main():
    set_dumpable(LIBC, False)  # defence in depth: no /proc/1/* for anyone, whatever their uid
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as pid 1, signals left at their default are never delivered
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    os.set_inheritable(0, False)
    user = (int(sys.argv[1]), int(sys.argv[2]))
    try:
        write_accounts(user)
    except OSError as error:
        sys.exit("posttrain agent: cannot write the accounts (an image older than the backend? make sandbox-image): "
                 + describe(error))
    agent = Agent(user, wake_r)
    send(b"H", 0, b"posttrain-agent 2")
    while True:
        try:
            size = HEADER.unpack(read_exact(HEADER.size))[0]
            header = json.loads(read_exact(size))
        except EOFError:
            return  # the host went away: the container ends with us
        xid = int(header.get("id", 0))
        try:
            if header["op"] == "run":
                agent.run(xid, header)
            elif header["op"] == "reset":
                agent.reset(xid, header)
            else:
                send(b"F", xid, b"unknown op")
        except EOFError:
            return
        except Exception as error:  # noqa: BLE001 - report, stay alive
            send(b"F", xid, ("agent error: %r" % (error,)).encode()[:2000])


if __name__ == "__main__":
    main()
