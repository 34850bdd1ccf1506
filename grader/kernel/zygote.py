"""The zygote of warm grading kernels (:mod:`grader.kernel.warm`), and what its forked children do.

Run by path, as ``python grader/kernel/zygote.py FD PARENT_PID`` (so that it imports only what a
kernel imports, like ``grader/kernel/sandbox.py``): see :mod:`grader.kernel.warm` for the whole design.
"""
from __future__ import annotations

import array
import contextlib
import ctypes
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

try:
    from . import bwrap, cleanroom_launch, sandbox
except ImportError:  # run by path, as the zygote is
    import bwrap  # type: ignore[no-redef]
    import cleanroom_launch  # type: ignore[no-redef]
    import sandbox  # type: ignore[no-redef]

#: What the zygote imports: what every grading kernel has loaded once its hand-back is sealed.
PRELOAD = ("ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell", "numpy", "torch", "normref",
           "normref.handback")
#: Per-notebook (or per-run) variables, which the zygote is started without and may differ.
VOLATILE = frozenset({"PWD", "OLDPWD", "_", "JPY_SESSION_NAME", "JPY_PARENT_PID", "JUPYTER_PATH",
                      sandbox.ENV_SCRATCH_ROOT, sandbox.ENV_PIDS_CGROUP, sandbox.ENV_MEMORY_CGROUP,
                      sandbox.HANDBACK_ENV})
#: Processes of ours in a warm kernel's cgroup beyond a fresh one's: the child and :data:`LIFELINE`.
EXTRA_PROCS = 2
#: In the order they are joined, after the user namespace that owns them (bubblewrap's first; see
#: :func:`_enter_sandbox`): the sandbox's own user namespace last.
NAMESPACES = (("mnt", 0x00020000), ("cgroup", 0x02000000), ("net", 0x40000000), ("ipc", 0x08000000),
              ("uts", 0x04000000), ("pid", 0x20000000), ("user", 0x10000000))
CLONE_NEWUSER = 0x10000000
#: ioctl(2) on a namespace's descriptor: the user namespace that owns it (linux/nsfs.h).
NS_GET_USERNS = 0xB701
START_TIMEOUT_S = 180  # the zygote's imports, on a loaded machine
REPLY_TIMEOUT_S = 60   # a fork, or a child entering its sandbox
#: The sandbox's command beside the warm kernel: ``cat`` reading a pipe that only the kernel's
#: child (outside) holds open. However the child ends (exit, a signal, SIGKILL with its worker),
#: the pipe closes, ``cat`` exits, and bubblewrap's PID 1 ends the sandbox and every process in
#: it, the kernel included: no sandbox outlives its child (PID 1 of a PID namespace ignores
#: signals it has no handler for, SIGTERM included; ``sleep infinity`` there ran forever).
LIFELINE = "/usr/bin/cat" if os.path.exists("/usr/bin/cat") else "/bin/cat"


class Refused(RuntimeError):
    """A warm kernel could not be had for this notebook (the reason is the message)."""


# -- the kernel's view: what bubblewrap would give its command --------------------------------------

def bwrap_env(env: dict[str, str], argv: list[str]) -> tuple[dict[str, str], str | None, int]:
    """:func:`grader.kernel.bwrap.bwrap_env`: what bubblewrap gives the command of ``argv`` started with
    ``env`` (``(environment, working directory or None, where the command starts)``).

    Raises:
        Refused: an option it does not know (so it cannot say what it does)."""
    try:
        return bwrap.bwrap_env(env, argv)
    except ValueError as e:
        raise Refused(str(e)) from None


# -- system calls ----------------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)), f"prctl({option})")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_privileges(last_cap: int) -> None:
    """No capability in any set (bounding and ambient included), and no_new_privs: what bwrap's
    ``--cap-drop ALL`` leaves its command."""
    for cap in range(last_cap + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    _check(_libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), (_CapData * 2)()), "capset")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _open_fds() -> list[int]:
    out = []
    for n in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is closed by now
            os.readlink(f"/proc/self/fd/{n}")
            out.append(int(n))
    return out


def _send(sock: socket.socket, **msg) -> None:
    sock.send(json.dumps(msg).encode())


def _recv(sock: socket.socket, size: int = 1 << 16) -> dict:
    data = sock.recv(size)
    if not data:
        raise EOFError("the other end closed")
    return json.loads(data)


# -- the zygote -----------------------------------------------------------------------------------

_ZYGOTE_ENV: dict[str, str] = {}


def zygote_main(fd: int, parent: int) -> None:
    """The zygote's loop (``python grader/kernel/zygote.py FD PARENT``): one fork per ``fork``
    message, whose four descriptors (the kernel's socket, stdin, stdout, stderr) go to the child."""
    global _ZYGOTE_ENV
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(0)
    _prctl(PR_SET_DUMPABLE, 0)  # no ptrace, no /proc/<pid>/mem of it, no core
    ctl = socket.socket(fileno=fd)
    _ZYGOTE_ENV = dict(os.environ)
    try:
        for name in PRELOAD:
            importlib.import_module(name)
        extra = [n for n in _open_fds() if n not in (0, 1, 2, fd)]
        if _threads() != 1 or extra:  # the kernel closes every descriptor: nothing may need one
            raise Refused(f"the zygote has {_threads()} threads and descriptors {extra} after its imports")
    except BaseException as e:  # noqa: BLE001 - told to the worker, which starts fresh kernels
        _send(ctl, refused=f"{type(e).__name__}: {e}")
        os._exit(1)
    _send(ctl, ready=len(sys.modules), cpu_s=round(time.process_time(), 3))
    while True:
        try:
            msg, anc, _, _ = ctl.recvmsg(16, socket.CMSG_SPACE(4 * array.array("i").itemsize))
        except OSError:
            break
        if not msg:
            break  # the worker is gone
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        fds = array.array("i")
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        n = _threads()  # a thread holding a lock at fork deadlocks the child (torch's pools did)
        if msg != b"fork" or len(fds) != 4 or n != 1:
            for f in fds:
                os.close(f)
            _send(ctl, refused=f"the zygote has {n} threads" if n != 1 else "bad request")
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            ctl.close()
            try:
                _supervise(*fds)
            finally:
                os._exit(1)
        for f in fds:
            os.close(f)
        _send(ctl, pid=pid)
    os._exit(0)


def _supervise(sock_fd: int, stdin_fd: int, out_fd: int, err_fd: int) -> None:
    """The forked child: enter the notebook's sandbox, fork the kernel there, wait for it."""
    for src, dst in ((stdin_fd, 0), (out_fd, 1), (err_fd, 2)):
        os.dup2(src, dst)
        os.close(src)
    sock = socket.socket(fileno=sock_fd)
    os.setsid()  # no controlling terminal; in the sandbox, its group and session read as 0
    bwrap_proc = pid1 = None
    try:
        req = _recv(sock, 1 << 22)
        env, cwd = req["env"], req["cwd"]
        cmd, fds, kenv, kcwd, at = _kernel_command(req["argv"], cwd, env, req.get("cleanroom", False))
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        life_r, _life_w = os.pipe()  # held until this process ends (LIFELINE); the kernel closes its copy
        argv, args_fd = bwrap.hidden(cmd[:at] + ["--info-fd", str(info_w), "--block-fd", str(block_r), LIFELINE])
        bwrap_proc = subprocess.Popen(argv, pass_fds=[*fds, info_w, block_r, args_fd], stdin=life_r, env={}, cwd=cwd)
        for f in (*fds, info_w, block_r, args_fd, life_r):
            os.close(f)
        child, pid1 = _sandbox_pid1(bwrap_proc, info_r)
        _enter_sandbox(child)
        alive_r, alive_w = os.pipe()
        kpid = os.fork()
        if kpid == 0:
            os.close(alive_w)
            sock.detach()
            command = cmd[at:]
            # the student's code can walk its frames down to this one: nothing of the worker's here
            req = env = cwd = cmd = fds = argv = None  # noqa: F841
            _kernel(kenv, kcwd, command, alive_r)
        os.close(alive_r)
        kfd = os.pidfd_open(kpid)
        os.write(block_w, b"x")  # bwrap's PID 1 now runs LIFELINE and reaps
        os.close(block_w)
        _send(sock, started=kpid)
    except BaseException as e:  # noqa: BLE001 - the worker starts a fresh kernel instead
        if pid1 is not None:  # the sandbox's PID 1 first: it outlives bubblewrap's own process
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pid1, signal.SIGKILL)
        if bwrap_proc is not None:
            bwrap_proc.kill()
            bwrap_proc.wait()
        with contextlib.suppress(OSError):
            _send(sock, refused=str(e) if isinstance(e, Refused) else f"{type(e).__name__}: {e}")
        os._exit(1)
    code = _watch(sock, kpid, kfd)
    with contextlib.suppress(OSError):  # the whole sandbox ends with its PID 1
        signal.pidfd_send_signal(pid1, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        bwrap_proc.wait(timeout=10)
    with contextlib.suppress(OSError):
        _send(sock, exit=code)
    os._exit(0)


def _kernel_command(argv: list, cwd: str, env: dict, cleanroom: bool = False) -> tuple[list, list, dict, str, int]:
    """The worker's kernel command (or, ``cleanroom``, a clean room's: :mod:`grader.kernel.cleanroom_launch`),
    checked to be the grading sandbox's with the zygote's own environment and Python, in this
    process's cwd and environment: ``(bwrap command, its fds, the kernel's env, the kernel's cwd,
    index of the kernel's argv in the command)``.

    Raises:
        Refused: another kernelspec, environment or Python."""
    if not cleanroom and (argv[1] != str(Path(sandbox.__file__).resolve()) or "-f" not in argv):
        raise Refused("not the grading sandbox's kernelspec")
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    if cleanroom:
        cmd, fds = cleanroom_launch.prepare(extra_procs=EXTRA_PROCS), []
    else:
        cmd, fds = sandbox.prepare(argv[2:], extra_procs=EXTRA_PROCS)
    kenv, kcwd, at = bwrap_env(env, cmd)
    differ = sorted(k for k in set(kenv) | set(_ZYGOTE_ENV)
                    if k not in VOLATILE and kenv.get(k) != _ZYGOTE_ENV.get(k))
    if differ:
        raise Refused(f"the kernel's environment differs from the zygote's in {', '.join(differ)}")
    if cmd[at] != sys.executable:
        raise Refused(f"the sandbox runs {cmd[at]}, the zygote is {sys.executable}")
    return cmd, fds, kenv, kcwd, at


def _sandbox_pid1(bwrap: subprocess.Popen, info_r: int) -> tuple[int, int]:
    """The sandbox's PID 1 (from bubblewrap's ``--info-fd``) and a pidfd of it, once bubblewrap
    has set the sandbox up (dropped its capabilities, blocked on ``--block-fd``).

    Raises:
        Refused: bubblewrap exited, or took longer than ``REPLY_TIMEOUT_S``."""
    with os.fdopen(info_r, "rb") as f:
        info = json.loads(f.read() or b"{}")
    child = int(info["child-pid"])
    pid1 = os.pidfd_open(child)
    deadline = time.monotonic() + REPLY_TIMEOUT_S
    while "CapEff:\t0000000000000000" not in Path(f"/proc/{child}/status").read_text():
        # bwrap drops its capabilities right before it blocks on --block-fd: set up
        if bwrap.poll() is not None or time.monotonic() > deadline:
            raise Refused(f"bubblewrap did not set the sandbox up (exit {bwrap.poll()})")
        time.sleep(0.0005)
    return child, pid1


def _enter_sandbox(child: int) -> None:
    """Join ``child``'s namespaces (those that differ from this process's) and root, then drop
    every privilege.

    bubblewrap makes two user namespaces: the first owns the sandbox's mount, PID and other
    namespaces (made with it), the second, nested in it, maps the sandbox's uid 65534. Joining a
    mount namespace takes CAP_SYS_ADMIN where one is, which a grader that is not root has only
    inside the user namespace it made: so the first user namespace is joined first (its owner's
    process gets every capability there, root or not), then the others, then the second."""
    import fcntl

    last_cap = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    ns = [(os.open(f"/proc/{child}/ns/{name}", os.O_RDONLY), flag) for name, flag in NAMESPACES
          if os.readlink(f"/proc/{child}/ns/{name}") != os.readlink(f"/proc/self/ns/{name}")]
    root = os.open(f"/proc/{child}/root", os.O_RDONLY | os.O_DIRECTORY)
    if ns and ns[0][1] != CLONE_NEWUSER:
        owner = fcntl.ioctl(ns[0][0], NS_GET_USERNS)  # a new descriptor of the owning user namespace
        if os.fstat(owner).st_ino != os.stat("/proc/self/ns/user").st_ino:
            _check(_libc.setns(owner, CLONE_NEWUSER), "setns(the sandbox's first user namespace)")
            if os.fstat(ns[-1][0]).st_ino == os.fstat(owner).st_ino:  # one user namespace only: joined
                os.close(ns.pop()[0])
        os.close(owner)
    for fd, flag in ns:
        _check(_libc.setns(fd, flag), f"setns({flag:#x})")
        os.close(fd)
        if flag == NAMESPACES[0][1]:  # setns resets root and cwd to the namespace's root
            os.fchdir(root)
            os.chroot(".")
    os.close(root)
    _drop_privileges(last_cap)


def _watch(sock: socket.socket, kpid: int, kfd: int) -> int:
    """Until the kernel exits: pass the worker's signals on; kill it when the worker is gone.
    Returns its exit code (negative: the signal that ended it)."""
    gone = False
    while True:
        ready = select.select([kfd] if gone else [kfd, sock], [], [])[0]
        if sock in ready:
            try:
                msg = sock.recv(4096)
            except OSError:
                msg = b""
            gone = not msg
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.pidfd_send_signal(kfd, json.loads(msg)["signal"] if msg else signal.SIGKILL)
        if kfd in ready:  # it has exited: waitpid returns at once
            return os.waitstatus_to_exitcode(os.waitpid(kpid, 0)[1])


def _reseed() -> None:
    """Every RNG from new entropy, as a fresh interpreter seeds them (torch's global generator
    too: torch 2.13 seeds it randomly per process); otherwise all of a zygote's kernels would
    draw the same numbers."""
    import random

    import numpy
    import torch

    random.seed()
    numpy.random.seed()
    torch.seed()


def _kernel(env: dict[str, str], cwd: str, command: list[str], alive_r: int) -> None:
    """In the sandbox (PID 2): become what ``python kernel_guard.py -f ...`` would be, and run it."""
    import runpy

    code = 1
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # bwrap's --die-with-parent
        if select.select([alive_r], [], [], 0)[0]:
            os._exit(1)  # the child died before that was set
        os.closerange(3, max(1 << 20, os.sysconf("SC_OPEN_MAX")))
        _prctl(PR_SET_DUMPABLE, 1)  # as after exec
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = command[1:]
        _reseed()
        for name in ("sandbox", "bwrap", "cleanroom_launch"):  # the zygote's, run by path: not the student's to import
            sys.modules.pop(name, None)
        runpy.run_path(command[1], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except BaseException:  # noqa: BLE001 - as an uncaught error would end the interpreter
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    zygote_main(int(sys.argv[1]), int(sys.argv[2]))
