"""The first stage of a run, ``check``: refuse bad input and an untrustworthy gradebook before
anything is touched (then the canary, :mod:`grader.stages.canary`, grades the instructor's solutions)."""
from __future__ import annotations

from pathlib import Path

from ..ledger import state
from ..batch import Batch
from ..intake.collect import check_input
from ..ledger.reset import DEMO_MARKER


def check(b: Batch) -> None:
    """Refuse bad input and an untrustworthy gradebook before anything is touched, and decide
    whether this run starts over (``found.fresh``: asked for, the demo class, or a course that
    held only the demo class's state); nothing is written."""
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
