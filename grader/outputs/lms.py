"""Grades back to the LMS they came from: the LMS's own gradebook export, filled in.

Given Canvas's gradebook export (``Student, ID, SIS User ID, SIS Login ID, Section, <assignment>
(<canvas id>), ...``) or Moodle's grading worksheet for one assignment (``Identifier``
``Participant <id>``, ``Full name``, ..., ``Grade``), :func:`fill_lms_gradebook` writes the same
file with each graded assignment's points filled in, students matched by their Canvas user id
(kept in the gradebook by collect; ``roster.csv``) or by their Moodle participant id in that
assignment (Moodle's number, ``Participant <id>``, is one per student and assignment; collect keeps
it with the download's name, ``logs/lms_files.json``). The points are the gradebook's, for every
student graded in any batch (nbgrader's score less its late penalty, as in ``grades.csv``). The
LMS imports that file as it is. Students the LMS lists but the gradebook has no submission of
are left blank and listed. Every file is written whole (:func:`grader.ledger.store.atomic_path`), and an
earlier, different one is first kept in ``logs/lms-exports/`` (:func:`keep_earlier`).

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
import shutil
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..ledger import store
from ..ledger.course import CourseTree
from ..intake.lms_names import _PATTERNS, lms_files, lms_kind, moodle_participants, notebook_key


@dataclass
class LmsImport:
    """What :func:`fill_lms_gradebook` wrote.

    Attributes:
        path: the file to import into the LMS.
        lms: ``"canvas"`` or ``"moodle"``.
        filled: ``{lms id: {assignment: points}}`` written.
        blank: LMS ids (with the LMS's name for them) the gradebook has no submission of.
        missing: students graded here (with their LMS id when known) that the LMS's file has no
            row for: their points are not in ``path``.
        kept: where the earlier ``path`` was kept, when this one replaced a different one.
        scaled: ``{assignment: (the course's points, the LMS column's)}`` where the LMS's file says its
            column is worth other points than the assignment's: the points written there are scaled
            to that column (the fraction earned kept).
    """

    path: Path
    lms: str
    filled: dict[str, dict[str, float]] = field(default_factory=dict)
    blank: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    kept: Path | None = None
    scaled: dict[str, tuple[float, float]] = field(default_factory=dict)


def max_points(tree: CourseTree, assignments: list[str]) -> dict[str, float]:
    """``{assignment: its points}`` in the gradebook (nbgrader's ``max_score``)."""
    from nbgrader.api import Gradebook, MissingEntry

    out = {}
    with Gradebook(tree.gradebook_url) as gb:
        for a in assignments:
            try:
                out[a] = float(gb.find_assignment(a).max_score)
            except MissingEntry:
                continue
    return out


def _scale(out: LmsImport, a: str, course: float | None, column: str) -> float:
    """The factor from the course's points of ``a`` to an LMS column worth ``column`` (a number,
    or not: then 1), recorded in ``out.scaled`` when it is not 1."""
    try:
        lms = float(column)
    except (TypeError, ValueError):
        return 1.0
    if not course or lms <= 0 or abs(lms - course) <= 1e-9:
        return 1.0
    out.scaled[a] = (course, lms)
    return lms / course


def scores_by_student(tree: CourseTree, assignments: list[str]) -> tuple[dict[tuple[str, str], float], dict[str, str]]:
    """``({(assignment, student): points}, {Canvas user id: student})`` from the gradebook: every
    submission of every batch, scored as ``nbgrader export`` scores it (the submission's score less
    its late penalty, never below 0)."""
    from nbgrader.api import Gradebook, MissingEntry

    points: dict[tuple[str, str], float] = {}
    ids: dict[str, str] = {}
    with Gradebook(tree.gradebook_url) as gb:
        for st in gb.students:
            if st.lms_user_id:
                ids[st.lms_user_id] = st.id
        for a in assignments:
            try:
                subs = gb.assignment_submissions(a)
            except MissingEntry:
                continue
            for sub in subs:
                penalty = float(sub.late_submission_penalty or 0.0)
                points[(a, sub.student.id)] = max(0.0, float(sub.score) - penalty)
    return points, ids


def scores_by_lms_id(tree: CourseTree, assignments: list[str]) -> dict[str, dict[str, float]]:
    """``{Canvas user id: {assignment: points}}`` (:func:`scores_by_student`) for the students the
    gradebook knows a Canvas user id of."""
    points, ids = scores_by_student(tree, assignments)
    by_student = {st: lms for lms, st in ids.items()}
    out: dict[str, dict[str, float]] = {}
    for (a, st), pts in points.items():
        if st in by_student:
            out.setdefault(by_student[st], {})[a] = pts
    return out


def fill_lms_gradebook(tree: CourseTree, export: Path, assignments: list[str]) -> LmsImport:
    """Fill the LMS's gradebook export with the gradebook's points (:func:`scores_by_student`).

    Args:
        export: Canvas's gradebook export CSV, or Moodle's grading worksheet CSV (one assignment,
            named in the worksheet's file name, e.g. ``Grades-L16-rmsnorm-12.csv``).
        assignments: the course's assignment names.

    Returns:
        :class:`LmsImport`; the file is ``<course>/lms-import-canvas.csv`` or
        ``<course>/lms-import-moodle-<assignment>.csv``, written whole (:func:`grader.ledger.store.atomic_path`);
        an earlier, different one is kept first (:func:`keep_earlier`, ``LmsImport.kept``).

    Raises:
        ValueError: the file is neither format, or names none of the assignments.
    """
    export = Path(export)
    with export.open(newline="", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise ValueError(f"{export} is empty")
    head = rows[0]
    if "ID" in head and "Student" in head:
        return _canvas(tree, export, rows, assignments)
    if "Identifier" in head and "Grade" in head:
        return _moodle(tree, export, rows, assignments)
    raise ValueError(f"{export}: not a Canvas gradebook export (Student, ID, ...) or a Moodle grading "
                     f"worksheet (Identifier, ..., Grade); its columns: {', '.join(head[:8])}")


def _canvas(tree, export, rows, assignments) -> LmsImport:
    points, ids = scores_by_student(tree, assignments)
    scores = scores_by_lms_id(tree, assignments)
    head = rows[0]
    keys = {notebook_key(a): a for a in assignments}
    cols = {i: keys[notebook_key(re.sub(r"\s*\(\d+\)$", "", h))] for i, h in enumerate(head)
            if notebook_key(re.sub(r"\s*\(\d+\)$", "", h)) in keys}
    if not cols:
        raise ValueError(f"{export}: no column names an assignment ({', '.join(assignments)})")
    out = LmsImport(tree.root / "lms-import-canvas.csv", "canvas")
    id_col, name_col = head.index("ID"), head.index("Student")
    # Canvas's "Points Possible" row: a column worth other points than the assignment gets the fraction earned
    possible = next((r for r in rows[1:] if len(r) > name_col and r[name_col].strip() == "Points Possible"), None)
    course_max = max_points(tree, list(cols.values()))
    factor = {i: _scale(out, a, course_max.get(a), possible[i] if possible and len(possible) > i else None)
              for i, a in cols.items()}
    for row in rows[1:]:
        lms = row[id_col].strip() if len(row) > id_col else ""
        if not lms.isdigit():  # "Points Possible" and other non-student rows stay as they are
            continue
        got = scores.get(lms, {})
        for i, a in cols.items():
            if a in got:
                row[i] = f"{round(got[a] * factor[i], 2):g}"
                out.filled.setdefault(lms, {})[a] = round(got[a] * factor[i], 2)
        if not any(a in got for a in cols.values()):
            out.blank.append(f"{row[name_col]} ({lms})")
    canvas_id = {st: lms for lms, st in ids.items()}
    graded = sorted({st for (a, st) in points if a in cols.values()})
    out.missing = [f"{st} (Canvas id {canvas_id[st]})" if st in canvas_id else f"{st} (no Canvas id)"
                   for st in graded if canvas_id.get(st) not in out.filled]
    out.kept = _write(tree, out.path, rows)
    return out


def _moodle(tree, export, rows, assignments) -> LmsImport:
    """Moodle's worksheet names each student ``Participant <participant id>`` (Identifier): the
    same number as the student's download of this assignment (:func:`grader.intake.collect.moodle_participants`),
    a new one in each assignment."""
    named = [a for a in assignments if notebook_key(a) in notebook_key(export.stem)]
    if len(named) != 1:
        raise ValueError(f"{export}: a Moodle worksheet holds one assignment, named in its file name "
                         f"(e.g. Grades-L16-rmsnorm-12.csv); found {named or 'none'} of {', '.join(assignments)}")
    a = named[0]
    points, ids = scores_by_student(tree, [a])
    who = dict(ids)  # a course graded before participant ids were kept apart: the gradebook's id
    who.update({pid: st for (a2, st), pid in moodle_participants(tree).items() if a2 == a})
    head = rows[0]
    ident, grade, name_col = head.index("Identifier"), head.index("Grade"), head.index("Full name")
    most = head.index("Maximum Grade") if "Maximum Grade" in head else None  # the worksheet's points
    out = LmsImport(tree.root / f"lms-import-moodle-{a}.csv", "moodle")
    course_max = max_points(tree, [a]).get(a)
    for row in rows[1:]:
        m = re.fullmatch(r"\D*?(\d+)", row[ident].strip()) if len(row) > ident else None
        if not m:
            continue
        pid = m.group(1)
        st = who.get(pid)
        if (a, st) in points:
            k = _scale(out, a, course_max, row[most] if most is not None and len(row) > most else None)
            row[grade] = f"{round(points[(a, st)] * k, 2):g}"
            out.filled.setdefault(pid, {})[a] = round(points[(a, st)] * k, 2)
        else:
            out.blank.append(f"{row[name_col]} ({row[ident].strip()})")
    participant = {st: pid for pid, st in who.items()}
    filled = {who.get(pid) for pid in out.filled}
    out.missing = [f"{st} (Participant {participant[st]})" if st in participant else st
                   for st in sorted({st for (a2, st) in points if a2 == a}) if st not in filled]
    out.kept = _write(tree, out.path, rows)
    return out


#: Where an earlier ``lms-import-*.csv`` or ``feedback-*.zip`` is kept before a different one
#: replaces it (inside ``logs/``, so ``make clean``'s state backup holds them too).
EARLIER = store.LMS_EXPORTS


def _zip_entries(path: Path) -> dict[str, tuple[int, int]] | None:
    try:
        with zipfile.ZipFile(path) as zf:
            return {i.filename: (i.CRC, i.file_size) for i in zf.infolist()}
    except (zipfile.BadZipFile, OSError):
        return None


def _same(a: Path, b: Path) -> bool:
    """Same content: the bytes, or for zips the same entries (a zip written again holds new dates)."""
    if b.suffix == ".zip":  # ``a`` is the finished part file, named ``<name>.zip.<pid>-<n>.part``
        return _zip_entries(a) is not None and _zip_entries(a) == _zip_entries(b)
    return a.read_bytes() == b.read_bytes()


def keep_earlier(tree: CourseTree, part: Path, path: Path) -> Path | None:
    """Before the finished ``part`` replaces ``path``: an earlier ``path`` with other content is
    copied to ``logs/lms-exports/<name>-<its UTC time><suffix>`` (never over another one), so an
    export already imported into the LMS, or handed out, is never lost.

    Returns:
        Where the earlier one was kept, or None (there was none, or it was the same).
    """
    if not path.is_file() or _same(part, path):
        return None
    keep_dir = tree.root / EARLIER
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(path.stat().st_mtime))
    kept = keep_dir / f"{path.stem}-{stamp}{path.suffix}"
    n = 1
    while kept.exists():
        n += 1
        kept = keep_dir / f"{path.stem}-{stamp}-{n}{path.suffix}"
    with store.atomic_path(kept) as tmp:
        shutil.copy2(path, tmp)
    return kept


def _write(tree: CourseTree, path: Path, rows: list[list[str]]) -> Path | None:
    """The CSV written whole (:func:`grader.ledger.store.atomic_path`), the earlier one kept first
    (:func:`keep_earlier`); a failure (a full disk) leaves no part file and the earlier file as
    it was. Returns where the earlier one was kept, or None."""
    with store.atomic_path(path) as part:
        with part.open("w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(rows)
        return keep_earlier(tree, part, path)


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
        return f"{m['student_id']}_{m['lms_id']}_assignsubmission_file_/{feedback_file}"
    return None


def feedback_zips(tree: CourseTree, assignments: list[str],
                  kept: dict[Path, Path] | None = None) -> dict[Path, list[str]]:
    """``feedback-<lms>-<assignment>.zip`` beside ``grades.csv``: for each assignment and each LMS
    its students' downloads came from (Canvas, Moodle), every such student's feedback HTML
    (``feedback/<student>/<assignment>/*.html``, written by ``nbgrader generate_feedback``) under
    the name that LMS's bulk feedback upload matches (:func:`upload_name`, module docstring).

    Args:
        kept: filled with ``{zip path: where its earlier, different version was kept}``
            (:func:`keep_earlier`).

    Returns:
        ``{zip path: [student ids in it]}``; a zip is written whole (:func:`grader.ledger.store.atomic_path`).
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
        with store.atomic_path(path) as part:
            with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as zf:
                for _, name, html in entries:
                    zf.write(html, name)
            earlier = keep_earlier(tree, part, path)
        if earlier is not None and kept is not None:
            kept[path] = earlier
        out[path] = sorted({st for st, _, _ in entries})
    return out
