"""README.md's "For instructors" block, run as written (tests/docrun.py) by the session's
instructor, a normal unix user (tests/graded_class.py), in their copy of the course: the same
user, a login shell's PATH, the course folder; the placeholders (``path/to/submitted``,
``canvas-download.zip``, ``canvas-export.csv``) filled with what this test makes.

README's first command, ``make grade`` (the demo class), is the session's graded class (the
``graded_class`` fixture runs it); the others grade two small batches of the ``practice``
assignment (each student's points from the answer bank, derived by hand), whose kernels are
warm, and nothing of the instructor's is left running after them. docs/SCALE.md's blocks:
tests/test_docs_scale.py.
"""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import docrun
import nbformat
import pytest

from grader.demo import fill_answers
from grader.demo.answer_bank import ANSWERS, EXPECTED

pytestmark = pytest.mark.slow

README, INSTRUCTORS = "README.md", "For instructors"
#: The batch of an nbgrader submitted/ tree, and the Canvas download: practice, a variant each.
BATCH = {"ann": "correct", "bea": "unbiased_variance"}
CANVAS = {"cid_1003_5003_practice.ipynb": ("cid", "correct"), "dee_1004_5004_practice.ipynb": ("dee", "partial")}
#: Automatic points of each practice variant (its written answer waits for a hand grade: 0).
POINTS = {v: sum(EXPECTED["practice"][v].values()) for v in ANSWERS["practice"]}


def _inputs(user: str, home: Path) -> dict[str, str]:
    """The placeholders' files, the instructor's own: a submitted/ tree, a Canvas zip and export."""
    base = home / "in"
    release = docrun.REPO / "release" / "practice" / "practice.ipynb"
    for st, variant in BATCH.items():
        d = base / "submitted" / st / "practice"
        d.mkdir(parents=True)
        nbformat.write(fill_answers(release, ANSWERS["practice"][variant]), d / "practice.ipynb")
        (d / "timestamp.txt").write_text("2026-11-20 10:00:00 UTC\n")
    with zipfile.ZipFile(base / "canvas-download.zip", "w") as zf:
        for name, (_, variant) in CANVAS.items():
            zf.writestr(name, nbformat.writes(fill_answers(release, ANSWERS["practice"][variant])))
    (base / "canvas-export.csv").write_text("Student,ID,SIS User ID,SIS Login ID,Section,practice (5001)\n"
                                            "    Points Possible,,,,,9\nCid,1003,,,S1,\nDee,1004,,,S1,\n")
    subprocess.run(["chown", "-R", f"{user}:{user}", str(base)], check=True)
    return {"submitted": str(base / "submitted"), "canvas_zip": str(base / "canvas-download.zip"),
            "canvas_export": str(base / "canvas-export.csv")}


def _grades(course: Path) -> dict[str, float]:
    with (course / "grades.csv").open() as f:
        return {r["student_id"]: float(r["score"]) for r in csv.DictReader(f) if r["assignment"] == "practice"}


def _fresh_course(user: str, course: Path, name: str) -> Path:
    """Another course folder of ``user``: a copy of ``course``'s files (no grading state)."""
    dest = course.parent / name
    shutil.copytree(course, dest, symlinks=True, ignore=shutil.ignore_patterns(
        "build", "submitted", "autograded", "feedback", "gradebook.db*", "logs", "reports", "*.csv"))
    subprocess.run(["chown", "-R", "-h", f"{user}:{user}", str(dest)], check=True)
    return dest


def test_the_readme_instructor_commands_as_written(graded_class, instructor_course):
    user, course = instructor_course
    cmds = docrun.section_commands(README, INSTRUCTORS)
    assert docrun.WHERE[(README, INSTRUCTORS)].test == "tests/test_docs_grade.py"
    assert cmds[0].text.split("#")[0].strip() == "make grade"
    assert cmds[0].text in [c.text for c, *_ in docrun.RAN if c.doc == README]  # by graded_class
    values = _inputs(user, course.parent)
    batch = {st: POINTS[v] for st, v in BATCH.items()}
    lms = {"cid": POINTS["correct"], "dee": POINTS["partial"]}
    for cmd in cmds[1:]:
        line = cmd.text.split("#")[0]
        asks = line.strip() in ("make clean", ".venv/bin/python -m grader restore --state")
        out = docrun.run(cmd, user, course, values, typed="yes\n" if asks else None, timeout=1800)
        said = out.stdout + out.stderr
        if "make grade" in line and "FRESH=1" in line:  # started over: this batch alone
            assert _grades(course) == batch, said[-3000:]
        elif "make grade" in line:  # a batch added (the first of each is autograded, warm)
            got = _grades(course)
            assert {k: got.get(k) for k in batch} == batch, said[-3000:]
            if "canvas-download.zip" in line:
                assert {k: got.get(k) for k in lms} == lms, said[-3000:]
            if "LMS_GRADEBOOK" in line:
                back = (course / "lms-import-canvas.csv").read_text().splitlines()
                assert back[2:] == [f"Cid,1003,,,S1,{lms['cid']:g}", f"Dee,1004,,,S1,{lms['dee']:g}"], back
            if "GROUPS=0" in line:
                assert json.loads((course / "reports" / "report.json").read_text())["groups"] == {}
            assert "fresh kernel" not in said, said[-3000:]
        elif line.strip() == "make clean":
            assert not (course / "gradebook.db").exists() and not (course / "submitted").exists(), said
        elif line.strip().endswith("restore"):
            assert (course / "gradebook.db").exists(), said
        elif line.strip().endswith("restore --state"):
            assert sorted(p.name for p in (course / "submitted").iterdir()) == sorted(batch), said
        left = docrun.processes_of(user)
        assert not left, f"{cmd} left processes running: {left}"
    ran = {c.text for c, *_ in docrun.RAN if c.doc == README and c.section == INSTRUCTORS}
    assert ran == {c.text for c in cmds}
