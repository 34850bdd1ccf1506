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
  the kernel counts only this sandbox's processes;
* a cell that opened a code file of the student's folder (``%run sitecustomize.py``,
  ``exec(open('usercustomize.py').read())``, an import, which opens the module's file) or imported
  a module from it gets one output of MIME type :data:`RECORD_MIME` saying which (Python's
  ``open`` audit event, and the modules new in ``sys.modules``): the class report describes each
  start-up file and shadowing module handed in from this record (:mod:`grader.intake.handed_in`).

These are conveniences, not the security boundary (student code runs in this same process
and could undo them, or leave its record out); the boundary is the sandbox around the process, and a kernel that dies
anyway is handled by ``make grade`` (the question is scored 0 and the rest re-graded).
"""
from __future__ import annotations

import os
import signal
import sys
import threading

MAX_OUTPUT_BYTES = int(os.environ.get("NORMREF_MAX_OUTPUT_BYTES", 2**20))


#: Inside the sandbox: the kernel's cgroup event counter, bound read-only by grader/kernel/sandbox.py.
PIDS_EVENTS = "/run/normref/pids.events"
#: The caps grader/kernel/sandbox.py sets for this kernel (``--setenv``), read here; one name each.
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


#: The MIME type of the output in which a cell's record of the student's files is handed to the
#: grader: ``{"opened": [path relative to the folder], "imported": {module: path}}``.
RECORD_MIME = "application/vnd.normref.kernel-record+json"
#: Files of the student's folder whose opening is recorded: code Python can run or load.
_CODE_FILES = (".py", ".pyc", ".pth", ".so")
#: Start-up files Python or IPython would run before any cell, were they where it looks
#: (:mod:`grader.intake.handed_in` reads this list).
STARTUP_NAMES = ("sitecustomize.py", "usercustomize.py", "ipython_config.py", "ipython_kernel_config.py",
                 "jupyter_config.py", "jupyter_notebook_config.py", "jupyter_server_config.py")


def _watched(here: str) -> set[str]:
    """The top-level names in the student's folder ``here`` worth a record: start-up files,
    ``*.pth``, IPython profiles, and modules named like one importable from elsewhere (a
    ``torch.py``); a helper module of the student's own (``utils.py``) is not."""
    import importlib.util

    def elsewhere(stem: str) -> bool:  # importable from outside the student's folder
        if stem in sys.stdlib_module_names or stem in sys.builtin_module_names:
            return True
        try:
            spec = importlib.util.find_spec(stem)  # finds, imports nothing (a top-level name)
        except (ImportError, ValueError):
            return False
        origin = os.path.realpath(getattr(spec, "origin", None) or here)
        return spec is not None and not origin.startswith(here + os.sep)

    out = set()
    for name in os.listdir(here):
        stem = name.split(".")[0]
        if name in STARTUP_NAMES or name.endswith(".pth") or name == ".ipython" or name.startswith("profile_"):
            out.add(name)
        elif stem.isidentifier() and elsewhere(stem) and \
                (name.endswith(_CODE_FILES) or os.path.isfile(os.path.join(here, name, "__init__.py"))):
            out.add(name)
    return out


def _record_student_files(ip) -> None:
    """Record which code files of the student's folder each cell opened (Python's ``open`` audit
    event: ``open()``, ``%run``, ``runpy``, the import system's ``io.open_code``) and which modules
    it imported from there; hand each cell's record to the grader as one output (:data:`RECORD_MIME`).
    Only the files :func:`_watched` names are recorded."""
    here = os.path.realpath(os.getcwd())
    try:
        watched = _watched(here)
    except OSError:
        return
    if not watched:
        return
    roots = {here + os.sep} | ({os.environ["PWD"].rstrip(os.sep) + os.sep} if os.environ.get("PWD") else set())
    opened: list[str] = []
    seen = set(sys.modules)

    def inside(path) -> str | None:
        try:
            p = os.fsdecode(path)
        except TypeError:  # a file descriptor
            return None
        p = os.path.normpath(p if os.path.isabs(p) else os.path.join(os.getcwd(), p))
        for root in roots:
            if p.startswith(root):
                return p[len(root):]
        return None

    def audit(event, args):
        if event != "open" or not _state["in_cell"] or not args:
            return
        rel = inside(args[0])  # the interpreter's own __pycache__ is not a file the student handed in
        if rel and rel.split(os.sep, 1)[0] in watched and rel.endswith(_CODE_FILES) and \
                "__pycache__" not in rel and rel not in opened:
            opened.append(rel)

    def report(result=None):
        nonlocal seen
        now = set(sys.modules)
        imported = {}
        for name in sorted(now - seen):
            f = getattr(sys.modules.get(name), "__file__", None)
            rel = inside(f) if isinstance(f, str) else None
            if rel and rel.split(os.sep, 1)[0] in watched:
                imported[name] = rel
        seen = now
        if not opened and not imported:
            return
        record = {"opened": list(opened), "imported": imported}
        opened.clear()
        what = [f"opened {', '.join(record['opened'])}"] if record["opened"] else []
        what += [f"imported {', '.join(f'{m} ({f})' for m, f in imported.items())}"] if imported else []
        from IPython.display import display

        display({RECORD_MIME: record, "text/plain": f"[the grader's record: this cell {' and '.join(what)} "
                                                   "from the submission's folder]"}, raw=True)

    sys.addaudithook(audit)
    ip.events.register("post_run_cell", report)


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
    _record_student_files(ip)
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
