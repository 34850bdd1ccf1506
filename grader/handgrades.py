"""Hand grades across a resubmission.

nbgrader forgets a submission's grades when it is replaced (``Gradebook.remove_submission``),
hand grades typed into formgrader included. :func:`capture` reads them, with the text of the
answer each one graded, before the earlier submission leaves the gradebook; after the new one
is autograded, :func:`carry_over` writes each hand grade back where that answer's text is
unchanged, and names the ones that must be graded again.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat

from .course import CourseTree


@dataclass(frozen=True)
class HandGrade:
    """One hand grade of one answer: where it was, the points, and the answer's text."""

    assignment: str
    student: str
    notebook: str
    grade_id: str
    manual_score: float
    answer: str


def _answers(folder: Path) -> dict[tuple[str, str], str]:
    """``{(notebook, grade_id): cell source}`` of the notebooks in ``folder``."""
    out = {}
    for path in sorted(folder.glob("*.ipynb")):
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001 - an unreadable notebook has no answer to compare
            continue
        for c in nb.cells:
            gid = c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if gid:
                out[(path.stem, gid)] = c.get("source", "").strip()
    return out


def capture(tree: CourseTree, assignment: str, student: str) -> list[HandGrade]:
    """The hand grades of the submission now in ``submitted/<student>/<assignment>/`` (call it
    before that submission is replaced)."""
    from nbgrader.api import Gradebook, MissingEntry

    answers = _answers(tree.submitted(student, assignment))
    out = []
    with Gradebook(tree.gradebook_url) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return []
        for nb in sub.notebooks:
            for g in nb.grades:
                if g.manual_score is not None:
                    out.append(HandGrade(assignment, student, nb.name, g.name, float(g.manual_score),
                                         answers.get((nb.name, g.name), "")))
    return out


def carry_over(tree: CourseTree, captured: list[HandGrade]) -> tuple[list[HandGrade], list[HandGrade]]:
    """Write back each captured hand grade whose answer text is unchanged in the autograded
    resubmission.

    Returns:
        ``(kept, redo)``: the hand grades written back, and those whose answer changed (or
        whose question is gone), which a person must grade again.
    """
    from nbgrader.api import Gradebook, MissingEntry

    kept, redo = [], []
    with Gradebook(tree.gradebook_url) as gb:
        for hg in captured:
            now = _answers(tree.submitted(hg.student, hg.assignment)).get((hg.notebook, hg.grade_id))
            if now is None or now != hg.answer:
                redo.append(hg)
                continue
            try:
                grade = gb.find_grade(hg.grade_id, hg.notebook, hg.assignment, hg.student)
            except MissingEntry:
                redo.append(hg)
                continue
            grade.manual_score = hg.manual_score
            grade.needs_manual_grade = False
            gb.db.commit()
            kept.append(hg)
    return kept, redo
