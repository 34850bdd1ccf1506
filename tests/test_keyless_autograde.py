"""Formgrader's Autograde button and a bare ``nbgrader autograde`` cannot wreck a grade (issue 21
item 4): without the inputs only a ``make grade`` run draws, the course's ``nbgrader_config.py``
refuses before any student code runs, naming ``make grade``, and the gradebook, the autograded
notebook and the feedback stay as the grader left them. Real nbgrader, real kernels, one student.
"""
import os
import subprocess
import sys

import nbformat
import pytest
from nbgrader.api import Gradebook

from grader.ledger.apps import Course
from normref.handback_files import HANDBACK_ENV as ENV
from test_course_state import grader, only_assignments, submitted_tree


def _grades(course) -> dict[str, tuple]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook("practice", "practice", "ada")
        return {g.name: (g.score, g.auto_score, g.manual_score, g.needs_manual_grade) for g in nb.grades}


def _files(course) -> dict[str, bytes]:
    return {str(p.relative_to(course)): p.read_bytes()
            for top in ("autograded", "feedback", "submitted") for p in sorted((course / top).rglob("*"))
            if p.is_file()}


@pytest.mark.slow
def test_autograde_without_the_inputs_refuses_naming_make_grade_and_changes_no_grade(course_copy, monkeypatch):
    only_assignments(course_copy, {"practice"})
    Course(course_copy).generate_assignment("practice")  # as nbgrader release_assignment leaves it on a hub
    submitted_tree(course_copy / "submitted", {"ada": "correct"}, "practice", release=course_copy / "release")
    out = grader("--submissions", course_copy / "submitted", course=course_copy)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    before, files = _grades(course_copy), _files(course_copy)
    # the correct answers scored full points (each test cell's points, read from source/)
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in nbformat.read(course_copy / "source" / "practice" / "practice.ipynb", 4).cells
              if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"}
    assert len(points) == 8 and {g: before[g][0] for g in points} == points

    # a bare `nbgrader autograde --force`, as an instructor would type it in the course folder
    env = {k: v for k, v in os.environ.items() if k != ENV}
    cli = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", "practice", "--force"], cwd=course_copy,
                         env=env, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 1, cli.stdout[-2000:] + cli.stderr[-2000:]
    said = cli.stdout + cli.stderr
    assert "nbgrader autograde cannot grade practice (ada)" in said and "`make grade" in said, said[-2000:]
    assert "Executing notebook" not in said  # no kernel was started
    assert _grades(course_copy) == before and _files(course_copy) == files

    # what formgrader's Autograde button calls (its API handler: NbGraderAPI.autograde, force=True)
    monkeypatch.delenv(ENV, raising=False)
    result = Course(course_copy).api.autograde("practice", "ada")
    assert result["success"] is False
    assert "cannot grade practice (ada)" in result["log"] and "`make grade SUBMISSIONS=submitted`" in result["log"]
    assert _grades(course_copy) == before and _files(course_copy) == files


def test_a_hidden_test_run_without_its_inputs_fails_naming_make_grade(monkeypatch):
    """The hand-back as written (no inputs: a configuration without the grader's preprocessors)
    fails its cell in autograde instead of scoring a quiet 0; in Validate it does nothing."""
    from normref.handback import hand_back

    assert hand_back("practice_rms", 4.0) is None  # JupyterLab, Validate
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(RuntimeError, match=r"practice_rms: this hidden test ran without its inputs: .*`make grade`"):
        hand_back("practice_rms", 4.0)
