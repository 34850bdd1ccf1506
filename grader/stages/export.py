"""The ``export`` stage: ``grades.csv`` (of the assignments students could have done), ``roster.csv``,
the LMS's files."""
from __future__ import annotations

import csv
import shutil
from pathlib import Path

from ..ledger import store
from ..batch import Batch, GradingError
from ..ledger.course import ROSTER_CSV
from ..intake.lms_names import lms_late, write_roster
from ..ledger.apps import AppError


def taken(b: Batch) -> list[str]:
    """The assignments of the run a student could have done: handed in by at least one student
    (this batch or an earlier one), or released to students through nbgrader's exchange (its
    ``outbound/<assignment>``, where this course's nbgrader config puts the exchange). An
    assignment still only in ``source/`` gets no ``grades.csv`` row and no report column: no
    0.0 a student could not have earned, no "missing" for work nobody was given."""
    from nbgrader.api import Gradebook

    config = b.services.course.config
    exchange = Path(config.Exchange.root if "root" in config.Exchange else "/srv/nbgrader/exchange")
    course_id = config.CourseDirectory.course_id if "course_id" in config.CourseDirectory else ""
    with Gradebook(b.services.tree.gradebook_url) as gb:
        handed_in = {a.name for a in gb.assignments if a.submissions}
    return [a for a in b.run.assignments
            if a in handed_in or (course_id and (exchange / course_id / "outbound" / a).is_dir())]


def export(b: Batch) -> None:
    """``nbgrader export``: ``grades.csv``, one row per (assignment, student) of the assignments
    students could have done (:func:`taken`), with a ``late`` column (after the due date, or marked
    late by the LMS); ``roster.csv`` beside it (``student_id,lms_id,name``); the LMS's gradebook
    filled in when given; the feedback HTML zipped for the LMS's bulk feedback upload
    (``feedback-<lms>-<assignment>.zip``, :mod:`grader.outputs.lms`)."""
    tree, log = b.services.tree, b.services.log
    try:
        b.run.grades_csv = b.services.course.export_csv(tree.grades_csv, taken(b))
    except AppError as e:
        raise GradingError(str(e)) from e
    _add_late_column(b.run.grades_csv, lms_late(tree))
    write_roster(tree, tree.root / ROSTER_CSV)
    fill_lms_exports(b)
    from ..outputs.lms import feedback_zips

    kept: dict[Path, Path] = {}
    b.run.feedback_zips = feedback_zips(tree, b.run.assignments, kept)
    for path, students in b.run.feedback_zips.items():
        n = len(students)
        log(f"export: {path}: the feedback of {n} student{'s' * (n != 1)}, named for the LMS's bulk "
            "feedback upload")
    for path, earlier in kept.items():
        log(f"export: the earlier, different {Path(path).name} was kept as {earlier}")


def fill_lms_exports(b: Batch) -> None:
    """Every LMS gradebook export given to this run (``--lms-gradebook``) or an earlier one, kept as
    given under ``logs/lms-exports/given/``, filled with the gradebook's points: so an
    ``lms-import-*.csv`` never holds older points than ``grades.csv`` (a run without the option
    left the earlier file as it was, with the points of then)."""
    lms_gradebook = b.options.lms_gradebook
    given = b.services.tree.root / store.LMS_EXPORTS / "given"
    if lms_gradebook is not None:
        with store.atomic_path(given / Path(lms_gradebook).name) as part:
            shutil.copyfile(lms_gradebook, part)
    for source in sorted(given.glob("*")) if given.is_dir() else []:
        _fill_lms(b, source, Path(lms_gradebook).name if lms_gradebook is not None else None)


def _fill_lms(b: Batch, lms_gradebook: Path, given_now: str | None) -> None:
    """One LMS gradebook export filled with the gradebook's points (:func:`grader.outputs.lms.fill_lms_gradebook`)
    and what it did said; ``lms_gradebook``: its copy under ``logs/lms-exports/given/``."""
    from ..outputs.lms import fill_lms_gradebook

    tree, log = b.services.tree, b.services.log
    try:
        got = fill_lms_gradebook(tree, lms_gradebook, b.run.assignments)
    except ValueError as e:
        if given_now == lms_gradebook.name:
            raise
        log(f"export: the LMS gradebook given to an earlier run ({lms_gradebook}) no longer fits this course "
            f"({e}): its import file was not refilled")
        return
    b.run.lms_import = got.path
    n = len(got.filled)
    if given_now != lms_gradebook.name:
        log(f"export: {got.path} refilled with this run's points from the LMS gradebook an earlier run was given "
            f"({lms_gradebook}); give LMS_GRADEBOOK= a new export when the LMS's students or columns changed")
    else:
        log(f"export: {got.path} is {lms_gradebook.name} with the points of {n} student{'s' * (n != 1)} "
            f"filled in: import it into {got.lms.capitalize()}")
    if got.kept is not None:
        log(f"export: the earlier, different {got.path.name} was kept as {got.kept}")
    for a, (course_pts, lms_pts) in sorted(got.scaled.items()):
        log(f"export: {a} is worth {course_pts:g} points here and {lms_pts:g} in {got.lms.capitalize()}'s "
            f"{lms_gradebook.name}: each student's points are scaled by {lms_pts:g}/{course_pts:g} (the "
            f"fraction earned kept); set the LMS column to {course_pts:g} points to import them as they are")
    if given_now == lms_gradebook.name:
        if got.blank:
            log(f"export: left blank (no submission here): {', '.join(got.blank)}")
        if got.missing:
            log(f"export: graded here but not in {lms_gradebook.name} (their points are not in "
                f"{got.path.name}; enter them by hand or export the LMS's gradebook again): {', '.join(got.missing)}")


def _add_late_column(path: Path, lms_marked: set[tuple[str, str]]) -> None:
    """``grades.csv``'s ``late`` column: ``yes`` after the due date or where the LMS marked it late."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    for r in rows:
        after_due = bool(r.get("timestamp") and r.get("duedate") and r["timestamp"] > r["duedate"])
        r["late"] = "yes" if after_due or (r["assignment"], r["student_id"]) in lms_marked else ""
    with store.atomic_path(path) as part, part.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
