"""Parallel autograde: several ``nbgrader autograde`` processes, one gradebook.

The class is split into ``jobs`` disjoint groups of students; each group is graded by one
``nbgrader autograde "*"`` process that excludes every other student
(``--CourseDirectory.student_id_exclude``). All of them write to the one SQLite gradebook
with a long busy timeout (``?timeout=`` on the SQLAlchemy URL), so a writer waits for the
lock instead of failing with "database is locked"; each student's rows are written by exactly
one process, so none is lost or duplicated. Grades are those of nbgrader itself: the same
preprocessors run on the same notebooks as in a sequential ``nbgrader autograde``.

Progress is read from ``autograded/<student>/<assignment>/``, where nbgrader writes each
notebook when that student is done.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .course import CourseTree, nbgrader_env, split_round_robin

_FAIL_RE = re.compile(r"There was an error processing assignment '([^']*)' for student '([^']*)'")


@dataclass
class AutogradeOutcome:
    """What the autograde stage did.

    Attributes:
        graded: ``(assignment, student)`` pairs with an autograded notebook.
        failed: ``{(assignment, student): reason}`` for submissions nbgrader could not grade.
        seconds: wall time of the stage.
        logs: one nbgrader log per worker (path), kept for the instructor.
    """

    graded: list[tuple[str, str]] = field(default_factory=list)
    failed: dict[tuple[str, str], str] = field(default_factory=dict)
    seconds: float = 0.0
    logs: list[Path] = field(default_factory=list)


def default_jobs() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child process (``preexec_fn``): the kernel sends it SIGKILL when its parent dies, so a
    ``kill -9`` of ``python -m grader`` leaves no autograde worker behind (Linux ``prctl``)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def stop_workers(procs: list[subprocess.Popen], grace_s: float = 2.0) -> None:
    """End every worker's process group (nbgrader, its kernel launchers and bwrap): SIGTERM, then
    SIGKILL after ``grace_s`` for any still there. Sandboxed kernels die with their bwrap
    (``--die-with-parent``)."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:  # the group may outlive its leader: kill it whole either way
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=1)


def _done(tree: CourseTree, pairs: list[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(a, s) for a, s in pairs if tree.has_notebook("autograded", s, a)}


def autograde(course: CourseTree | Path, assignments: list[str], *, jobs: int | None = None,
              progress=None, log=print, extra_args: list[str] | None = None,
              worker_setup=None, only: list[str] | None = None,
              pairs: list[tuple[str, str]] | None = None) -> AutogradeOutcome:
    """Autograde the submissions in the course's ``submitted/`` with up to ``jobs`` nbgrader
    processes at a time.

    Args:
        course: the course (a :class:`~grader.course.CourseTree`, or its root); its gradebook
            must already hold the assignments, i.e. ``generate_assignment`` has run.
        assignments: the assignment names to grade.
        jobs: number of concurrent nbgrader processes (default: all cores). ``1`` is exactly
            one plain ``nbgrader autograde "*" --force``.
        progress: a callable ``progress(done, total)`` called as notebooks finish, or None.
        log: where per-student failure lines go.
        extra_args: more nbgrader command-line options for every worker (e.g. the sandbox).
        worker_setup: ``worker_setup(i) -> (args, env)`` extra options and environment for
            worker ``i`` (e.g. its own kernel socket directory), or None.
        only: grade just these students (default: everyone in ``submitted/``).
        pairs: grade just these ``(assignment, student)`` submissions (a resubmission of one
            assignment leaves the student's other assignments and their hand grades alone).

    Returns:
        :class:`AutogradeOutcome`. A student whose code fails is *not* an error here: nbgrader
        records zero points for the failing cells and the notebook counts as graded.

    Raises:
        RuntimeError: an nbgrader process failed for a reason that is not one student's
            submission (its log is quoted).
    """
    tree = course if isinstance(course, CourseTree) else CourseTree(course)
    jobs = jobs or default_jobs()
    everyone_pairs = tree.pairs(assignments)
    todo = [pr for pr in everyone_pairs if (only is None or pr[1] in set(only))
            and (pairs is None or pr in set(pairs))]
    outcome = AutogradeOutcome()
    if not todo:
        return outcome
    for a, s in todo:  # nbgrader --force would remove these too; progress counts fresh ones
        old = tree.autograded(s, a)
        if old.is_dir():
            shutil.rmtree(old)
    tasks = _tasks(todo, everyone_pairs, assignments, jobs)
    t0 = time.perf_counter()
    procs = _run_workers(tree, tasks, sorted({s for _, s in everyone_pairs}), jobs, extra_args,
                         worker_setup, lambda: progress and progress(len(_done(tree, todo)), len(todo)))
    outcome.seconds = time.perf_counter() - t0
    for p, logfile in procs:
        outcome.logs.append(logfile)
        text = logfile.read_text(errors="replace")
        failures = _FAIL_RE.findall(text)
        for a, s in failures:
            outcome.failed[(a, s)] = reason = _reason(text, s)
            log(f"autograde failed: student {s}, assignment {a}: {reason}")
        if p.returncode != 0 and not failures:
            raise RuntimeError(f"nbgrader autograde failed (exit {p.returncode}); its log "
                               f"({logfile}):\n{text[-4000:]}")
    done = _done(tree, todo)
    outcome.graded = [pr for pr in todo if pr in done and pr not in outcome.failed]
    for pr in todo:
        if pr not in done and pr not in outcome.failed:
            outcome.failed[pr] = "nbgrader produced no autograded notebook"
    if progress is not None:
        progress(len(done), len(todo))
    return outcome


def _tasks(todo, everyone_pairs, assignments, jobs) -> list[tuple[str, list[str]]]:
    """``(assignment glob, students)`` per nbgrader process. When every chosen student is graded
    in all their assignments, ``jobs`` disjoint student groups over ``"*"``; otherwise one
    assignment at a time, so no other assignment of a student is touched."""
    students = sorted({s for _, s in todo})
    whole = {pr for pr in everyone_pairs if pr[1] in set(students)} == set(todo)
    if whole:
        glob = assignments[0] if len(assignments) == 1 else "*"
        return [(glob, g) for g in split_round_robin(students, jobs)]
    return [(a, g) for a in assignments
            for g in split_round_robin(sorted(s for b, s in todo if b == a), jobs)]


def _run_workers(tree: CourseTree, tasks, everyone: list[str], jobs: int, extra_args, worker_setup,
                 tick) -> list[tuple[subprocess.Popen, Path]]:
    """Run the tasks, at most ``jobs`` at once, each ``nbgrader autograde`` in its own process
    group that dies with this process; stop them all if this is interrupted."""
    tree.logs.mkdir(exist_ok=True)
    procs: list[tuple[subprocess.Popen, Path]] = []
    handles = []
    pending = list(enumerate(tasks))
    try:
        while pending or any(p.poll() is None for p, _ in procs):
            while pending and sum(p.poll() is None for p, _ in procs) < jobs:
                i, (glob, group) = pending.pop(0)
                others = [s for s in everyone if s not in group]
                cmd = [sys.executable, "-m", "nbgrader", "autograde", glob, "--force",
                       f"--CourseDirectory.db_url={tree.gradebook_url}", *(extra_args or [])]
                if others:
                    cmd.append(f"--CourseDirectory.student_id_exclude={','.join(others)}")
                env = nbgrader_env(single_thread=min(jobs, len(tasks)) > 1)
                if worker_setup is not None:
                    more_args, more_env = worker_setup(i)
                    cmd += more_args
                    env.update(more_env)
                logfile = tree.logs / f"autograde-worker{i}.log"
                handles.append(fh := logfile.open("w"))
                procs.append((subprocess.Popen(cmd, cwd=tree.root, stdout=fh, stderr=subprocess.STDOUT,
                                               env=env, start_new_session=True, preexec_fn=die_with_parent),
                              logfile))
            tick()
            time.sleep(0.25)
    finally:  # Ctrl-C, SIGTERM or an error here: no worker outlives the run
        stop_workers([p for p, _ in procs])
        for fh in handles:
            fh.close()
    return procs


def _reason(log_text: str, student: str) -> str:
    """The last exception line nbgrader logged before naming this student, if any."""
    lines = log_text.splitlines()
    idx = max((i for i, ln in enumerate(lines) if f"for student '{student}'" in ln), default=None)
    if idx is None:
        return "nbgrader reported an error"
    for ln in reversed(lines[:idx]):
        m = re.match(r"^\s*(\w+(?:\.\w+)*(?:Error|Exception|Exit)\w*):?\s*(.*)$", ln.strip())
        if m:
            return f"{m.group(1)}: {m.group(2)}"[:300]
    return "nbgrader reported an error (see the autograde log)"
