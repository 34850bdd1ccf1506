"""Guards inside the grading kernel (loaded as an IPython extension by the sandbox launcher).

While a cell runs:

* ``os._exit``, ``os.abort`` and ``os.kill``/``os.killpg`` aimed at the kernel itself raise
  :class:`GradingKernelGuard` in the cell that called them, instead of killing the kernel;
  so the error is charged to that question and the kernel lives on for the next one;
* printed output is capped at ``NORMREF_MAX_OUTPUT_BYTES`` per cell (default 1 MiB), with one
  notice, so a cell that prints hundreds of MB cannot bloat the notebook or the grader;
* a cell that ran into one of the sandbox's caps (the process cap, counted by the kernel's
  cgroup; the write cap, the tmpfs full) fails with :class:`GradingSandboxLimit`, which says
  which cap and what it costs, even when the student's code caught the underlying ``OSError``;
* the student's folder is searched for modules last, after every installed package
  (IPython puts it first on ``sys.path``), so a ``torch.py`` or ``normref/`` handed in beside
  the notebook cannot shadow the course's packages;
* without a cgroup, ``RLIMIT_NPROC`` is set here, inside the sandbox's user namespace, where
  the kernel counts only this sandbox's processes.

These are conveniences, not the security boundary (student code runs in this same process
and could undo them); the boundary is the sandbox around the process, and a kernel that dies
anyway is handled by ``make grade`` (the question is scored 0 and the rest re-graded).
"""
from __future__ import annotations

import os
import signal
import sys
import threading

MAX_OUTPUT_BYTES = int(os.environ.get("NORMREF_MAX_OUTPUT_BYTES", 2**20))


#: Inside the sandbox: the kernel's cgroup event counter, bound read-only by grader/sandbox.py.
PIDS_EVENTS = "/run/normref/pids.events"
#: The caps grader/sandbox.py sets for this kernel (``--setenv``), read here; one name each.
ENV_MAX_PROCS = "NORMREF_MAX_PROCS"
ENV_MAX_WRITE_BYTES = "NORMREF_MAX_WRITE_BYTES"
#: "1": no pids cgroup counts this kernel's processes, so this script sets ``RLIMIT_NPROC``.
ENV_NPROC_RLIMIT = "NORMREF_NPROC_RLIMIT"
WRITE_DIR = "/tmp"


class GradingKernelGuard(RuntimeError):
    """Raised in a student's cell for an action that would kill the grading kernel."""


class GradingSandboxLimit(RuntimeError):
    """The cell ran into one of the grading sandbox's caps (processes, bytes written)."""


_state = {"in_cell": False, "written": 0, "noticed": False, "refused": 0, "full": False}


def _refused_forks() -> int:
    """How many process starts the kernel's cgroup has refused so far (0 without one)."""
    try:
        with open(PIDS_EVENTS) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "max":
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _write_space_left() -> int | None:
    try:
        st = os.statvfs(WRITE_DIR)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _limits_hit() -> list[str]:
    """The caps this cell ran into (compared with the state before the cell)."""
    hit = []
    procs = os.environ.get(ENV_MAX_PROCS, "64")
    if _refused_forks() > _state["refused"]:
        hit.append(f"tried to run more than {procs} processes at once (the grading sandbox's "
                   "process cap)")
    left = _write_space_left()
    cap = int(os.environ.get(ENV_MAX_WRITE_BYTES, 0) or 0)
    if cap and left is not None and left < min(2**20, cap // 64) and not _state["full"]:
        hit.append(f"wrote more than the {cap // 2**20} MiB the grading sandbox lets a kernel write "
                   "(its folder and /tmp together)")
    return hit


def _pre(*_a, **_k):
    left = _write_space_left()
    cap = int(os.environ.get(ENV_MAX_WRITE_BYTES, 0) or 0)
    _state.update(in_cell=True, written=0, noticed=False, refused=_refused_forks(),
                  full=bool(cap and left is not None and left < min(2**20, cap // 64)))


def _post(*_a, **_k):
    _state["in_cell"] = False


def _post_run_cell(ip):
    """After a cell: if it ran into a cap, the cell fails with :class:`GradingSandboxLimit`
    (ipykernel reads ``result.error_in_exec`` after this event to set the reply's status)."""

    def check(result=None):
        hit = _limits_hit()
        if not hit or result is None:
            return
        err = GradingSandboxLimit("this cell " + " and ".join(hit) + ". Grading gives this question "
                                  "what a blank answer earns; an honest answer needs neither.")
        try:
            raise err
        except GradingSandboxLimit:
            ip.showtraceback()
        result.error_in_exec = err

    return check


def _student_folder_last() -> None:
    """Take the working directory ('' or its path) off ``sys.path`` and search it last of all,
    after every other finder on ``sys.meta_path``: an editable install (like the course's
    ``normref``) is found by a meta-path finder that runs *after* the search of ``sys.path``,
    so the folder at the end of ``sys.path`` would still shadow it."""
    import importlib
    import importlib.machinery

    here = os.path.realpath(os.getcwd())
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != here]

    class StudentFolderFinder:
        """Top-level modules in the student's own folder, found only if nothing else has them."""

        @staticmethod
        def find_spec(name, path=None, target=None):
            if path is not None:
                return None
            return importlib.machinery.PathFinder.find_spec(name, [here])

        @staticmethod
        def invalidate_caches():
            pass

    sys.meta_path.append(StudentFolderFinder())
    importlib.invalidate_caches()


def _student_code() -> bool:
    # Cells run on the main thread; ipykernel's control thread (which delivers interrupts
    # with os.killpg) must keep working.
    return _state["in_cell"] and threading.current_thread() is threading.main_thread()


def _guard_exit(real, what):
    def guarded(*args, **kwargs):
        if _student_code():
            raise GradingKernelGuard(f"{what} would end the grading kernel; it is blocked while grading. "
                                     "Return from your function instead.")
        return real(*args, **kwargs)

    return guarded


def _guard_kill(real):
    def guarded(pid, sig, *rest):
        me = os.getpid()
        if _student_code() and sig != 0 and pid in (me, 0, -1, -os.getpgid(0)):
            raise GradingKernelGuard(f"os.kill({pid}, {sig}) would kill the grading kernel; it is blocked "
                                     "while grading.")
        return real(pid, sig, *rest)

    return guarded


def _cap_output():
    from ipykernel.iostream import OutStream

    real_write = OutStream.write

    def write(self, s):
        if not _state["in_cell"]:
            return real_write(self, s)
        n = len(s) if isinstance(s, str) else 0
        if _state["written"] + n > MAX_OUTPUT_BYTES:
            if not _state["noticed"]:
                _state["noticed"] = True
                real_write(self, f"\n[output truncated by the grader after {MAX_OUTPUT_BYTES} bytes]\n")
            return n
        _state["written"] += n
        return real_write(self, s)

    OutStream.write = write


def load_ipython_extension(ip) -> None:
    """Install the guards in the running kernel (called by IPython)."""
    import posix

    for mod in (os, posix):
        mod._exit = _guard_exit(mod._exit, "os._exit()")
        mod.abort = _guard_exit(mod.abort, "os.abort()")
        mod.kill = _guard_kill(mod.kill)
    os.killpg = _guard_exit(os.killpg, "os.killpg()")
    signal.raise_signal = _guard_exit(signal.raise_signal, "signal.raise_signal()")
    _cap_output()
    _student_folder_last()
    ip.events.register("pre_execute", _pre)
    ip.events.register("post_execute", _post)
    ip.events.register("post_run_cell", _post_run_cell(ip))


def main() -> None:
    """Start ipykernel with this module loaded as an extension (argv as for ipykernel_launcher).

    Run as a script (by path) so that starting a kernel does not import the normref package;
    the script's folder is taken off ``sys.path`` again, and IPython finds this module under
    the name ``normref_kernel_guard``.
    """
    if os.environ.get(ENV_NPROC_RLIMIT) == "1":
        import resource

        n = int(os.environ.get(ENV_MAX_PROCS, "64"))
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
    from ipykernel import kernelapp

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.modules["normref_kernel_guard"] = sys.modules[__name__]
    sys.argv = [sys.argv[0], *sys.argv[1:], "--IPKernelApp.extensions=['normref_kernel_guard']"]
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
