"""The grading kernel: ipykernel inside a bubblewrap sandbox, with resource limits.

``python -m grader.sandbox -f CONNECTION_FILE [ipykernel args]`` is the ``argv`` of
the ``normref-sandbox`` kernelspec that ``make grade`` hands nbgrader. It

* sets per-kernel limits (address space ``NORMREF_KERNEL_MEM_MB``, default 3072 MiB; largest
  file written 64 MiB), so a memory bomb raises ``MemoryError`` in the student's cell instead
  of taking the machine down;
* copies the kernel's working directory (the student's own submitted folder) into a private
  scratch directory and mounts that copy in its place, so the student's files are where the
  notebook expects them and every write lands in the throw-away copy;
* starts ipykernel with `bwrap <https://github.com/containers/bubblewrap>`_: new user, PID,
  IPC, UTS and network namespaces (no network: the kernel talks to nbgrader over Unix sockets,
  ``KernelManager.transport = "ipc"``), all capabilities dropped, uid 65534, and a file system
  that holds only the Python installation, the virtual environment, the ``normref`` package,
  the connection files and the scratch directory: the course's ``source/`` (solutions, hidden
  tests), ``gradebook.db`` and other students' folders do not exist in there;
* runs :mod:`grader.kernel_guard` first, which turns ``os._exit``/``sys.exit`` into
  errors of the cell that called them and caps a cell's printed output.

What it does not prevent is written in the README ("What the grader protects against").
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sys
import sysconfig
import tempfile
from pathlib import Path

BWRAP = shutil.which("bwrap") or "/usr/bin/bwrap"
KERNEL_NAME = "normref-sandbox"
DEFAULT_MEM_MB = 3072
MAX_FILE_BYTES = 64 * 2**20
MAX_SCRATCH_COPY_BYTES = 64 * 2**20
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


def write_kernelspec(dest: Path, mem_mb: int = DEFAULT_MEM_MB) -> Path:
    """Write ``dest/kernels/normref-sandbox/kernel.json``; put ``dest`` on ``JUPYTER_PATH``."""
    kdir = dest / "kernels" / KERNEL_NAME
    kdir.mkdir(parents=True, exist_ok=True)
    # Run by path, not with -m: `-m grader.sandbox` would import the normref package
    # (torch, matplotlib) twice per kernel start, ~12 s of the ~16 s a kernel took to start.
    spec = {
        "argv": [sys.executable, str(Path(__file__).resolve()), "-f", "{connection_file}"],
        "display_name": "Python 3 (normref grading sandbox)",
        "language": "python",
        "env": {"NORMREF_KERNEL_MEM_MB": str(mem_mb)},
        "interrupt_mode": "message",  # signals do not cross into bwrap's PID namespace
        "metadata": {"debugger": False},
    }
    (kdir / "kernel.json").write_text(json.dumps(spec, indent=1))
    return kdir


class SandboxSession:
    """Everything ``make grade`` needs to run nbgrader's kernels in the sandbox.

    Use as a context manager; :meth:`worker` gives one autograde process its nbgrader options
    and environment (its own kernel-socket and scratch directories).
    """

    def __init__(self, course_root: Path, mem_mb: int = DEFAULT_MEM_MB):
        self.course_root = Path(course_root)
        self.mem_mb = mem_mb
        self.jupyter_dir = self.course_root / "logs" / "jupyter"
        self._tmp: list[str] = []

    def __enter__(self) -> "SandboxSession":
        write_kernelspec(self.jupyter_dir, self.mem_mb)
        return self

    def __exit__(self, *exc) -> None:
        for d in self._tmp:
            shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(self.course_root / "logs" / "scratch", ignore_errors=True)

    def worker(self, i: int) -> tuple[list[str], dict[str, str]]:
        # Unix socket paths are limited to ~107 bytes: keep them short, under /tmp.
        ipc = tempfile.mkdtemp(prefix="nr-ipc-", dir="/tmp")
        self._tmp.append(ipc)
        args = [f"--Execute.kernel_name={KERNEL_NAME}", "--KernelManager.transport=ipc",
                f"--KernelManager.ip={ipc}/k"]
        env = {"JUPYTER_PATH": os.pathsep.join([str(self.jupyter_dir), os.environ.get("JUPYTER_PATH", "")]),
               "NORMREF_SCRATCH_ROOT": str(self.course_root / "logs" / "scratch" / f"w{i}")}
        return args, env


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


def _copy_limited(src: Path, dst: Path) -> None:
    total = 0
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if p.is_symlink():
            continue
        if p.is_dir():
            (dst / rel).mkdir(parents=True, exist_ok=True)
        elif p.is_file():
            total += p.stat().st_size
            if total > MAX_SCRATCH_COPY_BYTES:
                break
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst / rel)


def bwrap_argv(connection_file: str, cwd: str, scratch: str, home: str, kernel_args: list[str]) -> list[str]:
    """The full ``bwrap ... python -m grader.kernel_guard ...`` command.

    Raises:
        ValueError: the connection file does not use the ``ipc`` transport with an absolute
            socket path (TCP cannot cross into the sandbox's empty network namespace).
    """
    info = json.loads(Path(connection_file).read_text())
    if info.get("transport") != "ipc" or not os.path.isabs(info.get("ip", "")):
        raise ValueError("the grading sandbox needs KernelManager.transport='ipc' and an absolute "
                         f"KernelManager.ip; got transport={info.get('transport')!r} ip={info.get('ip')!r}")
    ipc_dir = str(Path(info["ip"]).parent)
    conn_copy = Path(home).parent / "connection.json"
    conn_copy.write_text(json.dumps(info))
    argv = [BWRAP, "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
            "--cap-drop", "ALL", "--die-with-parent", "--new-session",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
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
    guard = str(Path(__file__).resolve().with_name("kernel_guard.py"))
    argv += ["--ro-bind", guard, guard,  # the grader's only file inside the sandbox
             "--ro-bind", str(conn_copy), "/tmp/connection.json",
             "--bind", ipc_dir, ipc_dir,  # this worker's kernel sockets
             "--bind", scratch, cwd,  # the student's folder: a private, writable copy
             "--bind", home, "/tmp/home",
             "--chdir", cwd,
             "--setenv", "HOME", "/tmp/home", "--setenv", "MPLCONFIGDIR", "/tmp/home/mpl",
             "--setenv", "IPYTHONDIR", "/tmp/home/ipython", "--setenv", "NORMREF_GRADING", "1",
             "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
             # ipykernel would see its parent as PID 1 in the new PID namespace and exit;
             # bwrap's --die-with-parent already ends the kernel with its parent.
             "--unsetenv", "JPY_PARENT_PID",
             sys.executable, guard,
             "-f", "/tmp/connection.json",
             *kernel_args]
    return argv


def _set_limits(mem_mb: int) -> None:
    as_bytes = mem_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails instead of killing


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "-f" not in args:
        print("usage: python -m grader.sandbox -f CONNECTION_FILE [ipykernel args]", file=sys.stderr)
        return 2
    i = args.index("-f")
    connection_file = args[i + 1]
    kernel_args = args[:i] + args[i + 2:]
    cwd = os.getcwd()
    # Scratch copies live under NORMREF_SCRATCH_ROOT, which make grade removes after the run
    # (the kernel process is bwrap itself, so nothing of ours outlives it to clean up).
    root = os.environ.get("NORMREF_SCRATCH_ROOT") or tempfile.gettempdir()
    os.makedirs(root, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kernel-", dir=root))
    scratch, home = work / "scratch", work / "home"
    scratch.mkdir()
    home.mkdir()
    _copy_limited(Path(cwd), scratch)
    _set_limits(int(os.environ.get("NORMREF_KERNEL_MEM_MB", DEFAULT_MEM_MB)))
    cmd = bwrap_argv(connection_file, cwd, str(scratch), str(home), kernel_args)
    os.execv(cmd[0], cmd)
    return 127  # pragma: no cover - execv does not return


if __name__ == "__main__":
    sys.exit(main())
