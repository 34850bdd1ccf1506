"""The ``feedback`` stage: nbgrader's feedback HTML per student."""
from __future__ import annotations

from ..ledger.apps import AppError, generate_feedback_parallel
from ..batch import Batch, GradingError


def feedback(b: Batch) -> None:
    """``nbgrader generate_feedback`` for every assignment with an autograded notebook."""
    graded = [a for a in b.run.assignments if any(b.services.tree.autograded().glob(f"*/{a}/*.ipynb"))]
    try:
        generate_feedback_parallel(b.services.course, graded, b.services.jobs)
    except AppError as e:
        raise GradingError(str(e)) from e
    b.run.feedback_dir = b.services.tree.feedback()
