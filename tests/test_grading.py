"""`make grade` end to end through nbgrader, in a throwaway course root.

The demo class is the session's (the ``graded_class`` fixture, tests/graded_class.py); the LMS
and batch tests, which check what a run collects and records, replay real kernel outputs
(the ``replayed`` fixture, tests/replay.py).
"""
import csv
import json
import subprocess
import sys
import zipfile

import nbformat
import pytest

import shutil
from pathlib import Path

from grader import grade_class
from grader.pipeline import format_table
from grader.demo.answer_bank import ANSWERS, EXPECTED
from grader.intake.collect import notebook_key, parse_lms_name
from grader.demo import LATE_STUDENTS, demo_class, expected_points, fill_answers
from grader.outputs.report import KNOWN_FAULTS

def only_assignments(root, keep):
    """Leave just these assignments in a course copy (a smaller class for the slower checks)."""
    for sub in ("source", "release"):
        for d in (root / sub).iterdir():
            if d.is_dir() and d.name not in keep:
                shutil.rmtree(d)


@pytest.mark.slow
def test_demo_class_every_score_as_the_answer_bank_derives(graded_class):
    """The demo class as `make grade` grades it (the session's graded_class: tests/graded_class.py)."""
    run, course_copy = graded_class.run, graded_class.root
    roster = demo_class([a for a in run.assignments if a in ANSWERS])
    assert sorted(run.students) == sorted(st.student_id for st in roster) and len(roster) >= 30
    n = 0
    for st in roster:
        for a in st.variants:
            assert run.scores[(a, st.student_id)] == expected_points(st, a), (st.student_id, a, st.variants[a])
            assert (course_copy / "feedback" / st.student_id / a).is_dir(), (st.student_id, a)
            n += 1
    assert n == len(run.autograde.graded) and not run.autograde.failed
    with run.grades_csv.open() as f:
        rows = list(csv.DictReader(f))
    late = {r["student_id"] for r in rows if r["timestamp"] and r["timestamp"] > r["duedate"]}
    assert late == set(LATE_STUDENTS)
    # every student built with a diagnosable mistake is counted under it in the class report
    report = json.loads((course_copy / "reports" / "report.json").read_text())
    for st in roster:
        for a, variant in st.variants.items():
            if variant in KNOWN_FAULTS:
                who = run.report.students_with_fault.get((a, variant), [])
                assert st.student_id in who, (st.student_id, a, variant)
    assert sum(report["faults"]["rmsnorm"].values()) >= sum(
        1 for st in roster if st.variants.get("rmsnorm") not in (None, "correct"))
    assert (course_copy / "reports" / "faults.png").stat().st_size > 5000
    # the groups of wrong answers (on by default, read from the scoring's records): one bank
    # variant is one code, so its students compute the same outputs and share one group
    groups = run.report.groups
    assert groups and not [k for k in run.report.groups_missing if k.endswith(")")]  # every notebook has records
    where = {(a, g.check, s): g.group_id for a, gs in groups.items() for g in gs for s in g.students}
    for a, gs in groups.items():
        for gid in {g.check for g in gs}:
            by_variant: dict = {}
            for st in roster:
                if a in st.variants:
                    by_variant.setdefault(st.variants[a], set()).add(where.get((a, gid, st.student_id)))
            assert all(len(v) == 1 for v in by_variant.values()), (a, gid, by_variant)
            assert by_variant.get("correct", {None}) == {None}  # a right answer is in no group


@pytest.mark.slow
def test_parallel_equals_sequential_and_regrading_is_idempotent(graded_class, tmp_path):
    # the session's demo class, graded with 2 parallel Dask workers (graded_class), against the
    # first 12 students of the rmsnorm-only demo class (they cover 11 of the bank's 13 rmsnorm
    # variants) graded sequentially in a copy of that course (so over its grading state): each
    # notebook gets the points the parallel run gave the same notebook (the same variant)
    par = graded_class.run
    with par.questions_csv.open() as f:
        rows = list(csv.DictReader(f))
    cells = {a: len(next(iter(EXPECTED[a].values()))) for a in par.assignments}
    submissions = [(a, st.student_id) for st in graded_class.roster for a in st.variants]
    assert len(par.students) == 30 and len(rows) == sum(cells[a] for a, _ in submissions)  # none lost or doubled
    assert sorted({(r["assignment"], r["student_id"]) for r in rows}) == sorted(submissions)
    course = tmp_path / "course"
    shutil.copytree(graded_class.root, course, ignore=shutil.ignore_patterns("feedback", "reports"))
    only_assignments(course, {"rmsnorm"})
    seq = grade_class(course_root=course, jobs=1, demo_students=12, log=lambda *_: None)
    assert len(seq.students) == 12 and not seq.autograde.failed
    by_variant: dict = {}  # the parallel run's points of each rmsnorm variant (all its students)
    for st in graded_class.roster:
        if "rmsnorm" in st.variants:
            by_variant.setdefault(st.variants["rmsnorm"], []).append(par.scores[("rmsnorm", st.student_id)])
    assert all(all(p == ps[0] for p in ps) for ps in by_variant.values())
    variants = {st.student_id: st.variants["rmsnorm"] for st in demo_class(["rmsnorm"])[:12]}
    assert seq.scores == {("rmsnorm", st): by_variant[v][0] for st, v in variants.items()}
    assert len({tuple(sorted(v.items())) for v in seq.scores.values()}) > 3


LMS_NAMES = {"ada": "ada_1001_5001_rmsnorm.ipynb",
             "bruno": "bruno_LATE_1002_5002_rmsnorm.ipynb",
             "chen": "chen_1003_5003_rmsnorm (1).ipynb",  # a re-download with a "(1)" suffix
             "dana": "dana_1004_5004_RMSNorm-1.ipynb"}  # Canvas resubmission suffix, other case
LMS_VARIANTS = {"ada": "correct", "bruno": "unbiased_variance", "chen": "low_precision_stats",
                "dana": "wrong_axis"}


def _canvas_zip(course_copy, tmp_path):
    """An LMS (Canvas-style) zip of the demo class, with the usual mess of real downloads."""
    release = course_copy / "release" / "rmsnorm" / "rmsnorm.ipynb"
    zpath = tmp_path / "submissions.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for sid, name in LMS_NAMES.items():
            zf.writestr(name, nbformat.writes(fill_answers(release, ANSWERS["rmsnorm"][LMS_VARIANTS[sid]])))
        zf.writestr("notes_from_lms.txt", "not a notebook")
        zf.writestr("eve_1005_5005_homework.ipynb", nbformat.writes(nbformat.read(release, 4)))
    return zpath


def test_lms_names_are_parsed():
    assert parse_lms_name("doejane_12345_67890_rmsnorm.ipynb") == {"student_id": "doejane", "file_id": "rmsnorm.ipynb"}
    assert parse_lms_name("doejane_LATE_12345_67890_rmsnorm.ipynb")["student_id"] == "doejane"
    # Moodle's number is the participant id, new in every assignment: the student is the full name
    assert parse_lms_name("Jane Doe_12345_assignsubmission_file_rmsnorm.ipynb")["student_id"] == "jane-doe"
    bb = parse_lms_name("Lesson 16_jdoe_attempt_2026-11-20-09-00-00_rmsnorm.ipynb")
    assert bb == {"student_id": "jdoe", "file_id": "rmsnorm.ipynb", "timestamp": "2026-11-20 09:00:00"}
    assert parse_lms_name("README.md") is None
    assert parse_lms_name("L16_.._attempt_2026-11-20-09-00-00_rmsnorm.ipynb") is None  # no "..": path
    assert parse_lms_name("doejane_LATE_12345_67890_rmsnorm.ipynb")["late"] is True
    assert notebook_key("RMSNorm (1).ipynb") == notebook_key("rmsnorm-2.ipynb") == "rmsnorm"


@pytest.mark.slow
def test_lms_zip_is_graded_through_zip_collect(course_copy, tmp_path, replayed):
    only_assignments(course_copy, {"rmsnorm"})
    zpath = _canvas_zip(course_copy, tmp_path)
    lines = []
    run = grade_class(course_root=course_copy, submissions=zpath, log=lines.append)
    assert sorted(run.students) == ["ada", "bruno", "chen", "dana", "eve"]
    for s in LMS_VARIANTS:
        assert run.scores[("rmsnorm", s)] == EXPECTED["rmsnorm"][LMS_VARIANTS[s]], s
    # eve renamed the released notebook and left it blank: known by its cells, graded (0), flagged
    assert run.scores[("rmsnorm", "eve")] == EXPECTED["rmsnorm"]["blank"]
    assert any("its cells are rmsnorm's notebook: graded as rmsnorm" in f for f in run.report.flags["eve"]), \
        run.report.flags.get("eve")
    assert any("skipped notes_from_lms.txt" in ln for ln in lines)


def test_cli_help_and_bad_input(tmp_path):
    out = subprocess.run([sys.executable, "-m", "grader", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--submissions" in out.stdout and "--jobs" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "grader", "--submissions", str(tmp_path / "nope")],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "no submissions at" in bad.stderr


#: Runs ``python -m grader ARGS`` in this process, then prints the modules it imported.
_IMPORTS = """import runpy, sys
sys.argv = ["grader", *sys.argv[1:]]
try:
    runpy.run_module("grader", run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code
print("IMPORTED", " ".join(sorted(sys.modules)))
sys.exit(code)
"""
#: What only grading itself needs: torch, the report's plotting, nbgrader's apps and converters.
_GRADING_ONLY = ("torch", "matplotlib", "nbconvert", "nbgrader.apps", "nbgrader.converters", "normref",
                 "grader.pipeline", "grader.outputs.report", "grader.autograde.engine")


def _imported(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    out = subprocess.run([sys.executable, "-c", _IMPORTS, *args], capture_output=True, text=True, timeout=300)
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("IMPORTED ")]
    return out, set(line.split()[1:])


def _loaded(modules: set[str], names) -> list[str]:
    return sorted(n for n in names if n in modules or any(m.startswith(n + ".") for m in modules))


def test_cli_help_clean_and_restore_import_only_what_they_run(tmp_path):
    """`python -m grader --help`, `clean` and `restore` load neither torch nor nbgrader's apps nor
    the pipeline (they took 8-18 s on a loaded machine when __main__ imported the whole pipeline)."""
    from nbgrader.api import Gradebook

    from grader.ledger.course import CourseTree

    for argv in (["--help"], ["clean", "--help"], ["restore", "--help"]):
        out, mods = _imported(*argv)
        assert out.returncode == 0 and "usage: python -m grader" in out.stdout, out.stderr
        assert _loaded(mods, (*_GRADING_ONLY, "nbgrader", "nbformat", "sqlalchemy")) == [], argv
    root = tmp_path / "course"
    (root / "submitted" / "ada" / "rmsnorm").mkdir(parents=True)  # a real class: clean backs it up first
    (root / "submitted" / "ada" / "rmsnorm" / "rmsnorm.ipynb").write_text("{}")
    with Gradebook(CourseTree(root).gradebook_url) as gb:
        gb.add_student("ada")
    out, mods = _imported("clean", "--yes", "--course-root", str(root))
    assert out.returncode == 0 and "grading state of" in out.stdout, out.stderr
    assert not (root / "submitted").exists() and not (root / "gradebook.db").exists()
    assert _loaded(mods, _GRADING_ONLY) == []
    out, mods = _imported("restore", "--course-root", str(root))  # the gradebook clean backed up
    assert out.returncode == 0, out.stderr
    with Gradebook(CourseTree(root).gradebook_url) as gb:
        assert [s.id for s in gb.students] == ["ada"]
    assert _loaded(mods, _GRADING_ONLY) == []
    out, mods = _imported("restore", "--state", "--yes", "--course-root", str(root))  # the whole state
    assert out.returncode == 0, out.stderr
    assert (root / "submitted" / "ada" / "rmsnorm" / "rmsnorm.ipynb").read_text() == "{}"
    assert _loaded(mods, _GRADING_ONLY) == []


def test_make_clean_removes_all_grading_state_but_backups_and_the_run_log(tmp_path):
    from grader.pipeline import GRADING_STATE, KEPT_LOGS, clean

    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    recipe = makefile.split("\nclean:", 1)[1].split("\n\n", 1)[0]
    assert "-m grader clean" in recipe  # grader.pipeline.start_over: a yes, a backup, then clean()
    for name in GRADING_STATE:
        p = tmp_path / name
        if name in ("submitted", "autograded", "feedback", "downloaded", "reports", "logs"):
            (p / "x").mkdir(parents=True)
        else:
            p.write_text("state")
    for kept in KEPT_LOGS:
        (tmp_path / "logs" / kept).write_text("kept")
    clean(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["autograded", "logs"]
    assert [p.name for p in (tmp_path / "autograded").iterdir()] == [".gitkeep"]
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == sorted(KEPT_LOGS)


def _tree(root, students, variant="correct"):
    """An nbgrader submitted/ tree with the rmsnorm notebook answered as ``variant``."""
    release = next((Path(__file__).resolve().parents[1] / "release" / "rmsnorm").glob("*.ipynb"))
    for st in students:
        d = root / st / "rmsnorm"
        d.mkdir(parents=True)
        nbformat.write(fill_answers(release, ANSWERS["rmsnorm"][variant]), d / release.name)
        (d / "timestamp.txt").write_text("2026-11-22 10:00:00 UTC\n")
    return root


@pytest.mark.slow
def test_batches_add_students_replace_resubmissions_and_drop_the_demo_state(course_copy, tmp_path, replayed):
    only_assignments(course_copy, {"rmsnorm"})
    (course_copy / ".demo-class").write_text("")  # as if `make grade` had graded the demo class
    (course_copy / "submitted" / "demo_kid" / "rmsnorm").mkdir(parents=True)
    b1 = _tree(tmp_path / "b1", ["ada", "bo"])
    (b1 / "ada" / "rmsnorm" / "torch.py").write_text("raise SystemExit\n")  # flagged: named like torch
    first = grade_class(course_root=course_copy, submissions=b1,
                        duedates={"*": "2026-11-21 09:00 UTC"}, log=lambda *_: None)
    assert first.students == ["ada", "bo"]  # the demo state was removed first
    # named for what it is and what it did (grader/intake/handed_in.py): nothing, the installed torch comes first
    shadow = "torch.py (named like the installed module 'torch', handed in beside the notebook): never run or imported"
    assert any(shadow in n for n in first.report.flags["ada"]), first.report.flags["ada"]
    assert "ada" in format_table(first).split("\n")[3] and "*" in format_table(first)  # late
    # batch 2, an LMS zip: bo resubmits (downloaded twice, no timestamp), cy is new, and a
    # Blackboard name whose student id is ".." must not write outside submitted/
    release = course_copy / "release" / "rmsnorm" / "rmsnorm.ipynb"
    zpath = tmp_path / "b2.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for name, variant in [("bo_1_2_rmsnorm.ipynb", "blank"),
                              ("bo_1_2_rmsnorm (1).ipynb", "unbiased_variance"),
                              ("cy_3_4_rmsnorm.ipynb", "unbiased_variance"),
                              ("L16_.._attempt_2026-11-20-09-00-00_rmsnorm.ipynb", "correct")]:
            zf.writestr(name, nbformat.writes(fill_answers(release, ANSWERS["rmsnorm"][variant])))
    lines = []
    second = grade_class(course_root=course_copy, log=lines.append, submissions=zpath)
    assert second.batch == ["bo", "cy"] and second.students == ["ada", "bo", "cy"]
    assert sorted(s for _, s in second.autograde.graded) == ["bo", "cy"]  # ada is not regraded
    assert any("bo (rmsnorm) replaces" in ln for ln in lines)
    assert "bo_1_2_rmsnorm.ipynb" in second.report.ungraded or any(
        "bo_1_2_rmsnorm.ipynb" in ln and "newest download" in ln for ln in lines)
    assert any("L16_.._attempt" in ln and "not recognised" in ln for ln in lines)
    assert not (course_copy / "rmsnorm").exists() and not (course_copy.parent / "rmsnorm").exists()
    assert any((course_copy / "logs" / "replaced" / "bo" / "rmsnorm").glob("*.ipynb"))  # kept
    wrong = EXPECTED["rmsnorm"]["unbiased_variance"]
    assert second.scores[("rmsnorm", "ada")] == EXPECTED["rmsnorm"]["correct"]
    assert second.scores[("rmsnorm", "bo")] == second.scores[("rmsnorm", "cy")] == wrong
    with second.grades_csv.open() as f:
        stamps = {r["student_id"]: r["timestamp"] for r in csv.DictReader(f)}
    assert stamps["ada"].startswith("2026-11-22") and not stamps["bo"].startswith("2026-11-22")
    rows = {ln.split()[0]: ln for ln in format_table(second).split("\n")[3:6]}
    assert "*" in rows["ada"] and "*" not in rows["bo"]
    # the class report covers every batch: ada's flag from batch 1 is still there (red team: it
    # was dropped once a later batch was graded)
    assert any(shadow in n for n in second.report.flags["ada"]), second.report.flags


def test_bad_inputs_get_a_clear_message(course_copy, tmp_path):
    empty_zip = tmp_path / "nothing.zip"
    with zipfile.ZipFile(empty_zip, "w") as zf:
        zf.writestr("readme.txt", "no notebooks here")
    with pytest.raises(ValueError, match="none of its 1 files is a notebook"):
        grade_class(course_root=course_copy, submissions=empty_zip, log=lambda *_: None)
    with pytest.raises(ValueError, match="due date for unknown assignment nope"):
        grade_class(course_root=course_copy, submissions=empty_zip, duedates={"nope": "2026-11-21"},
                    log=lambda *_: None)
    # refused before anything is touched: a --fresh run with a wrong path keeps the old state
    (course_copy / "gradebook.db").write_bytes(b"earlier grades")
    with pytest.raises(FileNotFoundError, match="no submissions at"):
        grade_class(course_root=course_copy, submissions=tmp_path / "typo", fresh=True, log=lambda *_: None)
    with pytest.raises(ValueError, match="none of its 1 files"):
        grade_class(course_root=course_copy, submissions=empty_zip, fresh=True, log=lambda *_: None)
    assert (course_copy / "gradebook.db").read_bytes() == b"earlier grades"
    out = subprocess.run([sys.executable, "-m", "grader", "--duedate", "someday"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "cannot read 'someday' as a date" in out.stderr


def test_the_terminal_table_keeps_its_columns_for_long_ids_and_says_what_late_means(tmp_path):
    """A Moodle full name as the student id is longer than the 12 characters the id column had;
    the row's scores then slid under the wrong assignments."""
    from types import SimpleNamespace

    rows = [("rmsnorm", "ada", "", "4.33", "5.0"), ("block", "ada", "", "13.5", "15.5"),
            ("rmsnorm", "maria-de-los-angeles-fernandez-garcia", "yes", "5.0", "5.0")]
    with (tmp_path / "grades.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["assignment", "duedate", "timestamp", "student_id", "score", "max_score", "late"])
        for a, st, late, score, top in rows:
            w.writerow([a, "", "", st, score, top, late])
            (tmp_path / "submitted" / st / a).mkdir(parents=True)
            (tmp_path / "submitted" / st / a / f"{a}.ipynb").write_text("{}")
    table = format_table(SimpleNamespace(grades_csv=tmp_path / "grades.csv", course_root=tmp_path)).splitlines()
    head, body = table[0], table[3:5]
    for a in ("block", "rmsnorm", "total"):  # each value ends where its column's name ends
        end = head.index(a) + len(a)
        for line in body:
            assert line[end - 1] != " " and (end == len(line) or line[end] == " "), (a, line)
    assert body[1].split() == ["maria-de-los-angeles-fernandez-garcia", "-", "5.00*", "5.00"]
    assert "marked late by the LMS" in table[-1]


def test_a_closed_stdout_does_not_fail_a_command(tmp_path):
    """`python -m grader ... >&-` (stdout closed before the start: Python's sys.stdout is None)."""
    import os

    out = subprocess.run([sys.executable, "-m", "grader", "clean", "--course-root", str(tmp_path)],
                         stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(1))
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
