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

import os
import re
import shutil
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


def _done(tree: CourseTree, pairs: list[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(a, s) for a, s in pairs if tree.has_notebook("autograded", s, a)}


def autograde(course: CourseTree | Path, assignments: list[str], *, jobs: int | None = None,
              progress=None, log=print, extra_args: list[str] | None = None,
              worker_setup=None, only: list[str] | None = None) -> AutogradeOutcome:
    """Autograde every submission in the course's ``submitted/`` with ``jobs`` nbgrader processes.

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
    pairs = everyone_pairs if only is None else [(a, s) for a, s in everyone_pairs if s in set(only)]
    everyone = sorted({s for _, s in everyone_pairs})
    students = sorted({s for _, s in pairs})
    outcome = AutogradeOutcome()
    if not pairs:
        return outcome
    for a, s in pairs:  # nbgrader --force would remove these too; progress counts fresh ones
        old = tree.autograded(s, a)
        if old.is_dir():
            shutil.rmtree(old)
    groups = split_round_robin(students, jobs)
    assignment_glob = assignments[0] if len(assignments) == 1 else "*"
    t0 = time.perf_counter()
    procs = []
    logdir = tree.logs
    logdir.mkdir(exist_ok=True)
    for i, group in enumerate(groups):
        others = [s for s in everyone if s not in group]
        cmd = [sys.executable, "-m", "nbgrader", "autograde", assignment_glob, "--force",
               f"--CourseDirectory.db_url={tree.gradebook_url}", *(extra_args or [])]
        if others:
            cmd.append(f"--CourseDirectory.student_id_exclude={','.join(others)}")
        env = nbgrader_env(single_thread=len(groups) > 1)
        if worker_setup is not None:
            more_args, more_env = worker_setup(i)
            cmd += more_args
            env.update(more_env)
        logfile = logdir / f"autograde-worker{i}.log"
        fh = logfile.open("w")
        procs.append((subprocess.Popen(cmd, cwd=tree.root, stdout=fh, stderr=subprocess.STDOUT,
                                       env=env), fh, logfile))
        outcome.logs.append(logfile)
    last = -1
    while True:
        running = [p for p, _, _ in procs if p.poll() is None]
        if progress is not None:
            n = len(_done(tree, pairs))
            if n != last:
                progress(n, len(pairs))
                last = n
        if not running:
            break
        time.sleep(0.25)
    for _, fh, _ in procs:
        fh.close()
    outcome.seconds = time.perf_counter() - t0

    for p, _, logfile in procs:
        text = logfile.read_text(errors="replace")
        failures = _FAIL_RE.findall(text)
        for a, s in failures:
            reason = _reason(text, s)
            outcome.failed[(a, s)] = reason
            log(f"autograde failed: student {s}, assignment {a}: {reason}")
        if p.returncode != 0 and not failures:
            raise RuntimeError(f"nbgrader autograde failed (exit {p.returncode}); its log "
                               f"({logfile}):\n{text[-4000:]}")
    done = _done(tree, pairs)
    outcome.graded = [pr for pr in pairs if pr in done and pr not in outcome.failed]
    for pr in pairs:
        if pr not in done and pr not in outcome.failed:
            outcome.failed[pr] = "nbgrader produced no autograded notebook"
    if progress is not None:
        progress(len(done), len(pairs))
    return outcome


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
