"""The one seccomp policy of both sandbox backends: a maintained allow-list, narrowed for programs without capabilities.

Source: the containers project's default profile (Docker's JSON format), read at run time from
``/usr/share/containers/seccomp.json``, which the Debian package ``golang-github-containers-common`` installs (podman,
buildah and CRI-O apply the same file). Its allow-list names every syscall a container may make; a syscall it does
not name (a new one included) fails with ``ENOSYS``, as on a kernel that lacks it, so libc falls back; the named but
dangerous ones fail with ``EPERM``. Rules that depend on a capability are resolved for a program that has none
(Docker's ``cap_drop=["ALL"]``; bwrap drops them all): those granted by a capability are dropped, those granted to
programs lacking one are kept.

Our additions narrow it further; nothing the profile denies is allowed:

* denied by name (``EPERM``): ``DENIED``, the kernel interfaces a grader never needs that have a history of privilege
  escalations: io_uring, keyrings, eBPF, perf events, userfaultfd, module and kexec loading, every mount API,
  ``unshare`` and ``setns``, file handles, swap, reboot, ``acct``, ``syslog``, quotas, and setting the clock; and
  taking another process's file descriptors or memory (``pidfd_getfd``, ``process_vm_readv``/``writev``), which
  Docker grants only with ``CAP_SYS_PTRACE``, and ``ptrace`` itself: every sandboxed process has the same uid, so a
  program could otherwise trace the trusted tests that run after it (no env asks for a debugger; an env that does
  would need a policy of its own). The profile allows some of these to rootless containers, whose user namespace
  makes the kernel check them; we want them closed whatever namespace a program finds itself in;
* on the caller only (``EPERM`` otherwise): ``prlimit64`` with pid 0 and ``setpriority(PRIO_PROCESS, 0)``
  (``ONLY_SELF``). With the same uid a program could lower the limits or the priority of a trusted process (the
  ``workspace_tests`` driver) and so of every test it starts; ``setrlimit``, ``nice`` and ``prlimit COMMAND`` pass
  pid 0 and keep working. The whole 64-bit argument is compared: junk in the high bits is refused, never let by;
* ``clone`` with a namespace flag (``EPERM``) and ``clone3`` (``ENOSYS``; its flags sit in memory a filter cannot
  read, so libc falls back to ``clone``): Docker's own rule for containers without ``CAP_SYS_ADMIN``;
* by argument (``EPERM``): the terminal-injection ioctls ``TIOCSTI`` and ``TIOCLINUX``, and ``socket(AF_VSOCK)``
  (the host's hypervisor sockets). The kernel reads both arguments as 32-bit ``int``, so only their low 32 bits are
  compared: junk in the high bits does not slip past.

Foreign ABIs are refused: the profile lists x86-64 and aarch64 without their 32-bit sub-architectures, so a syscall
through the i386 or x32 table kills the process (SIGSYS) on both backends.

Compared with dockerd's built-in default (Debian's 20.10) for the same container, this policy also denies io_uring,
``adjtimex``/``clock_adjtime``, ``io_pgetevents``, ``vmsplice``, ``futex_waitv`` and the argument rules above, and
allows what the containers profile allows and Docker gates on ``CAP_SYS_NICE`` or lacks: the NUMA calls (``mbind``,
``get_mempolicy``, ``set_mempolicy``) and memory protection keys (``pkey_*``), all confined to the caller's memory.

``profile()`` is the policy as a Docker profile, ``docker_security_opt()`` the Docker backend's ``security_opt``
entry for it, and ``program()`` the same policy compiled by libseccomp (the ``pyseccomp`` bindings) to the classic
BPF that ``bwrap --seccomp`` loads. Only the errno of a syscall the profile does not name can differ between them:
Docker 20.10 (Debian 12's) ignores ``defaultErrnoRet`` and answers ``EPERM``, except for syscalls newer than any the
profile names, for which runc answers ``ENOSYS`` as bwrap does (on x86-64 that leaves nine obsolete calls the kernel
no longer implements, such as ``_sysctl`` and ``tuxcall``).

Example:
    >>> rules = profile()["syscalls"]
    >>> allowed = {name for rule in rules if rule["action"] == "SCMP_ACT_ALLOW" for name in rule["names"]}
    >>> "read" in allowed, "io_uring_setup" in allowed, "mount" in allowed
    (True, False, False)
    >>> prog = program("x86_64")
    >>> len(prog) % 8, 100 < len(prog) // 8 < 4096
    (0, True)
    >>> program("sparc") is None
    True
"""

from __future__ import annotations

import errno
import functools
import json
import os
import platform
import tempfile
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable

PROFILE_PATH = Path("/usr/share/containers/seccomp.json")
PROFILE_PACKAGE = "golang-github-containers-common"

# machine (platform.machine()) -> (libseccomp arch name, Go arch name used by the profile's "arches" conditions)
MACHINES = {"x86_64": ("SCMP_ARCH_X86_64", "amd64"), "aarch64": ("SCMP_ARCH_AARCH64", "arm64")}

DENIED = ("io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key", "bpf",
          "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load", "init_module", "finit_module",
          "delete_module", "mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
          "open_tree", "mount_setattr", "swapon", "swapoff", "reboot", "acct", "syslog", "unshare", "setns",
          "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "quotactl", "quotactl_fd", "vhangup",
          "clock_settime", "settimeofday", "adjtimex", "clock_adjtime", "pidfd_getfd", "process_vm_readv",
          "process_vm_writev", "ptrace")
NOT_IMPLEMENTED = ("clone3",)  # ENOSYS: libc falls back to clone(2), whose flags the filter can read
TIOCSTI, TIOCLINUX, AF_VSOCK = 0x5412, 0x541C, 40
# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
CLONE_NAMESPACES = 0x7E020000
LOW32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Values:
    """A call is denied when the low 32 bits of argument ``index`` are one of ``values``."""

    index: int
    values: tuple[int, ...]

    def denied(self) -> list[tuple[int, int]]:
        return [(LOW32, v) for v in self.values]

    def allowed(self, also_denied: Iterable[int] = ()) -> list[tuple[int, int]]:
        return complement({*self.values, *(v & LOW32 for v in also_denied)})


@dataclass(frozen=True)
class Bits:
    """A call is denied when argument ``index`` has any of ``mask``'s bits set."""

    index: int
    mask: int

    def denied(self) -> list[tuple[int, int]]:
        return [(1 << i, 1 << i) for i in range(64) if self.mask >> i & 1]

    def allowed(self, also_denied: Iterable[int] = ()) -> list[tuple[int, int]]:
        if tuple(also_denied):
            raise ValueError("a profile rule compares a flags argument with NE; nothing to narrow it with")
        return [(self.mask, 0)]


DENIED_ARGS = {"ioctl": Values(1, (TIOCSTI, TIOCLINUX)), "socket": Values(0, (AF_VSOCK,)),
               "clone": Bits(0, CLONE_NAMESPACES)}
# allowed only when every one of these arguments is 0: the caller itself (prlimit64's pid; setpriority's which is
# PRIO_PROCESS and who is 0)
ONLY_SELF = {"prlimit64": (0,), "setpriority": (0, 1)}


def complement(values: set[int], width: int = 32) -> list[tuple[int, int]]:
    """Disjoint ``(mask, value)`` pairs whose matches (``x & mask == value``) are exactly the numbers not in ``values``.

    libseccomp has no "masked not-equal": a denied value is carved out of an allow rule by walking the binary trie of
    the denied values and allowing every branch that leaves it (at most ``width`` pairs per value).

    >>> complement({0b10}, width=2)
    [(2, 0), (3, 3)]
    """
    pieces: list[tuple[int, int]] = []

    def walk(prefix: int, depth: int, members: list[int]) -> None:
        if depth == width:
            return
        bit = 1 << (width - 1 - depth)
        mask = ((1 << width) - 1) ^ (bit - 1)  # the top depth + 1 bits
        for branch in (0, bit):
            inside = [v for v in members if v & bit == branch]
            if inside:
                walk(prefix | branch, depth + 1, inside)
            else:
                pieces.append((mask, prefix | branch))

    walk(0, 0, sorted(values))
    return pieces


def masked(index: int, mask: int, value: int) -> dict:
    return {"index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}


def compared(index: int, op: str, value: int) -> dict:
    return {"index": index, "value": value, "valueTwo": 0, "op": op}


def only_self(indexes: tuple[int, ...]) -> tuple[list[dict], list[list[dict]]]:
    """(the allowed arguments, the disjoint denied ones) of a call allowed only when every argument in ``indexes``
    is 0: denied when the first is not, or the first is and the second is not, ...

    >>> allowed, denied = only_self((0, 1))
    >>> [a["op"] for a in allowed], [[a["op"] for a in d] for d in denied]
    (['SCMP_CMP_EQ', 'SCMP_CMP_EQ'], [['SCMP_CMP_NE'], ['SCMP_CMP_EQ', 'SCMP_CMP_NE']])
    """
    allowed = [compared(i, "SCMP_CMP_EQ", 0) for i in indexes]
    return allowed, [[*allowed[:k], compared(i, "SCMP_CMP_NE", 0)] for k, i in enumerate(indexes)]


def rule(names: list[str], action: str, args: list[dict] | None = None, errno_ret: int | None = None,
         comment: str = "", includes: dict | None = None, excludes: dict | None = None) -> dict:
    out = {"names": names, "action": action, "args": args or [], "comment": comment, "includes": includes or {},
           "excludes": excludes or {}}
    if errno_ret is not None:
        out["errnoRet"] = errno_ret
    return out


def without_caps(source: list[dict]) -> list[dict]:
    """The profile's rules as they apply to a program without capabilities (the conditions on caps resolved)."""
    out = []
    for r in source:
        if (r.get("includes") or {}).get("caps"):
            continue  # granted by a capability we do not have
        includes = {k: v for k, v in (r.get("includes") or {}).items() if k != "caps" and v}
        excludes = {k: v for k, v in (r.get("excludes") or {}).items() if k != "caps" and v}
        out.append(rule(list(r["names"]), r["action"], r.get("args") or [], r.get("errnoRet"), r.get("comment", ""),
                        includes, excludes))
    return out


def narrow(r: dict, name: str, deny: Values | Bits) -> list[dict]:
    """Allow rule ``r`` for the one syscall ``name``, split so that it no longer matches what ``deny`` denies."""
    mine = [a for a in r["args"] if a["index"] == deny.index]
    others = [a for a in r["args"] if a["index"] != deny.index]
    if any(a["op"] not in ("SCMP_CMP_EQ", "SCMP_CMP_NE") for a in mine):
        raise ValueError(f"{name}: cannot narrow a rule comparing argument {deny.index} with {mine}")
    if any(a["op"] == "SCMP_CMP_EQ" for a in mine):  # one value: kept unless denied
        value = next(a["value"] for a in mine if a["op"] == "SCMP_CMP_EQ")
        ok = any(value & mask == v for mask, v in deny.allowed())
        return [rule([name], r["action"], r["args"], None, r["comment"], r["includes"], r["excludes"])] if ok else []
    pieces = deny.allowed(a["value"] for a in mine)  # "!= v" folds into the denied set (its high bits then count)
    return [rule([name], r["action"], [*others, masked(deny.index, mask, v)], None, r["comment"], r["includes"],
                 r["excludes"]) for mask, v in pieces]


@functools.cache
def _profile_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: the seccomp profile of both sandbox backends is missing; install the Debian "
                                f"package {PROFILE_PACKAGE} (make setup does)") from None


def profile() -> dict:
    """The policy as a Docker seccomp profile (a fresh dict): the maintained one without caps, plus our additions."""
    source = json.loads(_profile_text(PROFILE_PATH))
    closed = set(DENIED) | set(NOT_IMPLEMENTED)
    syscalls = []
    for r in without_caps(source["syscalls"]):
        names = [n for n in r["names"] if n not in closed]
        if r["action"] != "SCMP_ACT_ALLOW":
            if names:
                syscalls.append({**r, "names": names})
            continue
        plain = [n for n in names if n not in DENIED_ARGS and n not in ONLY_SELF]
        if plain:
            syscalls.append({**r, "names": plain})
        for name in names:
            if name in DENIED_ARGS:
                syscalls += narrow(r, name, DENIED_ARGS[name])
            elif name in ONLY_SELF:
                if r["args"]:
                    raise ValueError(f"{name}: cannot narrow a rule that already compares arguments: {r['args']}")
                syscalls.append(rule([name], r["action"], only_self(ONLY_SELF[name])[0], None, r["comment"],
                                     r["includes"], r["excludes"]))
    syscalls.append(rule(sorted(DENIED), "SCMP_ACT_ERRNO", errno_ret=errno.EPERM,
                         comment="posttrain: kernel interfaces no grader needs"))
    syscalls.append(rule(list(NOT_IMPLEMENTED), "SCMP_ACT_ERRNO", errno_ret=errno.ENOSYS,
                         comment="posttrain: as Docker without CAP_SYS_ADMIN; libc falls back to clone"))
    for name, deny in DENIED_ARGS.items():
        syscalls += [rule([name], "SCMP_ACT_ERRNO", [masked(deny.index, mask, v)], errno.EPERM,
                          f"posttrain: {name} denied by argument {deny.index}") for mask, v in deny.denied()]
    for name, indexes in ONLY_SELF.items():
        syscalls += [rule([name], "SCMP_ACT_ERRNO", args, errno.EPERM, f"posttrain: {name} on the caller only")
                     for args in only_self(indexes)[1]]
    return {"defaultAction": source["defaultAction"], "defaultErrnoRet": source.get("defaultErrnoRet", errno.ENOSYS),
            "archMap": [{"architecture": arch, "subArchitectures": []} for arch, _ in MACHINES.values()],
            "syscalls": syscalls}


def docker_security_opt() -> str:
    """The ``security_opt`` entry that makes the Docker backend enforce this policy instead of dockerd's default."""
    return "seccomp=" + json.dumps(profile(), separators=(",", ":"))


def _kernel_at_least(version: str) -> bool:
    want = tuple(int(p) for p in version.split(".")[:2])
    have = tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in os.uname().release.split(".")[:2])
    return have >= want


def _applies(r: dict, go_arch: str) -> bool:
    """Docker's test of a rule's remaining conditions (caps are already resolved)."""
    inc, exc = r["includes"], r["excludes"]
    if go_arch in exc.get("arches", ()) or ("minKernel" in exc and _kernel_at_least(exc["minKernel"])):
        return False
    if inc.get("arches") and go_arch not in inc["arches"]:
        return False
    return "minKernel" not in inc or _kernel_at_least(inc["minKernel"])


def _action(seccomp, r: dict) -> int:
    kind = r["action"]
    if kind == "SCMP_ACT_ALLOW":
        return seccomp.ALLOW
    if kind == "SCMP_ACT_ERRNO":
        return seccomp.ERRNO(r.get("errnoRet", errno.EPERM))
    raise ValueError(f"unsupported seccomp action {kind}")


OPS = {"SCMP_CMP_NE": "NE", "SCMP_CMP_LT": "LT", "SCMP_CMP_LE": "LE", "SCMP_CMP_EQ": "EQ", "SCMP_CMP_GE": "GE",
       "SCMP_CMP_GT": "GT", "SCMP_CMP_MASKED_EQ": "MASKED_EQ"}


@functools.cache
def program(machine: str | None = None) -> bytes | None:
    """The BPF program (``struct sock_filter[]`` bytes) for ``machine`` (default: this one), or None if unknown."""
    arch = MACHINES.get(machine or platform.machine())
    if arch is None:
        return None
    import pyseccomp as seccomp  # loads libseccomp.so.2

    scmp_arch, go_arch = arch
    policy = profile()
    default = _action(seccomp, {"action": policy["defaultAction"], "errnoRet": policy["defaultErrnoRet"]})
    filt = seccomp.SyscallFilter(default)
    filt.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)
    filt.set_attr(seccomp.Attr.CTL_OPTIMIZE, 2)  # a binary search over syscall numbers
    target = getattr(seccomp.Arch, scmp_arch.removeprefix("SCMP_ARCH_"))
    if target != seccomp.system_arch():
        filt.add_arch(target)
        filt.remove_arch(seccomp.Arch.NATIVE)
    for r in policy["syscalls"]:
        action = _action(seccomp, r)
        if action == default or not _applies(r, go_arch):
            continue  # libseccomp refuses a rule that repeats the default action
        args = [seccomp.Arg(a["index"], getattr(seccomp, OPS[a["op"]]), a["value"], a.get("valueTwo", 0))
                for a in r["args"]]
        for name in r["names"]:
            # a name libseccomp does not know (newer than it) keeps the default action, as runc does
            if seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) != -1:
                filt.add_rule(action, name, *args)
    with tempfile.TemporaryFile() as out:
        filt.export_bpf(out)
        out.seek(0)
        return out.read()
