"""Hand grades and formgrader comments across a resubmission.

nbgrader forgets a submission's grades when it is replaced (``Gradebook.remove_submission``),
hand grades typed into formgrader included, and its comments with them. :func:`capture` reads
both, with the text of the answer each one judged, before the earlier submission leaves the
gradebook, and writes them at once to ``logs/handgrades.json`` (:data:`PENDING`), so that a run
stopped before they are written back (Ctrl-C after collect) loses nothing: the rerun grades the
submission again and carries them over from that record. After the new submission is
autograded, :func:`carry_over` writes each one back where the answer it judged is unchanged,
and names the ones that must be redone; :func:`forget` removes them from the record once the
submission is recorded as graded.

The answer a hand grade judged: for a hand-graded answer cell (a written answer, a manually
graded code answer) the cell's own text; for a manual override of an autograded test cell (a
locked cell whose text never changes) the text of every answer cell above it in the notebook,
which is what the test ran.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat

from . import store
from .course import CourseTree

#: ``logs/handgrades.json``: hand grades and comments captured from replaced submissions and
#: not yet written back (a list of :class:`HandGrade` as dicts; :mod:`grader.ledger.store`).
PENDING = store.HANDGRADES


@dataclass(frozen=True)
class HandGrade:
    """What a person gave one cell of one submission in formgrader: the points (``manual_score``,
    None if only a comment), the comment (``comment``, None if none), and the answer judged.

    ``test`` is True for an override of an autograded test cell (``answer`` is then the text of
    the answer cells above it)."""

    assignment: str
    student: str
    notebook: str
    grade_id: str
    manual_score: float | None
    answer: str
    comment: str | None = None
    test: bool = False

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.assignment, self.student, self.notebook, self.grade_id)


def _answers(folder: Path) -> dict[tuple[str, str], tuple[str, bool]]:
    """``{(notebook, grade_id): (answer text, is an autograded test)}`` of the notebooks in
    ``folder``: a test cell's answer is the text of the answer (solution) cells above it."""
    out = {}
    for path in sorted(folder.glob("*.ipynb")):
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001 - an unreadable notebook has no answer to compare
            continue
        above: list[str] = []
        for c in nb.cells:
            meta = c.get("metadata", {}).get("nbgrader", {})
            gid = meta.get("grade_id")
            if not gid:
                continue
            text = c.get("source", "").strip()
            if meta.get("grade") and not meta.get("solution") and c.get("cell_type") == "code":
                out[(path.stem, gid)] = ("\n\0\n".join(above), True)
            else:
                out[(path.stem, gid)] = (text, False)
            if meta.get("solution"):
                above.append(f"{gid}\0{text}")
    return out


def _read_pending(tree: CourseTree) -> list[HandGrade]:
    return [HandGrade(**d) for d in store.hand_grades(tree)]


def _write_pending(tree: CourseTree, grades: list[HandGrade]) -> None:
    store.write_hand_grades(tree, [asdict(g) for g in grades])


def pending(tree: CourseTree) -> list[HandGrade]:
    """The hand grades captured and not yet written back (``logs/handgrades.json``)."""
    return _read_pending(tree)


def capture(tree: CourseTree, assignment: str, student: str, graded: Path | None = None) -> list[HandGrade]:
    """The hand grades and comments of the submission now in ``submitted/<student>/<assignment>/``
    (call it before that submission is replaced), added to ``logs/handgrades.json`` before this
    returns (a capture of the same cell replaces the one recorded).

    Args:
        graded: the folder of the notebooks the gradebook's grades were given to, when it is not
            ``submitted/`` (a restored older gradebook graded the earlier submission, kept in
            ``logs/replaced/``; graded in place, ``submitted/`` already holds the resubmission and
            the notebook as graded is ``autograded/``'s, :mod:`grader.intake.inplace`).
    """
    out = read(tree, assignment, student, graded=graded)
    record(tree, out)
    return out


def read(tree: CourseTree, assignment: str, student: str, graded: Path | None = None,
         gradebook_url: str | None = None) -> list[HandGrade]:
    """The hand grades and comments a gradebook (the course's, or ``gradebook_url``) holds for
    one submission, each with the answer it judged (from ``graded``, default ``submitted/``);
    nothing is written. ``[]`` when the gradebook has no such submission."""
    from nbgrader.api import Gradebook, MissingEntry

    answers = _answers(graded or tree.submitted(student, assignment))
    found: dict[tuple[str, str], dict] = {}
    with Gradebook(gradebook_url or tree.gradebook_url) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return []
        for nb in sub.notebooks:
            for g in nb.grades:
                if g.manual_score is not None:
                    found.setdefault((nb.name, g.name), {})["manual_score"] = float(g.manual_score)
            for c in nb.comments:
                if c.manual_comment:
                    found.setdefault((nb.name, c.name), {})["comment"] = c.manual_comment
    out = []
    for (nb_name, gid), what in sorted(found.items()):
        answer, test = answers.get((nb_name, gid), ("", False))
        out.append(HandGrade(assignment, student, nb_name, gid, what.get("manual_score"), answer,
                             what.get("comment"), test))
    return out


def record(tree: CourseTree, grades: list[HandGrade]) -> None:
    """Add ``grades`` to ``logs/handgrades.json`` (a grade of the same cell replaces the one
    recorded), written before this returns."""
    if grades:
        keys = {g.key for g in grades}
        _write_pending(tree, [g for g in _read_pending(tree) if g.key not in keys] + list(grades))


def carry_over(tree: CourseTree, captured: list[HandGrade]) -> tuple[list[HandGrade], list[HandGrade]]:
    """Write back each captured hand grade and comment whose answer is unchanged in the
    autograded resubmission (for a test override: every answer cell above the test).

    Returns:
        ``(kept, redo)``: the ones written back, and those whose answer changed (or whose
        question is gone), which a person must grade (or comment) again.
    """
    from nbgrader.api import Gradebook, MissingEntry

    kept, redo = [], []
    with Gradebook(tree.gradebook_url) as gb:
        for hg in captured:
            now = _answers(tree.submitted(hg.student, hg.assignment)).get((hg.notebook, hg.grade_id))
            if now is None or now[0] != hg.answer:
                redo.append(hg)
                continue
            try:
                if hg.manual_score is not None:
                    grade = gb.find_grade(hg.grade_id, hg.notebook, hg.assignment, hg.student)
                    grade.manual_score = hg.manual_score
                    grade.needs_manual_grade = False
                if hg.comment is not None:
                    gb.find_comment(hg.grade_id, hg.notebook, hg.assignment, hg.student).manual_comment = hg.comment
            except MissingEntry:
                gb.db.rollback()
                redo.append(hg)
                continue
            gb.db.commit()
            kept.append(hg)
    return kept, redo


def forget(tree: CourseTree, done: list[HandGrade]) -> None:
    """Remove hand grades that were carried over (or named as to redo) from
    ``logs/handgrades.json``; the record is deleted when nothing is left in it."""
    if not done or not _read_pending(tree):
        return
    _write_pending(tree, [g for g in _read_pending(tree) if g not in done])
