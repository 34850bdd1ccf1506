"""The class report's "for the instructor's review" section: the flags that took no points.

Only a reference seen running inside the student's call takes a question's points
(:func:`normref.rules.observed_reference`). Everything less (a reference the source spells but no
checked call ran, a tamper construct in the cells an answer comes from, a thread of the
student's, the recorder switched off) is scored on the outputs and flagged with
:func:`normref.rules.review_message`'s words, which the student reads in that question's feedback
(and the self-check) and the instructor here (:func:`grader.outputs.report.summary_text`, the report page).
"""
from __future__ import annotations

__all__ = ["for_review", "review_summary"]


def for_review(flags: dict[str, list[str]]) -> dict[str, list[str]]:
    """The flags for the instructor's review, ``{student: [note]}`` (of the report's ``flags``,
    ``{student: ["<assignment>: <note>"]}``), each as the flag says it, e.g. ``"rmsnorm:
    <grade_id>: For the instructor's review (no points taken): imports threading (line 1 of
    the cell that defines rms_norm)"``."""
    from normref.rules import REVIEW_PREFIX

    out = {}
    for who, notes in sorted(flags.items()):
        mine = [n for n in notes if REVIEW_PREFIX in n]
        if mine:
            out[who] = mine
    return out


def review_summary(review: dict[str, list[str]]) -> list[str]:
    """The text summary's line for :func:`for_review` (none when nothing is for review)."""
    if not review:
        return []
    n = len(review)
    return [f"  for the instructor's review, no points taken: {n} student{'s' if n != 1 else ''} "
            f"({', '.join(review)}; see the report)"]
