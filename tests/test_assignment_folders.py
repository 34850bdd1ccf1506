"""An assignment is a folder (grader/scoring/questions.py, docs/ASSIGNMENTS.md): its notebook, grading.py and
answer_bank.py hold everything the grader knows of its questions, and nothing elsewhere names them."""
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from grader.scoring.questions import NOT_RELEASED, assignments, questions

REPO = Path(__file__).resolve().parents[1]


def _cells(a: str) -> list:
    (nb,) = sorted((REPO / "source" / a).glob("*.ipynb"))
    return nbformat.read(nb, as_version=4).cells


def _meta(c) -> dict:
    return c.get("metadata", {}).get("nbgrader", {})


@pytest.mark.parametrize("a", sorted(assignments()))
def test_a_folders_questions_are_its_notebooks_hidden_tests_and_its_hand_graded_cells(a):
    cells = _cells(a)
    handed = {_meta(c)["grade_id"] for c in cells if "hand_back(" in c.source}
    declared = assignments()[a]
    assert {q.grade_id for q in declared.questions} == handed
    manual = {_meta(c)["grade_id"] for c in cells if _meta(c).get("grade") and _meta(c).get("solution")}
    assert set(declared.manual) == manual
    graded = {_meta(c)["grade_id"] for c in cells if _meta(c).get("grade")}
    answer_cells = {_meta(c)["grade_id"] for c in cells if _meta(c).get("solution")}
    assert declared.expected and set(declared.expected) == set(declared.answers), a
    for variant, points in declared.expected.items():
        assert set(points) == graded, (a, variant)  # every grade cell's points, derived by hand
        assert set(declared.answers[variant]) <= answer_cells, (a, variant)


def test_no_module_of_the_grader_or_normref_names_a_question():
    """Each grade_id is named in its assignment's folder alone (and the tests); the grader and the
    student package read the folders."""
    gids = sorted(questions())
    pattern = re.compile(r"(?<![\w])(" + "|".join(re.escape(g) for g in gids) + r")(?![\w])")
    named = {}
    lesson_quiz = REPO / "normref" / "practice.py"  # the lessons' practice quiz: the same questions, by the same ids
    for root in ("grader", "normref"):
        for path in sorted((REPO / root).rglob("*.py")):
            if path == lesson_quiz:
                continue
            found = set(pattern.findall(path.read_text()))
            if found:
                named[str(path.relative_to(REPO))] = sorted(found)
    assert not named, named


def test_the_grading_files_never_reach_students():
    """nbgrader copies an assignment's other files into release/ and into each autograded folder;
    its grading files are on nbgrader's ignore list, so neither has them."""
    from grader.ledger.apps import Course

    ignore = Course(REPO).config.CourseDirectory.ignore
    assert set(NOT_RELEASED) <= set(ignore)
    for name in NOT_RELEASED:
        assert not list((REPO / "release").rglob(name)), name
    assert (REPO / "release" / "batchnorm" / "batchnorm_check.py").is_file()  # a released self-check is


def test_a_folder_added_to_a_course_is_a_new_assignment_the_registry_and_the_demo_read(tmp_path):
    """A toy assignment, one question, added as a folder: its question is registered, its battery
    drawn, its answer bank in the demo class; nothing outside the folder changes."""
    from grader.scoring.inputs import question_inputs
    from normref.wire import load_inputs

    course = tmp_path / "course"
    # the copy is named "toy": a real assignment of that name stays out of this course
    shutil.copytree(REPO / "source", course / "source", ignore=lambda d, names: ["toy"] if d == str(REPO / "source")
                    else [])
    shutil.copy(REPO / "nbgrader_config.py", course)
    toy = course / "source" / "toy"
    shutil.copytree(REPO / "source" / "rmsnorm", toy)
    (toy / "rmsnorm.ipynb").rename(toy / "toy.ipynb")
    # every grade_id of the copy renamed (rmsnorm's questions, whichever they are: cells and declarations)
    gids = sorted({_meta(c)["grade_id"] for c in _cells("rmsnorm") if _meta(c).get("grade_id")}, key=len,
                  reverse=True)
    renamed = {g: "toy_" + g for g in gids} | {"rms_norm_battery": "toy_battery", "rms_norm_shape": "toy_shape"}
    for p in (toy / "grading.py", toy / "answer_bank.py", toy / "toy.ipynb"):
        text = p.read_text()
        text = re.sub(r'(?<=")(' + "|".join(map(re.escape, gids)) + r')(?=")', lambda m: renamed[m[1]], text)
        p.write_text(text.replace('"rmsnorm"', '"toy"'))
    found = assignments(course)
    graded = {renamed[q.grade_id] for q in assignments()["rmsnorm"].questions}
    assert "toy" in found and {q.grade_id for q in found["toy"].questions} == graded >= {"toy_shape", "toy_battery"}
    assert questions(course)["toy_battery"].assignment == "toy"
    calls = load_inputs(question_inputs("toy_battery", 7, course))["calls"]
    assert len(calls) >= 6  # the battery's calls, drawn for this seed
    assert {"toy_shape", "toy_battery"} <= set(found["toy"].expected["correct"])
    # and a grade_id declared twice is refused, naming both
    (toy / "grading.py").write_text((toy / "grading.py").read_text().replace("toy_battery", "rms_norm_battery"))
    with pytest.raises(ValueError, match="declared by both"):
        assignments(course)


def test_generate_copies_a_released_self_check_and_not_the_grading_files(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(REPO / "source" / "batchnorm", course / "source" / "batchnorm")
    shutil.copy(REPO / "nbgrader_config.py", course)
    subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-m", "nbgrader", "generate_assignment", "batchnorm",
                    "--force", "--log-level=WARN"], cwd=course, check=True, capture_output=True)
    released = sorted(p.name for p in (course / "release" / "batchnorm").iterdir())
    assert released == ["batchnorm.ipynb", "batchnorm_check.py"]
