"""How a clean room (:mod:`grader.kernel.cleanroom`) starts: in a bubblewrap sandbox of its own, under the
grading kernels' rules, forked from the worker's zygote (:func:`grader.kernel.warm.launch_cleanroom`) or,
without one, fresh: ``python grader/kernel/cleanroom_launch.py`` (run by path, as ``grader/kernel/sandbox.py``
is), which joins the session's cgroups, sets the rlimits and becomes bubblewrap.

Its sandbox holds the system, Python, the virtual environment and normref read-only, and the
clean room's two files (:data:`FILES`); none of the student's files, no socket folder, no
connection file: its only way out is its standard input and output, to the worker.
"""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

try:
    from . import sandbox
    from .bwrap import env_args, head, hidden
except ImportError:  # run by path, as the fresh launcher and the zygote are
    import sandbox  # type: ignore[no-redef]
    from bwrap import env_args, head, hidden  # type: ignore[no-redef]

#: The clean room's files: the process it runs, and its seal.
FILES = ("cleanroom_box.py", "cleanroom_seal.py")


def cleanroom_argv(pids_events: str | None = None, max_write_bytes: int = sandbox.MAX_WRITE_BYTES,
                   max_procs: int = sandbox.MAX_PROCS) -> list[str]:
    """``bwrap ... python cleanroom_box.py`` (see the module's doc); its environment is the
    kernels' (:func:`grader.kernel.sandbox.sandbox_env`), so a zygote serves both."""
    here = Path(__file__).resolve().parent
    argv = head(sandbox.BWRAP, max_write_bytes, sandbox.SANDBOX_WORK, sandbox._system_binds())
    for name in FILES:
        argv += ["--ro-bind", str(here / name), str(here / name)]
    env = sandbox.sandbox_env(os.environ, nproc_rlimit=not pids_events, max_procs=max_procs,
                              max_write_bytes=max_write_bytes)
    return argv + ["--chdir", sandbox.SANDBOX_WORK, *env_args(env), sys.executable, str(here / FILES[0])]


def prepare(extra_procs: int = 0) -> list[str]:
    """What the launcher does before it becomes bubblewrap, done to the calling process (in the
    clean room's environment): its pids and memory cgroups joined (``extra_procs`` more processes
    for a caller that stays beside bubblewrap), the rlimits set. Returns :func:`cleanroom_argv`."""
    max_procs = int(os.environ.get(sandbox.ENV_MAX_PROCS, sandbox.MAX_PROCS))
    max_write = int(os.environ.get(sandbox.ENV_MAX_WRITE_BYTES, sandbox.MAX_WRITE_BYTES))
    _, cgroup, memory, mem_mb = sandbox.join_cgroups("cleanroom-", max_procs + extra_procs)
    sandbox._set_limits(None if memory else sandbox.address_space_mb(mem_mb))
    return cleanroom_argv(str(cgroup / "pids.events") if cgroup else None, max_write, max_procs)


def main() -> int:
    parent = os.getppid()
    cmd = prepare()
    import ctypes

    # die with the worker, also if it died while this was preparing (as grader/kernel/sandbox.py's main)
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        return 1
    argv, _ = hidden(cmd)
    os.execve(argv[0], argv, {})
    return 127  # pragma: no cover - execve does not return


if __name__ == "__main__":
    sys.exit(main())
