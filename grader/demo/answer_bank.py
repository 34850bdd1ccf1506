"""The answer bank of the whole course, read from its assignment folders.

Each assignment's answers and the points each must get live in its folder,
``source/<assignment>/answer_bank.py`` (``ANSWERS[variant]``: an answer cell's grade_id -> what a
synthetic student typed there; ``EXPECTED[variant]``: every grade cell's points, derived by hand),
and its hand-graded cells in its ``grading.py`` (:mod:`grader.scoring.questions`). This module gathers
them for the demo class (:mod:`grader.demo`) and the tests:

- ``ANSWERS[assignment][variant]``, ``EXPECTED[assignment][variant]``;
- ``MANUAL_CELLS[assignment]``: the grade cells graded by hand (nbgrader records 0 for them and
  flags an answered one "needs manual grade"; ``EXPECTED`` holds that 0).

Read when first used, from this repository's ``source/``.
"""
from __future__ import annotations

__all__ = ["ANSWERS", "EXPECTED", "MANUAL_CELLS"]  # noqa: F822 - made on first use (__getattr__)


def __getattr__(name: str):
    from ..scoring.questions import assignments

    found = assignments()
    if name == "ANSWERS":
        return {a: dict(x.answers) for a, x in found.items() if x.answers}
    if name == "EXPECTED":
        return {a: dict(x.expected) for a, x in found.items() if x.expected}
    if name == "MANUAL_CELLS":
        return {a: tuple(x.manual) for a, x in found.items() if x.manual}
    raise AttributeError(name)
