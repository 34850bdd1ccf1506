"""Grades back to the LMS (grader/lms.py): its own export, filled in, matched by LMS user id.

Fast: no kernel. A gradebook with three students (two known to the LMS), a grades.csv as
nbgrader exports it, and the LMS's files written as Canvas and Moodle write them.
"""
import csv

import pytest
from nbgrader.api import Gradebook

from grader.course import CourseTree
from grader.lms import fill_lms_gradebook


@pytest.fixture
def graded(course_copy):
    tree = CourseTree(course_copy)
    with Gradebook(tree.gradebook_url) as gb:
        gb.update_or_create_student("leejohn-10011", last_name="leejohn", lms_user_id="10011")
        gb.update_or_create_student("mullerzoe", last_name="müllerzoë", lms_user_id="10013")
        gb.update_or_create_student("walkin", last_name="walkin")  # from an nbgrader tree: no LMS id
    rows = [("rmsnorm", "leejohn-10011", 4.5), ("rmsnorm", "mullerzoe", 0.0), ("rmsnorm", "walkin", 5.0),
            ("layernorm", "leejohn-10011", 3.0)]
    for a, st, _ in rows:
        (course_copy / "submitted" / st / a).mkdir(parents=True, exist_ok=True)
        (course_copy / "submitted" / st / a / f"{a}.ipynb").write_text("{}")
    grades = course_copy / "grades.csv"
    with grades.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
                    "raw_score", "late_submission_penalty", "score", "max_score"])
        for a, st, score in rows:
            w.writerow([a, "", "", st, "", "", "", score, 0.0, score, 5.0])
        w.writerow(["layernorm", "", "", "mullerzoe", "", "", "", 0.0, 0.0, 0.0, 4.0])  # no submission
    return tree, grades


def test_canvas_export_is_filled_by_user_id_and_absent_students_listed(graded, tmp_path):
    tree, grades = graded
    export = tmp_path / "2026-12-01T0900_Grades-L16.csv"
    export.write_text("Student,ID,SIS User ID,SIS Login ID,Section,RMSNorm (5001),LayerNorm (5002),Quiz 1 (5003)\n"
                      "    Points Possible,,,,,5,4,10\n"
                      "John Lee,10011,,,S1,,,7\nZoë Müller,10013,,,S1,,,8\nSam Absent,10099,,,S1,,,9\n",
                      encoding="utf-8")
    got = fill_lms_gradebook(tree, export, ["layernorm", "rmsnorm"], grades)
    assert got.lms == "canvas" and got.path == tree.root / "lms-import-canvas.csv"
    assert got.filled == {"10011": {"rmsnorm": 4.5, "layernorm": 3.0}, "10013": {"rmsnorm": 0.0}}
    assert got.blank == ["Sam Absent (10099)"]
    assert got.path.read_text(encoding="utf-8").splitlines() == [
        "Student,ID,SIS User ID,SIS Login ID,Section,RMSNorm (5001),LayerNorm (5002),Quiz 1 (5003)",
        "    Points Possible,,,,,5,4,10",
        "John Lee,10011,,,S1,4.5,3,7", "Zoë Müller,10013,,,S1,0,,8", "Sam Absent,10099,,,S1,,,9"]


def test_moodle_worksheet_gets_the_grade_of_its_assignment(graded, tmp_path):
    tree, grades = graded
    sheet = tmp_path / "Grades-L16-rmsnorm-42.csv"
    sheet.write_text("Identifier,Full name,Email address,Status,Grade,Maximum Grade,Grade can be changed\n"
                     "Participant 10011,John Lee,jl@x.org,Submitted,,5.00,Yes\n"
                     "Participant 10099,Sam Absent,sa@x.org,No submission,,5.00,Yes\n", encoding="utf-8")
    got = fill_lms_gradebook(tree, sheet, ["layernorm", "rmsnorm"], grades)
    assert got.lms == "moodle" and got.filled == {"10011": {"rmsnorm": 4.5}} and got.blank == ["Sam Absent (10099)"]
    assert got.path.read_text().splitlines()[1] == "Participant 10011,John Lee,jl@x.org,Submitted,4.5,5.00,Yes"


def test_a_file_of_another_kind_is_refused_with_its_columns(graded, tmp_path):
    tree, grades = graded
    other = tmp_path / "roster.csv"
    other.write_text("name,email\nJohn Lee,jl@x.org\n")
    with pytest.raises(ValueError, match="not a Canvas gradebook export .* its columns: name, email"):
        fill_lms_gradebook(tree, other, ["rmsnorm"], grades)
