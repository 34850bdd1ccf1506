"""Grading the course's own submitted/ in place (issue 21 item 5): on a JupyterHub,
`nbgrader collect --update` writes a resubmission over the notebook that was graded, and
`make grade SUBMISSIONS=submitted` must treat it as a download's resubmission is treated.

A changed notebook is graded again, its hand grade kept where the written answer is unchanged and
named "to redo" otherwise (gradebook, grades.csv, report and terminal agree with nbgrader's
needs_manual_grade); an unchanged one is not autograded again; a run stopped after deciding
(Ctrl-C, kill -9) leaves the change to the rerun; a damaged record is set aside, never written over.

The real runs grade one assignment (practice) of 3 students; the points are the answer bank's
EXPECTED (derived by hand there), the hand grades those typed here as formgrader would.
"""
import csv
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from grader.intake.collect import Collected
from grader.ledger.course import CourseTree
from grader.demo import fill_answers
from grader.demo.answer_bank import ANSWERS, EXPECTED
from grader.intake.inplace import GRADED_HASHES, remember_graded, set_aside_damaged, sort_out

REPO = Path(__file__).resolve().parents[1]
WHY = "practice_shape_why"  # practice's written answer, 1 point, graded by hand

#: A run killed with SIGKILL right after its collect stage decided what to grade (no cleanup runs).
KILLED_AFTER_COLLECT = """\
import os, signal, sys
import grader.pipeline as p
p.STAGES = tuple((n, (lambda b: os.kill(os.getpid(), signal.SIGKILL)) if n == "repair" else f) for n, f in p.STAGES)
from grader.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def grader(course: Path, *args, script: str | None = None) -> subprocess.CompletedProcess:
    head = ["-c", script] if script else ["-m", "grader"]
    return subprocess.run([sys.executable, *head, "--submissions", str(course / "submitted"), "--course-root",
                           str(course), "--engine", "processes", "--jobs", "2", *map(str, args)],
                          capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)


def hand_in(course: Path, student: str, variant: str, when: str) -> bytes:
    """What `nbgrader collect --update` leaves in submitted/: the student's notebook (answered as the
    bank's practice variant) and its timestamp. Returns the notebook's bytes."""
    d = course / "submitted" / student / "practice"
    d.mkdir(parents=True, exist_ok=True)
    nb = fill_answers(course / "release" / "practice" / "practice.ipynb", ANSWERS["practice"][variant])
    nbformat.write(nb, d / "practice.ipynb")
    (d / "timestamp.txt").write_text(when + "\n")
    return (d / "practice.ipynb").read_bytes()


def practice_course(course: Path) -> None:
    for sub in ("source", "release"):
        for d in (course / sub).iterdir():
            if d.is_dir() and d.name != "practice":
                shutil.rmtree(d)


def points(variant: str, hand: float = 0.0) -> float:
    """A practice submission's total: the bank's autograded points for the variant (its written
    answer counts 0 there) plus the hand grade that counts."""
    return sum(EXPECTED["practice"][variant].values()) + hand


def answer_of(notebook: Path, grade_id: str) -> str:
    nb = nbformat.read(notebook, as_version=4)
    return next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


@pytest.mark.slow
def test_a_notebook_changed_in_submitted_is_a_resubmission_even_across_killed_runs(course_copy, monkeypatch):
    from nbgrader.api import Gradebook

    from grader.ledger.handgrades import PENDING

    practice_course(course_copy)
    url = f"sqlite:///{course_copy / 'gradebook.db'}"
    with Gradebook(url):  # nbgrader collect opens (so makes) the gradebook, then fills submitted/
        pass
    for st in ("ada", "bo", "cy"):
        hand_in(course_copy, st, "correct", "2026-11-20 10:00:00 UTC")
    first = grader(course_copy)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    run1 = json.loads((course_copy / "logs" / "runs.jsonl").read_text().splitlines()[0])["run_id"]
    with Gradebook(url) as gb:  # formgrader: ada's and bo's written answers graded, cy's not yet
        for st in ("ada", "bo"):
            g = gb.find_grade(WHY, "practice", "practice", st)
            g.manual_score, g.needs_manual_grade = 1.0, False
            gb.find_comment(WHY, "practice", "practice", st).manual_comment = "Clear."
        gb.db.commit()
    cy_graded = course_copy / "autograded" / "cy" / "practice" / "practice.ipynb"
    cy_bytes = cy_graded.read_bytes()

    # nbgrader collect --update: ada changed a code answer (her written answer is the same),
    # bo rewrote his written answer (and his shape answer); cy did not resubmit
    ada_new = hand_in(course_copy, "ada", "l2_norm_not_rms", "2026-11-21 10:00:00 UTC")
    bo_new = hand_in(course_copy, "bo", "says_shape_changes", "2026-11-21 10:00:00 UTC")
    assert ANSWERS["practice"]["l2_norm_not_rms"][WHY] == ANSWERS["practice"]["correct"][WHY]
    assert ANSWERS["practice"]["says_shape_changes"][WHY] != ANSWERS["practice"]["correct"][WHY]

    # stopped right after collect decided: Ctrl-C (in process), then kill -9 (a process of its own)
    import grader.pipeline as pipeline

    stages = dict(pipeline.STAGES)

    def ctrl_c(_b):
        raise KeyboardInterrupt("SIGINT")

    with monkeypatch.context() as m:
        m.setattr(pipeline, "STAGES", tuple((n, ctrl_c if n == "repair" else stages[n]) for n in stages))
        with pytest.raises(KeyboardInterrupt):
            pipeline.grade_class(course_root=course_copy, submissions=course_copy / "submitted",
                                 engine="processes", log=lambda *_: None)
    captured = {(g["student"], g["manual_score"], g["comment"])
                for g in json.loads((course_copy / "logs" / PENDING).read_text())}
    assert captured == {("ada", 1.0, "Clear."), ("bo", 1.0, "Clear.")}  # on disk before the stop
    kept = course_copy / "logs" / "replaced" / "bo" / "practice" / "practice.ipynb"
    assert answer_of(kept, WHY) == ANSWERS["practice"]["correct"][WHY]  # the notebook bo's grade judged
    killed = grader(course_copy, script=KILLED_AFTER_COLLECT)
    assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
    assert answer_of(kept, WHY) == ANSWERS["practice"]["correct"][WHY]  # not written over by the rerun

    rerun = grader(course_copy)
    text = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, text[-3000:]
    for line in [f"collect: ada (practice) changed since it was graded (run {run1})",
                 f"collect: bo (practice) changed since it was graded (run {run1})",
                 "collect: 1 unchanged since last graded: not graded again",
                 "autograde: 2 notebooks",
                 f"hand grade kept: ada (practice) {WHY} = 1",
                 f"comment kept: ada (practice) {WHY}",
                 f"hand grade to redo: bo (practice) {WHY}: the resubmitted answer changed",
                 "2 submissions wait for it"]:  # the terminal summary: bo and cy
        assert line in text, (line, text[-4000:])
    assert cy_graded.read_bytes() == cy_bytes  # cy's notebook was not autograded again

    with Gradebook(url) as gb:  # what nbgrader itself says
        g = lambda st: gb.find_grade(WHY, "practice", "practice", st)  # noqa: E731
        assert (g("ada").manual_score, g("ada").needs_manual_grade) == (1.0, False)
        assert (g("bo").manual_score, g("bo").needs_manual_grade) == (None, True)
        assert (g("cy").manual_score, g("cy").needs_manual_grade) == (None, True)
        assert gb.find_comment(WHY, "practice", "practice", "bo").manual_comment is None
    with (course_copy / "grades.csv").open() as f:
        scores = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    assert scores == {"ada": points("l2_norm_not_rms", hand=1.0), "bo": points("says_shape_changes"),
                      "cy": points("correct")} == {"ada": 8.0, "bo": 7.0, "cy": 8.0}
    manual = json.loads((course_copy / "reports" / "report.json").read_text())["manual_grading"]["practice"]
    assert (manual["waiting"], manual["graded"]) == ({WHY: ["bo", "cy"]}, {WHY: ["ada"]})

    run3 = json.loads((course_copy / "logs" / "runs.jsonl").read_text().splitlines()[-1])["run_id"]
    record = json.loads((course_copy / "logs" / GRADED_HASHES).read_text())
    for st, new in (("ada", ada_new), ("bo", bo_new)):
        assert record[f"{st}/practice"]["run"] == run3
        assert hashlib.sha256(new).hexdigest() in record[f"{st}/practice"]["hashes"]
    assert record["cy/practice"]["run"] == run1
    received = json.loads((course_copy / "logs" / "received.json").read_text())
    assert received["bo/practice"] == hashlib.sha256(bo_new).hexdigest()
    assert not (course_copy / "logs" / PENDING).exists()  # written back or named: the record is gone

    # the day goes on: bo's and cy's written answers graded in formgrader, then make grade again for
    # the feedback; nothing changed in submitted/, so nothing is autograded and every hand grade counts
    with Gradebook(url) as gb:
        for st, pts in (("bo", 0.5), ("cy", 1.0)):
            g = gb.find_grade(WHY, "practice", "practice", st)
            g.manual_score, g.needs_manual_grade = pts, False
        gb.find_comment(WHY, "practice", "practice", "bo").manual_comment = "Say why the shape stays."
        gb.db.commit()
    again = grader(course_copy)
    text = again.stdout + again.stderr
    assert again.returncode == 0, text[-3000:]
    assert "collect: 3 unchanged since last graded: not graded again" in text and "autograde: 0 notebooks" in text
    assert "none waits for a grader" in text and "hand grade" not in text.replace("graded by hand", "")
    assert cy_graded.read_bytes() == cy_bytes
    with (course_copy / "grades.csv").open() as f:
        scores = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    assert scores == {"ada": points("l2_norm_not_rms", hand=1.0), "bo": points("says_shape_changes", hand=0.5),
                      "cy": points("correct", hand=1.0)} == {"ada": 8.0, "bo": 7.5, "cy": 9.0}
    assert "Say why the shape stays." in (course_copy / "feedback" / "bo" / "practice" / "practice.html").read_text()


def _tree_with(tmp_path: Path, notebooks: dict[str, bytes]) -> CourseTree:
    for st, data in notebooks.items():
        d = tmp_path / "submitted" / st / "practice"
        d.mkdir(parents=True)
        (d / "practice.ipynb").write_bytes(data)
    (tmp_path / "logs").mkdir()
    return CourseTree(tmp_path)


def test_changed_unchanged_and_new_are_told_apart_by_the_hash_last_graded(tmp_path):
    tree = _tree_with(tmp_path, {st: f'{{"cells": [], "who": "{st}"}}'.encode() for st in ("ada", "bo", "cy", "dee")})
    sha = {st: hashlib.sha256((tree.submitted(st, "practice") / "practice.ipynb").read_bytes()).hexdigest()
           for st in ("ada", "bo", "cy", "dee")}
    (tree.logs / GRADED_HASHES).write_text(json.dumps({
        "ada/practice": {"hashes": ["0" * 64, sha["ada"]], "run": "r1"},  # as graded (after repair)
        "bo/practice": {"hashes": ["1" * 64], "run": "r1"}}))  # bo's notebook is another one now
    out = Collected(source="submitted/")
    pairs = [("practice", st) for st in ("ada", "bo", "cy", "dee")]
    # dee: graded from a download before the record existed, received as she is now
    hashes = sort_out(SimpleNamespace(tree=tree), out, pairs, received={"dee/practice": sha["dee"]})
    assert sorted(out.unchanged) == [("practice", "ada"), ("practice", "dee")]
    assert out.changed == {("practice", "bo"): "r1"}
    assert out.pairs == [("practice", "bo"), ("practice", "cy")]
    assert hashes == {"bo/practice": sha["bo"], "cy/practice": sha["cy"]}
    assert out.notes[0] == "bo (practice) changed since it was graded (run r1): graded again as a resubmission"
    assert "1 new in" in out.notes[-1] and out.notes[-1].endswith("cy (practice)")
    assert out.replaced == [] and out.hand_grades == []  # no gradebook holds bo: nothing to drop


def test_a_damaged_record_is_set_aside_never_written_over(tmp_path):
    tree = _tree_with(tmp_path, {"ada": b'{"cells": []}'})
    path = tree.logs / GRADED_HASHES
    path.write_text('{"ada/practice": {"hashes": ["ab')  # cut short (a full disk)
    said = set_aside_damaged(tree)
    assert said and "could not be read" in said and str(tree.logs / (GRADED_HASHES + ".damaged")) in said
    assert not path.exists()
    path.write_text('{"ada/practice": "abc"}')  # edited by hand into another shape
    lines = []
    remember_graded(tree, [("practice", "ada")], {"ada/practice": "c" * 64}, "r2", log=lines.append)
    assert len(lines) == 1 and "ada/practice" in lines[0] and GRADED_HASHES + ".damaged.1" in lines[0]
    assert (tree.logs / (GRADED_HASHES + ".damaged")).read_text() == '{"ada/practice": {"hashes": ["ab'
    assert (tree.logs / (GRADED_HASHES + ".damaged.1")).read_text() == '{"ada/practice": "abc"}'
    assert json.loads(path.read_text()) == {"ada/practice": {
        "hashes": ["c" * 64, hashlib.sha256(b'{"cells": []}').hexdigest()], "run": "r2"}}
    assert set_aside_damaged(tree) is None  # the new record is sound
