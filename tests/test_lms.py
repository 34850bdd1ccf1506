"""Grades back to the LMS (grader/outputs/lms.py): its own export, filled in from the gradebook, matched
by LMS user id; the feedback zipped for the LMS's bulk feedback upload.

Fast: no kernel. A gradebook with three students (two known to the LMS) and their scored
submissions written through nbgrader's Gradebook API (no grades.csv, no submitted/ folder: the
points are the gradebook's, whichever batch graded them), and the LMS's files written as Canvas
and Moodle write them.
"""
import json
import os
import zipfile

import pytest
from nbgrader.api import Gradebook

from grader.intake.collect import LMS_FILES
from grader.ledger.course import CourseTree
from grader.outputs.lms import feedback_zips, fill_lms_gradebook, upload_name

# nbgrader's add_submission warns about its own session handling
pytestmark = pytest.mark.filterwarnings("ignore:Object of type:sqlalchemy.exc.SAWarning")


@pytest.fixture
def graded(course_copy):
    tree = CourseTree(course_copy)
    with Gradebook(tree.gradebook_url) as gb:
        for a, pts in (("rmsnorm", 5), ("layernorm", 4)):
            gb.add_assignment(a)
            gb.add_notebook(a, a)
            gb.add_grade_cell(f"{a}_test", a, a, max_score=pts, cell_type="code")
        gb.update_or_create_student("leejohn-10011", last_name="leejohn", lms_user_id="10011")
        gb.update_or_create_student("mullerzoe", last_name="müllerzoë", lms_user_id="10013")
        gb.update_or_create_student("walkin", last_name="walkin")  # from an nbgrader tree: no LMS id
        for a, st, score in [("rmsnorm", "leejohn-10011", 4.5), ("rmsnorm", "mullerzoe", 0.0),
                             ("rmsnorm", "walkin", 5.0), ("layernorm", "leejohn-10011", 3.0)]:
            gb.add_submission(a, st)
            gb.find_grade(f"{a}_test", a, a, st).auto_score = score
        gb.db.commit()
    return tree


def test_canvas_export_is_filled_by_user_id_and_absent_students_listed(graded, tmp_path):
    tree = graded
    export = tmp_path / "2026-12-01T0900_Grades-L16.csv"
    export.write_text("Student,ID,SIS User ID,SIS Login ID,Section,RMSNorm (5001),LayerNorm (5002),Quiz 1 (5003)\n"
                      "    Points Possible,,,,,5,4,10\n"
                      "John Lee,10011,,,S1,,,7\nZoë Müller,10013,,,S1,,,8\nSam Absent,10099,,,S1,,,9\n",
                      encoding="utf-8")
    got = fill_lms_gradebook(tree, export, ["layernorm", "rmsnorm"])
    assert got.lms == "canvas" and got.path == tree.root / "lms-import-canvas.csv"
    assert got.filled == {"10011": {"rmsnorm": 4.5, "layernorm": 3.0}, "10013": {"rmsnorm": 0.0}}
    assert got.blank == ["Sam Absent (10099)"]
    # graded here, not in Canvas's file (red team: left out without a word)
    assert got.missing == ["walkin (no Canvas id)"]
    assert got.path.read_text(encoding="utf-8").splitlines() == [
        "Student,ID,SIS User ID,SIS Login ID,Section,RMSNorm (5001),LayerNorm (5002),Quiz 1 (5003)",
        "    Points Possible,,,,,5,4,10",
        "John Lee,10011,,,S1,4.5,3,7", "Zoë Müller,10013,,,S1,0,,8", "Sam Absent,10099,,,S1,,,9"]


def test_a_canvas_column_worth_other_points_gets_the_fraction_earned(graded, tmp_path):
    """Canvas's "Points Possible" row says RMSNorm is worth 10 there (5 here) and LayerNorm 2 (4
    here): 4.5 of 5 is written as 9, 3 of 4 as 1.5, and the run says so (the tired instructor's
    13.5-point block landed as 135 % of a 10-point column, without a word)."""
    export = tmp_path / "grades.csv"
    export.write_text("Student,ID,SIS User ID,SIS Login ID,Section,RMSNorm (5001),LayerNorm (5002)\n"
                      "    Points Possible,,,,,10,2\nJohn Lee,10011,,,S1,,\n", encoding="utf-8")
    got = fill_lms_gradebook(graded, export, ["layernorm", "rmsnorm"])
    assert got.filled == {"10011": {"rmsnorm": 9.0, "layernorm": 1.5}}
    assert got.scaled == {"rmsnorm": (5.0, 10.0), "layernorm": (4.0, 2.0)}
    assert got.path.read_text(encoding="utf-8").splitlines()[-1] == "John Lee,10011,,,S1,9,1.5"


def test_a_later_run_without_the_lms_gradebook_refills_the_import_with_its_points(graded, tmp_path):
    """The export given once is kept as given; a later run's points go into lms-import-canvas.csv
    too (it kept the first run's, where grades.csv had new ones, without a word)."""
    from types import SimpleNamespace

    from nbgrader.api import Gradebook

    from grader.stages.export import fill_lms_exports

    export = tmp_path / "grades-export.csv"
    export.write_text("Student,ID,SIS User ID,SIS Login ID,Section,RMSNorm (5001)\n"
                      "    Points Possible,,,,,5\nJohn Lee,10011,,,S1,\n", encoding="utf-8")
    said: list[str] = []

    def batch(lms_gradebook):
        return SimpleNamespace(options=SimpleNamespace(lms_gradebook=lms_gradebook),
                               services=SimpleNamespace(tree=graded, log=said.append),
                               run=SimpleNamespace(assignments=["layernorm", "rmsnorm"], lms_import=None))

    fill_lms_exports(batch(export))
    assert (graded.root / "lms-import-canvas.csv").read_text(encoding="utf-8").splitlines()[-1] == \
        "John Lee,10011,,,S1,4.5"
    export.unlink()  # the instructor's download is gone: the kept copy serves
    with Gradebook(graded.gradebook_url) as gb:  # a resubmission graded later
        gb.find_grade("rmsnorm_test", "rmsnorm", "rmsnorm", "leejohn-10011").auto_score = 5.0
        gb.db.commit()
    said.clear()
    fill_lms_exports(batch(None))
    assert (graded.root / "lms-import-canvas.csv").read_text(encoding="utf-8").splitlines()[-1] == \
        "John Lee,10011,,,S1,5"
    assert any("refilled with this run's points" in line for line in said), said


def test_moodle_worksheet_is_matched_on_the_participant_id_of_that_assignment(graded, tmp_path):
    """Moodle numbers a student anew in each assignment (the participant id of the download's
    folder, ``Participant <id>`` in the worksheet's Identifier): John Lee is 20011 in rmsnorm and
    30011 in layernorm; the gradebook's Canvas id of him (10011) is not what Moodle writes."""
    tree = graded
    tree.logs.mkdir()
    (tree.logs / LMS_FILES).write_text(json.dumps({  # as collect keeps them
        "leejohn-10011/rmsnorm": "John Lee_20011_assignsubmission_file_rmsnorm.ipynb",
        "leejohn-10011/layernorm": "John Lee_30011_assignsubmission_file_layernorm.ipynb",
        "mullerzoe/rmsnorm": "Zoë Müller_20013_assignsubmission_file_rmsnorm.ipynb"}))
    sheet = tmp_path / "Grades-L16-rmsnorm-42.csv"
    sheet.write_text("Identifier,Full name,Email address,Status,Grade,Maximum Grade,Grade can be changed\n"
                     "Participant 20011,John Lee,jl@x.org,Submitted,,5.00,Yes\n"
                     "Participant 20013,Zoë Müller,zm@x.org,Submitted,,5.00,Yes\n"
                     "Participant 20099,Sam Absent,sa@x.org,No submission,,5.00,Yes\n", encoding="utf-8")
    got = fill_lms_gradebook(tree, sheet, ["layernorm", "rmsnorm"])
    assert got.lms == "moodle" and got.path == tree.root / "lms-import-moodle-rmsnorm.csv"
    assert got.filled == {"20011": {"rmsnorm": 4.5}, "20013": {"rmsnorm": 0.0}}
    assert got.blank == ["Sam Absent (Participant 20099)"]
    assert got.missing == ["walkin"]  # graded for rmsnorm, not a Moodle student of it
    assert got.path.read_text(encoding="utf-8").splitlines()[1:3] == [
        "Participant 20011,John Lee,jl@x.org,Submitted,4.5,5.00,Yes",
        "Participant 20013,Zoë Müller,zm@x.org,Submitted,0,5.00,Yes"]
    sheet2 = tmp_path / "Grades-L16-layernorm-43.csv"
    sheet2.write_text("Identifier,Full name,Grade\nParticipant 30011,John Lee,\nParticipant 20011,John Lee?,\n",
                      encoding="utf-8")
    got = fill_lms_gradebook(tree, sheet2, ["layernorm", "rmsnorm"])
    assert got.filled == {"30011": {"layernorm": 3.0}}  # his rmsnorm number means nothing in layernorm
    assert got.blank == ["John Lee? (Participant 20011)"]
    assert got.missing == []


def test_an_earlier_export_is_kept_before_a_different_one_replaces_it(graded, tmp_path):
    from nbgrader.api import Gradebook

    from grader.outputs.lms import EARLIER

    tree = graded
    export = tmp_path / "canvas.csv"
    export.write_text("Student,ID,RMSNorm (5001)\nJohn Lee,10011,\n", encoding="utf-8")
    first = fill_lms_gradebook(tree, export, ["rmsnorm"])
    assert first.kept is None and first.path.read_text().splitlines()[1] == "John Lee,10011,4.5"
    again = fill_lms_gradebook(tree, export, ["rmsnorm"])  # the same points: nothing to keep
    assert again.kept is None and not (tree.root / EARLIER).exists()
    with Gradebook(tree.gradebook_url) as gb:  # a hand grade changes his points
        gb.find_grade("rmsnorm_test", "rmsnorm", "rmsnorm", "leejohn-10011").manual_score = 5.0
        gb.db.commit()
    later = fill_lms_gradebook(tree, export, ["rmsnorm"])
    assert later.path.read_text().splitlines()[1] == "John Lee,10011,5"
    assert later.kept.parent == tree.root / EARLIER and later.kept.name.startswith("lms-import-canvas-")
    assert later.kept.read_text().splitlines()[1] == "John Lee,10011,4.5"  # what may be in Canvas already
    assert not list(tree.root.glob("*.part")) and not list((tree.root / EARLIER).glob("*.part"))


def test_a_file_of_another_kind_is_refused_with_its_columns(graded, tmp_path):
    tree = graded
    other = tmp_path / "roster.csv"
    other.write_text("name,email\nJohn Lee,jl@x.org\n")
    with pytest.raises(ValueError, match="not a Canvas gradebook export .* its columns: name, email"):
        fill_lms_gradebook(tree, other, ["rmsnorm"])


def test_upload_names_are_the_ones_each_lms_matches_on():
    # Canvas matches the first two all-digit "_" fields (user id, attachment id); the rest is kept
    assert upload_name("leejohn_10011_20013_rmsnorm.ipynb", "rmsnorm.html") == "leejohn_10011_20013_rmsnorm.html"
    assert upload_name("muñozjosé_LATE_10014_20016_RMSNorm (1).ipynb", "rmsnorm.html") == \
        "muñozjosé_LATE_10014_20016_rmsnorm.html"
    # Moodle: the submission folder of its download, "<Full name>_<participant id>_assignsubmission_file_"
    assert upload_name("Zoë Müller_10013_assignsubmission_file_rmsnorm.ipynb", "rmsnorm.html") == \
        "Zoë Müller_10013_assignsubmission_file_/rmsnorm.html"
    assert upload_name("Lesson 16_jdoe_attempt_2026-11-20-09-00-00_rmsnorm.ipynb", "rmsnorm.html") is None
    assert upload_name("jdoe_rmsnorm.ipynb", "rmsnorm.html") is None


def test_feedback_zips_hold_each_students_feedback_under_the_lms_upload_name(graded):
    tree = graded
    downloads = {"leejohn-10011/rmsnorm": "leejohn_10011_20013_rmsnorm.ipynb",
                 "mullerzoe/rmsnorm": "Zoë Müller_10013_assignsubmission_file_rmsnorm.ipynb",
                 "leejohn-10011/layernorm": "leejohn_10011_20019_layernorm.ipynb",
                 "bb/rmsnorm": "Lesson 16_bb_attempt_2026-11-20-09-00-00_rmsnorm.ipynb"}
    tree.logs.mkdir()
    (tree.logs / LMS_FILES).write_text(json.dumps(downloads))  # as collect keeps them
    for key in [*downloads, "walkin/rmsnorm"]:
        st, a = key.split("/")
        d = tree.feedback(st, a)
        d.mkdir(parents=True)
        (d / f"{a}.html").write_text(f"<html>feedback of {st} for {a}</html>", encoding="utf-8")
    got = feedback_zips(tree, ["layernorm", "rmsnorm"])
    root = tree.root
    assert got == {root / "feedback-canvas-layernorm.zip": ["leejohn-10011"],
                   root / "feedback-canvas-rmsnorm.zip": ["leejohn-10011"],
                   root / "feedback-moodle-rmsnorm.zip": ["mullerzoe"]}  # Blackboard, walkin: no upload
    with zipfile.ZipFile(root / "feedback-moodle-rmsnorm.zip") as zf:
        assert zf.namelist() == ["Zoë Müller_10013_assignsubmission_file_/rmsnorm.html"]
        assert zf.read(zf.namelist()[0]).decode() == "<html>feedback of mullerzoe for rmsnorm</html>"
    with zipfile.ZipFile(root / "feedback-canvas-rmsnorm.zip") as zf:
        assert zf.namelist() == ["leejohn_10011_20013_rmsnorm.html"]
        assert zf.read("leejohn_10011_20013_rmsnorm.html").decode() == \
            "<html>feedback of leejohn-10011 for rmsnorm</html>"
    assert not list(root.glob("*.part"))
    kept = {}
    for html in tree.root.glob("feedback/*/*/*.html"):  # feedback written again by a later run: new dates
        os.utime(html, (html.stat().st_mtime + 3600,) * 2)
    assert feedback_zips(tree, ["layernorm", "rmsnorm"], kept) == got and kept == {}  # the same feedback
    (tree.feedback("mullerzoe", "rmsnorm") / "rmsnorm.html").write_text("<html>regraded</html>", encoding="utf-8")
    feedback_zips(tree, ["layernorm", "rmsnorm"], kept)
    moodle = root / "feedback-moodle-rmsnorm.zip"
    assert list(kept) == [moodle] and kept[moodle].parent == root / "logs" / "lms-exports"
    for path, text in [(moodle, "<html>regraded</html>"),
                       (kept[moodle], "<html>feedback of mullerzoe for rmsnorm</html>")]:
        with zipfile.ZipFile(path) as zf:
            assert zf.read("Zoë Müller_10013_assignsubmission_file_/rmsnorm.html").decode() == text
