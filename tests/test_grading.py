"""`make grade` end to end through nbgrader, in a throwaway course root."""
import csv
import json
import subprocess
import sys
import zipfile

import nbformat
import pytest

from normref.grading import grade_class
from normref.grading.collect import notebook_key, parse_lms_name
from normref.grading.demo import DEMO_CLASS, fill_answers

# Expected points, derived from what each demo student was built to get wrong and from the
# cases of the rmsnorm battery (1-D seed, [2,3,8], [4,4,4], tiny eps, float16 overflow, bfloat16):
#   rms_norm_shape (1 pt) passes iff both seed cases pass; rms_norm_battery (4 pts) = 4 x passed / 6.
EXPECTED = {
    "ada": {"rms_norm_shape": 1, "rms_norm_battery": 4.0},  # correct
    "bruno": {"rms_norm_shape": 0, "rms_norm_battery": 0.0},  # n-1: every case has d >= 3
    "chen": {"rms_norm_shape": 1, "rms_norm_battery": 3.33},  # float16 stats: only the f16 row fails
    "dana": {"rms_norm_shape": 0, "rms_norm_battery": 0.67},  # dim=0: only the 1-D case is right
    "emeka": {"rms_norm_shape": 0, "rms_norm_battery": 0.0},  # blank
    "farah": {"rms_norm_shape": 1, "rms_norm_battery": 4.0},  # correct, late
}
FAULTS = {"unbiased_variance": ["bruno"], "low_precision_stats": ["chen"], "wrong_axis": ["dana"],
          "raises": ["emeka"]}


@pytest.mark.slow
def test_demo_class_parallel_then_sequential(course_copy):
    run = grade_class(course_root=course_copy, jobs=2, log=lambda *_: None)
    assert sorted(run.students) == sorted(s.student_id for s in DEMO_CLASS["rmsnorm"])
    assert {s: run.scores[("rmsnorm", s)] for s in EXPECTED} == EXPECTED
    with run.grades_csv.open() as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert {s: float(r["score"]) for s, r in rows.items()} == pytest.approx(
        {s: sum(v.values()) for s, v in EXPECTED.items()})
    assert rows["farah"]["timestamp"] > rows["farah"]["duedate"] > rows["ada"]["timestamp"]
    for student in EXPECTED:
        assert (course_copy / "feedback" / student / "rmsnorm" / "rmsnorm.html").exists(), student
    bruno = (course_copy / "feedback" / "bruno" / "rmsnorm" / "rmsnorm.html").read_text()
    assert "sqrt(7/8)" in bruno  # the diagnosis reaches the student's feedback
    report = json.loads((course_copy / "reports" / "report.json").read_text())
    assert report["faults"]["rmsnorm"] == {k: len(v) for k, v in FAULTS.items()}
    for (a, kind), who in run.report.students_with_fault.items():
        assert sorted(who) == FAULTS[kind]
    assert (course_copy / "reports" / "scores_rmsnorm.png").stat().st_size > 5000
    with run.questions_csv.open() as f:
        assert len(list(csv.DictReader(f))) == 2 * len(EXPECTED)  # no lost or duplicated rows

    # Grading again, now one nbgrader process: identical grades (idempotent, parallel == sequential).
    again = grade_class(course_root=course_copy, jobs=1, log=lambda *_: None)
    assert again.scores == run.scores


def _canvas_zip(course_copy, tmp_path):
    """An LMS (Canvas-style) zip of the demo class, with the usual mess of real downloads."""
    release = course_copy / "release" / "rmsnorm" / "rmsnorm.ipynb"
    zpath = tmp_path / "submissions.zip"
    names = {"ada": "ada_1001_5001_rmsnorm.ipynb",
             "bruno": "bruno_LATE_1002_5002_rmsnorm.ipynb",
             "chen": "chen_1003_5003_rmsnorm (1).ipynb",  # a re-download with a "(1)" suffix
             "dana": "dana_1004_5004_RMSNorm-1.ipynb"}  # Canvas resubmission suffix, other case
    by_id = {s.student_id: s for s in DEMO_CLASS["rmsnorm"]}
    with zipfile.ZipFile(zpath, "w") as zf:
        for sid, name in names.items():
            zf.writestr(name, nbformat.writes(fill_answers(release, by_id[sid].answers)))
        zf.writestr("notes_from_lms.txt", "not a notebook")
        zf.writestr("eve_1005_5005_homework.ipynb", nbformat.writes(nbformat.read(release, 4)))
    return zpath


def test_lms_names_are_parsed():
    assert parse_lms_name("doejane_12345_67890_rmsnorm.ipynb") == {"student_id": "doejane", "file_id": "rmsnorm.ipynb"}
    assert parse_lms_name("doejane_LATE_12345_67890_rmsnorm.ipynb")["student_id"] == "doejane"
    assert parse_lms_name("Jane Doe_12345_assignsubmission_file_rmsnorm.ipynb")["student_id"] == "12345"
    bb = parse_lms_name("Lesson 16_jdoe_attempt_2026-11-20-09-00-00_rmsnorm.ipynb")
    assert bb == {"student_id": "jdoe", "file_id": "rmsnorm.ipynb", "timestamp": "2026-11-20 09:00:00"}
    assert parse_lms_name("README.md") is None
    assert notebook_key("RMSNorm (1).ipynb") == notebook_key("rmsnorm-2.ipynb") == "rmsnorm"


@pytest.mark.slow
def test_lms_zip_is_graded_through_zip_collect(course_copy, tmp_path):
    zpath = _canvas_zip(course_copy, tmp_path)
    lines = []
    run = grade_class(course_root=course_copy, submissions=zpath, log=lines.append)
    assert sorted(run.students) == ["ada", "bruno", "chen", "dana"]
    for s in run.students:
        assert run.scores[("rmsnorm", s)] == EXPECTED[s], s
    assert "file eve_1005_5005_homework.ipynb" in run.report.ungraded
    assert any("skipped notes_from_lms.txt" in ln for ln in lines)


def test_cli_help_and_bad_input(tmp_path):
    out = subprocess.run([sys.executable, "-m", "normref.grading", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--submissions" in out.stdout and "--jobs" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "normref.grading", "--submissions", str(tmp_path / "nope")],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "no submissions at" in bad.stderr
