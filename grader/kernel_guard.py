"""Guards inside the grading kernel (loaded as an IPython extension by the sandbox launcher).

While a cell runs:

* ``os._exit``, ``os.abort`` and ``os.kill``/``os.killpg`` aimed at the kernel itself raise
  :class:`GradingKernelGuard` in the cell that called them, instead of killing the kernel;
  so the error is charged to that question and the kernel lives on for the next one;
* printed output is capped at ``NORMREF_MAX_OUTPUT_BYTES`` per cell (default 1 MiB), with one
  notice, so a cell that prints hundreds of MB cannot bloat the notebook or the grader.

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


class GradingKernelGuard(RuntimeError):
    """Raised in a student's cell for an action that would kill the grading kernel."""


_state = {"in_cell": False, "written": 0, "noticed": False}


def _pre(*_a, **_k):
    _state.update(in_cell=True, written=0, noticed=False)


def _post(*_a, **_k):
    _state["in_cell"] = False


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
    ip.events.register("pre_execute", _pre)
    ip.events.register("post_execute", _post)


def main() -> None:
    """Start ipykernel with this module loaded as an extension (argv as for ipykernel_launcher).

    Run as a script (by path) so that starting a kernel does not import the normref package;
    the script's folder is taken off ``sys.path`` again, and IPython finds this module under
    the name ``normref_kernel_guard``.
    """
    from ipykernel import kernelapp

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.modules["normref_kernel_guard"] = sys.modules[__name__]
    sys.argv = [sys.argv[0], *sys.argv[1:], "--IPKernelApp.extensions=['normref_kernel_guard']"]
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
