"""The course folder is the system of record (issue 13), through `python -m grader`: clean and
--fresh back up and ask, an untrusted gradebook stops a run before it writes, resubmissions touch
only what changed, hand grades survive, restores put back what they say, and every run is logged.

These are tests of what a run records: they run `python -m grader`'s ``main`` in this process
(:func:`replay.run_grader`) with the ``replayed`` fixture: nbgrader's own autograde, with each
notebook's kernel outputs replayed from a real sandboxed run of this session (tests/replay.py).
Where the process itself is under test (the demo, signals and the lock, a pipe closed by its
reader, a full disk), test_grader_process.py runs real subprocesses with real kernels.

Each test grades at most 4 students in 1-2 assignments of a throwaway course root.
"""
import csv
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.ledger.apps import Course
from grader.demo import fill_answers
from grader.demo.answer_bank import ANSWERS
from replay import run_grader

REPO = Path(__file__).resolve().parents[1]


def only_assignments(root: Path, keep: set[str]) -> None:
    for sub in ("source", "release"):
        for d in (root / sub).iterdir():
            if d.is_dir() and d.name not in keep:
                shutil.rmtree(d)


def grader(*args, course: Path, timeout: int = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", *map(str, args), "--course-root", str(course)],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)


def submitted_tree(root: Path, students: dict[str, str], assignment: str = "rmsnorm",
                   release: Path = REPO / "release") -> Path:
    """An nbgrader submitted/ tree: each student's notebook answered as the bank's variant."""
    nb_path = next((release / assignment).glob("*.ipynb"))
    for st, variant in students.items():
        d = root / st / assignment
        d.mkdir(parents=True)
        nbformat.write(fill_answers(nb_path, ANSWERS[assignment][variant]), d / nb_path.name)
        (d / "timestamp.txt").write_text("2026-11-20 10:00:00 UTC\n")
    return root


def grade_stopped_after_collect(course: Path, submissions: Path, monkeypatch) -> None:
    """A run of ``submissions`` stopped (SIGINT) right after collect, before repair: in process,
    the repair stage replaced by the signal's KeyboardInterrupt; the stages are put back after."""
    import grader.pipeline as pipeline

    stages = dict(pipeline.STAGES)

    def stopped(_b):
        raise KeyboardInterrupt("SIGINT")

    with monkeypatch.context() as m:
        m.setattr(pipeline, "STAGES", tuple((n, stopped if n == "repair" else stages[n]) for n in stages))
        with pytest.raises(KeyboardInterrupt):
            pipeline.grade_class(course_root=course, submissions=submissions, engine="processes",
                                 log=lambda *_: None)


def real_class(course: Path) -> dict[str, bytes]:
    """A course where a real class was graded: a gradebook with a student and a hand grade's
    worth of rows, and submitted/. Returns its files' bytes, to show they are untouched."""
    only_assignments(course, {"rmsnorm"})
    Course(course).generate_assignment("rmsnorm")
    with sqlite3.connect(course / "gradebook.db") as db:
        db.execute("insert into student (id, first_name, last_name) values ('realstudent', 'Real', 'Student')")
    submitted_tree(course / "submitted", {"realstudent": "correct"})
    return snapshot(course)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".grader.lock" and "build" not in p.relative_to(root).parts}


def test_clean_backs_up_asks_and_restore_brings_the_gradebook_back(course_copy, replayed):
    before = real_class(course_copy)
    refused = run_grader("clean", course=course_copy)  # no terminal, no --yes: nothing removed
    assert refused.returncode == 1 and "needs --yes" in refused.stderr, refused.stderr
    fresh = run_grader("--fresh", "--engine", "processes", "--submissions",
                   submitted_tree(course_copy.parent / "in", {"ada": "correct"}), course=course_copy)
    assert fresh.returncode == 1 and "needs --yes" in fresh.stderr, fresh.stderr
    # a refusal writes nothing, not even a backup (refusals pushed real backups out of the last 10)
    assert not (course_copy / "logs" / "backups").exists()
    assert {k: v for k, v in snapshot(course_copy).items() if not k.startswith("logs/")} == before

    done = run_grader("clean", "--yes", course=course_copy)
    assert done.returncode == 0, done.stderr
    assert not (course_copy / "gradebook.db").exists() and not (course_copy / "submitted").exists()
    (gb_backup,) = (course_copy / "logs" / "backups").glob("gradebook-*.db")  # written as it went ahead
    with sqlite3.connect(gb_backup) as db:
        assert db.execute("select id from student").fetchall() == [("realstudent",)]
    (archive,) = (course_copy / "logs" / "backups").glob("state-*.tar.gz")
    with tarfile.open(archive) as tf:
        member = tf.extractfile("submitted/realstudent/rmsnorm/rmsnorm.ipynb").read()
    assert member == before["submitted/realstudent/rmsnorm/rmsnorm.ipynb"]

    back = run_grader("restore", course=course_copy)
    assert back.returncode == 0, back.stderr
    with sqlite3.connect(course_copy / "gradebook.db") as db:
        assert db.execute("select id from student").fetchall() == [("realstudent",)]

    # restore --state refuses what is not a state backup, in one line, changing nothing
    junk = course_copy.parent / "state-junk.tar.gz"
    junk.write_bytes(b"not an archive")
    evil = course_copy.parent / "state-evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tf:
        tf.add(course_copy / "source" / "rmsnorm" / "rmsnorm.ipynb", arcname="source/rmsnorm/rmsnorm.ipynb")
    before = snapshot(course_copy)
    for archive, why in [(junk, "is not a readable state backup (file could not be opened successfully);"),
                         (evil, "holds 'source/rmsnorm/rmsnorm.ipynb', which is not grading state:")]:
        out = run_grader("restore", "--state", archive, "--yes", course=course_copy)
        assert out.returncode == 1 and out.stderr == f"error: {archive} {why} nothing was changed\n", out.stderr
    assert snapshot(course_copy) == before


@pytest.mark.parametrize("damage, problem, lms", [
    ("empty", "is empty (0 bytes)", False),
    ("empty", "is empty (0 bytes)", True),  # LMS names: ids are looked up in the gradebook first
    ("corrupt", "is not a readable SQLite database", False),
    ("truncated", "gradebook.db is", True),
    ("missing", "is missing, but this course has been graded before", False),
])
def test_an_untrusted_gradebook_stops_the_run_before_it_writes(course_copy, tmp_path, damage, problem, lms,
                                                               replayed):
    real_class(course_copy)
    backup = course_copy / "logs" / "backups" / "gradebook-20261130T090000Z-1.db"
    backup.parent.mkdir(parents=True)
    shutil.copy(course_copy / "gradebook.db", backup)
    # A newer backup that is itself broken (an earlier run backed up a damaged file) is never named.
    (backup.parent / "gradebook-20261130T100000Z-2.db").write_bytes(b"")
    gb = course_copy / "gradebook.db"
    if damage == "empty":
        gb.write_bytes(b"")
    elif damage == "corrupt":
        gb.write_bytes(b"this is not a database, it was overwritten" * 100)
    elif damage == "truncated":
        gb.write_bytes(gb.read_bytes()[:20000])
    else:
        gb.unlink()
    before = snapshot(course_copy)
    if lms:
        src = tmp_path / "lms"
        src.mkdir()
        shutil.copy(course_copy / "release" / "rmsnorm" / "rmsnorm.ipynb", src / "lovelaceada_1001_2001_rmsnorm.ipynb")
    else:
        src = submitted_tree(tmp_path / "in", {"ada": "correct"})
    out = run_grader("--submissions", src, course=course_copy)
    assert out.returncode == 1
    assert problem in out.stderr and "nothing was written" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert f"the newest good backup is {backup}" in out.stderr and "python -m grader restore" in out.stderr
    assert snapshot(course_copy) == before

    back = run_grader("restore", course=course_copy)  # picks the newest *readable* backup
    assert back.returncode == 0, back.stderr
    with sqlite3.connect(course_copy / "gradebook.db") as db:
        assert db.execute("select id from student").fetchall() == [("realstudent",)]


def _practice(variant_changes: dict[str, str]) -> dict[str, str]:
    return {**ANSWERS["practice"]["correct"], **variant_changes}


@pytest.mark.slow
def test_a_resubmission_regrades_only_its_assignment_and_keeps_an_unchanged_hand_grade(course_copy, tmp_path,
                                                                                       replayed):
    from nbgrader.api import Gradebook

    only_assignments(course_copy, {"rmsnorm", "practice"})
    rel = course_copy / "release" / "practice" / "practice.ipynb"

    def batch(name, answers_by_student, rmsnorm=()):
        root = tmp_path / name
        for st, answers in answers_by_student.items():
            (root / st / "practice").mkdir(parents=True)
            nbformat.write(fill_answers(rel, answers), root / st / "practice" / "practice.ipynb")
        if rmsnorm:
            submitted_tree(root, {st: "correct" for st in rmsnorm}, release=course_copy / "release")
        return root

    first = batch("b1", {"ada": _practice({}), "bo": _practice({})}, rmsnorm=("ada",))
    out = run_grader("--submissions", first, "--jobs", 2, course=course_copy)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    url = f"sqlite:///{course_copy / 'gradebook.db'}"
    with Gradebook(url) as gb:  # what formgrader does when a person grades the written answers
        for st in ("ada", "bo"):
            g = gb.find_grade("practice_shape_why", "practice", "practice", st)
            g.manual_score, g.needs_manual_grade = 1.0, False
        gb.db.commit()
    rms_graded = course_copy / "autograded" / "ada" / "rmsnorm" / "rmsnorm.ipynb"
    rms_mtime = rms_graded.stat().st_mtime_ns

    # ada resubmits practice with a changed code answer and the same written answer; bo rewrites it
    second = batch("b2", {"ada": _practice({"practice_rms_answer": "rms_34 = 5.0"}),
                          "bo": _practice({"practice_shape_why": "It keeps the shape, I think."})})
    out = run_grader("--submissions", second, course=course_copy)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert "hand grade kept: ada (practice) practice_shape_why = 1" in text
    assert "hand grade to redo: bo (practice) practice_shape_why" in text
    with Gradebook(url) as gb:
        ada = gb.find_grade("practice_shape_why", "practice", "practice", "ada")
        bo = gb.find_grade("practice_shape_why", "practice", "practice", "bo")
        assert (ada.manual_score, ada.needs_manual_grade) == (1.0, False)
        assert bo.manual_score is None and bo.needs_manual_grade
        assert gb.find_grade("practice_rms", "practice", "practice", "ada").score == 0.0  # regraded
    assert rms_graded.stat().st_mtime_ns == rms_mtime  # ada's rmsnorm was not autograded again

    runs = [json.loads(ln) for ln in (course_copy / "logs" / "runs.jsonl").read_text().splitlines()]
    assert [r["status"] for r in runs] == ["ok", "ok"] and runs[1]["batch"] == ["ada", "bo"]
    sent = second / "ada" / "practice" / "practice.ipynb"
    assert runs[1]["inputs"][str(sent)] == hashlib.sha256(sent.read_bytes()).hexdigest()
    assert [tuple(p) for p in runs[1]["replaced"]] == [("practice", "ada"), ("practice", "bo")]
    from grader.pipeline import STAGES

    assert set(runs[1]["stage_seconds"]) == {name for name, _ in STAGES} | {"canary"}  # the canary: in prepare
    kept = course_copy / "logs" / "batches" / runs[1]["run_id"] / "received" / "b2" / "ada" / "practice"
    assert (kept / "practice.ipynb").read_bytes() == sent.read_bytes()  # as received, per batch
    assert (course_copy / "logs" / "batches" / runs[0]["run_id"] / "received" / "b1").is_dir()


@pytest.mark.slow
def test_students_are_who_the_lms_says(course_copy, tmp_path, replayed):
    """Canvas names from the issue: two leejohns with different user ids, letters outside ASCII,
    an apostrophe, a LATE mark; then a second batch keeps every id."""
    only_assignments(course_copy, {"rmsnorm"})
    release = course_copy / "release" / "rmsnorm" / "rmsnorm.ipynb"
    files = {"leejohn_10011_20013_rmsnorm.ipynb": "correct",
             "leejohn_10012_20014_rmsnorm.ipynb": "unbiased_variance",
             "müllerzoë_10013_20015_rmsnorm.ipynb": "correct",
             "muñozjosé_LATE_10014_20016_rmsnorm.ipynb": "correct",
             "o'brienpat_10015_20017_rmsnorm.ipynb": "unbiased_variance"}
    folder = tmp_path / "canvas"
    folder.mkdir()
    for name, variant in files.items():
        nbformat.write(fill_answers(release, ANSWERS["rmsnorm"][variant]), folder / name)
    export = tmp_path / "canvas-export.csv"  # Canvas's own gradebook export, before grading
    export.write_text("Student,ID,SIS User ID,SIS Login ID,Section,rmsnorm (5001)\n"
                      "    Points Possible,,,,,5\n"
                      "John Lee,10011,,,S1,\nJohn Lee,10012,,,S1,\nZoë Müller,10013,,,S1,\n"
                      "José Muñoz,10014,,,S1,\nPat O'Brien,10015,,,S1,\nSam Absent,10099,,,S1,\n", encoding="utf-8")
    out = run_grader("--submissions", folder, "--jobs", 2, "--lms-gradebook", export, course=course_copy)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # no file left out (the canary may say its pass was cached)
    assert not [ln for ln in out.stdout.splitlines() if "skipped" in ln and not ln.startswith("canary:")]
    assert "left blank (no submission here): Sam Absent (10099)" in out.stdout
    back = (course_copy / "lms-import-canvas.csv").read_text(encoding="utf-8").splitlines()
    assert back == ["Student,ID,SIS User ID,SIS Login ID,Section,rmsnorm (5001)", "    Points Possible,,,,,5",
                    "John Lee,10011,,,S1,5", "John Lee,10012,,,S1,0", "Zoë Müller,10013,,,S1,5",
                    "José Muñoz,10014,,,S1,5", "Pat O'Brien,10015,,,S1,0", "Sam Absent,10099,,,S1,"]
    with (course_copy / "grades.csv").open() as f:
        grades = {r["student_id"]: (float(r["score"]), r["late"]) for r in csv.DictReader(f)}
    assert grades == {"leejohn-10011": (5.0, ""), "leejohn-10012": (0.0, ""), "mullerzoe": (5.0, ""),
                      "munozjose": (5.0, "yes"), "obrienpat": (0.0, "")}
    with (course_copy / "roster.csv").open(encoding="utf-8") as f:
        roster = {r["student_id"]: (r["lms_id"], r["name"]) for r in csv.DictReader(f)}
    assert roster == {"leejohn-10011": ("10011", "leejohn"), "leejohn-10012": ("10012", "leejohn"),
                      "mullerzoe": ("10013", "müllerzoë"), "munozjose": ("10014", "muñozjosé"),
                      "obrienpat": ("10015", "o'brienpat")}
    # a later batch: the same LMS users keep their ids; a third leejohn is a third student
    again = tmp_path / "canvas2"
    again.mkdir()
    for name, variant in {"leejohn_10012_20024_rmsnorm.ipynb": "correct",
                          "leejohn_10016_20025_rmsnorm.ipynb": "correct"}.items():
        nbformat.write(fill_answers(release, ANSWERS["rmsnorm"][variant]), again / name)
    out = run_grader("--submissions", again, course=course_copy)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "leejohn-10012 (rmsnorm) replaces that student's earlier submission" in out.stdout
    with (course_copy / "grades.csv").open() as f:
        grades = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    assert grades["leejohn-10012"] == 5.0 and grades["leejohn-10016"] == 5.0 and grades["leejohn-10011"] == 5.0


@pytest.mark.slow
def test_lms_batches_fill_the_import_from_the_gradebook_and_zip_the_feedback(course_copy, tmp_path, replayed):
    """Batch 1: a zip written as Linux `zip` writes one (UTF-8 names, no UTF-8 flag) with the
    issue's non-ASCII Canvas names; batch 2: one more student, with Canvas's gradebook export.
    The import file holds both batches' points (from the gradebook), and the feedback zip each
    student's feedback under their own Canvas download name."""
    from test_collect import NON_ASCII_CANVAS, zip_without_utf8_flag

    only_assignments(course_copy, {"rmsnorm"})
    release = course_copy / "release" / "rmsnorm" / "rmsnorm.ipynb"
    variants = {"mullerzoe": "correct", "munozjose": "unbiased_variance", "obrienpat": "correct"}
    first = zip_without_utf8_flag(tmp_path / "canvas-1.zip", {
        name: nbformat.writes(fill_answers(release, ANSWERS["rmsnorm"][variants[sid]])).encode()
        for name, (sid, _, _) in NON_ASCII_CANVAS.items()})
    out = run_grader("--submissions", first, "--jobs", 2, course=course_copy)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # no file left out (the canary may say its pass was cached)
    assert not [ln for ln in out.stdout.splitlines() if "skipped" in ln and not ln.startswith("canary:")]
    with (course_copy / "grades.csv").open() as f:
        grades = {r["student_id"]: (float(r["score"]), r["late"]) for r in csv.DictReader(f)}
    assert grades == {"mullerzoe": (5.0, ""), "munozjose": (0.0, "yes"), "obrienpat": (5.0, "")}
    with (course_copy / "roster.csv").open(encoding="utf-8") as f:
        assert sorted(tuple(r.values()) for r in csv.DictReader(f)) == sorted(NON_ASCII_CANVAS.values())

    second = tmp_path / "canvas-2"
    second.mkdir()
    nbformat.write(fill_answers(release, ANSWERS["rmsnorm"]["correct"]), second / "leejohn_10011_20013_rmsnorm.ipynb")
    export = tmp_path / "canvas-export.csv"
    export.write_text("Student,ID,SIS User ID,SIS Login ID,Section,rmsnorm (5001)\n"
                      "John Lee,10011,,,S1,\nZoë Müller,10013,,,S1,\nJosé Muñoz,10014,,,S1,\n"
                      "Pat O'Brien,10015,,,S1,\nSam Absent,10099,,,S1,\n", encoding="utf-8")
    out = run_grader("--submissions", second, "--lms-gradebook", export, course=course_copy)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert (course_copy / "lms-import-canvas.csv").read_text(encoding="utf-8").splitlines() == [
        "Student,ID,SIS User ID,SIS Login ID,Section,rmsnorm (5001)", "John Lee,10011,,,S1,5",
        "Zoë Müller,10013,,,S1,5", "José Muñoz,10014,,,S1,0", "Pat O'Brien,10015,,,S1,5",  # batch 1
        "Sam Absent,10099,,,S1,"]
    zpath = course_copy / "feedback-canvas-rmsnorm.zip"
    assert f"LMS feedback: {zpath} (bulk feedback upload)" in out.stdout
    expected = {"leejohn_10011_20013_rmsnorm.html": "leejohn", "müllerzoë_10013_20015_rmsnorm.html": "mullerzoe",
                "muñozjosé_LATE_10014_20016_rmsnorm.html": "munozjose",
                "o'brienpat_10015_20017_rmsnorm.html": "obrienpat"}
    with zipfile.ZipFile(zpath) as zf:
        assert sorted(zf.namelist()) == sorted(expected)
        for name, sid in expected.items():
            html = zf.read(name)
            assert html == (course_copy / "feedback" / sid / "rmsnorm" / "rmsnorm.html").read_bytes(), name
            score = "0.0" if sid == "munozjose" else "5.0"
            assert f"rmsnorm (Score: {score} / 5.0)" in html.decode(), (name, score)  # nbgrader's heading


@pytest.mark.slow
def test_restore_state_brings_back_a_cleaned_class_with_hand_grades_and_late_marks(course_copy, tmp_path, replayed):
    from nbgrader.api import Gradebook

    only_assignments(course_copy, {"practice"})
    rel = course_copy / "release" / "practice" / "practice.ipynb"
    folder = tmp_path / "canvas"
    folder.mkdir()
    nbformat.write(fill_answers(rel, _practice({})), folder / "lovelaceada_1001_2001_practice.ipynb")
    nbformat.write(fill_answers(rel, _practice({"practice_rms_answer": "rms_34 = 5.0"})),
                   folder / "bo_LATE_1002_2002_practice.ipynb")
    out = run_grader("--submissions", folder, "--jobs", 2, course=course_copy)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    url = f"sqlite:///{course_copy / 'gradebook.db'}"

    def scores():
        with Gradebook(url) as gb:
            hand = gb.find_grade("practice_shape_why", "practice", "practice", "lovelaceada")
            return ({st: gb.find_submission("practice", st).score for st in ("bo", "lovelaceada")},
                    (hand.manual_score, hand.needs_manual_grade))

    with Gradebook(url) as gb:  # what formgrader does when a person grades a written answer
        g = gb.find_grade("practice_shape_why", "practice", "practice", "lovelaceada")
        g.manual_score, g.needs_manual_grade = 1.0, False
        gb.db.commit()
    graded = scores()
    assert graded[1] == (1.0, False) and graded[0]["lovelaceada"] - graded[0]["bo"] >= 1.0

    def state_files():
        return {k: v for k, v in snapshot(course_copy).items() if not k.endswith("/.gitkeep") and (
                k.split("/")[0] in ("submitted", "autograded", "feedback", "grades.csv", "roster.csv")
                or k in ("logs/lms_late.json", "logs/lms_files.json", "logs/received.json"))}

    before = state_files()
    assert "logs/lms_late.json" in before and "feedback/bo/practice/practice.html" in before
    assert run_grader("clean", "--yes", course=course_copy).returncode == 0
    assert not (course_copy / "gradebook.db").exists() and state_files() == {}
    (archive,) = (course_copy / "logs" / "backups").glob("state-*.tar.gz")

    back = run_grader("restore", "--state", archive, course=course_copy)
    assert back.returncode == 0, back.stderr
    assert f"is now the state of {archive.name}: gradebook.db (2 students, 2 submissions), " in back.stdout
    for part in ("autograded/ (2 students)", "feedback/ (2 students)", "submitted/ (2 students)", "grades.csv",
                 "roster.csv", "logs/lms_late.json"):
        assert part in back.stdout, (part, back.stdout)
    assert scores() == graded  # the gradebook's points and the hand grade
    assert state_files() == before  # every file, byte for byte

    # state here now: replaced only with --yes, after a backup of it
    refused = run_grader("restore", "--state", archive, course=course_copy)
    assert refused.returncode == 1 and "would replace it; run again with --yes" in refused.stderr, refused.stderr
    assert state_files() == before and scores() == graded
    again = run_grader("restore", "--state", "--yes", course=course_copy)  # the newest state backup
    assert again.returncode == 0, again.stderr
    assert len(list((course_copy / "logs" / "backups").glob("state-*.tar.gz"))) == 2  # the replaced state
    assert state_files() == before and scores() == graded

    # the restored course grades on: the same download again is no resubmission, the LATE mark holds
    rerun = run_grader("--submissions", folder, course=course_copy)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "is unchanged since it was last received" in rerun.stdout and "replaces" not in rerun.stdout
    with (course_copy / "grades.csv").open() as f:
        rows = {r["student_id"]: (float(r["score"]), r["late"]) for r in csv.DictReader(f)}
    assert rows == {"bo": (graded[0]["bo"], "yes"), "lovelaceada": (graded[0]["lovelaceada"], "")}


def test_a_failed_generate_leaves_release_as_it_was(course_copy, tmp_path, replayed):
    only_assignments(course_copy, {"rmsnorm", "layernorm"})
    before = {k: v for k, v in snapshot(course_copy).items() if k.startswith("release/")}
    src = course_copy / "source" / "layernorm" / "layernorm.ipynb"
    nb = nbformat.read(src, as_version=4)
    nb.cells[2].metadata["nbgrader"]["grade_id"] = nb.cells[3].metadata["nbgrader"]["grade_id"]  # duplicate id
    nbformat.write(nb, src)
    out = run_grader("--submissions", submitted_tree(tmp_path / "in", {"ada": "correct"}), course=course_copy)
    assert out.returncode == 1 and "error: `nbgrader generate_assignment layernorm` failed" in out.stderr, out.stderr
    after = {k: v for k, v in snapshot(course_copy).items() if k.startswith("release/")}
    assert after == before  # the committed release/ notebooks are all there, unchanged
    assert not (course_copy / ".release-staging").exists()
    (run,) = [json.loads(ln) for ln in (course_copy / "logs" / "runs.jsonl").read_text().splitlines()]
    assert run["status"] == "failed", run  # not "ok"
    # the canary (grader/stages/canary.py) generates source/ first, in a scratch course: it stops the run there,
    # after the check (which writes nothing)
    assert run["error"].startswith("CanaryFailed: `nbgrader generate_assignment layernorm` failed")
    assert "\n" not in run["error"] and set(run["stage_seconds"]) == {"check", "canary"}


def test_an_interrupted_run_is_logged_as_interrupted_with_its_signal(course_copy, tmp_path, monkeypatch, replayed):
    """What grader.__main__'s handler raises on SIGTERM, in the middle of a run (in process, the
    generate stage replaced: the killed-run tests above send the real signals)."""
    import grader.pipeline as pipeline

    def stopped(_batch):
        raise KeyboardInterrupt("SIGTERM")

    only_assignments(course_copy, {"rmsnorm"})
    with monkeypatch.context() as m:
        m.setattr(pipeline, "STAGES", (*pipeline.STAGES[:3], ("generate", stopped)))  # check, canary, prepare
        with pytest.raises(KeyboardInterrupt):
            pipeline.grade_class(course_root=course_copy, engine="processes", log=lambda *_: None,
                                 submissions=submitted_tree(tmp_path / "in", {"ada": "correct"}))
    (run,) = [json.loads(ln) for ln in (course_copy / "logs" / "runs.jsonl").read_text().splitlines()]
    assert (run["status"], run["error"], set(run["stage_seconds"])) == ("interrupted", "SIGTERM",
                                                                         {"check", "canary", "prepare"})
    assert (course_copy / ".grader.lock").read_text() == ""  # the lock is free again


def test_the_hand_grading_hint_names_what_works_with_the_pinned_nbgrader():
    """The report's hint: `make lab-instructor` (its Jupyter configuration enables formgrader),
    then Nbgrader > Formgrader (the menu item nbgrader's JupyterLab extension installs)."""
    from grader.outputs.report import FORMGRADER_HINT

    assert "`make lab-instructor`" in FORMGRADER_HINT and "Nbgrader > Formgrader" in FORMGRADER_HINT
    recipe = (REPO / "Makefile").read_text().split("\nlab-instructor:", 1)[1].split("\n\n", 1)[0]
    assert "jupyter-instructor" in recipe and "jupyter lab" in recipe
    env = dict(os.environ, JUPYTER_CONFIG_PATH=str(REPO / "jupyter-instructor"))
    out = subprocess.run([str(Path(sys.executable).with_name("jupyter")), "server", "extension", "list"],
                         capture_output=True, text=True, env=env, timeout=120)
    listed = out.stdout + out.stderr
    assert any("nbgrader.server_extensions.formgrader" in ln and "enabled" in ln for ln in listed.splitlines())
    lab = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "@jupyter" / "nbgrader" / "static"
    assert any('label:"Formgrader"' in p.read_text(errors="replace") for p in lab.glob("*.js"))
    # what the old hint said to run is not a command of nbgrader 0.9.6: it lists the sub-commands
    old = subprocess.run([sys.executable, "-m", "nbgrader", "formgrader"], capture_output=True, text=True,
                         timeout=120)
    assert "No command given" in old.stdout + old.stderr


def test_a_cleaned_course_grades_a_new_class_without_being_told_to_restore_the_old_one(tmp_path):
    """`make clean` keeps the run log; the next class has no gradebook yet and that is right
    (red team: it was refused with "gradebook.db is missing ... restore it")."""
    from grader.ledger.course import CourseTree
    from grader.pipeline import clean
    from grader.ledger.state import gradebook_problem, record_run

    tree = CourseTree(tmp_path)
    record_run(tree, {"run": "1", "status": "ok"})
    record_run(tree, {"run": "2", "status": "ok"})
    assert "is missing, but this course has been graded before" in gradebook_problem(tree)
    clean(tmp_path)
    assert gradebook_problem(tree) is None  # a new class may start here
    assert len((tmp_path / "logs" / "runs.jsonl").read_text().splitlines()) == 2  # history kept
    record_run(tree, {"run": "3", "status": "ok"})  # the new class's first run ...
    assert "is missing" in gradebook_problem(tree)  # ... after which a lost gradebook is noticed


@pytest.mark.slow
def test_a_run_stopped_between_autograde_and_scoring_leaves_the_submission_to_the_rerun(
        course_copy, tmp_path, monkeypatch, replayed):
    """The submission is recorded as graded only once its trusted score is written (red team:
    Ctrl-C right after autograde left a correct submission at the kernel's 0 for good)."""
    from grader import pipeline
    from grader.scoring import scores
    from grader.pipeline import grade_class

    only_assignments(course_copy, {"rmsnorm"})
    tree = submitted_tree(tmp_path / "in", {"ada": "correct"})

    def stopped(b):
        raise KeyboardInterrupt("SIGINT")

    with monkeypatch.context() as m:
        m.setattr(scores, "scoring_stage", stopped)
        with pytest.raises(KeyboardInterrupt):
            grade_class(course_root=course_copy, submissions=tree, jobs=1, log=lambda *_: None)
    assert not (course_copy / "logs" / pipeline.GRADED).is_file() or "ada" not in (
        course_copy / "logs" / pipeline.GRADED).read_text()
    rerun = grade_class(course_root=course_copy, submissions=tree, jobs=1, log=lambda *_: None)
    assert ("rmsnorm", "ada") in rerun.autograde.graded  # graded again, not skipped as done
    assert rerun.scores[("rmsnorm", "ada")] == {"rms_norm_shape": 1.0, "rms_norm_battery": 4.0}


@pytest.mark.slow
def test_hand_grades_comments_and_test_overrides_survive_a_resubmission_run_stopped_after_collect(
        course_copy, tmp_path, monkeypatch, replayed):
    """Red team: hand grades captured from a replaced submission lived only in memory (Ctrl-C after
    collect lost them, and the rerun called the notebook unchanged); an override of an autograded
    test was kept though the answer it tests changed; formgrader comments were never carried over;
    the report's batch history left out the run that wrote it."""
    from nbgrader.api import Gradebook

    from grader.ledger.handgrades import PENDING

    only_assignments(course_copy, {"practice"})
    rel = course_copy / "release" / "practice" / "practice.ipynb"

    def batch(name, answers):
        (tmp_path / name / "ada" / "practice").mkdir(parents=True)
        nbformat.write(fill_answers(rel, answers), tmp_path / name / "ada" / "practice" / "practice.ipynb")
        return tmp_path / name

    out = run_grader("--submissions", batch("b1", _practice({})), "--engine", "processes", course=course_copy)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    url = f"sqlite:///{course_copy / 'gradebook.db'}"
    with Gradebook(url) as gb:  # formgrader: a hand grade and comments, overrides of two tests
        for gid, points in [("practice_shape_why", 1.0), ("practice_mean_var", 0.0), ("practice_shape", 0.0)]:
            gb.find_grade(gid, "practice", "practice", "ada").manual_score = points
        gb.find_comment("practice_shape_why", "practice", "practice", "ada").manual_comment = "Clear, well put."
        gb.find_comment("practice_rms_answer", "practice", "practice", "ada").manual_comment = "Use eps."
        gb.db.commit()

    # ada resubmits with a changed practice_rms answer (below practice_mean_var, above practice_shape);
    # the run is stopped right after collect
    second = batch("b2", _practice({"practice_rms_answer": "rms_34 = 5.0"}))
    grade_stopped_after_collect(course_copy, second, monkeypatch)
    kept = json.loads((course_copy / "logs" / PENDING).read_text())  # on disk, not only in memory
    assert {(k["grade_id"], k["manual_score"], k["comment"]) for k in kept} == {
        ("practice_shape_why", 1.0, "Clear, well put."), ("practice_mean_var", 0.0, None),
        ("practice_shape", 0.0, None), ("practice_rms_answer", None, "Use eps.")}

    out = run_grader("--submissions", second, "--engine", "processes", course=course_copy)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert "ada (practice) is unchanged since it was last received" in text
    for line in ["hand grade kept: ada (practice) practice_shape_why = 1",
                 "comment kept: ada (practice) practice_shape_why",
                 "hand grade kept: ada (practice) practice_mean_var = 0",
                 "hand grade to redo: ada (practice) practice_shape: an answer cell above",
                 "comment to redo: ada (practice) practice_rms_answer"]:
        assert line in text, text[-3000:]
    with Gradebook(url) as gb:
        g = lambda gid: gb.find_grade(gid, "practice", "practice", "ada")  # noqa: E731
        assert (g("practice_shape_why").score, g("practice_shape_why").needs_manual_grade) == (1.0, False)
        assert (g("practice_mean_var").manual_score, g("practice_mean_var").score) == (0.0, 0.0)
        assert (g("practice_shape").manual_score, g("practice_shape").score) == (None, 1.0)  # autograde's
        assert g("practice_rms").score == 0.0  # the changed answer, regraded
        c = lambda gid: gb.find_comment(gid, "practice", "practice", "ada").manual_comment  # noqa: E731
        assert (c("practice_shape_why"), c("practice_rms_answer")) == ("Clear, well put.", None)
    assert not (course_copy / "logs" / PENDING).exists()  # applied: the record is gone
    report = json.loads((course_copy / "reports" / "report.json").read_text())
    assert any("practice_shape" in f and "must be redone" in f for f in report["flags"]["ada"])
    # the report's batch history has every run, this one included (3 lines in runs.jsonl)
    runs = (course_copy / "logs" / "runs.jsonl").read_text().splitlines()
    html = (course_copy / "reports" / "index.html").read_text()
    assert len(runs) == 3 and html.split("class='runs'", 1)[1].split("</table>")[0].count("<tr><td>") == 3


@pytest.mark.slow
def test_restoring_an_older_gradebook_regrades_what_it_rolls_back(course_copy, tmp_path, replayed):
    """Red team: `restore` put back the backup from before the last run, whose students then
    vanished from the gradebook while logs/graded.json still listed them; every later run failed
    in generate_feedback. Now each successful run also backs up the gradebook it leaves (what a
    plain `restore` puts back), and restoring an older one names the runs it rolls back and has
    the next run grade their submissions again."""
    only_assignments(course_copy, {"rmsnorm"})
    run = lambda tree: run_grader("--submissions", tree, "--engine", "processes", course=course_copy)  # noqa: E731
    from nbgrader.api import Gradebook

    out = run(submitted_tree(tmp_path / "b1", {"ada": "correct"}))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with Gradebook(f"sqlite:///{course_copy / 'gradebook.db'}") as gb:  # an override of ada's test
        gb.find_grade("rms_norm_battery", "rmsnorm", "rmsnorm", "ada").manual_score = 2.0
        gb.db.commit()
    # batch 2: bo, and ada again with a different answer (its variance is wrong: 0 points)
    out = run(submitted_tree(tmp_path / "b2", {"bo": "correct", "ada": "unbiased_variance"}))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ids = [json.loads(ln)["run_id"] for ln in (course_copy / "logs" / "runs.jsonl").read_text().splitlines()]
    backups = sorted(p.name for p in (course_copy / "logs" / "backups").glob("gradebook-*.db"))
    assert backups == sorted([f"gradebook-{ids[0]}-after.db", f"gradebook-{ids[1]}-before.db",
                              f"gradebook-{ids[1]}-after.db"])  # the first run had no gradebook before it

    # red team: what is not a gradebook was installed as one (then every run crashed): refused
    junk, foreign = tmp_path / "junk.db", tmp_path / "foreign.db"
    junk.write_text("junk")
    with sqlite3.connect(foreign) as db:
        db.execute("create table x(a)")
    live = (course_copy / "gradebook.db").read_bytes()
    for bad, why in [(junk, "is not a readable SQLite database"), (foreign, "is not an nbgrader gradebook"),
                     (tmp_path / "gone.db", "does not exist"), (tmp_path / "empty.db", "is empty (0 bytes)")]:
        if bad.name == "empty.db":
            bad.touch()
        out = run_grader("restore", "--backup", bad, course=course_copy)
        assert out.returncode == 1 and why in out.stderr and "nothing was restored" in out.stderr, out.stderr
        assert (course_copy / "gradebook.db").read_bytes() == live and "replaced" not in out.stdout
    assert not list((course_copy / "logs" / "backups").glob("replaced-*.db"))

    # red team: a hand grade typed after the last run (bo's test overridden to 3) was dropped by a
    # restore; now it is written back, or waits for the regrade of its submission
    with Gradebook(f"sqlite:///{course_copy / 'gradebook.db'}") as gb:
        gb.find_grade("rms_norm_battery", "rmsnorm", "rmsnorm", "bo").manual_score = 3.0
        gb.db.commit()
    plain = run_grader("restore", course=course_copy)  # the newest: as the last run left it, nothing lost
    assert plain.returncode == 0 and f"is now {course_copy / 'logs' / 'backups'}/gradebook-{ids[1]}-after.db" \
        in plain.stdout and "rolled back" not in plain.stdout, plain.stdout + plain.stderr
    assert "kept the hand grade typed after that backup: bo (rmsnorm) rms_norm_battery" \
        in plain.stdout, plain.stdout
    with Gradebook(f"sqlite:///{course_copy / 'gradebook.db'}") as gb:
        assert gb.find_grade("rms_norm_battery", "rmsnorm", "rmsnorm", "bo").manual_score == 3.0
    older = course_copy / "logs" / "backups" / f"gradebook-{ids[1]}-before.db"
    back = run_grader("restore", "--backup", older, course=course_copy)
    assert back.returncode == 0, back.stderr
    assert f"rolled back 1 run(s) after that backup ({ids[1]}; students ada, bo)" in back.stdout, back.stdout
    assert "2 submission(s) will be graded again by the next run (kept in submitted/): ada (rmsnorm), " \
        "bo (rmsnorm)" in back.stdout, back.stdout
    assert "1 hand grade(s) typed after that backup wait in" in back.stdout and \
        "bo (rmsnorm) rms_norm_battery" in back.stdout, back.stdout

    out = run(tmp_path / "b2")  # batch 2 again: unchanged notebooks, but graded again, not skipped
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # the restored gradebook's override graded ada's earlier answer: not applied to the new one
    assert "hand grade to redo: ada (rmsnorm) rms_norm_battery" in out.stdout, out.stdout[-3000:]
    with (course_copy / "grades.csv").open() as f:
        scores = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    # bo regraded to the known 1 + 4, with the override typed after run 2 kept: 1 + 3; ada's new answer 0
    assert scores == {"ada": 0.0, "bo": 4.0}
    assert not (course_copy / "logs" / "handgrades.json").exists()


@pytest.mark.slow
def test_an_unreadable_notebook_is_reported_as_not_graded_by_every_run_until_a_readable_one_comes(
        course_copy, tmp_path, replayed):
    """Red team: the run that repaired an unreadable notebook reported it as could not be graded;
    every later run counted it as a graded blank (0 points) without a word about why."""
    only_assignments(course_copy, {"rmsnorm"})
    run = lambda tree: run_grader("--submissions", tree, "--engine", "processes", "--jobs", 1,  # noqa: E731
                              course=course_copy)
    b1 = submitted_tree(tmp_path / "b1", {"ada": "correct", "bo": "correct"})
    next((b1 / "bo" / "rmsnorm").glob("*.ipynb")).write_text("this is not a notebook")
    why = "rmsnorm.ipynb is not valid JSON (Expecting value at line 1) (scored 0)"

    def reported(out) -> tuple[dict, dict]:
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        rep = json.loads((course_copy / "reports" / "report.json").read_text())
        html = (course_copy / "reports" / "index.html").read_text()
        with (course_copy / "grades.csv").open() as f:
            scores = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
        assert rep["ungraded"] == ({"bo (rmsnorm)": why} if scores["bo"] == 0 else {}), rep["ungraded"]
        assert (f"bo (rmsnorm): {why}" in out.stdout) == (scores["bo"] == 0), out.stdout[-2000:]
        assert ("<td>bo (rmsnorm)</td><td>" in html) == (scores["bo"] == 0)
        return rep, scores

    first, scores = reported(run(b1))
    assert scores == {"ada": 5.0, "bo": 0.0} and first["not_diagnosed"] == {"rmsnorm": ["bo"]}
    second, scores = reported(run(submitted_tree(tmp_path / "b2", {"cy": "correct"})))  # another batch
    assert scores == {"ada": 5.0, "bo": 0.0, "cy": 5.0}
    assert second["ungraded"] == first["ungraded"] and second["not_diagnosed"] == {"rmsnorm": ["bo"]}
    assert second["flags"]["bo"] == first["flags"]["bo"]
    # the same unreadable file handed in again: the same report (not a resubmission, nothing regraded)
    third, scores = reported(run(b1))
    assert scores == {"ada": 5.0, "bo": 0.0, "cy": 5.0} and third["ungraded"] == first["ungraded"]
    # a readable notebook replaces it: graded, and no longer reported as could not be graded
    fourth, scores = reported(run(submitted_tree(tmp_path / "b4", {"bo": "correct"})))
    assert scores == {"ada": 5.0, "bo": 5.0, "cy": 5.0} and fourth["not_diagnosed"] == {}


@pytest.mark.slow
def test_a_run_after_an_interrupted_one_names_what_it_finishes_grading(course_copy, tmp_path, monkeypatch,
                                                                        replayed):
    """Red team: after a run stopped right after collect, the next run called the resubmission it
    finished grading "unchanged since it was last received: not a resubmission", and a run of
    another download said "collect: 2 students" without naming the interrupted batch's students
    it graded too."""

    only_assignments(course_copy, {"rmsnorm"})
    run = lambda tree: run_grader("--submissions", tree, "--engine", "processes", "--jobs", 2,  # noqa: E731
                              course=course_copy)
    out = run(submitted_tree(tmp_path / "b1", {"ada": "correct"}))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # batch 2: ada resubmits (a wrong variance), bo and cy are new; stopped right after collect
    b2 = submitted_tree(tmp_path / "b2", {"ada": "unbiased_variance", "bo": "correct", "cy": "unbiased_variance"})
    grade_stopped_after_collect(course_copy, b2, monkeypatch)
    runs = [json.loads(ln) for ln in (course_copy / "logs" / "runs.jsonl").read_text().splitlines()]
    assert [r["status"] for r in runs] == ["ok", "interrupted"]
    rid = runs[1]["run_id"]

    # another download: ada's resubmission again (the same bytes) and dee, new
    b3 = tmp_path / "b3"
    shutil.copytree(b2 / "ada", b3 / "ada")
    submitted_tree(b3, {"dee": "correct"})
    out = run(b3)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert (f"collect: ada (rmsnorm) is unchanged since it was last received, by the interrupted run {rid}, "
            "which did not finish grading it: this run finishes grading it") in text, text[-3000:]
    assert "not a resubmission" not in text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("collect: 2 students from")]
    assert line.endswith(f"(4 there in all); 2 carried over from the interrupted run {rid}, graded in this "
                         "run too: bo (rmsnorm), cy (rmsnorm)"), line
    assert "autograde: 4 notebooks" in text
    with (course_copy / "grades.csv").open() as f:
        scores = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    assert scores == {"ada": 0.0, "bo": 5.0, "cy": 0.0, "dee": 5.0}  # all four graded, ada's resubmission too
    # nothing left over: the same download again is plainly unchanged, and carries nothing over
    out = run(b3)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "collect: ada (rmsnorm) is unchanged since it was last received: not a resubmission" in out.stdout
    assert "carried over" not in out.stdout and "autograde: 0 notebooks" in out.stdout, out.stdout[-3000:]


def test_only_assignments_students_could_have_done_are_exported_and_reported(course_copy, tmp_path, replayed):
    """practice handed in, rmsnorm in source/ and release/ but given to nobody: grades.csv has no
    rmsnorm row, the report no rmsnorm column. Once rmsnorm is released through nbgrader's exchange
    (its outbound folder), the next run has its 0 (a student could have done it)."""
    only_assignments(course_copy, {"practice", "rmsnorm"})
    exchange = tmp_path / "exchange"
    config = course_copy / "nbgrader_config.py"
    config.write_text(config.read_text() + f"\nc.Exchange.root = {str(exchange)!r}\n")

    def graded(*args) -> tuple[dict, dict]:
        out = run_grader(*args, course=course_copy)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        with (course_copy / "grades.csv").open() as f:
            rows = {r["assignment"]: float(r["score"]) for r in csv.DictReader(f)}
        return rows, json.loads((course_copy / "reports" / "report.json").read_text())["max_total"]

    submissions = submitted_tree(tmp_path / "in", {"ada": "correct"}, "practice")
    rows, max_total = graded("--submissions", submissions)
    assert rows == {"practice": 8.0} and max_total == {"practice": 9.0}, (rows, max_total)
    (exchange / "lesson16-normalization" / "outbound" / "rmsnorm").mkdir(parents=True)
    rows, max_total = graded("--submissions", submissions)
    assert rows == {"practice": 8.0, "rmsnorm": 0.0} and max_total == {"practice": 9.0, "rmsnorm": 5.0}, rows
