"""The first two stages of a run: ``prepare`` (refuse bad input, the canary, a backup, start over
if asked, damaged bookkeeping set aside) and ``generate`` (``source/`` -> ``release/``)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from .. import canary, state, store
from ..apps import AppError, Course
from ..batch import Batch, GradingError
from ..collect import check_input
from ..reset import DEMO_MARKER, start_over


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()



def prepare(b: Batch) -> None:
    """Refuse bad input and an untrustworthy gradebook before anything is touched; grade the
    instructor's solutions (:mod:`grader.canary`, stops the run when they do not score full); back
    the gradebook up; start over (``fresh``) if asked, carefully (:func:`start_over`); set every
    damaged record of ``logs/`` aside, saying each (:func:`grader.store.set_aside_damaged`)."""
    tree = b.services.tree
    _refuse_bad_input(b)
    demo_state = (tree.root / DEMO_MARKER).exists()
    if b.options.submissions is None and state.has_grading_state(tree) and not demo_state:
        raise state.CourseStateError(
            f"{tree.root} holds a real class: the demo class is graded in a course folder of its own "
            "(`python -m grader` with no --submissions uses build/demo-course/); nothing was written")
    b.found.fresh = b.options.submissions is None if b.options.fresh is None else b.options.fresh
    if not b.found.fresh and demo_state:
        b.found.fresh = True
        b.services.log("the grading state here was the demo class's: removed before grading your submissions")
    if not b.found.fresh:
        state.check_gradebook(tree)
    canary.stage(b)  # the instructor's solutions first (grader/canary.py): nothing is written before
    if b.found.fresh:
        start_over(tree, yes=b.options.yes, tag=b.services.run_id, log=b.services.log)
    else:
        state.backup_gradebook(tree, f"{b.services.run_id}-before", log=b.services.log)
    for line in store.set_aside_damaged(tree):  # said once, here; every later read finds them sound
        b.services.log(f"prepare: {line}")


def _refuse_bad_input(b: Batch) -> None:
    """Due dates nbgrader cannot read or for no assignment, submissions that are not a kind of
    input, a missing LMS gradebook export: refused before anything is touched."""
    tree = b.services.tree
    unknown = sorted(set(b.options.duedates) - set(b.run.assignments) - {"*"})
    if unknown:
        raise ValueError(f"due date for unknown assignment {', '.join(unknown)} "
                         f"(assignments: {', '.join(b.run.assignments)})")
    if b.options.submissions is not None:
        check_input(tree, b.options.submissions, b.run.assignments)
    if b.options.lms_gradebook is not None and not Path(b.options.lms_gradebook).is_file():
        raise FileNotFoundError(f"no LMS gradebook export at {b.options.lms_gradebook}")



def generate(b: Batch) -> None:
    """``nbgrader generate_assignment`` for each assignment (this also records its cells in the
    gradebook, which autograde needs); says which ``release/`` folders were written, stale, or
    held work written in them, which is moved to ``logs/release-kept/<run>/`` first, never lost
    (:mod:`grader.release`).

    Raises:
        GradingError: nbgrader failed (its log is quoted).
    """
    tree, log = b.services.tree, b.services.log
    log(f"generate: {', '.join(b.run.assignments)}")
    b.services.course = Course(tree)
    kept_root = store.release_kept(tree, b.services.run_id or state.run_id())
    for a in b.run.assignments:
        rel = tree.release(a)
        existed = rel.is_dir()
        before = _digest(rel) if existed else ""
        try:
            done = b.services.course.generate_unless_unchanged(a, keep=kept_root)
        except AppError as e:
            raise GradingError(str(e)) from e
        if done.skipped:
            log(f"generate: {a} skipped: {done.skipped}")
        elif done.kept:
            log(f"generate: release/{a} held work written in it ({'; '.join(done.kept.work)}): moved to "
                f"{_shown(done.kept.path, tree.root)}, then release/{a} was generated again from source/{a}")
        elif not existed:
            log(f"generate: release/{a} written from source/{a}")
        elif _digest(rel) != before:
            log(f"generate: release/{a} was stale and has been regenerated from source/{a} (it held no "
                "work: every cell as nbgrader generated it)")


def _shown(path: Path, root: Path) -> str:
    """``path`` relative to the course root when it is inside it, with a trailing slash."""
    try:
        return f"{path.relative_to(root)}/"
    except ValueError:
        return f"{path}/"
