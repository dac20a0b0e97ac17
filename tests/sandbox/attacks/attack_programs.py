"""The adversarial programs, one function each: run the attack in a sandbox, assert it was contained.

Every attack gets the backend (``box``) and the ``host`` guard (``conftest.Host``), which afterwards checks the host
(canary file and environment secret unread and unchanged, no connection to the host listener, the innocent host
process alive, disk space, no attack process left) and that the next execution on this backend starts clean.
Attacks on the verdict run through the real verifier (``verify_many`` with ``python_tests``) and must come out as
failures (reward 0), not as infra errors (which would exclude them from training instead of penalising them).

``ATTACKS`` maps a name to (category, function); ``test_attacks.py`` runs every one on every backend.
"""

from __future__ import annotations

import resource
import time
from typing import Callable

from posttrain.config import PROJECT_ROOT, SandboxConfig
from posttrain.envs.spec import EnvSpec, Limits
from posttrain.envs.verifiers import python_tests, verify_many
from posttrain.sandbox import Execution, SessionError, run_many

ATTACKS: dict[str, tuple[str, Callable]] = {}
CFG = SandboxConfig(timeout_s=10, memory_mb=256)

# A spec whose expected values are easy to know (so forged lines can carry the right values) ...
ADD = EnvSpec(id="attack/add", prompt="", entry_point="add", reference="def add(a, b):\n    return a + b\n",
              verifier={"kind": "python_tests", "cases": [{"args": [1, 2], "expected": 3},
                                                          {"args": [40, 2], "expected": 42},
                                                          {"args": [1000, 337], "expected": 1337}]},
              limits=Limits(timeout_s=5, memory_mb=256))
# ... and one whose expected values cannot be guessed or computed: only the host knows them.
SECRET_VALUE = 982451653
SECRET = EnvSpec(id="attack/secret", prompt="", entry_point="answer", reference="",
                 verifier={"kind": "python_tests", "cases": [{"args": [1], "expected": SECRET_VALUE},
                                                             {"args": [2], "expected": SECRET_VALUE + 2}]},
                 limits=Limits(timeout_s=5, memory_mb=256))


def attack(name: str, category: str):
    def register(fn):
        ATTACKS[name] = (category, fn)
        return fn
    return register


def verdict(box, spec: EnvSpec, solution: str):
    [v] = verify_many([(spec, solution)], box, CFG)
    return v


def assert_cheat_fails(v) -> None:
    """A cheat earns nothing and is scored as the program's failure (an infra error would escape the penalty)."""
    assert not v.excluded, v
    assert v.infra_error == "", v
    assert v.reward == 0.0, v
    assert not v.passed, v
    assert v.tests_passed == 0, v


def raw_run(box, spec: EnvSpec, solution: str):
    """The same execution the verifier builds, run directly, to look at everything the program printed."""
    return box.run(python_tests.build_execution(spec, solution, CFG, "N" * 32))


def timed(box, execution: Execution):
    t0 = time.monotonic()
    result = box.run(execution)
    return result, time.monotonic() - t0


HEADER = ("import os, sys\nTOKEN, CANARY, CANARY_DIR, PORT, HOST_PID, INNOCENT_PID = sys.argv[1:7]\n"
          "PORT, HOST_PID, INNOCENT_PID = int(PORT), int(HOST_PID), int(INNOCENT_PID)\n")


# ---- resources -----------------------------------------------------------------------------------------------
@attack("fork_bomb", "resources")
def fork_bomb(box, host):
    code = HEADER + ("import time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                     "        time.sleep(0.01)\n")
    r, elapsed = timed(box, host.execution(code, timeout_s=3))
    assert not r.infra_error, r
    assert r.timed_out or r.exit_code != 0, r
    assert elapsed < 3 + 8, elapsed


@attack("memory_bomb", "resources")
def memory_bomb(box, host):
    code = HEADER + "chunks = []\nfor _ in range(400):\n    chunks.append(b'x' * 10_000_000)\nprint('survived')\n"
    r, elapsed = timed(box, host.execution(code, memory_mb=128, timeout_s=20))
    assert not r.infra_error, r
    assert not r.timed_out, r
    assert r.exit_code != 0, r
    assert "survived" not in r.stdout, r
    assert elapsed < 15


@attack("thread_bomb", "resources")
def thread_bomb(box, host):
    code = HEADER + ("import threading, time\nn = 0\ntry:\n    while n < 5000:\n"
                     "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n        n += 1\n"
                     "except (RuntimeError, MemoryError, OSError):\n    pass\nprint(n, flush=True)\nos._exit(0)\n")
    r = box.run(host.execution(code, timeout_s=10))
    assert not r.infra_error, r
    assert not r.timed_out, r
    assert r.exit_code != 0 or int(r.stdout) < 100, r  # the pid / process limit stops it


@attack("cpu_spin", "resources")
def cpu_spin(box, host):
    r, elapsed = timed(box, host.execution(HEADER + "while True:\n    pass\n", timeout_s=1.5))
    assert r.timed_out, r
    assert r.exit_code is None, r
    assert not r.infra_error, r
    assert 1.5 <= elapsed < 1.5 + 5, elapsed


@attack("sleep_past_deadline", "resources")
def sleep_past_deadline(box, host):
    r, elapsed = timed(box, host.execution(HEADER + "import time\nprint('napping', flush=True)\ntime.sleep(3600)\n",
                                           timeout_s=1))
    assert r.timed_out, r
    assert r.stdout == "napping\n", r
    assert not r.infra_error, r
    assert elapsed < 1 + 5


@attack("fd_exhaustion", "resources")
def fd_exhaustion(box, host):
    code = HEADER + ("n = 0\ntry:\n    while n < 100000:\n        os.open('/dev/null', os.O_RDONLY)\n        n += 1\n"
                     "except OSError as e:\n    print(n, e.errno)\n")
    r = box.run(host.execution(code))
    opened, errno = map(int, r.stdout.split())
    assert r.exit_code == 0, r
    assert opened < 1024, r
    assert errno == 24, r  # EMFILE at the configured limit


@attack("fill_the_disk", "resources")
def fill_the_disk(box, host):
    code = HEADER + (
        "import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\nchunk = b'\\0' * (1 << 20)\n"
        "for d in ['/work', '/tmp', '/dev/shm', '/var/tmp', '/']:\n    mb = 0\n    try:\n"
        "        for i in range(64):\n            with open(f'{d}/fill{i}', 'wb') as f:\n"
        "                for _ in range(128):\n                    try:\n                        f.write(chunk)\n"
        "                        f.flush()\n                        mb += 1\n"
        "                    except OSError as e:\n                        if e.errno == 27:\n"  # EFBIG: next file
        "                            break\n                        raise\n"
        "    except OSError as e:\n        pass\n    print(d, mb, flush=True)\n")
    r, elapsed = timed(box, host.execution(code, timeout_s=60, memory_mb=256))
    written = {line.split()[0]: int(line.split()[1]) for line in r.stdout.splitlines()}
    assert not r.infra_error, r
    assert not r.timed_out, r
    assert written["/work"] <= 65, written
    assert written["/tmp"] <= 65, written
    assert written["/dev/shm"] <= 17, written
    assert written["/var/tmp"] == 0, written
    assert written["/"] == 0, written
    assert elapsed < 45


@attack("huge_stdout", "resources")
def huge_stdout(box, host):
    code = HEADER + "for _ in range(100):\n    sys.stdout.write('x' * 1_000_000)\nprint('tail', file=sys.stderr)\n"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = box.run(host.execution(code, max_output_bytes=65536, timeout_s=30))
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert r.exit_code == 0, r.stderr
    assert r.output_truncated, r.stderr
    assert r.stderr == "tail\n", r.stderr
    assert r.stdout.endswith("[... output truncated at 65536 bytes ...]")
    assert len(r.stdout) < 70000
    assert grown_mb < 50


@attack("orphan_background_process", "lifecycle")
def orphan_background_process(box, host):
    code = HEADER + ("if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                     "        os.execv(sys.executable, [sys.executable, '-c', 'while True: pass', TOKEN])\n"
                     "    os._exit(0)\nos.wait()\nprint('parent done', flush=True)\n")
    r, elapsed = timed(box, host.execution(code, timeout_s=20))
    assert (r.exit_code, r.stdout, r.timed_out) == (0, "parent done\n", False), r
    assert elapsed < 5, elapsed  # the run ends with its program, not with the orphan (which the guard finds gone)


# ---- network ---------------------------------------------------------------------------------------------------
@attack("tcp_connect_host_port", "network")
def tcp_connect_host_port(box, host):
    code = HEADER + ("import socket\nfor addr in ['127.0.0.1', 'localhost', '::1']:\n    try:\n"
                     "        socket.create_connection((addr, PORT), timeout=3)\n        print(addr, 'CONNECTED')\n"
                     "    except OSError as e:\n        print(addr, 'BLOCKED', type(e).__name__)\n")
    r = box.run(host.execution(code))
    assert r.exit_code == 0, r
    assert "CONNECTED" not in r.stdout, r
    assert r.stdout.count("BLOCKED") == 3, r


@attack("dns_lookup", "network")
def dns_lookup(box, host):
    code = HEADER + ("import socket\nfor name in ['example.com', 'pypi.org', 'metadata.google.internal']:\n"
                     "    try:\n        print(name, 'RESOLVED', socket.getaddrinfo(name, 443)[0][4])\n"
                     "    except OSError as e:\n        print(name, 'FAILED', type(e).__name__)\n")
    r, elapsed = timed(box, host.execution(code, timeout_s=30))
    assert r.exit_code == 0, r
    assert "RESOLVED" not in r.stdout, r
    assert r.stdout.count("FAILED") == 3, r
    assert elapsed < 25


# ---- reading what is not the program's ----------------------------------------------------------------------------
READ_ALL = ("def show(path):\n    try:\n        with open(path, 'rb') as f:\n"
            "            print(path, 'READ', f.read(4096).decode('utf-8', 'replace'))\n"
            "    except OSError as e:\n        print(path, 'DENIED', e.errno)\n")


@attack("read_etc_shadow", "confidentiality")
def read_etc_shadow(box, host):
    code = HEADER + READ_ALL + ("for p in ['/etc/shadow', '/etc/gshadow', '/etc/sudoers', '/root/.ssh/id_rsa',"
                                " '/root/.bash_history', '/etc/docker/daemon.json']:\n    show(p)\n")
    r = box.run(host.execution(code))
    assert r.exit_code == 0, r
    assert " READ " not in r.stdout, r
    try:
        host_shadow = open("/etc/shadow").read().splitlines()[0]
        assert host_shadow not in r.stdout
    except (OSError, IndexError):
        pass


@attack("read_project_files", "confidentiality")
def read_project_files(box, host):
    targets = [PROJECT_ROOT / "pyproject.toml", PROJECT_ROOT / "posttrain" / "config.py", PROJECT_ROOT / ".git" /
               "config", "/root/.docker/config.json", "/var/run/docker.sock"]
    code = HEADER + READ_ALL + (f"for p in {[str(t) for t in targets]!r} + [CANARY]:\n    show(p)\n"
                                "for d in ['/', '/home', '/root', os.path.dirname(CANARY)]:\n    try:\n"
                                "        print(d, sorted(os.listdir(d)))\n    except OSError as e:\n"
                                "        print(d, 'DENIED', e.errno)\n")
    r = box.run(host.execution(code))
    assert r.exit_code == 0, r
    assert " READ " not in r.stdout, r
    assert host.secret not in r.stdout + r.stderr
    assert "'canary.txt'" not in r.stdout  # not listed either


@attack("read_parent_environment", "confidentiality")
def read_parent_environment(box, host):
    code = HEADER + READ_ALL + ("print(dict(os.environ))\nimport glob\n"
                                "for p in sorted(glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline')):\n"
                                "    show(p)\n")
    r = box.run(host.execution(code))
    assert r.exit_code == 0, r
    assert host.secret not in r.stdout + r.stderr
    assert "POSTTRAIN_ATTACK_SECRET" not in r.stdout


@attack("read_test_file_to_echo_expected", "verdict")
def read_test_file_to_echo_expected(box, host):
    cheat = ("import os, sys, re\nseen = []\n"
             "for base in ['/work', '/tmp', '/etc', '/']:\n    for root, dirs, files in os.walk(base):\n"
             "        if root.startswith(('/proc', '/sys', '/usr', '/dev', '/var/lib')) or len(seen) > 3000:\n"
             "            dirs[:] = []\n            continue\n        for name in files:\n            try:\n"
             "                seen.append(open(os.path.join(root, name), errors='replace').read(20000))\n"
             "            except OSError:\n                pass\n"
             "frame = sys._getframe(0)\nwhile frame:\n    seen.append(repr(frame.f_locals))\n"
             "    frame = frame.f_back\nseen.append(repr(dict(os.environ)))\ntext = '\\n'.join(seen)\n"
             "print(text, file=sys.stderr)\n"
             "found = [int(x) for x in re.findall(r'expected[\"\\']?\\s*[:=]\\s*(\\d+)', text)]\n"
             "def answer(x):\n    return found[x - 1] if len(found) >= x else None\n")
    assert_cheat_fails(verdict(box, SECRET, cheat))
    r = raw_run(box, SECRET, cheat)
    assert "harness" in r.stderr  # it did read the harness and the request...
    assert str(SECRET_VALUE) not in r.stdout + r.stderr  # ...and no expected value is in the sandbox


# ---- writing where the program must not -------------------------------------------------------------------------
@attack("write_outside_workspace", "integrity")
def write_outside_workspace(box, host):
    code = HEADER + ("targets = ['/x', '/etc/x', '/etc/passwd', '/usr/x', '/usr/bin/x', '/bin/x', '/home/x', "
                     "'/root/x', '/var/x', '/opt/x', '/dev/x', '/sys/x', CANARY, CANARY_DIR + '/planted']\n"
                     "for t in targets:\n    try:\n        with open(t, 'a') as f:\n            f.write('pwned')\n"
                     "        print(t, 'WROTE')\n    except OSError as e:\n        print(t, 'DENIED', e.errno)\n")
    r = box.run(host.execution(code))
    assert r.exit_code == 0, r
    assert "WROTE" not in r.stdout, r
    assert r.stdout.count("DENIED") == 14, r


@attack("symlink_to_host_path", "integrity")
def symlink_to_host_path(box, host):
    code = HEADER + ("os.symlink(CANARY, 'leak'); os.symlink(CANARY_DIR, 'dirleak'); os.symlink('/', 'root')\n"
                     "for action in ['read', 'write', 'plant']:\n    try:\n        if action == 'read':\n"
                     "            print('READ', open('leak').read())\n        elif action == 'write':\n"
                     "            open('leak', 'w').write('pwned'); print('WROTE')\n        else:\n"
                     "            open('dirleak/planted', 'w').write('x'); print('PLANTED')\n"
                     "    except OSError as e:\n        print(action, 'DENIED', e.errno)\n"
                     "print(sorted(os.listdir('root')))\n")
    r = box.run(host.execution(code))
    assert r.exit_code == 0, r
    assert r.stdout.count("DENIED") == 3, r
    assert host.secret not in r.stdout, r


@attack("session_symlink_to_host_path", "integrity")
def session_symlink_to_host_path(box, host):
    with box.session(timeout_s=10) as s:
        s.run(f"ln -s {host.canary} leak; ln -s {host.canary_dir} dirleak; ln -s /etc/passwd pw")
        for name in ("leak",):
            try:
                assert host.secret not in s.read_file(name)
            except SessionError:
                pass
        for path in ("leak", "dirleak/planted.txt"):
            try:
                s.write_file(path, "pwned")
            except SessionError:
                pass
        assert "root:" in s.read_file("pw")  # the sandbox's own /etc/passwd, resolved inside
        snap = s.snapshot()
        s.restore(snap)  # the snapshot keeps the links as links; restoring them writes nothing outside


@attack("overwrite_interpreter_and_shell", "integrity")
def overwrite_interpreter_and_shell(box, host):
    cheat = ("import os, stat\nfake = '#!/bin/sh\\necho ALL PASSED\\nexit 0\\n'\n"
             "for target in ['/usr/bin/python3', '/bin/sh', '/usr/bin/prlimit', '/bin/bash']:\n    try:\n"
             "        open(target, 'w').write(fake)\n    except OSError:\n        pass\n"
             "for name in ['python3', 'python', 'sh', 'bash', 'prlimit', 'harness.py']:\n"
             "    open(name, 'w').write(fake)\n    os.chmod(name, 0o755)\n"
             "os.environ['PATH'] = '/work:' + os.environ['PATH']\nos._exit(0)\n")
    assert_cheat_fails(verdict(box, ADD, cheat))
    after = box.run(Execution(files={}, command=["bash", "-c", "python3 -c 'import sys; print(sys.executable)'; "
                                                 "sh -c 'echo sane'; head -c 2 /usr/bin/python3 | od -c | head -1"],
                              runtime="bash"))
    assert after.stdout.splitlines()[:2] == ["/usr/bin/python3", "sane"], after
    assert "#" not in after.stdout, after
    assert verdict(box, ADD, ADD.reference).passed  # the verifier still works on the next sample


@attack("chmod_lock_workspace", "integrity")
def chmod_lock_workspace(box, host):
    code = HEADER + ("import subprocess\nos.makedirs('a/b/c')\nopen('a/b/c/f', 'w').write('x')\n"
                     "for weird in ['-rf', '.hidden', '..dots', 'new\\nline', ' space']:\n"
                     "    open(weird, 'w').write('x')\n"
                     "os.makedirs('/tmp/t/u')\nos.chmod('a/b', 0)\nos.chmod('/tmp/t', 0)\nos.chmod('a', 0o111)\n"
                     "os.chmod('/work', 0o500)\nprint('locked')\n")
    r = box.run(host.execution(code))
    assert r.stdout == "locked\n", r  # the guard's probe then finds /work and /tmp empty and writable again


@attack("cross_execution_persistence", "integrity")
def cross_execution_persistence(box, host):
    code = HEADER + ("import ctypes, subprocess\nopen('/tmp/persist', 'w').write('x')\n"
                     "open('/dev/shm/persist', 'w').write('x')\n"
                     "libc = ctypes.CDLL(None, use_errno=True)\nprint('shm', libc.shmget(0x7074, 4096, 0o1666))\n"
                     "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', TOKEN],"
                     " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                     "print('planted')\n")
    r = box.run(host.execution(code))
    assert r.stdout.splitlines()[-1] == "planted", r
    probe = Execution(files={"p.py": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                                     "print(libc.shmget(0x7074, 0, 0), ctypes.get_errno())\n"},
                      command=["python3", "p.py"])
    for later in run_many(box, [probe, probe], concurrency=2):  # on every container of the pool
        assert later.stdout == "-1 2\n", later  # ENOENT: the segment did not survive


# ---- processes and privileges ------------------------------------------------------------------------------------
@attack("kill_parent_and_other_processes", "isolation")
def kill_parent_and_other_processes(box, host):
    code = HEADER + ("import signal, time\ntime.sleep(0.3)\n"
                     "for pid in [os.getppid(), 1, HOST_PID, INNOCENT_PID, -1]:\n    try:\n"
                     "        os.kill(pid, signal.SIGKILL)\n        print(pid, 'SIGNALLED')\n"
                     "    except OSError as e:\n        print(pid, 'DENIED', e.errno)\n"
                     "hit = 0\nfor pid in range(2, 70000):\n    if pid != os.getpid():\n        try:\n"
                     "            os.kill(pid, signal.SIGKILL)\n            hit += 1\n        except OSError:\n"
                     "            pass\nprint('others', hit)\n")
    bystander = Execution(files={"b.py": "import time\ntime.sleep(1.5)\nprint('bystander ok')\n"},
                          command=["python3", "b.py"])
    attacker, other = run_many(box, [host.execution(code, timeout_s=20), bystander], concurrency=2)
    assert not attacker.infra_error, attacker
    assert other.stdout == "bystander ok\n", other  # a concurrent sandbox is untouched
    # (the host guard checks that the innocent host process and we survived)


@attack("setuid_and_capabilities", "privilege")
def setuid_and_capabilities(box, host):
    code = HEADER + ("import shutil, subprocess\nfor name, args in [('setuid', (0,)), ('setgid', (0,)),"
                     " ('setresuid', (0, 0, 0)), ('setgroups', ([0],))]:\n    try:\n"
                     "        getattr(os, name)(*args)\n        print(name, 'GAINED')\n"
                     "    except OSError:\n        print(name, 'DENIED')\n"
                     "status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines())\n"
                     "print('caps', status['CapEff'].strip(), status['CapPrm'].strip(), status['CapAmb'].strip())\n"
                     "shutil.copy('/usr/bin/id', 'myid')\nos.chmod('myid', 0o4755)\n"
                     "print('suid-copy euid', subprocess.run(['./myid', '-u'], capture_output=True, text=True)"
                     ".stdout.strip())\n"
                     "for su in ['/usr/bin/su', '/bin/su', '/usr/bin/sudo']:\n    if os.path.exists(su):\n"
                     "        p = subprocess.run([su, 'root', '-c', 'id -u'], capture_output=True, text=True,"
                     " stdin=subprocess.DEVNULL, timeout=5)\n        print('su', repr(p.stdout.strip()))\n"
                     "print('euid', os.geteuid())\n")
    r = box.run(host.execution(code, timeout_s=20))
    assert "GAINED" not in r.stdout, r
    assert r.stdout.count("DENIED") == 4, r
    assert "caps 0000000000000000 0000000000000000 0000000000000000" in r.stdout
    euid = r.stdout.rsplit("euid ", 1)[1].strip()  # bwrap: 10001 in its user namespace; docker: the leased host uid
    assert euid == "10001" if box.name.startswith("bwrap") else int(euid) >= SandboxConfig().host_uid_first, r
    assert f"suid-copy euid {euid}\n" in r.stdout, r
    assert "su '0'" not in r.stdout, r


@attack("kernel_attack_surface", "privilege")
def kernel_attack_surface(box, host):
    code = HEADER + ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nCLONE_NEWUSER, CLONE_NEWNS,"
                     " CLONE_NEWNET = 0x10000000, 0x00020000, 0x40000000\n"
                     "calls = {'unshare-user': lambda: libc.unshare(CLONE_NEWUSER),"
                     " 'unshare-mount': lambda: libc.unshare(CLONE_NEWNS),"
                     " 'unshare-net': lambda: libc.unshare(CLONE_NEWNET),"
                     " 'mount': lambda: libc.mount(b'none', b'/tmp', b'tmpfs', 0, None),"
                     " 'sethostname': lambda: libc.sethostname(b'pwned', 5),"
                     " 'chroot': lambda: libc.chroot(b'/tmp'),"
                     " 'mknod': lambda: libc.mknod(b'/tmp/sda', 0o60600, os.makedev(8, 0))}\n"
                     "import platform\nif platform.machine() == 'x86_64':\n"
                     "    calls.update({'keyctl': lambda: libc.syscall(250, 0, 0, 0, 0, 0),"
                     " 'bpf': lambda: libc.syscall(321, 0, 0, 0), 'perf_event_open': lambda: libc.syscall(298, 0,"
                     " 0, -1, -1, 0)})\n"
                     "for name, call in calls.items():\n    rc = call()\n"
                     "    print(name, 'ALLOWED' if rc >= 0 else 'DENIED', ctypes.get_errno())\n")
    r = box.run(host.execution(code))
    lines = r.stdout.splitlines()
    assert r.exit_code == 0, r
    assert len(lines) >= 7, r
    assert all(line.endswith(" DENIED 1") for line in lines), r.stdout  # EPERM: refused, not merely malformed


@attack("tiocsti_terminal_injection", "isolation")
def tiocsti_terminal_injection(box, host):
    code = HEADER + ("import fcntl, termios\nfor fd in (0, 1, 2):\n    try:\n"
                     "        fcntl.ioctl(fd, termios.TIOCSTI, b'x')\n        print(fd, 'INJECTED')\n"
                     "    except OSError as e:\n        print(fd, 'DENIED', e.errno)\ntry:\n"
                     "    tty = os.open('/dev/tty', os.O_RDWR)\n    fcntl.ioctl(tty, termios.TIOCSTI, b'x')\n"
                     "    print('tty INJECTED')\nexcept OSError as e:\n    print('tty DENIED', e.errno)\n")
    r = box.run(host.execution(code))
    assert r.exit_code == 0, r
    assert "INJECTED" not in r.stdout, r
    assert r.stdout.count("DENIED") == 4, r


@attack("read_other_sandboxes", "isolation")
def read_other_sandboxes(box, host):
    victim_secret = f"VICTIM-{host.token}"
    victim = Execution(files={"secret.txt": victim_secret, "v.py": "import time\ntime.sleep(3)\nprint('done')\n"},
                       command=["python3", "v.py"], stdin=victim_secret)
    code = HEADER + READ_ALL + ("import glob, time\ntime.sleep(1)\n"
                                "for pattern in ['/proc/*/root/work/*', '/proc/*/cwd/*', '/proc/*/environ',"
                                " '/proc/*/fd/0', '/tmp/*', '/dev/shm/*']:\n"
                                "    for p in glob.glob(pattern):\n        show(p)\n")
    got_victim, attacker = run_many(box, [victim, host.execution(code)], concurrency=2)
    assert got_victim.stdout == "done\n", (got_victim, attacker)
    assert attacker.exit_code == 0, (got_victim, attacker)
    assert victim_secret not in attacker.stdout + attacker.stderr


# ---- attacks on the verdict (the real python_tests verifier) ----------------------------------------------------
@attack("sys_exit_0_before_asserts", "verdict")
def sys_exit_0(box, host):
    assert_cheat_fails(verdict(box, ADD, "import sys\nsys.exit(0)\n"))


@attack("os_exit_0_before_asserts", "verdict")
def os_exit_0(box, host):
    assert_cheat_fails(verdict(box, ADD, "import os\nos._exit(0)\n"))
    assert_cheat_fails(verdict(box, ADD, "import os\ndef add(a, b):\n    os._exit(0)\n"))


@attack("raise_skiptest", "verdict")
def raise_skiptest(box, host):
    assert_cheat_fails(verdict(box, ADD, "import unittest\nraise unittest.SkipTest('nothing to see')\n"))
    assert_cheat_fails(verdict(box, ADD, "import unittest\ndef add(a, b):\n    raise unittest.SkipTest('skip')\n"))


@attack("conftest_and_runner_monkeypatch", "verdict")
def conftest_and_runner_monkeypatch(box, host):
    cheat = ("import builtins, json, sys\nfor name, text in {'conftest.py': 'def pytest_runtest_makereport(): pass',"
             " 'sitecustomize.py': 'print(\"ALL PASSED\")', 'usercustomize.py': '', 'json.py': 'dumps = str'}"
             ".items():\n    open(name, 'w').write(text)\n"
             "json.dumps = lambda *a, **k: 'true'\nbuiltins.callable = lambda f: True\n"
             "builtins.enumerate = lambda it: [(i, [0, 0]) for i in range(len(list(it)))]\n"
             "def add(a, b):\n    return True\n")
    assert_cheat_fails(verdict(box, ADD, cheat))


@attack("forge_harness_channel_from_the_stack", "verdict")
def forge_harness_channel_from_the_stack(box, host):
    cheat = ("import sys, os, json\nframe = sys._getframe(0)\n"
             "while frame and 'nonce' not in frame.f_locals:\n    frame = frame.f_back\n"
             "nonce, fd = frame.f_locals['nonce'], frame.f_locals['results_fd']\n"
             "for i in range(len(frame.f_locals['request']['cases'])):\n"
             "    record = json.dumps({'case': i, 'value': 1, 'passed': True})\n"
             "    os.write(fd, ('\\n%s %s\\n' % (nonce, record)).encode())\n"
             "os.write(fd, ('\\n%s %s\\n' % (nonce, json.dumps({'compiled': True, 'reward': 1.0}))).encode())\n"
             "os._exit(0)\n")
    v = verdict(box, SECRET, cheat)
    assert_cheat_fails(v)  # it can claim values, but only the host knows which values are right


@attack("print_fake_success_lines", "verdict")
def print_fake_success_lines(box, host):
    lines = ["All 3 tests passed", "OK", "PASSED", '{"case": 0, "value": 3}', '{"passed": true, "reward": 1.0}']
    lines += [f'{"0" * 32} {{"case": {i}, "value": {v}}}' for i, v in enumerate([3, 42, 1337])]
    cheat = "import os, sys\n" + "".join(f"print({line!r})\nos.write(3, ({line!r} + '\\n').encode())\n"
                                         for line in lines) + "sys.stdout.flush()\nos._exit(0)\n"
    assert_cheat_fails(verdict(box, ADD, cheat))


@attack("prewrite_results_file", "verdict")
def prewrite_results_file(box, host):
    cheat = ("import os, json\nrecord = json.dumps({'case': 0, 'value': 3, 'passed': True})\n"
             "for path in ['results.json', 'report.json', 'junit.xml', '.pytest_cache/v/cache/lastfailed',"
             " '/tmp/results.json', '/tmp/harness.out', 'harness.out']:\n"
             "    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)\n    open(path, 'w').write(record)\n"
             "for fd in range(3, 64):\n    try:\n        os.write(fd, b'\\n' + record.encode() + b'\\n')\n"
             "    except OSError:\n        pass\nos._exit(0)\n")
    assert_cheat_fails(verdict(box, ADD, cheat))


@attack("confuse_the_output_stream", "verdict")
def confuse_the_output_stream(box, host):
    # frame headers of Docker's multiplexed stream, the launcher's READY marker, NUL bytes, invalid UTF-8
    cheat = ("import os\nos.write(1, b'READY\\n\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x05hello\\x02\\x00\\x00\\x00"
             "\\xff\\xff\\xff\\xff\\x00\\xfe\\xfd')\nos.write(2, b'\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x10' * 50)\n"
             "def add(a, b):\n    return a + b + 1\n")
    v = verdict(box, ADD, cheat)
    assert_cheat_fails(v)
    assert v.compiled  # the harness still ran and reported (wrong) values: the stream stayed parseable


@attack("close_streams_and_linger", "lifecycle")
def close_streams_and_linger(box, host):
    code = HEADER + "import time\nos.close(1)\nos.close(2)\ntime.sleep(30)\n"
    r, elapsed = timed(box, host.execution(code, timeout_s=1.5))
    assert r.timed_out, (r, elapsed)
    assert not r.infra_error, (r, elapsed)
    assert 1.5 <= elapsed < 6, (r, elapsed)


@attack("hijack_the_sandbox_init", "isolation")
def hijack_the_sandbox_init(box, host):
    # pid 1 and every ancestor the program can see: on bwrap the program is pid 1 itself (nothing of the sandbox sits
    # above it); in a pool container pid 1 is the agent, which holds the result channel. Try to take them over.
    code = HEADER + ("import ctypes, signal\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                     "def parent(pid):\n    return int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n"
                     "targets, pid = {1}, parent(os.getpid())\nwhile pid > 0:\n    targets.add(pid)\n"
                     "    pid = parent(pid)\ntargets.discard(os.getpid())\nprint('targets', len(targets))\n"
                     "for t in sorted(targets):\n"
                     "    print('ptrace', libc.ptrace(0x4206, t, 0, 0), ctypes.get_errno())\n"
                     "    pidfd = libc.syscall(434, t, 0)\n"
                     "    print('pidfd_getfd', libc.syscall(438, pidfd, 1, 0) if pidfd >= 0 else 'no pidfd')\n"
                     "    for name in ['environ', 'mem', 'fd/0', 'fd/1']:\n"
                     "        try:\n            with open(f'/proc/{t}/{name}', 'rb') as f:\n"
                     "                print(name, f.read(300))\n"
                     "        except OSError as e:\n            print(name, 'DENIED', e.errno)\n"
                     "    for name in ['fd/1', 'fd/0']:\n        try:\n"
                     "            with open(f'/proc/{t}/{name}', 'wb') as f:\n"
                     "                f.write(b'X' + bytes(8) + b'{\"exit\": 0}')\n"
                     "            print(name, 'WROTE')\n        except OSError as e:\n"
                     "            print(name, 'DENIED', e.errno)\n"
                     "    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGSTOP, signal.SIGKILL):\n"
                     "        try:\n            os.kill(t, sig)\n        except OSError:\n            pass\n"
                     "raise SystemExit(3)\n")
    r = box.run(host.execution(code, timeout_s=3))
    assert not r.infra_error, r
    assert r.exit_code == 3, r  # its own failure, reported as such
    if box.name.startswith("bwrap"):  # the program is the sandbox's pid 1: nothing above it to take over
        assert r.stdout.startswith("targets 0\n"), r.stdout
    else:
        assert "WROTE" not in r.stdout, r.stdout
        assert "ptrace 0" not in r.stdout, r.stdout
        assert "pidfd_getfd -1" in r.stdout, r.stdout
    assert host.secret not in r.stdout
    assert box.run(Execution(files={}, command=["true"], runtime="bash")).ok  # pid 1 of the next run is fine


@attack("ptrace_race_the_cleanup", "lifecycle")
def ptrace_race_the_cleanup(box, host):
    # an orphan that tries to seize every new process (a cleanup shell, the next program) and stop it
    spy = ("import ctypes, os, time\nlibc = ctypes.CDLL(None, use_errno=True)\nme = os.getpid()\n"
           "end = time.time() + 20\nwhile time.time() < end:\n    for pid in range(me + 1, me + 64):\n"
           "        if libc.ptrace(0x4206, pid, 0, 0) == 0:\n            libc.ptrace(0x4207, pid, 0, 0)\n")
    code = HEADER + ("import subprocess\nsubprocess.Popen([sys.executable, '-c', " + repr(spy) + ", TOKEN],"
                     " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                     "import time\ntime.sleep(0.5)\nprint('spy planted')\n")
    r = box.run(host.execution(code))
    assert r.stdout == "spy planted\n", r
    after = box.run(Execution(files={"n.py": "print('next sample ran')"}, command=["python3", "n.py"]))
    assert after.stdout == "next sample ran\n", after
    assert not after.timed_out, after


# ---- the sandbox's own processes: nothing done to them may reach a later execution ----------------------------------
# The program's ancestors in its pid namespace and pid 1 (the docker pool's agent, bwrap's init or harness), not itself.
ANCESTORS = ("import os\ndef targets():\n    pids, pid = {1}, os.getppid()\n    while pid > 1:\n        pids.add(pid)\n"
             "        with open(f'/proc/{pid}/status') as f:\n"
             "            pid = int(f.read().split('PPid:')[1].split()[0])\n"
             "    return sorted(pids - {os.getpid()})\n")
# What a program inherits from the processes above it: every rlimit, nice, CPU affinity, scheduler, I/O priority.
INHERITED = ("import ctypes, os, platform, resource, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
             "nr = {'x86_64': 252, 'aarch64': 31}.get(platform.machine())\n"
             "print(sorted((n, resource.getrlimit(getattr(resource, n))) for n in dir(resource)"
             " if n.startswith('RLIMIT_')), os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)),"
             " os.sched_getscheduler(0), libc.syscall(nr, 1, 0) if nr else None, libc.prctl(30, 0, 0, 0, 0))\n"
             "time.sleep(0.3)\n")  # so that concurrent probes land on different containers of the pool


@attack("poison_the_sandbox_for_later_runs", "isolation")
def poison_the_sandbox_for_later_runs(box, host):
    # prlimit / setpriority / sched_setaffinity / sched_setscheduler / ioprio_set on everything above the program:
    # whatever succeeds must die with this execution (a later one inherits the defaults, and no 64 bits of data)
    probe = Execution(files={"p.py": INHERITED}, command=["python3", "p.py"])
    before = sorted(r.stdout for r in run_many(box, [probe, probe], concurrency=2))
    code = HEADER + ANCESTORS + (
        "import ctypes, platform, resource\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "ioprio_set = {'x86_64': 251, 'aarch64': 30}.get(platform.machine())\n"
        "def attempt(what, call):\n    try:\n        call()\n        print(what, 'CHANGED')\n"
        "    except OSError as e:\n        print(what, 'DENIED', e.errno)\n"
        "def set_ioprio(pid):\n    if ioprio_set and libc.syscall(ioprio_set, 1, pid, 3 << 13) != 0:\n"
        "        raise OSError(ctypes.get_errno(), 'ioprio_set')\n"
        "for pid in targets():\n"
        "    for name in ('RLIMIT_NOFILE', 'RLIMIT_AS', 'RLIMIT_NPROC', 'RLIMIT_CPU', 'RLIMIT_FSIZE', 'RLIMIT_STACK',"
        " 'RLIMIT_MSGQUEUE'):\n"
        "        attempt(f'{pid} {name}', lambda: resource.prlimit(pid, getattr(resource, name), (3, 3)))\n"
        "    attempt(f'{pid} nice', lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))\n"
        "    attempt(f'{pid} affinity', lambda: os.sched_setaffinity(pid, {min(os.sched_getaffinity(0))}))\n"
        "    attempt(f'{pid} scheduler', lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)))\n"
        "    attempt(f'{pid} ioprio', lambda: set_ioprio(pid))\n"
        "print('targets', targets())\n")
    r = box.run(host.execution(code, timeout_s=10))
    assert not r.infra_error, r
    assert "targets [" in r.stdout, r  # whatever it did is its own outcome
    if box.name == "docker":  # the pool's agent is another uid: every call is refused
        assert "CHANGED" not in r.stdout, r.stdout
        assert r.stdout.count(" DENIED 1\n") >= 11, r.stdout
    after = sorted(x.stdout for x in run_many(box, [probe, probe], concurrency=2))  # every container of the pool
    assert after == before, (before, after)
    assert verdict(box, ADD, ADD.reference).passed


@attack("lower_the_sandbox_fd_limit_then_fail", "verdict")
def lower_the_sandbox_fd_limit_then_fail(box, host):
    # a failing solution that breaks the cleanup after it ran must still score 0, not be excluded as an infra error
    cheat = ANCESTORS + ("import resource\nfor pid in targets():\n    try:\n"
                         "        resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, 3))\n    except OSError:\n"
                         "        pass\nraise SystemExit(1)\n")
    for _ in range(2):  # on both containers of the pool, if the first survived
        assert_cheat_fails(verdict(box, ADD, cheat))
    assert verdict(box, ADD, ADD.reference).passed


TRUSTED_TESTS = {"h1dden/test_add.py": "from solution import add\nassert add(1, 2) == 3\n", "h1dden/data/x.json": "[3]"}


@attack("tamper_with_trusted_files", "integrity")
def tamper_with_trusted_files(box, host):
    code = HEADER + (
        "import shutil\nt = '/trusted/h1dden'\n"
        "def attempt(what, call):\n    try:\n        call()\n        print(what, 'DONE')\n"
        "    except OSError as e:\n        print(what, 'DENIED', e.errno)\n"
        "attempt('list', lambda: os.listdir('/trusted'))\n"  # the tests hide under a name the solution cannot find
        "attempt('write', lambda: open(t + '/test_add.py', 'w').write('pass'))\n"
        "attempt('append', lambda: open(t + '/data/x.json', 'a').write('pwned'))\n"
        "attempt('chmod', lambda: os.chmod(t + '/test_add.py', 0o666))\n"
        "attempt('chmod-dir', lambda: os.chmod(t, 0o777))\n"
        "attempt('utime', lambda: os.utime(t + '/test_add.py', (0, 0)))\n"
        "attempt('unlink', lambda: os.unlink(t + '/test_add.py'))\n"
        "attempt('rename', lambda: os.rename(t + '/data/x.json', t + '/data/y.json'))\n"
        "attempt('create', lambda: open(t + '/conftest.py', 'w').write('pwned'))\n"
        "attempt('mkdir', lambda: os.mkdir(t + '/data/sub'))\n"
        "attempt('symlink', lambda: os.symlink('/work/main.py', t + '/evil.py'))\n"
        "attempt('rmtree', lambda: shutil.rmtree(t + '/data'))\n"
        "attempt('plant', lambda: open('/trusted/conftest.py', 'w').write('pwned'))\n"
        "print([(root, sorted(dirs), sorted(files)) for root, dirs, files in os.walk(t)])\n"
        "print(open(t + '/test_add.py').read() + open(t + '/data/x.json').read())\n")
    r = box.run(host.execution(code, trusted_files=TRUSTED_TESTS))
    lines = r.stdout.splitlines()
    assert r.exit_code == 0, r
    assert "DONE" not in r.stdout, r
    assert r.stdout.count("DENIED") == 13, r
    assert lines[13] == "[('/trusted/h1dden', ['data'], ['test_add.py']), ('/trusted/h1dden/data', [], ['x.json'])]", r
    assert "\n".join(lines[14:]) == "".join(TRUSTED_TESTS.values()), r
    # the next executions (every container of the pool) find their own trusted files only
    look = ("import os, time\ntime.sleep(0.3)\n"
            "print([os.path.exists(p) for p in ['/trusted/h1dden', '/trusted/other/x.txt']])\n")
    probe = Execution(files={"l.py": look}, command=["python3", "l.py"], trusted_files={"other/x.txt": "x"})
    for later in run_many(box, [probe, probe], concurrency=2):
        assert later.stdout == "[False, True]\n", later
