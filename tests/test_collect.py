"""Collect (grader/collect.py): what lands where in submitted/, and what is skipped and why.

Fast: no kernel. An nbgrader tree is copied; an LMS folder or zip goes through nbgrader's own
``zip_collect`` app, run in this process. Notebooks are the released rmsnorm notebook written
with nbformat under LMS-style names, in a throwaway course root.
"""
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.apps import Course
from grader.collect import check_input, collect

ASSIGNMENTS = ["rmsnorm"]


def _release(course_copy: Path) -> nbformat.NotebookNode:
    return nbformat.read(course_copy / "release" / "rmsnorm" / "rmsnorm.ipynb", as_version=4)


def _marked(nb, tag: str) -> str:
    """The notebook with a marker in its answer cell, to tell files apart after collect."""
    nb = nbformat.from_dict(nb)
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == "rms_norm_impl":
            c.source = f"# {tag}\n" + c.source
    return nb


def _answer_of(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return next(c.source.splitlines()[0] for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "rms_norm_impl")


def _only_rmsnorm(course_copy: Path) -> Course:
    import shutil

    for sub in ("source", "release"):
        for d in (course_copy / sub).iterdir():
            if d.is_dir() and d.name != "rmsnorm":
                shutil.rmtree(d)
    return Course(course_copy)


def test_an_nbgrader_tree_is_copied_and_a_resubmission_replaces_the_earlier_one(course_copy, tmp_path):
    course = _only_rmsnorm(course_copy)
    nb = _release(course_copy)
    tree = tmp_path / "batch1"
    for st in ("ada", "bo"):
        (tree / st / "rmsnorm").mkdir(parents=True)
        nbformat.write(_marked(nb, f"{st} first"), tree / st / "rmsnorm" / "rmsnorm.ipynb")
        (tree / st / "rmsnorm" / "timestamp.txt").write_text("2026-11-20 09:00:00 UTC\n")
    got = collect(course, tree, ASSIGNMENTS)
    assert got.students == ["ada", "bo"] and got.replaced == [] and got.skipped == {}
    dest = course_copy / "submitted" / "ada" / "rmsnorm"
    assert sorted(p.name for p in dest.iterdir()) == ["rmsnorm.ipynb", "timestamp.txt"]
    assert _answer_of(dest / "rmsnorm.ipynb") == "# ada first"

    again = tmp_path / "batch2"
    (again / "bo" / "rmsnorm").mkdir(parents=True)
    nbformat.write(_marked(nb, "bo second"), again / "bo" / "rmsnorm" / "rmsnorm.ipynb")
    got = collect(course, again, ASSIGNMENTS)
    assert got.students == ["bo"] and got.replaced == [("rmsnorm", "bo")]
    assert _answer_of(course_copy / "submitted" / "bo" / "rmsnorm" / "rmsnorm.ipynb") == "# bo second"
    assert _answer_of(course_copy / "logs" / "replaced" / "bo" / "rmsnorm" / "rmsnorm.ipynb") == "# bo first"
    assert _answer_of(course_copy / "submitted" / "ada" / "rmsnorm" / "rmsnorm.ipynb") == "# ada first"


def test_an_lms_folder_goes_through_zip_collect_with_reasons_for_every_skipped_file(course_copy, tmp_path):
    course = _only_rmsnorm(course_copy)
    nb = _release(course_copy)
    folder = tmp_path / "canvas"
    folder.mkdir()
    files = {"ada_1001_5001_rmsnorm.ipynb": "ada",
             "bo_LATE_1002_5002_RMSNorm-1.ipynb": "bo late",  # Canvas resubmission suffix, other case
             "cy_1003_5003_rmsnorm.ipynb": "cy older",
             "cy_1003_5003_rmsnorm (1).ipynb": "cy newer",  # the re-download wins
             "eve_1005_5005_homework.ipynb": "eve"}
    for name, tag in files.items():
        nbformat.write(_marked(nb, tag), folder / name)
    (folder / "notes_from_lms.txt").write_text("not a notebook")
    got = collect(course, folder, ASSIGNMENTS)
    assert got.students == ["ada", "bo", "cy"]
    assert got.skipped == {
        "notes_from_lms.txt": "file name not recognised as an LMS submission",
        "eve_1005_5005_homework.ipynb": "no assignment has a notebook named 'homework.ipynb'",
        "cy_1003_5003_rmsnorm.ipynb": "cy has more than one rmsnorm notebook here: "
                                      "'cy_1003_5003_rmsnorm (1).ipynb' (the newest download) is graded instead"}
    assert got.flags == {"bo": ["rmsnorm: the LMS marked the download 'bo_LATE_1002_5002_RMSNorm-1.ipynb' late"]}
    for st, tag in [("ada", "ada"), ("bo", "bo late"), ("cy", "cy newer")]:
        landed = sorted(p.name for p in (course_copy / "submitted" / st / "rmsnorm").glob("*.ipynb"))
        assert landed == ["rmsnorm.ipynb"], (st, landed)  # renamed onto the released name
        assert _answer_of(course_copy / "submitted" / st / "rmsnorm" / "rmsnorm.ipynb") == f"# {tag}"
    assert not (course_copy / "submitted" / "eve").exists()


def test_a_zip_cannot_write_outside_submitted(course_copy, tmp_path):
    course = _only_rmsnorm(course_copy)
    zpath = tmp_path / "download.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("../../escape/ada_1_2_rmsnorm.ipynb", nbformat.writes(_marked(_release(course_copy), "ada")))
        zf.writestr("L16_.._attempt_2026-11-20-09-00-00_rmsnorm.ipynb", nbformat.writes(_release(course_copy)))
    got = collect(course, zpath, ASSIGNMENTS)
    assert got.students == ["ada"]
    assert got.skipped == {"L16_.._attempt_2026-11-20-09-00-00_rmsnorm.ipynb":
                           "file name not recognised as an LMS submission"}
    assert _answer_of(course_copy / "submitted" / "ada" / "rmsnorm" / "rmsnorm.ipynb") == "# ada"
    assert not (tmp_path / "escape").exists() and not (course_copy.parent / "escape").exists()
    assert sorted(p.name for p in (course_copy / "submitted").iterdir()) == ["ada"]


def test_bad_input_is_refused_before_anything_is_written(course_copy, tmp_path):
    with pytest.raises(FileNotFoundError, match="no submissions at"):
        check_input(course_copy, tmp_path / "typo", ASSIGNMENTS)
    (tmp_path / "grades.pdf").write_bytes(b"%PDF")
    with pytest.raises(ValueError, match="expected an nbgrader submitted/<student>/<assignment>/ tree"):
        check_input(course_copy, tmp_path / "grades.pdf", ASSIGNMENTS)
    (tmp_path / "tree" / "ada" / "rmsnorm").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"no <student>/<assignment>/\*\.ipynb in it"):
        check_input(course_copy, tmp_path / "tree", ASSIGNMENTS)
    assert not (course_copy / "submitted").exists()
