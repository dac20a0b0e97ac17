"""The container agent: pid 1 of a pooled container; runs one program at a time for the host, then cleans up.

Runs inside the container (``python3 -I -S -c <its shipped text>``, ``posttrain.trusted.source("container_agent")``)
as the unprivileged sandbox user, standard library only. The host talks to it over the container's attached
stdin/stdout (``posttrain.sandbox.docker.agent_client.AgentChannel``):

    host -> agent   4-byte big-endian length, a JSON header, then the payload bytes the header announces
    agent -> host   messages: 1-byte kind, 4-byte execution id, 4-byte length, payload
                    H hello | R started | O stdout | E stderr | X exit (JSON) | C clean | F failure (text)

Ops: ``run`` (unpack a tar into /work, start argv with limits, relay its capped output, enforce the deadline, then
kill whatever it left behind, report X) and ``reset`` (kill every other process, empty /work unless kept, /tmp,
/dev/shm, POSIX queues and SysV IPC, check, report C). The agent is protected from the programs it runs although
they share its uid: as pid 1 of the container's pid namespace it ignores every signal they can send (it keeps no
handler for any catchable signal but SIGCHLD), and it makes itself non-dumpable so they cannot ptrace it or read
its memory and descriptors through /proc. Programs get fresh pipes, never the agent's channel.
"""

import json
import os
import resource
import select
import signal
import stat
import struct
import tarfile
import io
import time

from posttrain.trusted.prelude import load_libc, set_dumpable

MSG = struct.Struct(">cII")
HEADER = struct.Struct(">I")
QUIET_S, GRACE_S = 0.2, 2.0  # after the program exited: wait for its pipes this long once quiet, at most GRACE_S
DIRS = {"/work": 0o755, "/tmp": 0o1777, "/dev/shm": 0o1777}
LIMITS = {"cpu": resource.RLIMIT_CPU, "fsize": resource.RLIMIT_FSIZE, "nofile": resource.RLIMIT_NOFILE,
          "core": resource.RLIMIT_CORE, "as": resource.RLIMIT_AS}


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
            os.kill(-1, signal.SIGKILL)  # every process we may signal but ourselves
        except ProcessLookupError:
            pass
        reap()
        if not others():
            return True
        time.sleep(0.002)
    return not others()


def wipe(top):
    try:
        os.chmod(top, DIRS.get(top, 0o755))  # /work is ours (a program may have locked it); /tmp is root's
    except OSError:
        pass
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


def extract(archive):
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            target = os.path.join("/work", member.name)
            if member.isdir():
                os.makedirs(target, mode=0o755, exist_ok=True)
            elif member.isfile():
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                with open(target, "wb") as handle:
                    handle.write(tar.extractfile(member).read())
                os.chmod(target, member.mode & 0o777)


def child(header, fds, exec_w, libc):
    try:
        set_dumpable(libc, True)  # dumpable again (exec would do it too): /proc/self is ours to write
        os.setsid()
        for name, value in header.get("limits", {}).items():
            resource.setrlimit(LIMITS[name], (value[0], value[1]))
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")  # the kernel's OOM killer takes the program, never the agent
        for sig in (signal.SIGPIPE, signal.SIGCHLD, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, exec_w)
        os.closerange(exec_w + 1, 1 << 16)
        os.chdir(header.get("cwd", "/work"))
        os.execvpe(header["argv"][0], header["argv"], header["env"])
    except OSError as error:
        os.write(exec_w, ("%d %s" % (error.errno, error)).encode()[:1000])
    except BaseException as error:  # noqa: B036
        os.write(exec_w, ("0 %s" % (error,)).encode()[:1000])
    os._exit(127)


def run(xid, header, wake_r):
    archive = read_exact(header["archive"])
    stdin = read_exact(header["stdin"])
    try:
        if archive:
            extract(archive)
    except Exception as error:  # noqa: BLE001
        send(b"F", xid, ("could not unpack the workspace: %s" % (error,)).encode())
        return
    (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
    exec_r, exec_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        child(header, (in_r, out_w, err_w), exec_w, LIBC)
    for fd in (in_r, out_w, err_w, exec_w):
        os.close(fd)
    failure = os.read(exec_r, 1000)
    os.close(exec_r)
    send(b"R", xid)
    if failure:  # like a shell: 127 when the command is missing, 126 when it cannot be executed
        send(b"E", xid, ("posttrain: cannot execute %s: %s\n"
                         % (header["argv"][0], failure.decode(errors="replace").partition(" ")[2])).encode())
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
        ready_r, ready_w, _ = select.select(list(streams) + [wake_r, 0], [in_w] if in_w is not None else [], [],
                                            wait)
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
            if fd == wake_r:
                try:
                    os.read(wake_r, 4096)
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
    for fd in list(streams) + ([in_w] if in_w is not None else []):
        os.close(fd)
    if failure:
        code = 127 if failure.startswith(b"2 ") else 126
    elif status is None:
        code = None
    elif os.WIFSIGNALED(status):
        code = 128 + os.WTERMSIG(status)
    else:
        code = os.WEXITSTATUS(status)
    send(b"X", xid, json.dumps({"exit": None if timed_out else code, "timed_out": timed_out, "clean": killed,
                                "stdout_bytes": totals[b"O"], "stderr_bytes": totals[b"E"]}).encode())


def reset(xid, header):
    ok = kill_all()
    for top in DIRS:
        if top == "/work" and header.get("keep_work"):
            continue
        wipe(top)
    for name in os.listdir("/dev/mqueue") if os.path.isdir("/dev/mqueue") else []:
        remove(os.path.join("/dev/mqueue", name))
    pid = os.posix_spawn("/usr/bin/ipcrm", ["ipcrm", "--all"], {"PATH": "/usr/bin:/bin"})
    while True:
        try:
            os.waitpid(pid, 0)
            break
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    left = [top for top in DIRS if not (top == "/work" and header.get("keep_work")) and os.listdir(top)]
    ok = ok and not others() and not left
    send(b"C" if ok else b"F", xid, b"clean" if ok else ("left behind: %s" % (left or others(),)).encode())


LIBC = load_libc()


def main():
    set_dumpable(LIBC, False)  # the programs (same uid) cannot ptrace us or read /proc/1/*
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as pid 1, signals left at their default are never delivered
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    os.set_inheritable(0, False)
    send(b"H", 0, b"posttrain-agent 1")
    while True:
        try:
            size = HEADER.unpack(read_exact(HEADER.size))[0]
            header = json.loads(read_exact(size))
        except EOFError:
            return  # the host went away: the container ends with us
        xid = int(header.get("id", 0))
        try:
            if header["op"] == "run":
                run(xid, header, wake_r)
            elif header["op"] == "reset":
                reset(xid, header)
            else:
                send(b"F", xid, b"unknown op")
        except EOFError:
            return
        except Exception as error:  # noqa: BLE001 - report, stay alive
            send(b"F", xid, ("agent error: %r" % (error,)).encode()[:2000])


if __name__ == "__main__":
    main()
