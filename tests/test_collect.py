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


def test_lms_names_in_any_script_become_stable_ids_and_namesakes_stay_two_students(course_copy):
    from nbgrader.api import Gradebook

    from grader.collect import ascii_id, lms_identity, resolve_students
    from grader.course import CourseTree

    assert [ascii_id(n) for n in ("müllerzoë", "muñozjosé", "o'brienpat", "zoë.müller", "Jane Doe", "..")] == [
        "mullerzoe", "munozjose", "obrienpat", "zoe.muller", "jane-doe", ""]
    assert lms_identity("müllerzoë_10013_20015_rmsnorm.ipynb") == ("10013", "müllerzoë")
    assert lms_identity("Zoë Müller_555_assignsubmission_file_rmsnorm.ipynb") == ("555", "Zoë Müller")
    assert lms_identity("L16_zoë.müller_attempt_2026-11-20-09-00-00_rmsnorm.ipynb") == (None, "zoë.müller")
    tree = CourseTree(course_copy)
    first = ["leejohn_10011_20013_rmsnorm.ipynb", "leejohn_10012_20014_rmsnorm.ipynb",
             "müllerzoë_10013_20015_rmsnorm.ipynb", "张伟_10030_4_rmsnorm.ipynb"]
    ids = resolve_students(tree, first)
    assert ids == {first[0]: "leejohn-10011", first[1]: "leejohn-10012", first[2]: "mullerzoe", first[3]: "lms10030"}
    with Gradebook(tree.gradebook_url) as gb:  # as record_identities leaves them
        for sid, lms in [("leejohn-10011", "10011"), ("leejohn-10012", "10012"), ("mullerzoe", "10013")]:
            gb.update_or_create_student(sid, lms_user_id=lms)
    later = ["leejohn_10012_20024_rmsnorm.ipynb", "leejohn_10016_20025_rmsnorm.ipynb",
             "müllerzoë_10013_20026_rmsnorm.ipynb", "müllerzoë_10017_20027_rmsnorm.ipynb"]
    assert resolve_students(tree, later) == {later[0]: "leejohn-10012", later[1]: "leejohn-10016",
                                             later[2]: "mullerzoe", later[3]: "mullerzoe-10017"}


def zip_without_utf8_flag(path: Path, files: dict[str, bytes]) -> Path:
    """A zip as Linux ``zip`` (Info-ZIP) writes one: names as UTF-8 bytes, general purpose flag
    bit 11 ("the name is UTF-8") clear. Python's zipfile always sets the flag for a non-ASCII
    name, so each entry is written under an ASCII name of the same byte length, then those bytes
    are replaced by the UTF-8 name in the local header and the central directory (the CRC covers
    the data only)."""
    swaps = {}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for i, (name, data) in enumerate(files.items()):
            raw = name.encode("utf-8")
            stand_in = f"Z{i:02d}".encode().ljust(len(raw), b"q")
            swaps[stand_in] = raw
            zf.writestr(stand_in.decode("ascii"), data)
    blob = path.read_bytes()
    for stand_in, raw in swaps.items():
        assert blob.count(stand_in) == 2, stand_in  # the local header and the central directory
        blob = blob.replace(stand_in, raw)
    path.write_bytes(blob)
    with zipfile.ZipFile(path) as zf:  # really no UTF-8 flag: Python reads these names as cp437
        assert all(not info.flag_bits & 0x800 for info in zf.infolist())
        assert set(zf.namelist()) == {n.encode("utf-8").decode("cp437") for n in files}
    return path


#: The issue's Canvas names outside ASCII; ``müllerzoë`` read as cp437 is ``m├╝llerzo├½``.
NON_ASCII_CANVAS = {"müllerzoë_10013_20015_rmsnorm.ipynb": ("mullerzoe", "10013", "müllerzoë"),
                    "muñozjosé_LATE_10014_20016_rmsnorm.ipynb": ("munozjose", "10014", "muñozjosé"),
                    "o'brienpat_10015_20017_rmsnorm.ipynb": ("obrienpat", "10015", "o'brienpat")}


def test_a_zip_without_the_utf8_flag_keeps_non_ascii_names(course_copy, tmp_path):
    import csv

    from grader.collect import write_roster

    course = _only_rmsnorm(course_copy)
    nb = _release(course_copy)
    zpath = zip_without_utf8_flag(tmp_path / "canvas.zip", {
        name: nbformat.writes(_marked(nb, sid)).encode() for name, (sid, _, _) in NON_ASCII_CANVAS.items()})
    got = collect(course, zpath, ASSIGNMENTS)
    assert got.students == ["mullerzoe", "munozjose", "obrienpat"] and got.skipped == {}
    for sid, _, _ in NON_ASCII_CANVAS.values():
        assert _answer_of(course_copy / "submitted" / sid / "rmsnorm" / "rmsnorm.ipynb") == f"# {sid}"
    assert got.flags == {"munozjose": ["rmsnorm: the LMS marked the download "
                                       "'muñozjosé_LATE_10014_20016_rmsnorm.ipynb' late"]}
    with write_roster(course.tree, tmp_path / "roster.csv").open(encoding="utf-8") as f:
        assert sorted(tuple(r.values()) for r in csv.DictReader(f)) == sorted(NON_ASCII_CANVAS.values())
    # a name that really is cp437 (é is byte 0x82, not valid UTF-8) stays as cp437 decoded it
    from grader.collect import zip_member_name

    assert zip_member_name(zipfile.ZipInfo("café_1_2_rmsnorm.ipynb")) == "café_1_2_rmsnorm.ipynb"
    flagged = zipfile.ZipInfo("m├╝ller_1_2_rmsnorm.ipynb")
    flagged.flag_bits |= 0x800  # the writer said UTF-8: the name is taken as it is
    assert zip_member_name(flagged) == "m├╝ller_1_2_rmsnorm.ipynb"
