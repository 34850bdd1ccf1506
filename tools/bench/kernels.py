"""``make bench``'s kernel rows: the core-seconds of grading one correct notebook, per assignment,
split into start-up, cells and shutdown, "before" and "after" issue 22's cheap start-up.

One graded notebook is the assignment's source notebook (its solutions: a correct submission, with
the hidden tests) after the course's ``HandbackInputs`` preprocessor, run by nbgrader's own
``Execute`` preprocessor with the course's configuration, in the grading sandbox when bubblewrap
works here (else a plain ``python3`` kernel). Phases:

* start-up: from the kernel's launch to the end of the assignment's imports cell (the sealing cell
  and the locked imports: where ``import torch`` is paid);
* cells: every cell after that;
* shutdown: from the last cell to the kernel gone.

"before": the kernel imports torch (and every normref module) eagerly, as ``import normref`` did,
and is shut down gracefully (nbclient's default); "after": this course's configuration
(``seal(torch=False)`` for the numpy-only assignments, ``Execute.shutdown_kernel = "immediate"``).
CPU is that of the kernel's whole process tree (the sandbox launcher, bwrap, the kernel and
whatever it starts), read from a cgroup v1 ``cpuacct`` child each kernel starts in; where none
can be made, from ``/proc/<pid>/stat`` of the tree (children that exit before a reading are then
missed). Figures to read, never a test.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from normref.handback_files import HANDBACK_ENV

CPUACCT_ROOT = Path("/sys/fs/cgroup/cpuacct")
PHASES = ("start-up", "cells", "shutdown")
#: What the kernel imported at start before issue 22 (``import normref`` loaded them all).
EAGER = "import torch, normref.blocks, normref.modules, normref.checks.block\n"


class _Meter:
    """CPU seconds of one kernel's process tree: a cpuacct cgroup it is launched into, or /proc."""

    def __init__(self, name: str):
        self.cgroup: Path | None = None
        if (CPUACCT_ROOT / "cgroup.procs").exists() and os.access(CPUACCT_ROOT, os.W_OK):
            with contextlib.suppress(OSError):
                (CPUACCT_ROOT / name).mkdir()
                self.cgroup = CPUACCT_ROOT / name
        self.root_pid: int | None = None

    @property
    def how(self) -> str:
        return "cgroup v1 cpuacct" if self.cgroup else "/proc/<pid>/stat of the kernel's tree"

    def seconds(self) -> float:
        if self.cgroup is not None:
            return int((self.cgroup / "cpuacct.usage").read_text()) / 1e9
        return _tree_cpu(self.root_pid) if self.root_pid else 0.0

    def close(self) -> None:
        if self.cgroup is None:
            return
        deadline = time.monotonic() + 10
        while (self.cgroup / "cgroup.procs").read_text().split() and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(OSError):
            self.cgroup.rmdir()


def _tree_cpu(pid: int) -> float:
    """utime + stime (and those of reaped children) of ``pid`` and its live descendants, seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    stats, children = {}, {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
                stats[int(d)] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
                children.setdefault(int(fields[1]), []).append(int(d))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += stats.get(p, 0)
        todo.extend(children.get(p, []))
    return total / tick


def _kernelspec(dest: Path, sandboxed: bool) -> str:
    """A kernelspec that starts the course's grading kernel inside the meter's cgroup
    (``$NORMREF_BENCH_CGROUP``): a shell writes its pid there, then becomes the kernel."""
    from grader.kernel.sandbox import KERNEL_NAME, write_kernelspec

    name = "normref-bench"
    kdir = dest / "kernels" / name
    if sandboxed:
        spec = json.loads((write_kernelspec(dest) / "kernel.json").read_text())
        shutil.rmtree(dest / "kernels" / KERNEL_NAME)
    else:
        spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "bench", "language": "python", "env": {}}
    enter = ('[ -n "$NORMREF_BENCH_CGROUP" ] && echo $$ > "$NORMREF_BENCH_CGROUP"/cgroup.procs; '
             'exec "$@" >>"$NORMREF_BENCH_LOG" 2>&1')  # the kernels' own chatter: in the log, not the figures
    spec["argv"] = ["/bin/sh", "-c", enter, "sh", *spec["argv"]]
    kdir.mkdir(parents=True, exist_ok=True)
    (kdir / "kernel.json").write_text(json.dumps(spec, indent=1))
    return name


def _cells(course, assignment: str, inputs: Path, before: bool):
    """The graded notebook: the source notebook (a correct answer, hidden tests in) after the course's
    HandbackInputs; ``before``: its sealing cell imports torch and every normref module first."""
    import nbformat

    (give,) = [p for p in course.config.Autograde.autograde_preprocessors if p.__name__ == "HandbackInputs"]
    nb = nbformat.read(course.tree.source(assignment) / f"{assignment}.ipynb", as_version=4)
    with _env(**{HANDBACK_ENV: str(inputs)}):
        nb, _ = give(config=course.config).preprocess(nb, {"nbgrader": {"assignment": assignment}})
    if before:
        nb.cells[0].source = EAGER + nb.cells[0].source.replace("seal(torch=False)", "seal()")
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    return nb, code[1], code[-1]  # the sealing cell, then the assignment's imports cell; the last


@contextlib.contextmanager
def _env(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.update({k: v})


def grade_one(course, assignment: str, inputs: Path, before: bool, kernel: str, kernel_args: dict,
              tag: str) -> tuple[dict, dict, str]:
    """One correct notebook graded in a fresh kernel. Returns ``({phase: CPU s}, {phase: wall s},
    how CPU was read)``."""
    from nbgrader.preprocessors import Execute
    from traitlets.config import Config

    nb, imports, last_cell = _cells(course, assignment, inputs, before)
    marks: dict = {}
    meter = _Meter(f"normref-bench-{os.getpid()}-{tag}")

    class Timed(Execute):
        def on_cell_executed(self, **kw):
            super().on_cell_executed(**kw)
            if kw["cell_index"] == imports:
                marks["start-up"] = (meter.seconds(), time.perf_counter())
            if kw["cell_index"] == last_cell:  # then nbclient shuts the kernel down
                marks["cells"] = (meter.seconds(), time.perf_counter())

        async def async_start_new_kernel(self, **kw):
            await super().async_start_new_kernel(**kw)
            meter.root_pid = getattr(getattr(self.km, "provisioner", None), "pid", None)

    cfg = Config(course.config)
    cfg.merge(Config({"Execute": {"kernel_name": kernel, "shutdown_kernel": "graceful" if before else "immediate"},
                      "KernelManager": kernel_args}))
    env = {"NBGRADER_EXECUTION": "autograde"}  # the inputs are in the cells (HandbackInputs)
    if meter.cgroup is not None:
        env["NORMREF_BENCH_CGROUP"] = str(meter.cgroup)
    try:
        with _env(**env):
            t0, c0 = time.perf_counter(), meter.seconds()
            Timed(config=cfg).preprocess(nb, {"metadata": {"path": str(course.tree.source(assignment))}})
            marks["shutdown"] = (meter.seconds(), time.perf_counter())
    finally:
        meter.close()
    cpu, wall, last = {}, {}, (c0, t0)
    for phase in PHASES:
        cpu[phase], wall[phase] = marks[phase][0] - last[0], marks[phase][1] - last[1]
        last = marks[phase]
    if meter.cgroup is None:  # the tree is gone by then: what it used shutting down is not seen
        cpu["shutdown"] = float("nan")
    return cpu, wall, meter.how


def _print(line: str) -> None:
    print(line, flush=True)


def _course_copy(td: Path) -> tuple[Path, object, Path]:
    """A copy of the course's config, sources and releases under ``td``: its root, its
    :class:`grader.ledger.apps.Course`, and the graded inputs of its hidden tests."""
    from grader.ledger.apps import Course
    from grader.ledger.course import CONFIG, REPO_ROOT, CourseTree
    from grader.scoring.inputs import prepare_inputs

    root = td / "course"
    root.mkdir()
    shutil.copy(REPO_ROOT / CONFIG, root)
    for sub in ("source", "release"):
        shutil.copytree(REPO_ROOT / sub, root / sub)
    course = Course(CourseTree(root))
    _, inputs = prepare_inputs(root, log=lambda *_: None)
    return root, course, inputs


def _assignment_rows(course, a: str, inputs: Path, reps: int, kernel: str, kernel_args: dict, log,
                     out: dict) -> str:
    """Grade ``a``'s correct notebook ``reps`` times before and after (interleaved), log the
    medians, put them in ``out``; returns where the CPU was read from."""
    how = ""
    runs: dict = {"before": [], "after": []}
    for i in range(reps):
        for mode in ("before", "after"):
            cpu, wall, how = grade_one(course, a, inputs, mode == "before", kernel, kernel_args,
                                       f"{a}-{mode}-{i}")
            runs[mode].append((cpu, wall))
    for mode in ("before", "after"):
        med = {p: statistics.median(c[p] for c, _ in runs[mode]) for p in PHASES}
        medw = {p: statistics.median(w[p] for _, w in runs[mode]) for p in PHASES}
        tot = statistics.median(sum(c.values()) for c, _ in runs[mode])
        totw = statistics.median(sum(w.values()) for _, w in runs[mode])
        out[(a, mode)] = {**med, "total": tot}
        log(f"{a if mode == 'before' else '':<20}{mode:<8}"
            + "".join(f"{med[p]:>11.2f} ({medw[p]:>4.1f})" for p in PHASES)
            + f"{tot:>11.2f} ({totw:>4.1f})")
    b, f = out[(a, "before")]["total"], out[(a, "after")]["total"]
    log(f"{'':<20}{'after/before':<12}{f / b:>10.2f} of the core-seconds")
    return how


def kernel_rows(reps: int = 3, assignments: list[str] | None = None, log=_print) -> dict:
    """Print, per assignment, the median core-seconds (and wall seconds) of each phase of one
    graded correct notebook, before and after, over ``reps`` runs each (interleaved). Returns
    ``{(assignment, "before"|"after"): {phase: median CPU s}}``."""
    from grader.kernel import sandbox

    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="kernel-bench-") as td:
        root, course, inputs = _course_copy(Path(td))
        sandboxed = sandbox.available()
        jupyter = Path(td) / "jupyter"
        kernel = _kernelspec(jupyter, sandboxed)
        kernel_args: dict = {}
        stack = contextlib.ExitStack()
        with stack:
            env = {"JUPYTER_PATH": os.pathsep.join([str(jupyter), os.environ.get("JUPYTER_PATH", "")]),
                   "NORMREF_BENCH_LOG": str(Path(td) / "kernels.log")}
            if sandboxed:
                session = stack.enter_context(sandbox.SandboxSession(root))
                args, senv = session.worker(0)
                for a in args:
                    key, value = a.lstrip("-").split("=", 1)
                    if key.startswith("KernelManager."):
                        kernel_args[key.split(".", 1)[1]] = value
                env.update({k: v for k, v in senv.items() if k != "JUPYTER_PATH"})
            stack.enter_context(_env(**env))
            names = assignments or course.tree.assignments()
            how = ""
            log(f"one correct notebook per assignment, graded by nbgrader's Execute in "
                f"{'the grading sandbox' if sandboxed else 'a plain python3 kernel (no bubblewrap here)'}; "
                f"median of {reps} runs each; CPU of the kernel's process tree, core-seconds (wall s)")
            log(f"{'assignment':<20}{'':<8}" + "".join(f"{p:>18}" for p in PHASES) + f"{'total':>18}")
            for a in names:
                how = _assignment_rows(course, a, inputs, reps, kernel, kernel_args, log, out)
            log(f"(CPU read from {how}; load: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} "
                f"{os.getloadavg()[2]:.1f})")
    return out
