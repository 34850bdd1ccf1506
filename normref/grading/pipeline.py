"""``grade_class``: generate -> collect -> autograde -> feedback -> grades.csv, all through nbgrader."""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .demo import write_demo_submissions

REPO_ROOT = Path(__file__).resolve().parents[2]


class GradingError(RuntimeError):
    """The pipeline itself failed (not a student's code): nbgrader exited non-zero."""


@dataclass
class GradeRun:
    """What one ``grade_class`` call produced.

    Attributes:
        course_root: the nbgrader course root graded in.
        assignments: assignment names graded.
        students: student ids found in ``submitted/``.
        grades_csv: nbgrader's export, one row per (assignment, student).
        questions_csv: one row per (assignment, student, grade cell) with score and max score.
        feedback_dir: where nbgrader wrote the per-student feedback HTML.
        scores: ``{(assignment, student): {grade_id: score}}`` read from the gradebook.
    """

    course_root: Path
    assignments: list[str] = field(default_factory=list)
    students: list[str] = field(default_factory=list)
    grades_csv: Path | None = None
    questions_csv: Path | None = None
    feedback_dir: Path | None = None
    scores: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)


def _nbgrader(course_root: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "nbgrader", *args]
    proc = subprocess.run(cmd, cwd=course_root, capture_output=True, text=True, env=nbgrader_env())
    if proc.returncode != 0:
        raise GradingError(f"`nbgrader {' '.join(args)}` failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def nbgrader_env() -> dict[str, str]:
    """The environment for nbgrader subprocesses: this interpreter's bin/ first on PATH
    (nbgrader runs `alembic` from PATH when it creates a gradebook)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def list_assignments(course_root: Path) -> list[str]:
    """Assignment names: the folders of ``source/`` that hold a notebook."""
    src = course_root / "source"
    return sorted(p.name for p in src.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def collect(course_root: Path, submissions: Path | None) -> list[str]:
    """Put submissions into ``course_root/submitted/<student>/<assignment>/``.

    Args:
        submissions: an nbgrader ``submitted/`` tree to copy in, or None for the demo class.

    Returns:
        The student ids now in ``submitted/``.

    Raises:
        FileNotFoundError: ``submissions`` does not exist.
    """
    dest = course_root / "submitted"
    if submissions is None:
        write_demo_submissions(course_root, dest)
    else:
        submissions = Path(submissions)
        if not submissions.exists():
            raise FileNotFoundError(f"no submissions at {submissions}")
        if submissions.resolve() != dest.resolve():
            shutil.copytree(submissions, dest, dirs_exist_ok=True)
    return sorted(p.name for p in dest.iterdir() if p.is_dir())


def read_scores(course_root: Path, assignments: list[str]) -> dict[tuple[str, str], dict[str, float]]:
    """Per-question scores from nbgrader's gradebook: ``{(assignment, student): {grade_id: score}}``."""
    from nbgrader.api import Gradebook

    out: dict[tuple[str, str], dict[str, float]] = {}
    with Gradebook(f"sqlite:///{course_root / 'gradebook.db'}") as gb:
        for a in assignments:
            for sub in gb.assignment_submissions(a):
                row: dict[str, float] = {}
                for nb in sub.notebooks:
                    for g in nb.grades:
                        row[g.name] = float(g.score)
                out[(a, sub.student.id)] = row
    return out


def grade_class(*, course_root: Path = REPO_ROOT, submissions: Path | None = None,
                log=print) -> GradeRun:
    """Grade a class end to end with nbgrader.

    Args:
        course_root: the nbgrader course root (holds ``nbgrader_config.py`` and ``source/``).
        submissions: an nbgrader ``submitted/`` tree; None grades the embedded demo class.
        log: where progress lines go.

    Returns:
        :class:`GradeRun` with paths to ``grades.csv``, the per-question CSV and feedback.

    Raises:
        GradingError: an nbgrader step failed for a reason other than a student's code.
        FileNotFoundError: ``submissions`` does not exist.
    """
    course_root = Path(course_root).resolve()
    run = GradeRun(course_root=course_root, assignments=list_assignments(course_root))
    for a in run.assignments:
        log(f"generate: {a}")
        _nbgrader(course_root, "generate_assignment", a, "--force")
    run.students = collect(course_root, submissions)
    log(f"collect: {len(run.students)} students in {course_root / 'submitted'}")
    for a in run.assignments:
        log(f"autograde: {a}")
        _nbgrader(course_root, "autograde", a, "--force")
        log(f"feedback: {a}")
        _nbgrader(course_root, "generate_feedback", a, "--force")
    _nbgrader(course_root, "export", "--to", "grades.csv")
    run.grades_csv = course_root / "grades.csv"
    run.feedback_dir = course_root / "feedback"
    run.scores = read_scores(course_root, run.assignments)
    run.questions_csv = course_root / "grades_by_question.csv"
    with run.questions_csv.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["assignment", "student_id", "grade_id", "score"])
        for (a, s), row in sorted(run.scores.items()):
            for gid, score in row.items():
                w.writerow([a, s, gid, f"{score:g}"])
    return run


def format_table(run: GradeRun) -> str:
    """The grades as a plain-text table: one row per student, one column per assignment."""
    lines = []
    with run.grades_csv.open() as f:
        rows = list(csv.DictReader(f))
    header = f"{'student':<12} {'assignment':<12} {'score':>6} / max"
    lines.append(header)
    lines.append("-" * len(header))
    for r in sorted(rows, key=lambda r: (r["student_id"], r["assignment"])):
        lines.append(f"{r['student_id']:<12} {r['assignment']:<12} {float(r['score']):>6.2f} / "
                     f"{float(r['max_score']):g}")
    return "\n".join(lines)
