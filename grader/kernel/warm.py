"""Warm grading kernels: each notebook's kernel is forked from a process that has already
imported what a grading kernel loads, and enters that notebook's own sandbox.

A fresh grading kernel (:mod:`grader.kernel.sandbox`) spends ~3 of its ~3.4 CPU seconds starting a
Python interpreter, importing torch and finalizing it again; the student's cells are ~0.2 s.
Here the ``normref-sandbox`` kernelspec names the jupyter_client kernel provisioner
:class:`WarmProvisioner` (entry point ``normref-warm``, registered by ``make install``), so
nbgrader, nbclient and the autograde engine (:mod:`grader.autograde.engine`) are unchanged. Per worker
process (of this machine's process pool, or a Dask worker):

* **the zygote**: ``python grader/kernel/zygote.py``, started with the kernel's environment
  (as bubblewrap gives it, without the per-notebook variables of :data:`VOLATILE`), imports
  :data:`grader.kernel.zygote.PRELOAD` (~1,500 modules), runs no torch op, starts no thread and no ZMQ context, is
  non-dumpable, dies with its worker (``PR_SET_PDEATHSIG`` from a thread that never ends, and
  the end of its one socket), and is reachable only through that inherited socket pair. It
  forks on request, after asserting that it has one thread; it never sees a notebook's path,
  environment or student: those go to the child it forked, over a socket of that kernel's own;
* **the child** (one per notebook) does, for that notebook, what ``grader/kernel/sandbox.py`` does:
  :func:`grader.kernel.sandbox.prepare` (its record, its pids cgroup joined before anything else, the
  rlimits, the student's files), then starts the unchanged :func:`grader.kernel.sandbox.bwrap_argv`
  with ``--info-fd`` and ``--block-fd`` (bubblewrap sets the sandbox up and waits before it runs
  its command), joins that sandbox's mount, cgroup, network, IPC, UTS and PID namespaces and
  then its user namespace (uid 65534), drops every capability, the bounding set included, sets
  no_new_privs, and forks the kernel, which is PID 2 in there as a fresh kernel is; then it lets
  bubblewrap go on (its command is ``cat`` on a pipe only the child holds,
  :data:`grader.kernel.zygote.LIFELINE`: bubblewrap's PID 1 reaps, and ends the sandbox when the child
  ends, however it ends) and stays outside, as the kernel's parent, until the kernel exits;
* **the kernel** takes the environment and working directory bubblewrap gives its command,
  closes every inherited descriptor, reseeds its RNGs (:func:`grader.kernel.zygote._reseed`) and runs
  ``grader/kernel/kernel_guard.py`` as a fresh kernel does. It is killed once nbgrader asks it to shut
  down: its outputs are in by then, and a graceful exit only finalizes torch again.

A zygote that cannot start, dies, or refuses a fork (or a child that cannot enter the sandbox,
or an environment that differs from the zygote's in anything but :data:`VOLATILE`) makes that
notebook start a fresh kernel exactly as before; :func:`kernel_counts` and :func:`describe`
tell the run, which says so once. ``NORMREF_WARM_KERNELS=0`` turns warm kernels off.
"""
from __future__ import annotations

import array
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from jupyter_client.provisioning import LocalProvisioner

from . import sandbox
from .zygote import REPLY_TIMEOUT_S, START_TIMEOUT_S, VOLATILE, Refused, _recv, _send, bwrap_env

# The sandbox session decides whether kernels start warm (grader/kernel/sandbox.py): its names, here too.
PROVISIONER = sandbox.WARM_PROVISIONER
ENTRY_POINT_GROUP = sandbox.WARM_ENTRY_POINT_GROUP
SWITCH = sandbox.WARM_SWITCH
unavailable = sandbox.warm_unavailable


def _zygote_env(argv: list[str], cwd: str, env: dict[str, str]) -> dict[str, str]:
    """The kernel's environment inside its sandbox, less :data:`~grader.kernel.zygote.VOLATILE`."""
    i = argv.index("-f")  # the sandbox's own variables, as grader.kernel.sandbox.prepare sets them
    cmd = sandbox.bwrap_argv(argv[i + 1], cwd, [], connection_fd=0,
                             pids_events="-" if env.get(sandbox.ENV_PIDS_CGROUP) else None,
                             max_procs=int(env.get(sandbox.ENV_MAX_PROCS, sandbox.MAX_PROCS)),
                             max_write_bytes=int(env.get(sandbox.ENV_MAX_WRITE_BYTES, sandbox.MAX_WRITE_BYTES)))
    kenv = bwrap_env(env, cmd)[0]
    return {k: v for k, v in kenv.items() if k not in VOLATILE}


# -- the worker's side ------------------------------------------------------------------------------

class _Zygote:
    """This worker process's zygote: started with ``env``, reached through a socket pair."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.lock = threading.Lock()  # one fork exchange at a time (a Dask worker may have threads)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        cmd = [sys.executable, str(Path(__file__).resolve().with_name("zygote.py")), str(theirs.fileno()),
               str(os.getpid())]
        box: dict = {}
        started = threading.Event()

        def start() -> None:  # PR_SET_PDEATHSIG fires when the *thread* that forked ends: this one never does
            try:
                box["proc"] = subprocess.Popen(cmd, env=env, pass_fds=[theirs.fileno()], cwd="/",
                                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL)
            except OSError as e:
                box["error"] = e
            started.set()
            threading.Event().wait()

        threading.Thread(target=start, name="normref-zygote", daemon=True).start()
        started.wait()
        theirs.close()
        if "error" in box:
            raise Refused(f"the zygote could not start ({box['error']})")
        self.proc = box["proc"]
        self.sock.settimeout(START_TIMEOUT_S)
        try:
            reply = _recv(self.sock)
        except (OSError, EOFError, ValueError) as e:
            self.stop()
            raise Refused(f"the zygote died while it started ({type(e).__name__}, exit {self.proc.poll()})") from None
        if "ready" not in reply:
            self.stop()
            raise Refused(f"the zygote refused to start: {reply.get('refused')}")
        self.modules, self.cpu_s = reply["ready"], reply["cpu_s"]

    def fork(self, out: int = 1) -> tuple[int, socket.socket, int]:
        """``(child pid, the kernel's socket, the write end of its stdin)``; its stdout is ``out``.

        Raises:
            Refused: the zygote refused; EOFError or OSError: it is gone."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stdin_r, stdin_w = os.pipe()
        try:
            with self.lock:
                self.sock.settimeout(REPLY_TIMEOUT_S)
                self.sock.sendmsg([b"fork"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                               array.array("i", [theirs.fileno(), stdin_r, out, 2]))])
                reply = _recv(self.sock)
        except BaseException:
            mine.close()
            os.close(stdin_w)
            raise
        finally:
            theirs.close()
            os.close(stdin_r)
        if "pid" not in reply:
            mine.close()
            os.close(stdin_w)
            raise Refused(f"the zygote refused to fork: {reply.get('refused')}")
        return reply["pid"], mine, stdin_w

    def stop(self) -> None:
        self.sock.close()  # the zygote exits when its socket ends
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


class WarmKernel:
    """A running warm kernel, as its provisioner sees it (through the child that watches it)."""

    def __init__(self, child: int, sock: socket.socket, stdin_w: int):
        self.child, self.sock, self.stdin_w = child, sock, stdin_w
        self.pidfd = os.pidfd_open(child)
        self.kernel_pid: int | None = None  # as this machine sees it (2 in its sandbox)
        self.code: int | None = None
        self._killed_at: float | None = None

    def start(self, argv: list[str], cwd: str, env: dict[str, str], cleanroom: bool = False) -> None:
        self.sock.settimeout(REPLY_TIMEOUT_S)
        _send(self.sock, argv=argv, cwd=cwd, env=env, cleanroom=cleanroom)
        reply = _recv(self.sock)
        if "started" not in reply:
            raise Refused(f"the warm kernel could not enter its sandbox: {reply.get('refused')}")
        self.kernel_pid = reply["started"]
        self.sock.setblocking(False)

    def poll(self) -> int | None:
        """The kernel's exit code once it and its sandbox are gone, else None."""
        if self.code is None:
            try:
                msg = self.sock.recv(4096)
            except BlockingIOError:
                msg = None
            except OSError:
                msg = b""
            if msg is not None:
                self.code = json.loads(msg).get("exit", 1) if msg else -signal.SIGKILL
            elif self._killed_at is not None and time.monotonic() - self._killed_at > 2:
                self._sigkill()  # the child did not answer: it, and so the kernel (PDEATHSIG), end
        return self.code

    def signal(self, signum: int) -> None:
        if self.code is None:
            with contextlib.suppress(OSError):
                _send(self.sock, signal=int(signum))
            if signum == signal.SIGKILL and self._killed_at is None:
                self._killed_at = time.monotonic()

    def _sigkill(self) -> None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def close(self) -> None:
        if self.code is None:
            self._sigkill()
        self.sock.close()
        for fd in (self.pidfd, self.stdin_w):
            with contextlib.suppress(OSError):
                os.close(fd)


_WORKER: dict = {"pid": None, "zygote": None, "dead": None, "counts": {}}


def _worker_zygote(env: dict[str, str]) -> _Zygote:
    """This process's zygote, started on first use with ``env``."""
    if _WORKER["pid"] != os.getpid():  # a forked worker: the parent's zygote is not ours
        if _WORKER["zygote"] is not None:
            _WORKER["zygote"].sock.detach()
        _WORKER.update(pid=os.getpid(), zygote=None, dead=None, counts={})
    if _WORKER["dead"]:
        raise Refused(_WORKER["dead"])
    z = _WORKER["zygote"]
    if z is not None and z.proc.poll() is not None:
        _WORKER["dead"] = f"the zygote died ({_exit_text(z.proc.returncode)})"
        raise Refused(_WORKER["dead"])
    if z is None:
        try:
            z = _WORKER["zygote"] = _Zygote(env)
        except Refused as e:
            _WORKER["dead"] = str(e)
            raise
    if z.env != env:
        differ = sorted(k for k in set(env) | set(z.env) if env.get(k) != z.env.get(k))
        raise Refused(f"the kernel's environment differs from the zygote's in {', '.join(differ)}")
    return z


def _exit_text(code: int | None) -> str:
    return f"signal {-code}" if code is not None and code < 0 else f"exit {code}"


def launch(argv: list[str], cwd: str, env: dict[str, str]) -> WarmKernel | None:
    """A warm kernel for this notebook, or None (a fresh one is to start; recorded, with why)."""
    why = None
    try:
        z = _worker_zygote(_zygote_env(argv, cwd, env))
        try:
            child, sock, stdin_w = z.fork()
        except (OSError, EOFError, ValueError) as e:
            _WORKER["dead"] = f"the zygote died ({type(e).__name__}, {_exit_text(z.proc.poll())})"
            raise Refused(_WORKER["dead"]) from None
        kernel = WarmKernel(child, sock, stdin_w)
        try:
            kernel.start(argv, cwd, env)
        except (Refused, OSError, EOFError, ValueError) as e:
            kernel.close()
            raise e if isinstance(e, Refused) else Refused(f"the warm kernel's child died ({type(e).__name__})")
    except Refused as e:
        kernel, why = None, str(e)
    _record(env, why)
    return kernel


def launch_cleanroom(env: dict[str, str]) -> tuple[WarmKernel, int, int] | None:
    """A clean room (:mod:`grader.kernel.cleanroom`) forked from this worker's zygote into a sandbox of its
    own (:mod:`grader.kernel.cleanroom_launch`): ``(its process, the write end of its stdin, the read end
    of its stdout)``, or None when the zygote cannot serve (the caller starts one fresh)."""
    from .cleanroom_launch import cleanroom_argv

    zenv = {k: v for k, v in bwrap_env(env, cleanroom_argv("-" if env.get(sandbox.ENV_PIDS_CGROUP) else None))[0]
            .items() if k not in VOLATILE}
    out_r, out_w = os.pipe()
    try:
        child, sock, stdin_w = _worker_zygote(zenv).fork(out=out_w)
    except (Refused, OSError, EOFError, ValueError):
        os.close(out_r)
        return None
    finally:
        os.close(out_w)
    kernel = WarmKernel(child, sock, stdin_w)
    try:
        kernel.start([sys.executable], "/", env, cleanroom=True)
    except (Refused, OSError, EOFError, ValueError):
        kernel.close()
        os.close(out_r)
        return None
    return kernel, stdin_w, out_r


def _record(env: dict[str, str], why: str | None) -> None:
    """Count this launch in ``$NORMREF_SCRATCH_ROOT/warm-<pid>.json`` (read by :func:`kernel_counts`)."""
    root = env.get(sandbox.ENV_SCRATCH_ROOT)
    if not root:
        return
    c = _WORKER["counts"].setdefault(root, {"warm": 0, "fresh": 0, "why": []})
    c["fresh" if why else "warm"] += 1
    if why and why not in c["why"]:
        c["why"].append(why)
    with contextlib.suppress(OSError):
        Path(root).mkdir(parents=True, exist_ok=True)
        Path(root, f"warm-{os.getpid()}.json").write_text(json.dumps(c))


def kernel_counts(folder: Path, off: str | None = None, notebooks: int = 0) -> dict:
    """``{"warm": n, "fresh": m, "why": [reasons]}`` of the kernels whose launches were recorded
    under ``folder`` (a session's ``logs/scratch``); with warm kernels ``off`` (the session's
    :attr:`~grader.kernel.sandbox.SandboxSession.warm_off`), its ``notebooks`` all fresh, for that reason."""
    if off:
        return {"warm": 0, "fresh": notebooks, "why": [f"warm kernels are off ({off})"]}
    out = {"warm": 0, "fresh": 0, "why": []}
    for f in sorted(Path(folder).rglob("warm-*.json")) if Path(folder).is_dir() else []:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            merge(out, json.loads(f.read_text()))
    return out


def merge(into: dict, more: dict | None) -> dict:
    """Add the counts ``more`` to ``into`` (both as :func:`kernel_counts` returns); returns ``into``."""
    for k in ("warm", "fresh"):
        into[k] += int((more or {}).get(k, 0))
    into["why"] += [w for w in (more or {}).get("why", []) if w not in into["why"]]
    return into


def describe(counts: dict, off: str | None = None) -> str | None:
    """The run's one line about its kernels (None: no kernel was counted)."""
    if off:
        return f"autograde: warm kernels are off ({off}): every notebook started a fresh kernel"
    if counts["fresh"]:
        return (f"autograde: {counts['fresh']} of {counts['warm'] + counts['fresh']} notebooks started a fresh "
                f"kernel instead of a warm one (same grades, ~3 CPU-s more each): {'; '.join(counts['why'])}")
    return f"autograde: warm kernels for all {counts['warm']} notebooks" if counts["warm"] else None


def stop_zygote() -> None:
    """End this process's zygote (it also ends with the process)."""
    if _WORKER["pid"] == os.getpid() and _WORKER["zygote"] is not None:
        _WORKER["zygote"].stop()
    _WORKER.update(pid=None, zygote=None, dead=None, counts={})


class WarmProvisioner(LocalProvisioner):
    """jupyter_client's :class:`~jupyter_client.provisioning.LocalProvisioner`, with warm kernels:
    a kernel forked from this worker's zygote (see the module's doc); when there is none, the
    kernelspec's ``argv`` as before. A warm kernel is killed when its shutdown is requested."""

    warm: WarmKernel | None = None

    @property
    def has_process(self) -> bool:
        return self.warm is not None or super().has_process

    async def launch_kernel(self, cmd: list[str], **kwargs) -> dict:
        env = dict(kwargs.get("env") or os.environ)
        cwd = str(kwargs.get("cwd") or os.getcwd())
        self.warm = launch(cmd, cwd, env)
        if self.warm is None:
            return await super().launch_kernel(cmd, **kwargs)
        self.pid, self.pgid, self.cwd = self.warm.child, None, cwd
        return self.connection_info

    async def poll(self) -> int | None:
        return self.warm.poll() if self.warm is not None else await super().poll()

    async def wait(self) -> int | None:
        if self.warm is None:
            return await super().wait()
        import asyncio

        while (code := self.warm.poll()) is None:
            await asyncio.sleep(0.01)
        self.warm.close()
        self.warm = None
        return code

    async def send_signal(self, signum: int) -> None:
        if self.warm is None:
            return await super().send_signal(signum)
        self.warm.signal(signum)

    async def kill(self, restart: bool = False) -> None:
        if self.warm is None:
            return await super().kill(restart)
        self.warm.signal(signal.SIGKILL)

    async def terminate(self, restart: bool = False) -> None:
        await self.kill(restart) if self.warm is not None else await super().terminate(restart)

    async def shutdown_requested(self, restart: bool = False) -> None:
        if self.warm is not None:  # the outputs are in: no graceful exit (it finalizes torch, ~1 s)
            self.warm.signal(signal.SIGKILL)

    async def cleanup(self, restart: bool = False) -> None:
        if self.warm is not None:
            self.warm.close()
            self.warm = None
        await super().cleanup(restart)

