"""cgroup v1 controllers of the grading kernels: one ``pids`` and one ``memory`` child per kernel.

A grading run makes a ``normref-<pid>-<hex>`` cgroup in each hierarchy it may write to
(:func:`make_cgroup`); each kernel launcher joins a child of it capped at the kernel's process count
or memory (:func:`join_pids_cgroup`, :func:`join_memory_cgroup`) before it becomes the sandbox,
and the run reads the counters back from outside (:func:`counters`). :func:`sweep_stale` removes
what runs killed with ``kill -9`` left. Without a writable hierarchy the sandbox falls back on
rlimits (:mod:`grader.kernel.sandbox`). Imported by path too (the kernel launcher, ``grader/kernel/sandbox.py``
run by path): standard library only.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
from pathlib import Path

#: cgroup v1 ``pids`` hierarchy (``make grade`` makes one child per kernel when it may).
PIDS_CGROUP_ROOT = Path("/sys/fs/cgroup/pids")
#: cgroup v1 ``memory`` hierarchy (the same: one child per kernel, capped at its memory).
MEMORY_CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
#: Environment variables naming each hierarchy's root (tests point them elsewhere).
_CGROUP_ROOTS = {"pids": ("NORMREF_PIDS_CGROUP_ROOT", PIDS_CGROUP_ROOT),
                 "memory": ("NORMREF_MEMORY_CGROUP_ROOT", MEMORY_CGROUP_ROOT)}


def hierarchy(kind: str) -> Path:
    """The cgroup v1 hierarchy ``kind`` (``"pids"`` or ``"memory"``): its usual mount point, or
    ``$NORMREF_PIDS_CGROUP_ROOT`` / ``$NORMREF_MEMORY_CGROUP_ROOT``."""
    var, default = _CGROUP_ROOTS[kind]
    return Path(os.environ.get(var) or default)


def memory_cgroups_work() -> bool:
    """True if kernels' memory is capped by a cgroup here (a writable v1 ``memory`` hierarchy)."""
    root = hierarchy("memory")
    return (root / "cgroup.procs").exists() and (root / "memory.limit_in_bytes").exists() and os.access(root, os.W_OK)


def counters(cgroup: str | None, name: str) -> dict[str, int]:
    """The ``key value`` lines of a cgroup file (``pids.events``, ``memory.oom_control``) as
    ``{key: int}``; ``{}`` without the cgroup or the file."""
    if not cgroup:
        return {}
    try:
        text = Path(cgroup, name).read_text()
    except OSError:
        return {}
    return {k: int(v) for k, v in (ln.split() for ln in text.splitlines() if len(ln.split()) == 2)
            if v.lstrip("-").isdigit()}


def make_cgroup(kind: str, name: str) -> Path | None:
    """A new child of the cgroup v1 hierarchy ``kind`` (``"pids"``, ``"memory"``) for this grading
    run, or None when this machine has none or will not let us write to it (then
    the process cap is enforced with ``RLIMIT_NPROC``, which holds for a non-root instructor
    only, and memory with ``RLIMIT_AS``)."""
    root = hierarchy(kind)
    if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
        return None
    if kind == "memory" and not memory_cgroups_work():
        return None
    try:
        (root / name).mkdir()
    except OSError:
        return None
    return root / name


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cgroup_procs(cg: Path) -> int:
    """Processes in cgroup ``cg`` and its children (a count; unreadable counts as in use)."""
    n = 0
    for procs in [cg / "cgroup.procs", *cg.glob("*/cgroup.procs")]:
        try:
            n += len(procs.read_text().split())
        except OSError:
            n += 1
    return n


def _kill_cgroup(cg: Path, wait_s: float = 2.0) -> int:
    """SIGKILL every process in cgroup ``cg`` and its children; wait up to ``wait_s`` for them to
    leave it. Returns how many were signalled."""
    import time

    pids = set()
    for procs in [cg / "cgroup.procs", *cg.glob("*/cgroup.procs")]:
        with contextlib.suppress(OSError, ValueError):
            pids |= {int(p) for p in procs.read_text().split()}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while _cgroup_procs(cg) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(pids)


def remove_cgroup(cg: Path, wait_s: float = 10.0) -> tuple[int, bool]:
    """Remove cgroup ``cg`` and its children, SIGKILLing first any process still in them (a
    child the student's code left behind, which outlived its kernel) and waiting up to
    ``wait_s`` for them to leave.

    Returns:
        ``(processes signalled, removed)``; ``removed`` is False when a process would not leave
        or the kernel refused the ``rmdir``.
    """
    killed = _kill_cgroup(cg, wait_s) if _cgroup_procs(cg) else 0
    if _cgroup_procs(cg):
        return killed, False
    try:
        for child in sorted((c for c in cg.iterdir() if c.is_dir()), reverse=True):
            child.rmdir()
        cg.rmdir()
    except OSError:
        return killed, False
    return killed, True


def _named_by_a_live_process(path: str) -> bool:
    """Does any live process's command line name ``path`` (an autograde worker's
    ``--KernelManager.ip=<path>/k``, a kernel launcher's ``--bind <path> <path>``)?"""
    me = os.getpid()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == me:
            continue
        try:
            if path.encode() in (proc / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def sweep_stale(cgroup_root: Path | None = None, tmp: Path = Path("/tmp")) -> dict[str, int]:
    """Remove what grading runs killed with ``kill -9`` left behind on this machine: their
    ``normref-<pid>-<hex>`` cgroups in the ``pids`` and ``memory`` hierarchies and their ``nr-ipc-*`` kernel-socket
    folders under ``/tmp`` (tmpfs mounts, as root).

    Never one in use: a cgroup is removed only when the process that made it (the ``<pid>`` in
    its name: the run's grader or Dask worker) is gone; a process still in it or its children
    (``cgroup.procs``) is a sandbox that outlived its run (seen: a ``bwrap`` whose worker was
    killed while it started, asleep forever) and is killed first; a socket
    folder only when the process named in it (``nr-ipc-<pid>-``; older folders carry none) is
    gone and no live process names it on its command line (the autograde worker that uses it,
    a kernel sandbox bound to it). Other users' runs are safe the same way.

    Returns:
        ``{"cgroups": removed, "ipc": removed, "killed": processes of dead runs killed,
        "in_use": left because in use}``.
    """
    import re
    import subprocess

    out = {"cgroups": 0, "ipc": 0, "killed": 0, "in_use": 0}
    roots = [Path(cgroup_root)] if cgroup_root else [hierarchy(k) for k in _CGROUP_ROOTS]
    for root in roots:
        if not ((root / "cgroup.procs").exists() and os.access(root, os.W_OK)):
            continue
        for cg in sorted(root.glob("normref-*")):
            m = re.fullmatch(r"normref-(\d+)-[0-9a-f]+", cg.name)
            if not m or not cg.is_dir() or _alive(int(m.group(1))):
                continue
            killed, removed = remove_cgroup(cg)
            out["killed"] += killed
            out["cgroups" if removed else "in_use"] += 1
    try:
        mounts = {line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
                  if len(line.split()) > 1}
    except OSError:
        mounts = set()
    for d in sorted(Path(tmp).glob("nr-ipc-*")):
        m = re.match(r"nr-ipc-(\d+)-", d.name)
        if not d.is_dir() or d.is_symlink() or (m and _alive(int(m.group(1)))):
            continue
        if _named_by_a_live_process(str(d)):
            out["in_use"] += 1
            continue
        if str(d) in mounts:
            subprocess.run(["umount", "-l", str(d)], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)
        out["ipc"] += 0 if d.exists() else 1
    return out


def join_pids_cgroup(parent: Path, kernel: str, max_procs: int) -> Path | None:
    """Move this process (and so the sandbox it becomes) into a new ``parent/kernel`` cgroup
    that allows ``max_procs`` processes; None if that fails."""
    cg = parent / kernel
    try:
        cg.mkdir()
        (cg / "pids.max").write_text(str(max_procs))
        (cg / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        with contextlib.suppress(OSError):
            cg.rmdir()
        return None
    return cg


def join_memory_cgroup(parent: Path, kernel: str, mem_mb: int) -> Path | None:
    """Move this process (and so the sandbox it becomes) into a new ``parent/kernel`` memory
    cgroup capped at ``mem_mb`` MiB (memory and swap together where swap is accounted); None
    if that fails."""
    cg = parent / kernel
    limit = str(mem_mb * 2**20)
    try:
        cg.mkdir()
        (cg / "memory.limit_in_bytes").write_text(limit)
        if (cg / "memory.memsw.limit_in_bytes").exists():  # no swapping past the cap either
            (cg / "memory.memsw.limit_in_bytes").write_text(limit)
        (cg / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        with contextlib.suppress(OSError):
            cg.rmdir()
        return None
    return cg
