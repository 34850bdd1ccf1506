"""The instructor's tooling: ``python -m grader`` (``make grade``).

Every step is nbgrader's own app, run in the course root: generate_assignment, autograde,
generate_feedback, export. This module only arranges the submissions and reads the gradebook.
"""
from .pipeline import GradeRun, grade_class

__all__ = ["grade_class", "GradeRun"]
