"""Grades back to the LMS they came from: the LMS's own gradebook export, filled in.

Given Canvas's gradebook export (``Student, ID, SIS User ID, SIS Login ID, Section, <assignment>
(<canvas id>), ...``) or Moodle's grading worksheet for one assignment (``Identifier``
``Participant <id>``, ``Full name``, ..., ``Grade``), :func:`fill_lms_gradebook` writes the same
file with each graded assignment's points filled in, students matched by their LMS user id
(kept in the gradebook by collect; ``roster.csv``). The points are the gradebook's, for every
student graded in any batch (nbgrader's score less its late penalty, as in ``grades.csv``). The
LMS imports that file as it is. Students the LMS lists but the gradebook has no submission of
are left blank and listed.

:func:`feedback_zips` packs each student's feedback HTML into the zip the LMS's bulk feedback
upload reads, named from the student's own download (kept by collect, ``logs/lms_files.json``):

* Moodle, "Upload multiple feedback files in a zip": a folder per student named as Moodle names
  the submission folders of its download, ``<Full name>_<participant id>_assignsubmission_file_/``,
  holding the feedback HTML (Moodle matches the participant id, the second ``_`` field);
* Canvas, "Re-upload submissions" (the submissions page's bulk upload, which adds each file as a
  comment on that student's submission): each file named as the student's download,
  ``<name>_<user id>_<attachment id>_<file>``, ``.html`` for ``.ipynb`` (Canvas matches the first
  two all-digit ``_`` fields).

Blackboard has no such upload: its students are left out of the zips.
"""
from __future__ import annotations

import csv
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from .collect import _PATTERNS, lms_files, lms_kind, notebook_key
from .course import CourseTree


@dataclass
class LmsImport:
    """What :func:`fill_lms_gradebook` wrote.

    Attributes:
        path: the file to import into the LMS.
        lms: ``"canvas"`` or ``"moodle"``.
        filled: ``{lms id: {assignment: points}}`` written.
        blank: LMS ids (with the LMS's name for them) the gradebook has no submission of.
    """

    path: Path
    lms: str
    filled: dict[str, dict[str, float]] = field(default_factory=dict)
    blank: list[str] = field(default_factory=list)


def scores_by_lms_id(tree: CourseTree, assignments: list[str]) -> dict[str, dict[str, float]]:
    """``{LMS user id: {assignment: points}}`` from the gradebook: every submission of every
    batch whose student has an LMS id, scored as ``nbgrader export`` scores it (the submission's
    score less its late penalty, never below 0)."""
    from nbgrader.api import Gradebook, MissingEntry

    out: dict[str, dict[str, float]] = {}
    with Gradebook(tree.gradebook_url) as gb:
        for a in assignments:
            try:
                subs = gb.assignment_submissions(a)
            except MissingEntry:
                continue
            for sub in subs:
                lms = sub.student.lms_user_id
                if lms:
                    penalty = float(sub.late_submission_penalty or 0.0)
                    out.setdefault(lms, {})[a] = max(0.0, float(sub.score) - penalty)
    return out


def fill_lms_gradebook(tree: CourseTree, export: Path, assignments: list[str]) -> LmsImport:
    """Fill the LMS's gradebook export with the gradebook's points (:func:`scores_by_lms_id`).

    Args:
        export: Canvas's gradebook export CSV, or Moodle's grading worksheet CSV (one assignment,
            named in the worksheet's file name, e.g. ``Grades-L16-rmsnorm-12.csv``).
        assignments: the course's assignment names.

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
    scores = scores_by_lms_id(tree, assignments)
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


def upload_name(download: str, feedback_file: str) -> str | None:
    """The name the LMS's bulk feedback upload expects for ``feedback_file`` (e.g.
    ``rmsnorm.html``) of the student whose download was named ``download``; None for a download
    no upload can match (Blackboard, plain names).

    >>> upload_name("leejohn_LATE_10011_20013_rmsnorm (1).ipynb", "rmsnorm.html")
    'leejohn_LATE_10011_20013_rmsnorm.html'
    >>> upload_name("Jane Doe_12345_assignsubmission_file_rmsnorm.ipynb", "rmsnorm.html")
    'Jane Doe_12345_assignsubmission_file_/rmsnorm.html'
    """
    stem = os.path.basename(download).removesuffix(".ipynb")
    kind = lms_kind(download)
    if kind == "canvas":
        m = _PATTERNS[2].match(stem)
        return stem[: m.start("file_id")] + feedback_file
    if kind == "moodle":
        m = _PATTERNS[1].match(stem)
        return f"{m['name']}_{m['student_id']}_assignsubmission_file_/{feedback_file}"
    return None


def feedback_zips(tree: CourseTree, assignments: list[str]) -> dict[Path, list[str]]:
    """``feedback-<lms>-<assignment>.zip`` beside ``grades.csv``: for each assignment and each LMS
    its students' downloads came from (Canvas, Moodle), every such student's feedback HTML
    (``feedback/<student>/<assignment>/*.html``, written by ``nbgrader generate_feedback``) under
    the name that LMS's bulk feedback upload matches (:func:`upload_name`, module docstring).

    Returns:
        ``{zip path: [student ids in it]}``; a zip is written whole (``.part``, then renamed).
    """
    by_zip: dict[Path, list[tuple[str, str, Path]]] = {}
    for (a, st), download in sorted(lms_files(tree).items()):
        kind = lms_kind(download)
        if a not in assignments or kind not in ("canvas", "moodle"):
            continue
        for html in sorted(tree.feedback(st, a).glob("*.html")):
            by_zip.setdefault(tree.root / f"feedback-{kind}-{a}.zip", []).append(
                (st, upload_name(download, html.name), html))
    out = {}
    for path, entries in sorted(by_zip.items()):
        part = path.with_name(path.name + ".part")
        try:
            with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as zf:
                for _, name, html in entries:
                    zf.write(html, name)
            part.replace(path)
        finally:
            part.unlink(missing_ok=True)
        out[path] = sorted({st for st, _, _ in entries})
    return out
