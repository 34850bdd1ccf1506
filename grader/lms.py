"""Grades back to the LMS they came from: the LMS's own gradebook export, filled in.

Given Canvas's gradebook export (``Student, ID, SIS User ID, SIS Login ID, Section, <assignment>
(<canvas id>), ...``) or Moodle's grading worksheet for one assignment (``Identifier``
``Participant <id>``, ``Full name``, ..., ``Grade``), :func:`fill_lms_gradebook` writes the same
file with each graded assignment's points filled in, students matched by their LMS user id
(kept in the gradebook by collect; ``roster.csv``). The LMS imports that file as it is.
Students the LMS lists but the grader has no submission for are left blank and listed.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from .collect import notebook_key
from .course import CourseTree


@dataclass
class LmsImport:
    """What :func:`fill_lms_gradebook` wrote.

    Attributes:
        path: the file to import into the LMS.
        lms: ``"canvas"`` or ``"moodle"``.
        filled: ``{lms id: {assignment: points}}`` written.
        blank: LMS ids (with the LMS's name for them) the grader has no submission for.
    """

    path: Path
    lms: str
    filled: dict[str, dict[str, float]] = field(default_factory=dict)
    blank: list[str] = field(default_factory=list)


def _scores_by_lms_id(tree: CourseTree, grades_csv: Path) -> dict[str, dict[str, float]]:
    """``{lms id: {assignment: points}}`` for the submissions in grades.csv."""
    from nbgrader.api import Gradebook

    with Gradebook(tree.gradebook_url) as gb:
        lms_of = {s.id: s.lms_user_id for s in gb.students if s.lms_user_id}
    out: dict[str, dict[str, float]] = {}
    with grades_csv.open(newline="") as f:
        for r in csv.DictReader(f):
            lms = lms_of.get(r["student_id"])
            if lms and tree.has_notebook("submitted", r["student_id"], r["assignment"]):
                out.setdefault(lms, {})[r["assignment"]] = float(r["score"])
    return out


def fill_lms_gradebook(tree: CourseTree, export: Path, assignments: list[str], grades_csv: Path) -> LmsImport:
    """Fill the LMS's gradebook export with the grader's points.

    Args:
        export: Canvas's gradebook export CSV, or Moodle's grading worksheet CSV (one assignment,
            named in the worksheet's file name, e.g. ``Grades-L16-rmsnorm-12.csv``).
        assignments: the course's assignment names.
        grades_csv: ``grades.csv`` of this course.

    Returns:
        :class:`LmsImport`; the file is ``<course>/lms-import-<lms>.csv``.

    Raises:
        ValueError: the file is neither format, or names none of the assignments.
    """
    export = Path(export)
    with export.open(newline="", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise ValueError(f"{export} is empty")
    head = rows[0]
    scores = _scores_by_lms_id(tree, grades_csv)
    if "ID" in head and "Student" in head:
        return _canvas(tree, export, rows, assignments, scores)
    if "Identifier" in head and "Grade" in head:
        return _moodle(tree, export, rows, assignments, scores)
    raise ValueError(f"{export}: not a Canvas gradebook export (Student, ID, ...) or a Moodle grading "
                     f"worksheet (Identifier, ..., Grade); its columns: {', '.join(head[:8])}")


def _canvas(tree, export, rows, assignments, scores) -> LmsImport:
    head = rows[0]
    keys = {notebook_key(a): a for a in assignments}
    cols = {i: keys[notebook_key(re.sub(r"\s*\(\d+\)$", "", h))] for i, h in enumerate(head)
            if notebook_key(re.sub(r"\s*\(\d+\)$", "", h)) in keys}
    if not cols:
        raise ValueError(f"{export}: no column names an assignment ({', '.join(assignments)})")
    out = LmsImport(tree.root / "lms-import-canvas.csv", "canvas")
    id_col, name_col = head.index("ID"), head.index("Student")
    for row in rows[1:]:
        lms = row[id_col].strip() if len(row) > id_col else ""
        if not lms.isdigit():  # "Points Possible" and other non-student rows stay as they are
            continue
        got = scores.get(lms, {})
        for i, a in cols.items():
            if a in got:
                row[i] = f"{got[a]:g}"
                out.filled.setdefault(lms, {})[a] = got[a]
        if not any(a in got for a in cols.values()):
            out.blank.append(f"{row[name_col]} ({lms})")
    _write(out.path, rows)
    return out


def _moodle(tree, export, rows, assignments, scores) -> LmsImport:
    named = [a for a in assignments if notebook_key(a) in notebook_key(export.stem)]
    if len(named) != 1:
        raise ValueError(f"{export}: a Moodle worksheet holds one assignment, named in its file name "
                         f"(e.g. Grades-L16-rmsnorm-12.csv); found {named or 'none'} of {', '.join(assignments)}")
    a = named[0]
    head = rows[0]
    ident, grade, name_col = head.index("Identifier"), head.index("Grade"), head.index("Full name")
    out = LmsImport(tree.root / f"lms-import-moodle-{a}.csv", "moodle")
    for row in rows[1:]:
        m = re.search(r"(\d+)$", row[ident].strip()) if len(row) > ident else None
        if not m:
            continue
        lms = m.group(1)
        if a in scores.get(lms, {}):
            row[grade] = f"{scores[lms][a]:g}"
            out.filled.setdefault(lms, {})[a] = scores[lms][a]
        else:
            out.blank.append(f"{row[name_col]} ({lms})")
    _write(out.path, rows)
    return out


def _write(path: Path, rows: list[list[str]]) -> None:
    part = path.with_name(path.name + ".part")
    with part.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    part.replace(path)
