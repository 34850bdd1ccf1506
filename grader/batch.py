"""What one grading run carries from stage to stage: the :class:`Batch` the stages of
:data:`grader.pipeline.STAGES` read and fill in, the :class:`GradeRun` it produces, the
gradebook's points they read (:func:`read_gradebook`), and its line in the run log
(:func:`run_record`). Below the pipeline, its stages (:mod:`grader.stages`) and the canary, which
all run stages on a ``Batch``.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .ledger.course import CourseTree
from .options import GradeOptions
from .ledger.state import now_utc

if TYPE_CHECKING:  # annotations only (``from __future__ import annotations``): no import at run time
    from .ledger.apps import Course
    from .intake.collect import Collected
    from .autograde.engine import AutogradeOutcome
    from .intake.repair import Repair
    from .outputs.report import ClassReport


class GradingError(RuntimeError):
    """The pipeline itself failed (not a student's code): an nbgrader step exited non-zero."""


@dataclass
class GradeRun:
    """What one ``grade_class`` call produced.

    Attributes:
        course_root: the nbgrader course root graded in.
        assignments: assignment names graded.
        students: student ids found in ``submitted/`` (this batch and earlier ones).
        batch: the students this run collected (and graded).
        grades_csv: nbgrader's export, one row per (assignment, student).
        questions_csv: one row per (assignment, student, grade cell) with the points earned.
        feedback_dir: where nbgrader wrote the per-student feedback HTML.
        report_html: the class report page.
        scores: ``{(assignment, student): {grade_id: points}}`` read from the gradebook.
        max_points: ``{assignment: {grade_id: max points}}``.
        report: the :class:`~grader.outputs.report.ClassReport`.
        autograde: timing and failures of the autograde stage.
        repairs: ``{(assignment, student): Repair}`` for every submission repair touched.
        sandboxed: whether kernels ran in the bubblewrap sandbox.
        lms_import: the LMS's gradebook export filled in (``lms-import-<lms>.csv``), when given.
        feedback_zips: ``{feedback-<lms>-<assignment>.zip: [students]}`` for the LMS's bulk
            feedback upload (students collected from Canvas or Moodle downloads).
        seconds: wall time of the whole run.
        stage_seconds: ``{stage: seconds}``, one entry per stage of
            :data:`grader.pipeline.STAGES` (and the canary's, within prepare).
    """

    course_root: Path
    assignments: list[str] = field(default_factory=list)
    students: list[str] = field(default_factory=list)
    batch: list[str] = field(default_factory=list)
    grades_csv: Path | None = None
    questions_csv: Path | None = None
    feedback_dir: Path | None = None
    report_html: Path | None = None
    scores: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    max_points: dict[str, dict[str, float]] = field(default_factory=dict)
    report: ClassReport | None = None
    autograde: AutogradeOutcome | None = None
    repairs: dict[tuple[str, str], Repair] = field(default_factory=dict)
    sandboxed: bool = False
    lms_import: Path | None = None
    feedback_zips: dict[Path, list[str]] = field(default_factory=dict)
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)


def read_gradebook(course: CourseTree | Path, assignments: list[str]):
    """Per-question points and max points from nbgrader's gradebook.

    Returns:
        ``(scores, max_points)``: ``{(assignment, student): {grade_id: points}}`` and
        ``{assignment: {grade_id: max points}}`` (manually graded cells count 0 until graded).
    """
    from nbgrader.api import Gradebook

    tree = course if isinstance(course, CourseTree) else CourseTree(course)
    scores: dict[tuple[str, str], dict[str, float]] = {}
    max_points: dict[str, dict[str, float]] = {}
    with Gradebook(tree.gradebook_url) as gb:
        for a in assignments:
            asg = gb.find_assignment(a)
            max_points[a] = {gc.name: float(gc.max_score) for nb in asg.notebooks for gc in nb.grade_cells}
            for sub in gb.assignment_submissions(a):
                row: dict[str, float] = {}
                for nb in sub.notebooks:
                    for g in nb.grades:
                        row[g.name] = float(g.score)
                scores[(a, sub.student.id)] = row
    return scores, max_points


@dataclass
class Services:
    """What a run works with: the course folder, where its lines go, its id and command line, the
    autograde engine and nbgrader's API for the course (set by the generate stage)."""

    tree: CourseTree
    log: Callable[[str], object]
    run_id: str
    command: str
    jobs: int  # the engine's workers (``GradeOptions.jobs``, or all cores)
    engine: object = None  # grader.autograde.engine.Engine: the process pool, or autograde.cluster.DaskCluster
    course: Course | None = None
    workers: list[str] | None = None  # the Dask workers the tasks may run on (None: any; the canary pins one)


@dataclass
class Findings:
    """What the stages decided and found on the way, for the stages after them (what the run
    produced for its caller is the :class:`GradeRun`)."""

    fresh: bool = False  # this run starts over (decided by prepare from the options and the course)
    collected: Collected | None = None
    to_grade: list[tuple[str, str]] | None = None  # None: every submission here
    scoring_seed: int | None = None  # the secret seed of this run's graded inputs (the inputs stage)
    hand_grades_done: list = field(default_factory=list)  # carried over (or to redo) in this run


@dataclass
class Batch:
    """One ``grade_class`` call while it runs: what was asked (``options``, frozen), what it works
    with (``services``), what the stages found (``found``), and what it produces (``run``); each
    stage reads what earlier ones left and fills in ``found`` and ``run``."""

    options: GradeOptions
    services: Services
    run: GradeRun
    found: Findings = field(default_factory=Findings)


def run_record(b: Batch, status: str, error: str | None = None) -> dict:
    """The ``logs/runs.jsonl`` line of one run: ``status`` is ``"ok"``, ``"failed"`` (``error``:
    the exception's type and first line) or ``"interrupted"`` (``error``: the signal)."""
    got, o = b.found.collected, b.options
    return {"run_id": b.services.run_id, "time": now_utc(), "command": b.services.command, "status": status,
            **({"error": error} if error else {}),
            "inputs": _input_hashes(o.submissions), "batch": b.run.batch,
            "students_in_course": b.run.students,
            "skipped": dict(got.skipped) if got else {}, "replaced": [list(p) for p in got.replaced] if got else [],
            "flags": {"jobs": b.services.jobs, "fresh": b.found.fresh, "sandbox": b.run.sandboxed,
                      "cell_timeout": o.cell_timeout, "duedates": o.duedates},
            "stage_seconds": {k: round(v, 3) for k, v in b.run.stage_seconds.items()},
            "seconds": round(b.run.seconds, 3)}


def _input_hashes(path: Path | None) -> dict[str, str]:
    """``{file: sha256}`` of what was handed in (the embedded demo class: ``{}``)."""
    if path is None or not Path(path).exists():
        return {}
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


__all__ = ["Batch", "Findings", "Services", "GradeRun", "GradingError", "read_gradebook", "run_record"]
