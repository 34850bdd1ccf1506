"""The embedded demo class: synthetic students built from the mistakes normref diagnoses.

Each student is the released notebook with the answer cells filled in by the code below, so
`make grade` on a fresh clone grades a realistic class. ``DEMO_CLASS`` says what each student
was built to get wrong; the tests derive every expected score from that, not from the grader.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

RMS_CORRECT = '''def rms_norm(x, weight, eps=1e-6):
    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()  # [..., 1]
    return (x.float() * rms * weight).to(x.dtype)
'''

RMS_N_MINUS_1 = '''def rms_norm(x, weight, eps=1e-6):
    d = x.shape[-1]
    ms = x.float().pow(2).sum(dim=-1, keepdim=True) / (d - 1)  # "unbiased", like torch.var
    return (x.float() * (ms + eps).rsqrt() * weight).to(x.dtype)
'''

RMS_NO_FLOAT32 = '''def rms_norm(x, weight, eps=1e-6):
    rms = x.pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()  # stays in x's dtype
    return (x * rms * weight).to(x.dtype)
'''

RMS_WRONG_AXIS = '''def rms_norm(x, weight, eps=1e-6):
    rms = x.float().pow(2).mean(dim=0, keepdim=True).add(eps).rsqrt()  # first axis, not last
    return (x.float() * rms * weight).to(x.dtype)
'''


#: Due dates of the demo course; a demo student submitted after it is late.
DUE_DATES = {"rmsnorm": "2026-11-21 09:00:00 UTC"}
ON_TIME = "2026-11-20 09:00:00.000000 UTC"
LATE = "2026-11-22 18:30:00.000000 UTC"


@dataclass(frozen=True)
class DemoStudent:
    """One synthetic student: id, the fault they were built with, and their answer cells."""

    student_id: str
    built_with: str  # "correct", a normref fault kind, or "blank"
    answers: dict[str, str] = field(default_factory=dict)  # grade_id -> cell source
    late: bool = False


DEMO_CLASS: dict[str, list[DemoStudent]] = {
    "rmsnorm": [
        DemoStudent("ada", "correct", {"rms_norm_impl": RMS_CORRECT}),
        DemoStudent("bruno", "unbiased_variance", {"rms_norm_impl": RMS_N_MINUS_1}),
        DemoStudent("chen", "low_precision_stats", {"rms_norm_impl": RMS_NO_FLOAT32}),
        DemoStudent("dana", "wrong_axis", {"rms_norm_impl": RMS_WRONG_AXIS}),
        DemoStudent("emeka", "blank", {}),
        DemoStudent("farah", "correct", {"rms_norm_impl": RMS_CORRECT}, late=True),
    ],
}


def fill_answers(release_nb: Path, answers: dict[str, str]) -> nbformat.NotebookNode:
    """The released notebook with the given answer cells replaced (by nbgrader grade_id).

    Raises:
        KeyError: an answer names a grade_id the notebook does not have.
    """
    nb = nbformat.read(release_nb, as_version=4)
    ids = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    for grade_id, src in answers.items():
        if grade_id not in ids:
            raise KeyError(f"{release_nb.name} has no cell with grade_id {grade_id!r}")
        ids[grade_id].source = src.rstrip("\n")
    return nb


def write_demo_submissions(course_root: Path, dest: Path) -> list[str]:
    """Write the demo class as an nbgrader ``submitted/`` tree under ``dest``.

    Returns the student ids written.
    """
    students: list[str] = []
    for assignment, roster in DEMO_CLASS.items():
        release_dir = course_root / "release" / assignment
        for st in roster:
            out_dir = dest / st.student_id / assignment
            out_dir.mkdir(parents=True, exist_ok=True)
            for nb_path in sorted(release_dir.glob("*.ipynb")):
                nb = fill_answers(nb_path, {k: v for k, v in st.answers.items()})
                nbformat.write(nb, out_dir / nb_path.name)
            (out_dir / "timestamp.txt").write_text((LATE if st.late else ON_TIME) + "\n")
            if st.student_id not in students:
                students.append(st.student_id)
    return students


def apply_due_dates(course_root: Path, nbgrader) -> None:
    """Record the demo course's due dates in the gradebook (``nbgrader db assignment add``)."""
    for assignment, due in DUE_DATES.items():
        if (course_root / "source" / assignment).is_dir():
            nbgrader("db", "assignment", "add", assignment, f"--duedate={due}")


def demo_manifest() -> str:
    """JSON description of the demo class (for the report and for humans)."""
    return json.dumps({a: {s.student_id: s.built_with for s in r} for a, r in DEMO_CLASS.items()},
                      indent=2)
