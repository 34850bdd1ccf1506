"""`make grade` on the demo class, end to end through nbgrader, in a throwaway course root."""
import csv

import pytest

from normref.grading import grade_class
from normref.grading.demo import DEMO_CLASS

# Expected points, derived from what each demo student was built to get wrong and from the
# cases of the battery (1-D seed, [2,3,8], [4,4,4], tiny eps, float16 overflow, bfloat16):
#   shape cell (1 pt) passes iff both seed cases pass; battery (4 pts) = 4 x cases passed / 6.
EXPECTED = {
    "ada": {"rms_norm_shape": 1, "rms_norm_battery": 4.0},  # correct
    "bruno": {"rms_norm_shape": 0, "rms_norm_battery": 0.0},  # n-1: all wrong
    "chen": {"rms_norm_shape": 1, "rms_norm_battery": 3.33},  # f16 row only
    "dana": {"rms_norm_shape": 0, "rms_norm_battery": 0.67},  # 1-D only
    "emeka": {"rms_norm_shape": 0, "rms_norm_battery": 0.0},  # blank
}


@pytest.mark.slow
def test_demo_class_grades(course_copy):
    lines = []
    run = grade_class(course_root=course_copy, log=lines.append)
    assert sorted(run.students) == sorted(s.student_id for s in DEMO_CLASS["rmsnorm"])
    for student, want in EXPECTED.items():
        assert run.scores[("rmsnorm", student)] == pytest.approx(want, abs=1e-9), student
    with run.grades_csv.open() as f:
        totals = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    assert totals == pytest.approx({s: sum(v.values()) for s, v in EXPECTED.items()})
    for student in EXPECTED:
        html = course_copy / "feedback" / student / "rmsnorm" / "rmsnorm.html"
        assert html.exists(), student
    bruno = (course_copy / "feedback" / "bruno" / "rmsnorm" / "rmsnorm.html").read_text()
    assert "sqrt(7/8)" in bruno  # the diagnosis reaches the student's feedback
