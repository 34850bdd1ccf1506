"""The grading kernel: ipykernel inside a bubblewrap sandbox, with resource limits.

``python grader/kernel/sandbox.py -f CONNECTION_FILE [ipykernel args]`` (run by path) is the ``argv`` of
the ``normref-sandbox`` kernelspec that ``make grade`` hands nbgrader. It

* sets per-kernel limits: memory ``NORMREF_KERNEL_MEM_MB`` (default 3072 MiB), by a cgroup v1
  ``memory`` controller per kernel when this machine lets us create one (any torch build
  imports: only what the kernel touches counts; a kernel past the cap is killed by the kernel's
  out-of-memory killer and the run says so), else by ``RLIMIT_AS``: the address space the
  kernel's imports map, measured once per environment (:func:`address_space_mb`), plus
  ``NORMREF_KERNEL_MEM_MB`` (a memory bomb then raises ``MemoryError`` in the student's cell);
  at most :data:`MAX_PROCS` processes (a cgroup v1 ``pids`` controller when this machine lets
  us create one, else ``RLIMIT_NPROC``, which the kernel counts per user namespace, i.e. per
  sandbox, but does not apply to root); everything the kernel writes (its folder, ``/tmp``,
  its home) lives in one tmpfs of :data:`MAX_WRITE_BYTES` (bubblewrap's ``--size``), and
  ``/dev`` is read-only; the largest single file is 64 MiB;
* copies the kernel's working directory (the student's own submitted folder) into that tmpfs
  (bubblewrap's ``--file``) and puts it where the notebook expects it, so every write lands
  in the throw-away copy and nothing the kernel writes reaches the course's disk;
* starts ipykernel with `bwrap <https://github.com/containers/bubblewrap>`_: new user, PID,
  IPC, UTS and network namespaces (no network: the kernel talks to nbgrader over Unix sockets,
  ``KernelManager.transport = "ipc"``), all capabilities dropped, uid 65534, an environment of
  its own (:func:`sandbox_env`; bubblewrap is started with none, its options read from a memfd:
  the sandbox's PID 1 shows nothing of the grader's), and a file system
  that holds only the Python installation, the virtual environment, the ``normref`` package,
  the connection files and the scratch directory: the course's ``source/`` (solutions, hidden
  tests), ``gradebook.db`` and other students' folders do not exist in there;
* runs :mod:`grader.kernel.kernel_guard` first, which turns ``os._exit``/``sys.exit`` into
  errors of the cell that called them and caps a cell's printed output.

What it does not prevent is written in docs/SECURITY.md ("What the grader protects against").
"""
from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import sys
import sysconfig
import tempfile
from pathlib import Path

_BY_PATH = None if __package__ else str(Path(__file__).resolve().parents[2])
if _BY_PATH:  # run by path (the kernelspec, the zygote): import the package's modules (PEP 366), appended:
    sys.path.append(_BY_PATH)  # an installed normref comes first, as in the sandbox (_normref_dir binds it)
    __package__ = "grader.kernel"
from ..ledger import store  # noqa: E402
from .bwrap import env_args, head, hidden, sandbox_env as _sandbox_env  # noqa: E402
from .cgroups import (MEMORY_CGROUP_ROOT, PIDS_CGROUP_ROOT, counters, hierarchy,  # noqa: E402, F401
                      join_memory_cgroup, join_pids_cgroup, make_cgroup, memory_cgroups_work, remove_cgroup,
                      sweep_stale)
from .kernel_guard import ENV_MAX_PROCS, ENV_MAX_WRITE_BYTES, ENV_NPROC_RLIMIT  # noqa: E402
from .kernel_guard import PIDS_EVENTS as SANDBOX_PIDS_EVENTS  # noqa: E402
from .names import SINGLE_THREAD_VARS  # noqa: E402, F401 - the names course.py reads too
from normref.handback_files import HANDBACK_ENV  # noqa: E402, F401 - the launchers' VOLATILE (grader/kernel/zygote.py)

if _BY_PATH:  # imported: the package is found through its __path__ now; a forked kernel's sys.path is a fresh one's
    del sys.path[len(sys.path) - 1 - sys.path[::-1].index(_BY_PATH)]  # the one appended

BWRAP = shutil.which("bwrap") or "/usr/bin/bwrap"
KERNEL_NAME = "normref-sandbox"
DEFAULT_MEM_MB = 3072
MAX_FILE_BYTES = 64 * 2**20
MAX_SCRATCH_COPY_BYTES = 64 * 2**20
MAX_SCRATCH_COPY_FILES = 256
#: Processes (and threads) one grading kernel may run at once, itself included.
MAX_PROCS = 64
#: Bytes one grading kernel may write: its folder, /tmp and its home share one tmpfs this size.
MAX_WRITE_BYTES = 256 * 2**20
#: Inside the sandbox: the tmpfs, the student's folder in it, and the cgroup's event counter.
SANDBOX_WORK = "/tmp/work"
#: Variables the sandbox and its launchers (grader/kernel/warm.py, grader/kernel/zygote.py) pass each other,
#: and those that cap a kernel's memory or name the canary's shared cache: one name each.
ENV_SCRATCH_ROOT, ENV_PIDS_CGROUP = "NORMREF_SCRATCH_ROOT", "NORMREF_PIDS_CGROUP"
ENV_MEMORY_CGROUP, ENV_KERNEL_MEM_MB = "NORMREF_MEMORY_CGROUP", "NORMREF_KERNEL_MEM_MB"
ENV_KERNEL_AS_MB = "NORMREF_KERNEL_AS_MB"
ENV_CANARY_CACHE = store.ENV_CANARY_CACHE
#: This user's cache folder (the canary's passes, a kernel's measured address space).
shared_cache_dir = store.user_cache_dir
#: Warm kernels (grader/kernel/warm.py): the jupyter_client provisioner that starts them (registered by
#: tools/grading-kernels), and the variable that turns them off (``NORMREF_WARM_KERNELS=0``).
WARM_PROVISIONER = "normref-warm"
WARM_ENTRY_POINT_GROUP = "jupyter_client.kernel_provisioners"
WARM_SWITCH = "NORMREF_WARM_KERNELS"
_ETC = ("/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf", "/etc/hosts", "/etc/mime.types")


def available() -> bool:
    """True if bubblewrap is installed and can create the namespaces here."""
    if not os.path.exists(BWRAP):
        return False
    import subprocess

    probe = subprocess.run([BWRAP, "--ro-bind", "/", "/", "--unshare-all", "--unshare-user",
                            "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL", "true"],
                           capture_output=True)
    return probe.returncode == 0


def default_mem_mb() -> int:
    """A grading kernel's memory cap in MiB: ``$NORMREF_KERNEL_MEM_MB``, else :data:`DEFAULT_MEM_MB`."""
    return int(os.environ.get(ENV_KERNEL_MEM_MB) or DEFAULT_MEM_MB)


def write_kernelspec(dest: Path, mem_mb: int = DEFAULT_MEM_MB, provisioner: str | None = None,
                     as_mb: int | None = None) -> Path:
    """Write ``dest/kernels/normref-sandbox/kernel.json``; put ``dest`` on ``JUPYTER_PATH``.
    ``provisioner``: the jupyter_client kernel provisioner that starts its kernels (default:
    jupyter_client's own, which runs the ``argv``; :mod:`grader.kernel.warm` names its own).
    ``as_mb``: the ``RLIMIT_AS`` cap in MiB for kernels without a memory cgroup (None: none)."""
    kdir = dest / "kernels" / KERNEL_NAME
    kdir.mkdir(parents=True, exist_ok=True)
    # Run by path, not with -m: `-m grader.kernel.sandbox` would import the normref package
    # (torch, matplotlib) twice per kernel start, ~12 s of the ~16 s a kernel took to start.
    spec = {
        "argv": [sys.executable, str(Path(__file__).resolve()), "-f", "{connection_file}"],
        "display_name": "Python 3 (normref grading sandbox)",
        "language": "python",
        "env": {ENV_KERNEL_MEM_MB: str(mem_mb), **({ENV_KERNEL_AS_MB: str(as_mb)} if as_mb else {})},
        "interrupt_mode": "message",  # signals do not cross into bwrap's PID namespace
        "metadata": {"debugger": False},
    }
    if provisioner:
        spec["metadata"]["kernel_provisioner"] = {"provisioner_name": provisioner, "config": {}}
    (kdir / "kernel.json").write_text(json.dumps(spec, indent=1))
    return kdir


def warm_unavailable() -> str | None:
    """None when this machine's kernels may start warm (:mod:`grader.kernel.warm`), else why not (for
    the run's log)."""
    if os.environ.get(WARM_SWITCH, "1").strip().lower() in ("0", "no", "off", "false"):
        return f"{WARM_SWITCH}={os.environ[WARM_SWITCH]}"
    from importlib.metadata import entry_points

    if not entry_points(group=WARM_ENTRY_POINT_GROUP, name=WARM_PROVISIONER):
        return f"the {WARM_PROVISIONER} kernel provisioner is not installed here: run make install"
    if not hasattr(os, "pidfd_open"):
        return "this system has no pidfd_open"
    return None


class SandboxSession:
    """Everything ``make grade`` needs to run nbgrader's kernels in the sandbox.

    Use as a context manager; :meth:`worker` gives one autograde process its nbgrader options
    and environment (its own kernel-socket and record directories). :meth:`limits_hit` says,
    from outside the kernels, which ones ran into the process cap.
    """

    def __init__(self, course_root: Path, mem_mb: int | None = None):
        self.course_root = Path(course_root)
        self.mem_mb = mem_mb or default_mem_mb()
        self.jupyter_dir = self.course_root / "logs" / "jupyter"
        self.records = self.course_root / "logs" / "scratch"
        self.pids_cgroup: Path | None = None
        self.memory_cgroup: Path | None = None
        #: the RLIMIT_AS cap (MiB) of kernels without a memory cgroup; None while they have one
        self.as_mb: int | None = None
        self._tmp: list[str] = []
        self._mounts: list[str] = []
        #: what :func:`sweep_stale` removed when the session started
        self.swept: dict[str, int] = {}
        #: None when the kernels start warm (:mod:`grader.kernel.warm`), else why they start fresh
        self.warm_off: str | None = None

    def __enter__(self) -> "SandboxSession":
        self.warm_off = warm_unavailable()
        self.swept = sweep_stale()  # what killed runs left (never one in use)
        name = f"normref-{os.getpid()}-{os.urandom(3).hex()}"
        self.pids_cgroup = make_cgroup("pids", name)
        self.memory_cgroup = make_cgroup("memory", name)
        self.as_mb = None if self.memory_cgroup else address_space_mb(self.mem_mb)
        write_kernelspec(self.jupyter_dir, self.mem_mb, None if self.warm_off else WARM_PROVISIONER, self.as_mb)
        return self

    def __exit__(self, *exc) -> None:
        for m in self._mounts:
            import subprocess

            subprocess.run(["umount", "-l", m], capture_output=True)
        for d in self._tmp:
            shutil.rmtree(d, ignore_errors=True)
        for cg in (self.pids_cgroup, self.memory_cgroup):
            if cg is not None and cg.is_dir():
                remove_cgroup(cg)  # kills what a student's code left running in it first
        shutil.rmtree(self.records, ignore_errors=True)

    def worker(self, i: int) -> tuple[list[str], dict[str, str]]:
        # Unix socket paths are limited to ~107 bytes: keep them short, under /tmp.
        ipc = tempfile.mkdtemp(prefix=f"nr-ipc-{os.getpid()}-", dir="/tmp")  # the pid: see sweep_stale
        self._tmp.append(ipc)
        # The kernel must create its sockets here, so it can write here: as root, this folder
        # is a tiny tmpfs of its own (1 MiB, 64 files), so it cannot fill the disk through it.
        if os.geteuid() == 0 and shutil.which("mount"):
            import subprocess

            if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=64,mode=0700", "tmpfs", ipc],
                              capture_output=True).returncode == 0:
                self._mounts.append(ipc)
        args = [f"--Execute.kernel_name={KERNEL_NAME}", "--KernelManager.transport=ipc",
                f"--KernelManager.ip={ipc}/k"]
        env = {"JUPYTER_PATH": os.pathsep.join([str(self.jupyter_dir), os.environ.get("JUPYTER_PATH", "")]),
               ENV_SCRATCH_ROOT: str(self.records / f"w{i}")}
        if self.pids_cgroup is not None:
            env[ENV_PIDS_CGROUP] = str(self.pids_cgroup)
        if self.memory_cgroup is not None:
            env[ENV_MEMORY_CGROUP] = str(self.memory_cgroup)
        return args, env

    def limits_hit(self) -> dict[Path, list[str]]:
        """``{kernel working directory: [what it ran into]}``, read outside the sandbox.

        The process cap is read from each kernel's cgroup (``pids.events``) and the memory cap
        from its memory cgroup (``memory.oom_control``: kernels killed for memory), which the
        student's code cannot change; kernels without a cgroup (no controller here) are not
        listed. The write cap is reported by the kernel itself (see :mod:`grader.kernel.kernel_guard`),
        in the cell that hit it.
        """
        out: dict[Path, list[str]] = {}
        for rec in sorted(self.records.glob("w*/kernel-*/record.json")):
            try:
                info = json.loads(rec.read_text())
            except (OSError, ValueError):
                continue
            events = counters(info.get("cgroup"), "pids.events")
            if events.get("max", 0) > 0:
                out.setdefault(Path(info["cwd"]), []).append(
                    f"hit the grading sandbox's process cap ({info.get('max_procs', MAX_PROCS)} per kernel): "
                    f"{events['max']} process starts were refused")
            if counters(info.get("memory_cgroup"), "memory.oom_control").get("oom_kill", 0) > 0:
                out.setdefault(Path(info["cwd"]), []).append(
                    f"hit the grading sandbox's memory cap ({info.get('mem_mb', DEFAULT_MEM_MB)} MiB per kernel): "
                    "the kernel was killed by the out-of-memory killer while that cell ran")
        return out

    def peak_memory_mb(self) -> dict[Path, float]:
        """``{kernel working directory: peak memory in MiB}`` of the kernels run so far that had a
        memory cgroup (``memory.max_usage_in_bytes``: what the kernel itself touched, page cache
        included; a warm kernel's pages shared with its zygote are not counted)."""
        out: dict[Path, float] = {}
        for rec in sorted(self.records.glob("w*/kernel-*/record.json")):
            try:
                info = json.loads(rec.read_text())
                peak = int(Path(info["memory_cgroup"], "memory.max_usage_in_bytes").read_text())
            except (OSError, ValueError, KeyError, TypeError):
                continue
            out[Path(info["cwd"])] = max(out.get(Path(info["cwd"]), 0.0), peak / 2**20)
        return out


#: A cell stopped by nbgrader's ``Execute.timeout`` ends in this error (nbclient interrupts the kernel).
_INTERRUPTED = ("was stopped by the grader's time limit per cell (nbgrader's Execute.timeout; or it raised "
                "KeyboardInterrupt): what it defines is missing for the cells below it, which may score 0")
#: ... and a cell the kernel stopped answering in, killed and skipped (``GradingExecute`` in
#: ``nbgrader_config.py``), this, whose message says so.
KERNEL_STOPPED = "KernelStoppedAnswering"
_FLAGGED_ERRORS = ("GradingSandboxLimit", "KeyboardInterrupt", KERNEL_STOPPED)


def limit_flags(course_root: Path, session: "SandboxSession | None", pairs) -> dict[tuple[str, str], list[str]]:
    """Report flags for every ``(assignment, student)`` in ``pairs`` whose kernel hit a cap.

    Read from the kernels' cgroups (outside the sandbox; the process cap) and from the autograded
    notebooks' cells: the guard's :class:`~grader.kernel.kernel_guard.GradingSandboxLimit` (either cap),
    ``KeyboardInterrupt``, which nbgrader's time limit per cell ends a cell with, and
    :data:`KERNEL_STOPPED`, a cell whose kernel stopped answering at that limit and was killed.
    """
    flags: dict[tuple[str, str], list[str]] = {}
    root = Path(course_root).resolve()
    if session is not None:
        for cwd, hits in session.limits_hit().items():
            try:
                st, a = Path(cwd).resolve().relative_to(root / "autograded").parts[:2]
            except ValueError:
                continue
            flags.setdefault((a, st), []).extend(dict.fromkeys(hits))
    import nbformat

    for a, st in pairs:
        for nb_path in sorted((root / "autograded" / st / a).glob("*.ipynb")):
            try:
                nb = nbformat.read(nb_path, as_version=4)
            except Exception:  # noqa: BLE001 - an unreadable notebook is reported elsewhere
                continue
            for cell in nb.cells:
                for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
                    if out.get("output_type") != "error" or out.get("ename") not in _FLAGGED_ERRORS:
                        continue
                    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                    where = f"cell {gid!r}" if gid else "a cell the student added"
                    said = _INTERRUPTED if out["ename"] == "KeyboardInterrupt" else out.get("evalue", "")
                    flags.setdefault((a, st), []).append(f"{where}: {said}")
    return flags


#: What a grading kernel imports before the student's first cell (:data:`grader.kernel.zygote.PRELOAD`).
_KERNEL_IMPORTS = ("ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell", "numpy", "torch",
                   "normref", "normref.handback")
_AS_PROBE = """
import importlib, os, shutil, sys, tempfile
for m in sys.argv[1:]:
    importlib.import_module(m)
import torch
torch.ones(64, 64) @ torch.ones(64, 64)
out, d = os.dup(1), tempfile.mkdtemp(prefix="nr-probe-")
from ipykernel.kernelapp import IPKernelApp
app = IPKernelApp.instance()  # a kernel's sockets and threads, as a grading kernel has them when idle
app.initialize(["-f", d + "/c.json", "--transport=ipc", "--ip=" + d + "/k", "--HistoryManager.hist_file=:memory:"])
app.kernel.shell.run_cell("x = 1")
peak = [ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("VmPeak:")][0]
shutil.rmtree(d, ignore_errors=True)
os.write(out, peak.encode() + b"\\n")
os._exit(0)
"""
_as_measured: dict[str, int] = {}


def kernel_address_space_mb() -> int:
    """The address space (MiB, ``VmPeak``) an idle grading kernel maps: a Python process that
    imports what a grading kernel imports (:data:`_KERNEL_IMPORTS`: ipykernel, numpy, the
    installed torch, normref), runs one torch op single-threaded as the kernels do, and sets up an
    ipykernel (its sockets and threads, each thread's stack and malloc arena counting in the
    address space), without serving it. Measured in a subprocess once per
    environment (the interpreter and torch's installed version and build), kept in memory and
    in :func:`shared_cache_dir`: ~2 CPU-s the first time.

    Raises:
        RuntimeError: the probe could not import them (its error's last line)."""
    import importlib.metadata
    import subprocess

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "none"
    key = f"{sys.executable}|{torch_version}"
    if key in _as_measured:
        return _as_measured[key]
    known = store.cached("address-space.json") or {}
    if key not in known:
        # the environment a kernel gets (grader.kernel.bwrap.sandbox_env: nothing else of this process's, which
        # changes what ipykernel starts: under pytest it watches no output fds, two threads fewer)
        env = {**_sandbox_env(os.environ, {}, SANDBOX_WORK), **dict.fromkeys(SINGLE_THREAD_VARS, "1")}
        out = subprocess.run([sys.executable, "-c", _AS_PROBE, *_KERNEL_IMPORTS], capture_output=True,
                             text=True, env=env, cwd="/", timeout=300)
        last = (out.stdout.strip().splitlines() or [""])[-1]  # after ipykernel's own notes
        if out.returncode != 0 or not last.isdigit():
            raise RuntimeError("measuring a grading kernel's address space failed: "
                               + (out.stderr.strip().splitlines() or ["no output"])[-1])
        known[key] = -(-int(last) // 1024)  # kB -> MiB, rounded up
        store.cache("address-space.json", known)
    _as_measured[key] = int(known[key])
    return _as_measured[key]


def address_space_mb(mem_mb: int) -> int:
    """The ``RLIMIT_AS`` cap (MiB) of a kernel without a memory cgroup: what its imports map
    (:func:`kernel_address_space_mb`) plus ``mem_mb`` for its cells, unless
    ``$NORMREF_KERNEL_AS_MB`` sets it. A CUDA build of torch maps several GiB of libraries it
    never touches on a CPU-only grader: a fixed cap would refuse to import it."""
    if os.environ.get(ENV_KERNEL_AS_MB):
        return int(os.environ[ENV_KERNEL_AS_MB])
    return kernel_address_space_mb() + mem_mb


def _normref_dir() -> str:
    """The installed ``normref`` package's folder, found without importing it (torch, matplotlib)."""
    import importlib.util

    spec = importlib.util.find_spec("normref")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the grading sandbox needs the normref package installed (make install)")
    return str(Path(next(iter(spec.submodule_search_locations))).resolve())


def _ro_paths() -> list[str]:
    """What the kernel may read: the interpreter, the venv, the normref package, system libs."""
    paths = {sys.base_prefix, sys.prefix, _normref_dir()}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            paths.add(p)
    # drop paths already inside another one
    out = []
    for p in sorted(paths, key=len):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


def _student_files(src: Path) -> list[tuple[Path, Path]]:
    """``(relative path, absolute path)`` of the student's folder to copy into the sandbox:
    regular files only, at most :data:`MAX_SCRATCH_COPY_FILES` and
    :data:`MAX_SCRATCH_COPY_BYTES` in all (the rest is left out)."""
    out, total = [], 0
    for p in sorted(src.rglob("*")):
        if p.is_symlink() or not p.is_file():
            continue
        total += p.stat().st_size
        if total > MAX_SCRATCH_COPY_BYTES or len(out) >= MAX_SCRATCH_COPY_FILES:
            break
        out.append((p.relative_to(src), p))
    return out


def bwrap_argv(connection_file: str, cwd: str, kernel_args: list[str], *,
               files: list[tuple[Path, int]] = (), connection_fd: int | None = None,
               pids_events: str | None = None, max_write_bytes: int = MAX_WRITE_BYTES,
               max_procs: int = MAX_PROCS) -> list[str]:
    """The full ``bwrap ... python kernel_guard.py ...`` command.

    Args:
        connection_file: the kernel's connection file (``ipc`` transport).
        cwd: the student's folder, as nbgrader sees it (the kernel runs in its copy, /tmp/work).
        kernel_args: more ipykernel arguments.
        files: ``(path relative to cwd, open file descriptor)`` copied into the tmpfs.
        connection_fd: an open descriptor of the connection file (else it is opened here).
        pids_events: the kernel's cgroup ``pids.events``, shown read-only to the guard.
        max_write_bytes: size of the kernel's one writable tmpfs.
        max_procs: the process cap, told to the guard for its message.

    Raises:
        ValueError: the connection file does not use the ``ipc`` transport with an absolute
            socket path (TCP cannot cross into the sandbox's empty network namespace).
    """
    info = json.loads(Path(connection_file).read_text())
    if info.get("transport") != "ipc" or not os.path.isabs(info.get("ip", "")):
        raise ValueError("the grading sandbox needs KernelManager.transport='ipc' and an absolute "
                         f"KernelManager.ip; got transport={info.get('transport')!r} ip={info.get('ip')!r}")
    ipc_dir = str(Path(info["ip"]).parent)
    if connection_fd is None:
        connection_fd = os.open(connection_file, os.O_RDONLY)
        os.set_inheritable(connection_fd, True)
    argv = head(BWRAP, max_write_bytes, SANDBOX_WORK, _system_binds())
    guard = str(Path(__file__).resolve().with_name("kernel_guard.py"))
    argv += ["--ro-bind", guard, guard,  # the grader's only file inside the sandbox
             "--file", str(connection_fd), "/tmp/connection.json",
             "--bind", ipc_dir, ipc_dir]  # this worker's kernel sockets
    for rel, fd in files:
        for parent in reversed(rel.parents[:-1]):
            argv += ["--dir", f"{SANDBOX_WORK}/{parent}"]
        argv += ["--file", str(fd), f"{SANDBOX_WORK}/{rel}"]
    if pids_events:
        argv += ["--ro-bind", pids_events, SANDBOX_PIDS_EVENTS]
    # its environment is sandbox_env()'s: no kernel learns where the graded inputs are
    return argv + _kernel_argv(cwd, guard, kernel_args, pids_events, max_write_bytes, max_procs)


def _system_binds() -> list[str]:
    """bwrap's arguments showing the system read-only: /usr, /bin, /lib..., /etc's files the
    kernel needs, Python's and the course's folders (:func:`_ro_paths`)."""
    argv = []
    for top in ("usr", "bin", "lib", "lib64", "sbin"):
        p = Path("/") / top
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), str(p)]
        elif p.exists():
            argv += ["--ro-bind", str(p), str(p)]
    for f in _ETC:
        if os.path.exists(f):
            argv += ["--ro-bind", f, f]
    for p in _ro_paths():
        argv += ["--ro-bind", p, p]
    return argv


def sandbox_env(environ, *, nproc_rlimit: bool, max_procs: int = MAX_PROCS,
                max_write_bytes: int = MAX_WRITE_BYTES) -> dict[str, str]:
    """A kernel's or clean room's whole environment (:func:`grader.kernel.bwrap.sandbox_env`): home, matplotlib's
    and IPython's folders in the tmpfs (no start-up file is read), no user site, the caps, and whether
    the guard sets ``RLIMIT_NPROC`` (no pids cgroup: counted per user namespace, i.e. per sandbox)."""
    return _sandbox_env(environ, {
        "HOME": "/tmp/home", "MPLCONFIGDIR": "/tmp/home/mpl", "IPYTHONDIR": "/tmp/home/ipython",
        "NORMREF_GRADING": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
        ENV_MAX_PROCS: str(max_procs), ENV_MAX_WRITE_BYTES: str(max_write_bytes),
        ENV_NPROC_RLIMIT: "1" if nproc_rlimit else "0"}, SANDBOX_WORK)


def _kernel_argv(cwd: str, guard: str, kernel_args: list[str], pids_events: str | None,
                 max_write_bytes: int, max_procs: int) -> list[str]:
    """bwrap's last arguments: the kernel's folder (the student's, a private writable copy) and its
    whole environment (no JPY_PARENT_PID: ipykernel would take PID 1 for its parent and exit;
    --die-with-parent ends it with its parent), then the guarded kernel."""
    env = sandbox_env(os.environ, nproc_rlimit=not pids_events, max_procs=max_procs, max_write_bytes=max_write_bytes)
    return ["--chdir", SANDBOX_WORK, *env_args(env), sys.executable, guard, "-f", "/tmp/connection.json",
            *kernel_args]


def _set_limits(as_mb: int | None) -> None:
    """The rlimits of a kernel: ``RLIMIT_AS`` of ``as_mb`` MiB (None: memory is capped by its
    cgroup instead), the largest file, no core dumps."""
    if as_mb:
        as_bytes = as_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails instead of killing


def _clear_stale_sockets(info: dict) -> None:
    """Remove what earlier kernels of this worker left in its socket folder (one kernel runs
    at a time per worker), so a kernel that filled it cannot stop the next from starting."""
    ipc = Path(info["ip"])
    for p in ipc.parent.iterdir():
        with contextlib.suppress(OSError):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()


def prepare(args: list[str], extra_procs: int = 0) -> tuple[list[str], list[int]]:
    """What :func:`main` does before it runs bubblewrap, done to the calling process (which
    must be in the kernel's working directory, with the kernel's environment): this kernel's
    record, its pids cgroup (joined; ``extra_procs`` more processes allowed than
    ``NORMREF_MAX_PROCS``, for a caller that stays in it beside bubblewrap) and its memory cgroup
    (joined, capped at ``NORMREF_KERNEL_MEM_MB``), the rlimits (``RLIMIT_AS`` only without a
    memory cgroup: ``NORMREF_KERNEL_AS_MB``, else :func:`address_space_mb`), the student's files
    opened.

    Args:
        args: ``-f CONNECTION_FILE [ipykernel args]``.

    Returns:
        ``(bwrap argv, descriptors that argv names)``: the :func:`bwrap_argv` command.
    """
    i = args.index("-f")
    connection_file = args[i + 1]
    kernel_args = args[:i] + args[i + 2:]
    cwd = os.getcwd()
    max_procs = int(os.environ.get(ENV_MAX_PROCS, MAX_PROCS))
    max_write = int(os.environ.get(ENV_MAX_WRITE_BYTES, MAX_WRITE_BYTES))
    # A record of this kernel (its folder, its cgroup) for make grade, outside the sandbox
    # (NORMREF_SCRATCH_ROOT is removed after the run; nothing of ours outlives bwrap).
    work, cgroup, memory, mem_mb = join_cgroups("kernel-", max_procs + extra_procs)
    (work / "record.json").write_text(json.dumps({"cwd": cwd, "cgroup": str(cgroup) if cgroup else None,
                                                  "max_procs": max_procs, "mem_mb": mem_mb,
                                                  "memory_cgroup": str(memory) if memory else None}))
    if cgroup is None and os.geteuid() == 0:
        print(f"grading sandbox: no pids cgroup here, and RLIMIT_NPROC does not bind root: this kernel "
              f"is not limited to {max_procs} processes", file=sys.stderr)
    info = json.loads(Path(connection_file).read_text())
    if info.get("transport") == "ipc" and os.path.isabs(info.get("ip", "")):
        _clear_stale_sockets(info)
    files = []
    for rel, path in _student_files(Path(cwd)):
        fd = os.open(path, os.O_RDONLY)
        os.set_inheritable(fd, True)
        files.append((rel, fd))
    connection_fd = os.open(connection_file, os.O_RDONLY)
    os.set_inheritable(connection_fd, True)
    _set_limits(None if memory else address_space_mb(mem_mb))
    cmd = bwrap_argv(connection_file, cwd, kernel_args, files=files, connection_fd=connection_fd,
                     pids_events=str(cgroup / "pids.events") if cgroup else None,
                     max_write_bytes=max_write, max_procs=max_procs)
    return cmd, [connection_fd] + [fd for _, fd in files]


def join_cgroups(prefix: str, max_procs: int) -> tuple[Path, Path | None, Path | None, int]:
    """A record folder for this process under ``NORMREF_SCRATCH_ROOT`` (outside the sandbox) and its
    pids and memory cgroups, joined where the session has them: ``(folder, pids, memory, MiB)``."""
    root = os.environ.get(ENV_SCRATCH_ROOT) or tempfile.gettempdir()
    os.makedirs(root, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    cgroup = memory = None
    mem_mb = default_mem_mb()
    if os.environ.get(ENV_PIDS_CGROUP):
        cgroup = join_pids_cgroup(Path(os.environ[ENV_PIDS_CGROUP]), work.name, max_procs)
    if os.environ.get(ENV_MEMORY_CGROUP):
        memory = join_memory_cgroup(Path(os.environ[ENV_MEMORY_CGROUP]), work.name, mem_mb)
    return work, cgroup, memory, mem_mb


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "-f" not in args:
        print("usage: python grader/kernel/sandbox.py -f CONNECTION_FILE [ipykernel args]", file=sys.stderr)
        return 2
    parent = os.getppid()
    cmd, _ = prepare(args)
    # Die with the autograde worker that started this kernel, also when it died while this was
    # still preparing: bwrap's --die-with-parent is set only after exec, too late if the worker
    # is already gone (it then watches init, which never dies). The signal survives exec.
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        return 1
    argv, _ = hidden(cmd)
    os.execve(argv[0], argv, {})  # nothing of the grader's for the sandbox's PID 1 (bwrap.hidden)
    return 127  # pragma: no cover - execv does not return


if __name__ == "__main__":
    sys.exit(main())
