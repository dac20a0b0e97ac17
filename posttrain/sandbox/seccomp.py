"""A seccomp deny-list for the bwrap backend, compiled to classic BPF by hand (no libseccomp needed).

Docker applies its default seccomp profile; bwrap applies none unless given one. This filter closes the kernel
interfaces an untrusted program has no business with and that have a history of privilege escalations: keyrings,
eBPF, perf events, userfaultfd, io_uring, module and kexec loading, every mount API, namespace creation and
joining, file handles, swap, reboot, clock setting, and the terminal-injection ioctls ``TIOCSTI``/``TIOCLINUX``.
Denied calls fail with ``EPERM``; everything else is allowed. Foreign ABIs (i386 and x32 on x86-64) are refused
whole, so a denied call cannot be reached through another syscall table.

Only x86-64 and aarch64 are known; on another machine ``program()`` returns None and bwrap runs without a filter.

Example:
    >>> import platform
    >>> prog = program("x86_64")
    >>> len(prog) % 8, len(prog) > 100
    (0, True)
    >>> program("sparc") is None
    True
"""

from __future__ import annotations

import errno
import platform
import struct

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
NR_OFFSET, ARCH_OFFSET, ARG1_LOW_OFFSET = 0, 4, 16 + 8
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x06
RET_ALLOW, RET_KILL_PROCESS = 0x7FFF0000, 0x80000000
RET_ERRNO = 0x00050000
TIOCSTI, TIOCLINUX = 0x5412, 0x541C
X32_SYSCALL_BIT = 0x40000000

DENIED = ("keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
          "io_uring_enter", "io_uring_register", "kexec_load", "kexec_file_load", "init_module", "finit_module",
          "delete_module", "mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick",
          "move_mount", "open_tree", "mount_setattr", "swapon", "swapoff", "reboot", "acct", "syslog", "unshare",
          "setns", "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "quotactl", "vhangup",
          "clock_settime", "settimeofday", "adjtimex", "clock_adjtime")

# (AUDIT_ARCH value, syscall numbers); numbers from asm/unistd_64.h and asm-generic/unistd.h
ARCHES = {
    "x86_64": (0xC000003E, {
        "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
        "mount": 165, "umount2": 166, "pivot_root": 155, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "move_mount": 429, "open_tree": 428, "mount_setattr": 442, "swapon": 167, "swapoff": 168,
        "reboot": 169, "acct": 163, "syslog": 103, "unshare": 272, "setns": 308, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "lookup_dcookie": 212, "quotactl": 179, "vhangup": 153, "clock_settime": 227,
        "settimeofday": 164, "adjtimex": 159, "clock_adjtime": 305, "ioctl": 16}),
    "aarch64": (0xC00000B7, {
        "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
        "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "mount": 40, "umount2": 39, "pivot_root": 41, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "move_mount": 429, "open_tree": 428, "mount_setattr": 442, "swapon": 224, "swapoff": 225,
        "reboot": 142, "acct": 89, "syslog": 116, "unshare": 97, "setns": 268, "open_by_handle_at": 265,
        "name_to_handle_at": 264, "lookup_dcookie": 18, "quotactl": 60, "vhangup": 58, "clock_settime": 112,
        "settimeofday": 170, "adjtimex": 171, "clock_adjtime": 266, "ioctl": 29}),
}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The BPF program (``struct sock_filter[]`` bytes) for ``machine`` (default: this one), or None if unknown."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, numbers = arch
    deny = RET_ERRNO | errno.EPERM
    denied = sorted({numbers[name] for name in DENIED})
    insns = [_insn(BPF_LD_W_ABS, 0, 0, ARCH_OFFSET),
             _insn(BPF_JEQ_K, 1, 0, audit_arch),
             _insn(BPF_RET_K, 0, 0, RET_KILL_PROCESS),  # another ABI: nothing of it is allowed
             _insn(BPF_LD_W_ABS, 0, 0, NR_OFFSET)]
    if audit_arch == ARCHES["x86_64"][0]:
        insns += [_insn(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT), _insn(BPF_RET_K, 0, 0, deny)]
    # ioctl: deny the two terminal-injection requests, allow every other request
    insns += [_insn(BPF_JEQ_K, 0, 5, numbers["ioctl"]),
              _insn(BPF_LD_W_ABS, 0, 0, ARG1_LOW_OFFSET),
              _insn(BPF_JEQ_K, 1, 0, TIOCSTI),
              _insn(BPF_JEQ_K, 0, 1, TIOCLINUX),
              _insn(BPF_RET_K, 0, 0, deny),
              _insn(BPF_RET_K, 0, 0, RET_ALLOW)]
    # one comparison per denied number: a match jumps to the final "deny" instruction
    for i, nr in enumerate(denied):
        to_deny = len(denied) - i  # instructions left after this one, up to and including the allow; deny follows
        insns.append(_insn(BPF_JEQ_K, to_deny, 0, nr))
    insns += [_insn(BPF_RET_K, 0, 0, RET_ALLOW), _insn(BPF_RET_K, 0, 0, deny)]
    return b"".join(insns)
