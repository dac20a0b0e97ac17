"""Trusted zygote of a warm bwrap slot: a Python already started, which forks one fresh sandbox per execution.

It runs as the pid 1 of a long-lived bwrap sandbox (``sandbox/warm.py``) that has new user, pid, net, ipc, uts and
mount namespaces and, inside them only, the capabilities to build more (CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETPCAP
in its own user namespace; none on the host). For each execution the host sends one message on the SOCK_SEQPACKET
socket whose fd number is its argument: a memfd holding the JSON request, the program's three stdio pipes and
the ``cgroup.procs`` files of the execution's own cgroup (opened by the host; none where there are no cgroups). Then:

1. the zygote forks an **executor**, which unshares new mount, pid, net, ipc and uts namespaces, mounts a fresh
   tmpfs, capped in size and in inodes, on ``/work`` (filled with the files), ``/tmp``, ``/dev/shm`` and, for
   trusted files, a read-only ``/trusted`` (mode 0111: entries can be opened by name, not listed); brings up the
   new loopback;
2. the executor forks the **program**, the pid 1 of the new pid namespace, which first joins the execution's
   cgroup (so the memory it charges, and an OOM kill at that cgroup's cap, are its own: the zygote and the
   executor stay in the slot's other cgroup), then mounts its own ``/proc`` (with ``/proc/sys`` and friends
   read-only), makes itself a session leader, takes its stdio, sets its rlimits and oom_score_adj, drops every
   capability (bounding, ambient, permitted), sets no_new_privs, installs the shared seccomp filter and then runs
   the command: ``python3 [-I] script.py ...`` runs in this very process (the interpreter start-up is what the
   zygote saves), anything else is exec'ed (also every run with trusted files, so that they are never in the
   memory of a program that can read its own);
3. the executor waits for the program until the deadline (then SIGKILLs it: the whole pid namespace dies with its
   pid 1), hands its JSON result to the zygote and exits, its namespaces and tmpfs mounts with it; the zygote
   sends the result to the host once the executor is gone, so the next execution never meets this one's mounts.

So no execution sees another's files or processes, and nothing of the zygote is visible from inside: it is in
the parent pid namespace, it is non-dumpable, and the executor closes the socket as it starts. The zygote never
reads a request itself (the executor does, after the fork), so its memory, which every program inherits, holds
nothing of any execution but the last result. A setup failure is reported as ``{"setup_error": ...}`` (an infra
error on the host), never as a program outcome; whatever happens once the program runs (an OOM kill included,
which can only pick a process of the execution's cgroup) is the program's outcome.

Example (what the host does, ``sandbox/warm.py``):
    $ bwrap ... --cap-add CAP_SYS_ADMIN ... python3 -I - 7 < zygote.py     # the socket is fd 7
"""

import ctypes
import fcntl
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

from posttrain.trusted.prelude import load_libc, set_dumpable

PRELOAD = ("json", "math", "re", "types", "collections", "itertools", "functools", "string", "traceback", "runpy",
           "threading", "atexit", "typing", "dataclasses")  # what harnesses and small programs import anyway
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
MS_REC, MS_PRIVATE = 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_CAP_AMBIENT = 24, 38, 22, 47
PR_CAP_AMBIENT_CLEAR_ALL, SECCOMP_MODE_FILTER = 4, 2
CAPABILITY_VERSION_3, LAST_CAP = 0x20080522, 63
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus")  # as bwrap's --proc leaves them
libc = load_libc()


class SetupError(Exception):
    """The sandbox could not be built: the host reports an infra error."""


def check(rc, what):
    if rc != 0:
        errno = ctypes.get_errno()
        raise SetupError("%s: %s" % (what, os.strerror(errno)))


def mount(source, target, fstype, flags, data=None):
    check(libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                     data.encode() if data else None), "mount %s on %s" % (fstype or source, target))


def tmpfs(target, size_inodes, mode):
    """A fresh tmpfs at ``target``; ``size_inodes``: [bytes, inodes] it may hold (empty files cost inodes only)."""
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "size=%d,nr_inodes=%d,mode=%o" % (*size_inodes, mode))


def write_tree(root, files, file_mode):
    for name, content in files:
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(content.encode("utf-8"))
        os.chmod(path, file_mode)


def loopback_up():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def build_namespaces(req):
    """In the executor: new namespaces, the fresh mounts of one execution, and its files."""
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    check(libc.sethostname(b"sandbox", 7), "sethostname")
    loopback_up()
    tmpfs("/work", req["mounts"]["/work"], 0o755)
    write_tree("/work", req["files"], 0o644)
    tmpfs("/tmp", req["mounts"]["/tmp"], 0o1777)
    tmpfs("/dev/shm", req["mounts"]["/dev/shm"], 0o1777)
    if req["trusted_files"]:
        tmpfs("/trusted", req["mounts"]["/trusted"], 0o755)
        write_tree("/trusted", req["trusted_files"], 0o444)
        for parent, _, _ in os.walk("/trusted"):
            os.chmod(parent, 0o555)
        os.chmod("/trusted", 0o111)
        mount("none", "/trusted", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def drop_privileges(seccomp_filter):
    """Every capability gone for good, no_new_privs, then the seccomp filter (last: it may deny what came before)."""
    for cap in range(LAST_CAP + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the kernel's last capability
    check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    header = struct.pack("Ii", CAPABILITY_VERSION_3, 0)
    data = ctypes.create_string_buffer(24)  # two (effective, permitted, inheritable) sets of zeros
    check(libc.capset(ctypes.c_char_p(header), data), "capset")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if seccomp_filter:
        program = ctypes.create_string_buffer(seccomp_filter, len(seccomp_filter))
        fprog = struct.pack("HxxxxxxQ", len(seccomp_filter) // 8, ctypes.addressof(program))
        check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0), "seccomp")


def set_limits(limits):
    """``limits``: resource name -> [soft, hard] (``sandbox.workspace.rlimits``)."""
    for name, (soft, hard) in limits.items():
        resource.setrlimit(getattr(resource, name), (soft, hard))


def join_cgroup(cgroup_fds):
    """Move this process into the execution's cgroup: "0" (ourselves) to each ``cgroup.procs`` the host opened."""
    for fd in cgroup_fds:
        try:
            os.write(fd, b"0")
        except OSError as error:
            raise SetupError("join the execution's cgroup: %s" % error.strerror)
        os.close(fd)


def become_program(req, stdio, cgroup_fds, error_w, seccomp_filter):
    """In the program (pid 1 of the new pid namespace): its cgroup, /proc, stdio, limits, privileges; then run it."""
    join_cgroup(cgroup_fds)  # first: what it charges from here on is the execution's, never the slot's
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # over the zygote's, which is out of reach
    for name in PROC_READ_ONLY:
        path = "/proc/" + name
        if os.path.exists(path):
            mount(path, path, None, MS_BIND)
            mount("none", path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.chdir("/work")
    os.setsid()
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
    os.closerange(3, error_w)
    os.closerange(error_w + 1, 1 << 16)
    set_dumpable(libc, True)  # as a fresh process is (the zygote is not); also makes /proc/self ours
    with open("/proc/self/oom_score_adj", "w") as handle:
        handle.write("0")  # the zygote is protected from the OOM killer; the program is not
    os.umask(0o022)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a fresh interpreter's default for exec'ed programs
    set_limits(req["rlimits"])
    drop_privileges(seccomp_filter)
    os.environ.clear()
    os.environ.update(req["env"])
    argv = req["argv"]
    # trusted files must not sit in the memory of a program that can read its own: those runs are exec'ed
    script = None if req["trusted_files"] else in_process_script(argv, req["python"])
    if script is None:
        exec_program(argv, req["env"])  # error_w is close-on-exec: EOF tells the executor it started
    os.close(error_w)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as the interpreter sets it for Python code
    run_python(script, argv, isolated="-I" in argv[1:argv.index(script)])


def exec_program(argv, env):
    """``execvpe``, or exit 127 (not found) / 126 (not executable) with a message, as a shell would."""
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as error:
        os.write(2, ("%s: %s\n" % (argv[0], error.strerror)).encode("utf-8", "replace"))
        os._exit(127 if isinstance(error, FileNotFoundError) else 126)


def in_process_script(argv, python):
    """The script of ``python3 [-I] script.py args...`` (run here, in-process), else None (exec'ed)."""
    if not argv or argv[0] != python:
        return None
    i = 1
    while i < len(argv) and argv[i] == "-I":
        i += 1
    if i < len(argv) and not argv[i].startswith("-"):
        return argv[i]
    return None


def run_python(script, argv, isolated):
    """Run ``script`` as ``__main__`` the way ``python3 [-I] script`` would, then exit with its status."""
    import atexit
    import runpy

    sys.argv = argv[argv.index(script):]
    if not isolated:
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as error:
        code = exit_status(error.code)
    except BaseException:  # noqa: B036 - what the interpreter does with an uncaught exception
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: B036
        code = code or 120
    os._exit(code)


def exit_status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except BaseException:  # noqa: B036
        pass
    return 1


def execute(req, stdio, cgroup_fds, seccomp_filter):
    """The executor: build the namespaces, start the program, wait for it until the deadline; returns the result."""
    result = {"exit_code": None, "timed_out": False, "setup_error": ""}
    try:
        build_namespaces(req)
        error_r, error_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(error_r)
                become_program(req, stdio, cgroup_fds, error_w, seccomp_filter)
            except BaseException as error:  # noqa: B036 - reported, then this process ends
                os.write(error_w, ("%s: %s" % (type(error).__name__, error)).encode()[:2000])
            os._exit(127)
        os.close(error_w)
        for fd in (*stdio, *cgroup_fds):
            os.close(fd)
        failure = b"".join(iter(lambda: os.read(error_r, 4096), b""))
        started = time.monotonic()
        if failure:
            os.waitpid(pid, 0)
            result["setup_error"] = failure.decode("utf-8", "replace")
        else:
            result["exit_code"], result["timed_out"] = wait(pid, req["timeout_s"])
        result["run_ms"] = (time.monotonic() - started) * 1000
    except BaseException as error:  # noqa: B036
        result["setup_error"] = "%s: %s" % (type(error).__name__, error)
    return result


def wait(pid, timeout_s):
    """(exit code, timed out) of the program; past ``timeout_s`` it is SIGKILLed (and its pid namespace with it)."""
    pidfd = os.pidfd_open(pid)
    try:
        timed_out = not select.select([pidfd], [], [], timeout_s)[0]
        if timed_out:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    if timed_out:
        return None, True
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status), False


def serve():
    for name in PRELOAD:
        __import__(name)
    set_dumpable(libc, False)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sock = socket.socket(fileno=int(sys.argv[1]))
    config_msg, fds, _, _ = socket.recv_fds(sock, 64, 1)
    with os.fdopen(fds[0], "rb") as handle:
        seccomp_filter = bytes.fromhex(json.load(handle)["seccomp_hex"])
    sock.send(b'{"ready": true}')
    while True:
        message, fds, _, _ = socket.recv_fds(sock, 64, 16)
        if not message:
            return  # the host closed the slot
        result_r, result_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                os.close(result_r)
                # read here, never in the zygote: its heap (which every later fork inherits) holds no request
                with os.fdopen(fds[0], "rb") as handle:
                    req = json.load(handle)
                os.write(result_w, json.dumps(execute(req, fds[1:4], fds[4:], seccomp_filter)).encode())
            finally:
                os._exit(0)
        os.close(result_w)
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)  # the executor is gone, and with it its namespaces and tmpfs mounts
        with os.fdopen(result_r, "rb") as handle:
            result = handle.read(1 << 16)  # a few hundred bytes, written whole before the executor exited
        if status != 0 or not result:
            result = json.dumps({"exit_code": None, "timed_out": False,
                                 "setup_error": "the executor died (wait status %d)" % status}).encode()
        sock.send(result)


if __name__ == "__main__":
    serve()
