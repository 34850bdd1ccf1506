"""The instructor's tooling: ``python -m grader`` (``make grade``).

One run is the list of stages in :data:`grader.pipeline.STAGES`: collect the submissions,
repair them and scan for tampering, draw the graded inputs, then nbgrader's own apps
(generate_assignment, autograde as one sandboxed task per submission on worker processes or Dask,
generate_feedback, export) with the scores computed outside the kernels, and a class report read
from nbgrader's gradebook. ``docs/ARCHITECTURE.md`` says which module does what.

``grade_class`` and ``GradeRun`` are imported on first use, so that ``import grader.intake.collect``
(or the tamper scan) does not load the report's plotting and the ``normref`` checkers.
"""
__all__ = ["grade_class", "GradeRun"]


def __getattr__(name: str):
    if name in __all__:
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'grader' has no attribute {name!r}")
