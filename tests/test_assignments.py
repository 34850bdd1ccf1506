"""The nbgrader assignments, graded by real nbgrader: every variant of the answer bank gets
exactly its expected points per cell, a blank notebook scores 0, a correct one writes nothing
to stderr, and the feedback shows the diagnosis but never the hidden tests.

One throwaway course (config, source/, release/) serves the whole module; each assignment is
autograded once, all its variants (students) in one ``nbgrader autograde`` call.
"""
from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from normref.grading.answer_bank import ANSWERS, EXPECTED, MANUAL_CELLS
from normref.grading.demo import fill_answers

REPO = Path(__file__).resolve().parents[1]
SOURCE_NOTEBOOKS = sorted(REPO.glob("source/*/*.ipynb"))
ASSIGNMENTS = sorted(ANSWERS)

# What a failing hidden test must show in the feedback: (assignment, variant, diagnosis texts).
DIAGNOSES = [
    ("practice", "unbiased_variance", ["4/3", "[fault: unbiased_variance]"]),
    ("practice", "post_ln_formula", ["[fault: post_ln_formula]"]),
    ("layernorm", "unbiased_variance", ["sqrt(7/8)", "[fault: unbiased_variance]"]),
    ("layernorm", "low_precision_stats", ["[fault: low_precision_stats]"]),
    ("rmsnorm", "eps_outside_sqrt", ["[fault: eps_outside_sqrt]"]),
]


def _nbgrader(root: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=root,
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _grade_ids(nb_path: Path, *, grade: bool) -> list[str]:
    nb = nbformat.read(nb_path, as_version=4)
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") is grade]


def _hidden_lines(nb_path: Path) -> list[str]:
    """The lines between ### BEGIN/END HIDDEN TESTS in a source notebook."""
    out, inside = [], False
    for cell in nbformat.read(nb_path, as_version=4).cells:
        for line in cell.source.splitlines():
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and line.strip():
                out.append(line.strip())
    return out


def _html_text(path: Path) -> str:
    """What a reader of the feedback page sees: tags stripped, entities decoded."""
    raw = path.read_text()
    raw = re.sub(r"<style.*?</style>|<script.*?</script>", "", raw, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


class Course:
    """The module's throwaway course; autogrades an assignment on first request."""

    def __init__(self, root: Path):
        self.root = root
        self.seconds: dict[str, float] = {}
        self._done: set[str] = set()

    def notebook(self, kind: str, assignment: str, student: str | None = None) -> Path:
        base = self.root / kind / (student or "") / assignment
        nbs = sorted(base.glob("*.ipynb"))
        assert len(nbs) == 1, f"expected one notebook in {base}, found {nbs}"
        return nbs[0]

    def feedback(self, assignment: str, student: str) -> Path:
        pages = sorted((self.root / "feedback" / student / assignment).glob("*.html"))
        assert len(pages) == 1, f"expected one feedback page for {student}/{assignment}: {pages}"
        return pages[0]

    def autograde(self, assignment: str) -> None:
        if assignment in self._done:
            return
        release = self.notebook("release", assignment)
        for variant, answers in ANSWERS[assignment].items():
            dest = self.root / "submitted" / variant / assignment
            dest.mkdir(parents=True, exist_ok=True)
            nbformat.write(fill_answers(release, answers), dest / release.name)
        t0 = time.perf_counter()
        _nbgrader(self.root, "autograde", assignment, "--force")
        _nbgrader(self.root, "generate_feedback", assignment, "--force")
        self.seconds[assignment] = time.perf_counter() - t0
        print(f"autograde + feedback {assignment}: {len(ANSWERS[assignment])} variants, "
              f"{self.seconds[assignment]:.1f} s")
        self._done.add(assignment)

    def grades(self, assignment: str) -> dict[str, dict[str, tuple[float, bool]]]:
        """``{variant: {grade_id: (score, needs_manual_grade)}}`` from nbgrader's gradebook."""
        from nbgrader.api import Gradebook

        self.autograde(assignment)
        out: dict[str, dict[str, tuple[float, bool]]] = {}
        with Gradebook(f"sqlite:///{self.root / 'gradebook.db'}") as gb:
            for sub in gb.assignment_submissions(assignment):
                out[sub.student.id] = {g.name: (float(g.score), bool(g.needs_manual_grade))
                                       for nb in sub.notebooks for g in nb.grades}
        return out


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Course:
    root = tmp_path_factory.mktemp("assignments") / "course"
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    shutil.copytree(REPO / "source", root / "source")
    shutil.copytree(REPO / "release", root / "release")
    for a in ASSIGNMENTS:  # records each assignment's cells (with hidden tests) in the gradebook
        _nbgrader(root, "generate_assignment", a, "--force")
    return Course(root)


# ----------------------------------------------------------------- the bank itself (fast)


def test_every_assignment_has_a_bank_with_the_required_variants():
    assert ASSIGNMENTS == sorted(p.parent.name for p in SOURCE_NOTEBOOKS)
    for a in ASSIGNMENTS:
        assert {"correct", "blank", "partial"} <= set(ANSWERS[a]), a
        assert set(EXPECTED[a]) == set(ANSWERS[a]), a


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_bank_names_real_cells_and_every_grade_cell(assignment):
    source = next((REPO / "source" / assignment).glob("*.ipynb"))
    nb = nbformat.read(source, as_version=4)
    solution_ids = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
                    if c.metadata.get("nbgrader", {}).get("solution")}
    grade_ids = set(_grade_ids(source, grade=True))
    for variant, answers in ANSWERS[assignment].items():
        assert set(answers) <= solution_ids, (variant, set(answers) - solution_ids)
        assert set(EXPECTED[assignment][variant]) == grade_ids, variant
    assert set(MANUAL_CELLS.get(assignment, ())) <= grade_ids


# ----------------------------------------------------------------- nbgrader round trips (slow)


@pytest.mark.slow
@pytest.mark.parametrize("path", SOURCE_NOTEBOOKS, ids=lambda p: p.parent.name)
def test_source_notebook_passes_nbgrader_validate(path):
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "validate", str(path)],
                          capture_output=True, text=True, cwd=REPO)
    assert "Success! Your notebook passes all the tests." in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_each_variant_gets_exactly_the_expected_points(course, assignment):
    grades = course.grades(assignment)
    assert sorted(grades) == sorted(ANSWERS[assignment])
    manual = set(MANUAL_CELLS.get(assignment, ()))
    for variant, want in EXPECTED[assignment].items():
        got = {gid: score for gid, (score, _) in grades[variant].items()}
        assert got == pytest.approx(want, abs=1e-9), variant
        flagged = {gid for gid, (_, needs) in grades[variant].items() if needs}
        # a written answer needs a grader exactly when the variant wrote one
        assert flagged == manual & set(ANSWERS[assignment][variant]), variant


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_unanswered_release_scores_zero_without_crashing(course, assignment):
    grades = course.grades(assignment)
    assert grades["blank"] and all(score == 0 for score, _ in grades["blank"].values())
    assert not any(needs for _, needs in grades["blank"].values())
    graded = nbformat.read(course.notebook("autograded", assignment, "blank"), as_version=4)
    test_cells = [c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade")
                  and c.cell_type == "code"]
    assert test_cells and all(c.outputs for c in test_cells)  # every test cell ran


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_correct_answer_leaves_stderr_empty(course, assignment):
    course.autograde(assignment)
    graded = nbformat.read(course.notebook("autograded", assignment, "correct"), as_version=4)
    for cell in graded.cells:
        if cell.cell_type != "code":
            continue
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        for out in cell.outputs:
            assert out.output_type != "error", (gid, out.get("ename"), out.get("evalue"))
            assert not (out.output_type == "stream" and out.name == "stderr"), (gid, out.text)


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_feedback_never_contains_hidden_tests(course, assignment):
    course.autograde(assignment)
    hidden = _hidden_lines(next((REPO / "source" / assignment).glob("*.ipynb")))
    assert hidden, f"{assignment} has no hidden tests"
    for variant in ANSWERS[assignment]:
        # control: the hidden tests did run in the instructor's autograded copy
        autograded = course.notebook("autograded", assignment, variant).read_text()
        graded_src = "\n".join(c.source for c in nbformat.reads(autograded, as_version=4).cells)
        assert all(line in graded_src for line in hidden), variant
        page = _html_text(course.feedback(assignment, variant))
        assert "HIDDEN TESTS" not in page, variant
        leaked = [line for line in hidden if line in page]
        assert not leaked, (variant, leaked)


@pytest.mark.slow
@pytest.mark.parametrize("assignment, variant, texts", DIAGNOSES,
                         ids=[f"{a}-{v}" for a, v, _ in DIAGNOSES])
def test_feedback_of_a_failing_hidden_test_shows_the_diagnosis(course, assignment, variant, texts):
    got = course.grades(assignment)[variant]
    assert any(got[g][0] < EXPECTED[assignment]["correct"][g] for g in got)  # it does fail
    page = _html_text(course.feedback(assignment, variant))
    for text in texts:
        assert text in page, (assignment, variant, text)
