"""The class report's own logic, without grading anything: fault merging and labels, the
manually graded questions read from a small hand-made nbgrader gradebook, and which
submissions the mistake counts are out of."""
import json
from pathlib import Path

import nbformat
import numpy as np
import pytest

from normref.checks import FAULT_KINDS
from grader.outputs.report import (FAULT_ALIASES, FAULT_LABELS, KNOWN_FAULTS, ManualGrading,
                                    build_report, canonical_fault, fault_description, fault_label,
                                    merge_faults, read_manual_grading, summary_text, write_report)


# nbgrader's add_submission warns about its own session handling
pytestmark = pytest.mark.filterwarnings("ignore:Object of type:sqlalchemy.exc.SAWarning")


# ------------------------------------------------------------------ fault kinds and labels

def test_aliases_join_a_code_fault_and_an_answer_fault_that_name_the_same_mistake():
    # the answer checkers' former names for three code faults (normref.faults: one name now)
    assert canonical_fault("dropped_keepdim") == "missing_keepdim"
    assert canonical_fault("missing_keepdim") == "missing_keepdim"
    assert canonical_fault("raises") == "raises"
    assert set(FAULT_ALIASES) == {"dropped_keepdim", "norm_after_sublayer", "post_ln_formula"}
    for alias, target in FAULT_ALIASES.items():
        assert alias not in KNOWN_FAULTS and target in FAULT_KINDS, (alias, target)
        assert target not in FAULT_ALIASES  # one step: no chains
        assert fault_label(alias) == fault_label(target)


def test_merge_counts_a_student_tagged_with_both_aliases_once():
    counts, who = merge_faults({
        "ada": ["dropped_keepdim", "missing_keepdim", "raises"],
        "bo": ["dropped_keepdim"],
        "cy": ["missing_keepdim"],
        "di": [],
    })
    assert counts == {"missing_keepdim": 3, "raises": 1}
    assert "dropped_keepdim" not in counts
    assert who == {"missing_keepdim": ["ada", "bo", "cy"], "raises": ["ada"]}


def test_every_known_fault_has_a_short_human_label():
    for kind in KNOWN_FAULTS:
        label = fault_label(kind)
        assert label and len(label) <= 48, (kind, label)
        assert label != kind.replace("_", " "), (kind, label)  # not the raw tag
        assert canonical_fault(kind) in FAULT_LABELS, kind  # a written phrase, not a cut one
    # the ones an instructor could not read before
    assert fault_label("bwd_not_summed") == "backward: dweight/dbias not summed to [D]"
    assert fault_label("mlp_reads_x") == "fed the MLP x instead of x + attention"
    assert fault_label("module_weight") == "RMSNorm module lacks weight = ones(dim)"


def test_label_of_an_unlisted_kind_is_cut_from_its_description(monkeypatch):
    monkeypatch.setitem(KNOWN_FAULTS, "new_kind", "the thing went sideways: do it straight; really")
    assert fault_label("new_kind") == "the thing went sideways"
    assert fault_label("not_a_kind_at_all") == "not a kind at all"


def test_description_of_a_merged_kind_names_both_texts_once():
    d = fault_description("dropped_keepdim")  # one kind, one text in the registry now
    assert d == FAULT_KINDS["missing_keepdim"]
    assert fault_description("raises") == FAULT_KINDS["raises"]


# ------------------------------------------------------------------ a small course on disk

def _gradebook(root: Path) -> None:
    """assignment "hw", notebook "hw": one autograded test cell (3 points), one markdown answer
    graded by hand (2 points) and one code answer graded by hand (1 point); students:
    ana answered both manual questions (waiting), ben left them as released (0, nothing to
    grade), cid was graded by hand already, dov's notebook could not be graded."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        gb.add_assignment("hw")
        gb.add_notebook("hw", "hw")
        gb.add_grade_cell("hw_test", "hw", "hw", max_score=3, cell_type="code")
        gb.add_grade_cell("hw_why", "hw", "hw", max_score=2, cell_type="markdown")
        gb.add_solution_cell("hw_why", "hw", "hw")
        gb.add_grade_cell("hw_essay_code", "hw", "hw", max_score=1, cell_type="code")
        gb.add_solution_cell("hw_essay_code", "hw", "hw")
        gb.add_solution_cell("hw_impl", "hw", "hw")  # an autograded answer: not a grade cell
        for s, auto, why, essay, manual in [
            ("ana", 3, None, None, None),
            ("ben", 3, 0, 0, None),
            ("cid", 1, None, None, 2),
            ("dov", 0, 0, 0, None),
        ]:
            gb.add_student(s)
            gb.add_submission("hw", s)
            g = gb.find_grade("hw_test", "hw", "hw", s)
            g.auto_score, g.needs_manual_grade = auto, False
            for name, score in (("hw_why", why), ("hw_essay_code", essay)):
                g = gb.find_grade(name, "hw", "hw", s)
                g.auto_score = score
                g.needs_manual_grade = score is None
                if manual is not None and name == "hw_why":
                    g.manual_score, g.needs_manual_grade = manual, False
                if manual is not None and name == "hw_essay_code":
                    g.manual_score, g.needs_manual_grade = 1, False
            gb.db.commit()


def _autograded(root: Path, student: str, faults: list[str]) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("check()")
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "hw_test", "points": 3}
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                           text="".join(f"case 1 failed [fault: {f}]\n" for f in faults))]
    nb.cells.append(cell)
    d = root / "autograded" / student / "hw"
    d.mkdir(parents=True)
    nbformat.write(nb, d / "hw.ipynb")


@pytest.fixture
def course(tmp_path: Path) -> Path:
    root = tmp_path / "course"
    root.mkdir()
    _gradebook(root)
    _autograded(root, "ana", ["dropped_keepdim", "missing_keepdim"])
    _autograded(root, "ben", ["raises"])
    _autograded(root, "cid", [])
    _autograded(root, "dov", ["raises"])  # the released notebook graded in place of an invalid one
    return root


SCORES = {
    ("hw", "ana"): {"hw_test": 3.0, "hw_why": 0.0, "hw_essay_code": 0.0},
    ("hw", "ben"): {"hw_test": 3.0, "hw_why": 0.0, "hw_essay_code": 0.0},
    ("hw", "cid"): {"hw_test": 1.0, "hw_why": 2.0, "hw_essay_code": 1.0},
    ("hw", "dov"): {"hw_test": 0.0, "hw_why": 0.0, "hw_essay_code": 0.0},
}
MAX = {"hw": {"hw_test": 3.0, "hw_why": 2.0, "hw_essay_code": 1.0}}
UNGRADED = {"dov (hw)": "hw.ipynb is not valid JSON (scored 0)", "file junk.txt": "not a notebook"}


def test_manual_questions_and_who_waits_come_from_the_gradebook(course):
    mg = read_manual_grading(course / "gradebook.db", ["hw", "not_in_gradebook"])
    assert list(mg) == ["hw"]
    m = mg["hw"]
    assert m.questions == {"hw_why": 2.0, "hw_essay_code": 1.0}
    assert m.waiting == {"hw_why": ["ana"], "hw_essay_code": ["ana"]}
    assert m.graded == {"hw_why": ["cid"], "hw_essay_code": ["cid"]}
    assert m.points == 3.0 and m.submissions_waiting == ["ana"]
    assert m.message().startswith(
        "3 points in 2 questions (hw_why, hw_essay_code) are graded by hand: 1 submission waits for "
        "it; grade them in formgrader: run `make lab-instructor`, then Nbgrader > Formgrader > Manual "
        "Grading (nbgrader 0.9.6 has no `nbgrader formgrader` command); on this course's JupyterHub: "
        "Nbgrader > Formgrader in your own server, or https://<hub>/user/"), m.message()
    assert m.message().endswith("/formgrader; until then it counts 0."), m.message()


def test_manual_message_when_nothing_waits():
    m = ManualGrading(questions={"q": 1.0}, graded={"q": ["a"]})
    assert m.message() == "1 point in 1 question (q) is graded by hand: none waits for a grader."


def test_report_counts_mistakes_of_graded_work_only_and_flags_manual_points(course):
    rep = build_report(course, ["hw"], SCORES, MAX, ungraded=UNGRADED)
    assert rep.not_diagnosed == {"hw": ["dov"]}
    assert rep.diagnosed("hw") == 3
    assert rep.faults["hw"] == {"missing_keepdim": 1, "raises": 1}  # ana once; dov not counted
    assert rep.students_with_mistake[("hw", "raises")] == ["ben"]
    assert rep.students_with_fault[("hw", "dropped_keepdim")] == ["ana"]  # as tagged, too
    assert rep.totals["hw"]["dov"] == 0.0  # still scored
    assert rep.waiting_questions("hw") == {"hw_why", "hw_essay_code"}
    text = summary_text(rep)
    assert "hw: 4 graded, mean 2.50 / 6" in text  # (3 + 3 + 4 + 0) / 4
    # ana and ben have the 3 autograded points; cid has all 6 but only 1 of the autograded 3
    assert "2 with full marks on the autograded part" in text
    assert "    3 points in 2 questions (hw_why, hw_essay_code) are graded by hand: 1 submission" in text
    assert "1 of 3 had code that raised" in text and "1 of 3 dropped keepdim=True" in text
    assert "of 4" not in text
    assert "not counted, could not be graded: dov" in text


def test_full_marks_are_plain_when_no_manual_grading_waits(course, tmp_path):
    scores = dict(SCORES)
    scores[("hw", "cid")] = {"hw_test": 3.0, "hw_why": 2.0, "hw_essay_code": 1.0}
    rep = build_report(tmp_path / "no_gradebook_here", ["hw"], scores, MAX)
    assert rep.manual == {} and rep.not_diagnosed == {}
    text = summary_text(rep)
    assert text.endswith("hw: 4 graded, mean 3.00 / 6, median 3.00, 1 with full marks")
    assert "autograded part" not in text and "graded by hand" not in text


def test_written_report_has_the_manual_box_labels_and_json(course):
    rep = build_report(course, ["hw"], SCORES, MAX, ungraded=UNGRADED)
    path = write_report(rep, course / "reports")
    page = path.read_text()
    assert "<div class='manual'><b>hw: graded by hand.</b> 3 points in 2 questions" in page
    assert "waiting: ana" in page
    assert FAULT_KINDS["missing_keepdim"] in page
    assert "<td>1 of 3</td>" in page
    data = json.loads((course / "reports" / "report.json").read_text())
    assert data["manual_grading"]["hw"]["submissions_waiting"] == 1
    assert data["manual_grading"]["hw"]["points"] == 3.0
    assert data["faults"] == {"hw": {"missing_keepdim": 1, "raises": 1}}
    assert data["faults_as_tagged"] == {"hw": {"dropped_keepdim": 1, "missing_keepdim": 1, "raises": 1}}
    assert data["fault_labels"]["missing_keepdim"] == "dropped keepdim=True"
    assert data["not_diagnosed"] == {"hw": ["dov"]}
    for png in ("scores_hw.png", "faults.png"):
        assert (course / "reports" / png).stat().st_size > 5000


# ------------------------------------------------------------------ groups, similar pairs, the student table

def _rec(outputs, passed, fault="wrong_values", message="case 'c': max abs error 1 (rel 1) at index (0,); "
         "you divided by the largest |x| of the token, where RMSNorm ..."):
    return {"checker": "rms_norm", "score": sum(passed) / len(passed),
            "cases": [{"name": f"c{i}", "passed": p, "fault": None if p else fault, "message": message,
                       "variant": None if p else "stat=max_abs", "got": o, "shape": [len(o)],
                       "rtol": 1e-5, "atol": 1e-5} for i, (o, p) in enumerate(zip(outputs, passed))]}


def test_wrong_answers_that_agree_within_tolerance_form_one_group_largest_first():
    from grader.outputs.groups import group_records

    records = {
        "ann": _rec([[1.0, 2.0], [3.0, 4.0]], [True, False]),
        "bob": _rec([[1.0, 2.0], [3.0 + 1e-6, 4.0]], [True, False]),  # within 2 x tolerance of ann
        "cid": _rec([[1.0, 2.0], [3.1, 4.0]], [True, False]),  # a different wrong output
        "dee": _rec([[1.0, 2.0], [3.0, 4.0]], [True, True]),  # right: in no group
        "eve": _rec([[1.0, 2.0], [3.0, 4.0]], [False, False]),  # fails another case too
    }
    groups = group_records("hw", "check_rms_norm", records, cells={"ann": "def rms_norm(): ..."})
    assert [g.students for g in groups] == [["ann", "bob"], ["cid"], ["eve"]]
    g = groups[0]
    assert (g.size, g.representative, g.cell, g.failed, g.cases) == (2, "ann", "def rms_norm(): ...", 1, 2)
    assert g.diagnosis.startswith("you divided by the largest |x| of the token")  # case and error removed
    assert g.variant == "stat=max_abs" and g.faults == ["wrong_values"]
    assert [x.group_id for x in groups] == ["hw-rms-norm-1", "hw-rms-norm-2", "hw-rms-norm-3"]


def test_handed_back_names_and_answer_cells_are_read_from_the_notebooks():
    from grader.outputs.groups import answer_source, handed_back_name

    repo = Path(__file__).resolve().parents[1]
    ln = nbformat.read(repo / "source" / "layernorm" / "layernorm.ipynb", as_version=4)
    test = next(c for c in ln.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "layer_norm_battery")
    assert handed_back_name(test.source, "layer_norm_battery") == "layer_norm"
    assert answer_source(ln, "layer_norm").startswith("def layer_norm(x, weight, bias, eps=1e-5):")


def test_student_table_links_groups_history_and_csvs(course):
    from grader.outputs.groups import group_records
    from grader.outputs.similarity import Pair

    fb = course / "feedback" / "ana" / "hw"
    fb.mkdir(parents=True)
    (fb / "hw.html").write_text("<html>feedback</html>")
    (course / "grades.csv").write_text("x\n")
    (course / "logs").mkdir()
    (course / "logs" / "runs.jsonl").write_text(json.dumps({"time": "2026-11-30T10:00:00Z", "status": "ok",
                                                            "batch": ["ana", "ben"], "seconds": 12.5,
                                                            "command": "make grade"}) + "\n")
    rep = build_report(course, ["hw"], SCORES, MAX, ungraded=UNGRADED, flags={"ben": ["hw: repaired"]},
                       groups=False, similarity=False)
    assert rep.runs[0]["batch"] == ["ana", "ben"]
    rep.groups = {"hw": group_records("hw", "check_rms_norm", {
        "ana": _rec([[1.0]], [False]), "cid": _rec([[1.0]], [False])})}
    rep.similar = {"hw": [Pair("hw", "ana", "cid", 1.0, (1.0, 1.0), 80, ("a = 1", "a = 1"),
                               ((np.array([0]), np.array([5])), (np.array([0]), np.array([5]))))]}
    page = write_report(rep, course / "reports").read_text()
    assert page.count("<tr data-student=") == 4  # ana, ben, cid, dov
    assert "<tr data-student='ana' data-groups='hw-rms-norm-1'>" in page
    assert "href='../feedback/ana/hw/hw.html'" in page and "href='../autograded/ana/hw/hw.ipynb'" in page
    assert "<option value='hw-rms-norm-1'>hw / rms_norm: 2 students" in page
    assert "href='../grades.csv'" in page and "make grade" in page
    assert "ana &amp; cid" in page and "<mark>a = 1</mark>" in page
    assert "<script src" not in page and "http" not in page.split("<script>")[1]  # self-contained
    data = json.loads((course / "reports" / "report.json").read_text())
    assert data["groups"]["hw"][0]["students"] == ["ana", "cid"]
    assert data["similar"]["hw"][0]["students"] == ["ana", "cid"]
    text = summary_text(rep)
    assert "1 group of wrong answers (largest: 2 students, rms_norm): you divided by the largest |x|" in text
    assert len(text.splitlines()) < 20


def test_the_student_table_shows_the_lms_name_beside_the_id(course):
    """A student collected from an LMS download has the name as the LMS wrote it in the gradebook
    (first and last name, as in roster.csv): the table shows it beside the id; others show the id."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.update_or_create_student("ana", last_name="o'brienanaïs", lms_user_id="10015")
        gb.update_or_create_student("ben", first_name="Ben", last_name="Müller", lms_user_id="42")
    rep = build_report(course, ["hw"], SCORES, MAX, groups=False, similarity=False)
    assert rep.names == {"ana": "o'brienanaïs", "ben": "Ben Müller"}
    page = write_report(rep, course / "reports").read_text(encoding="utf-8")
    assert "<td>ana <small class='lms-name'>(o&#x27;brienanaïs)</small></td>" in page
    assert "<td>ben <small class='lms-name'>(Ben Müller)</small></td>" in page
    assert "<td>cid</td>" in page  # no LMS name: the id alone
    data = json.loads((course / "reports" / "report.json").read_text(encoding="utf-8"))
    assert data["names"] == {"ana": "o'brienanaïs", "ben": "Ben Müller"}


def test_the_late_column_shows_lms_late_marks_as_grades_csv_does(course):
    """A Canvas ``_LATE_`` download (kept by collect in logs/lms_late.json, which grades.csv's late
    column reads) is late in the report's student table too, with no due date here; a submission
    after the gradebook's due date shows how late."""
    import re
    from datetime import datetime

    from nbgrader.api import Gradebook

    from grader.ledger import store
    from grader.ledger.course import CourseTree

    store.add_lms_late(CourseTree(course), {"ana/hw": True, "ben/hw": False, "eve/hw": True})  # as collect does
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.find_assignment("hw").duedate = datetime(2026, 11, 20, 9, 0)
        gb.find_submission("hw", "cid").timestamp = datetime(2026, 11, 20, 11, 30)
        gb.db.commit()
    rep = build_report(course, ["hw"], SCORES, MAX, groups=False, similarity=False)
    assert rep.lms_late == {("hw", "ana")}  # eve has no graded submission here
    page = write_report(rep, course / "reports").read_text(encoding="utf-8")
    late = dict(re.findall(r"<tr data-student='(\w+)'.*?<td class='late'>(.*?)</td>", page))
    assert late == {"ana": "hw (marked late by the LMS)", "ben": "", "cid": "hw (2.5 h)", "dov": ""}
    data = json.loads((course / "reports" / "report.json").read_text(encoding="utf-8"))
    assert data["lms_late"] == ["ana (hw)"] and data["late_seconds"] == {"cid (hw)": 9000.0}


def test_the_hand_grading_hint_on_a_hub_names_formgrader_by_its_address():
    from grader.outputs.report import FORMGRADER_HINT, formgrader_hint

    # a terminal of the instructor's own hub server has the server's prefix in its environment
    on_hub = formgrader_hint({"JUPYTERHUB_SERVICE_PREFIX": "/user/nrhub-instr/"})
    assert "/user/nrhub-instr/formgrader" in on_hub and "make lab-instructor" not in on_hub
    # a laptop, or an SSH shell on the hub's machine (no JUPYTERHUB_* variable): both ways
    over_ssh = formgrader_hint({"USER": "nrhub-instr"})
    assert over_ssh.startswith(FORMGRADER_HINT) and "`make lab-instructor`" in FORMGRADER_HINT
    assert "https://<hub>/user/nrhub-instr/formgrader" in over_ssh


def test_the_review_section_lists_what_took_no_points_in_the_students_words(course):
    """Issue 30: what the rules found short of a reference seen running is its own section of the
    report (and one line of the text summary), each line as the student's feedback says it; the
    other flags are not in it."""
    from normref.rules import review_message

    line = review_message("imports threading (line 1 of the cell that defines rms_norm)")
    flags = {"ben": ["hw: repaired", f"hw: rms_norm_battery: {line}"], "ana": ["hw: repaired"]}
    rep = build_report(course, ["hw"], SCORES, MAX, ungraded=UNGRADED, flags=flags, groups=False,
                       similarity=False)
    page = write_report(rep, course / "reports").read_text()
    section = page.split("<h2 id='review'>For the instructor's review</h2>")[1].split("<h2")[0]
    assert "<td>ben</td>" in section and "ana" not in section and "repaired" not in section
    assert html_escape(f"hw: rms_norm_battery: {line}") in section
    assert "for the instructor's review, no points taken: 1 student (ben; see the report)" in summary_text(rep)
    rep.flags = {"ana": ["hw: repaired"]}
    assert "id='review'" not in write_report(rep, course / "reports").read_text()


def html_escape(text: str) -> str:
    import html

    return html.escape(text)
