"""The grades as a plain-text table for the terminal (``make grade`` prints it, then the class
report's summary, :func:`grader.outputs.report.summary_text`)."""
from __future__ import annotations

import csv

from ..batch import GradeRun
from ..ledger.course import CourseTree


def format_table(run: GradeRun) -> str:
    """The grades as a plain-text table from grades.csv: one row per student, one column per
    assignment (``-`` = no submission, ``*`` = late: after the due date or marked late by the LMS),
    and the total."""
    with run.grades_csv.open() as f:
        rows = list(csv.DictReader(f))
    assignments = sorted({r["assignment"] for r in rows})
    maxes = {r["assignment"]: float(r["max_score"]) for r in rows}
    cell: dict[tuple[str, str], str] = {}
    totals: dict[str, float] = {}
    for r in rows:
        late = r.get("late") == "yes" or bool(r.get("timestamp") and r.get("duedate")
                                               and r["timestamp"] > r["duedate"])
        submitted = CourseTree(run.course_root).has_notebook("submitted", r["student_id"], r["assignment"])
        cell[(r["student_id"], r["assignment"])] = (f"{float(r['score']):.2f}{'*' if late else ''}"
                                                    if submitted else "-")
        totals[r["student_id"]] = totals.get(r["student_id"], 0.0) + float(r["score"])
    width = max([len(a) for a in assignments] + [7])
    first = max([len(st) + 1 for st in totals] + [12])  # a long id (an LMS's full name) keeps the columns
    head = f"{'student':<{first}}" + "".join(f"{a:>{width + 1}}" for a in assignments) + f"{'total':>9}"
    sub = f"{'(max)':<{first}}" + "".join(f"{maxes[a]:>{width + 1}g}" for a in assignments) + \
        f"{sum(maxes.values()):>9g}"
    lines = [head, sub, "-" * len(head)]
    for st in sorted(totals):
        lines.append(f"{st:<{first}}" + "".join(f"{cell.get((st, a), '-'):>{width + 1}}" for a in assignments)
                     + f"{totals[st]:>9.2f}")
    lines.append("(* = late: submitted after the due date, or marked late by the LMS; - = no submission)")
    return "\n".join(lines)
