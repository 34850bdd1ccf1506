"""Collect (grader/intake/collect.py): what lands where in submitted/, and what is skipped and why.

Fast: no kernel. An nbgrader tree is copied; an LMS folder or zip goes through nbgrader's own
``zip_collect`` app, run in this process. Notebooks are the released rmsnorm notebook written
with nbformat under LMS-style names, in a throwaway course root.
"""
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.ledger.apps import Course
from grader.intake.collect import check_input, collect

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


def test_a_submission_whose_notebook_is_a_link_is_said_to_have_nothing_to_grade(course_copy, tmp_path):
    """rosa's rmsnorm.ipynb is a symbolic link (to the course's solution): nothing is copied, and the
    run's collect lines say she has no notebook to grade (only the report's flags named her)."""
    course = _only_rmsnorm(course_copy)
    tree = tmp_path / "batch"
    (tree / "rosa" / "rmsnorm").mkdir(parents=True)
    (tree / "rosa" / "rmsnorm" / "rmsnorm.ipynb").symlink_to(course_copy / "source" / "rmsnorm" / "rmsnorm.ipynb")
    got = collect(course, tree, ASSIGNMENTS)
    assert got.skipped == {"rosa/rmsnorm": "no notebook to grade: rmsnorm.ipynb (a symbolic link) (links are never "
                                           "followed)"}
    assert got.flags == {"rosa": ["rmsnorm: handed in and not copied: rmsnorm.ipynb (a symbolic link)"]}
    assert not list((course_copy / "submitted" / "rosa" / "rmsnorm").glob("*"))


def test_an_lms_folder_goes_through_zip_collect_with_reasons_for_every_skipped_file(course_copy, tmp_path):
    course = _only_rmsnorm(course_copy)
    nb = _release(course_copy)
    folder = tmp_path / "canvas"
    folder.mkdir()
    files = {"ada_1001_5001_rmsnorm.ipynb": "ada",
             "bo_LATE_1002_5002_RMSNorm-1.ipynb": "bo late",  # Canvas resubmission suffix, other case
             "cy_1003_5003_rmsnorm.ipynb": "cy older",
             "cy_1003_5003_rmsnorm (1).ipynb": "cy newer",  # the re-download wins
             "eve_1005_5005_RMSNorm final version \u2713.ipynb": "eve"}  # renamed: its cells say rmsnorm
    for name, tag in files.items():
        nbformat.write(_marked(nb, tag), folder / name)
    (folder / "notes_from_lms.txt").write_text("not a notebook")
    foreign = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])  # no nbgrader cell
    nbformat.write(foreign, folder / "fay_1006_5006_mine.ipynb")
    got = collect(course, folder, ASSIGNMENTS)
    assert got.students == ["ada", "bo", "cy", "eve"]
    assert got.skipped == {
        "notes_from_lms.txt": "file name not recognised as an LMS submission",
        "fay_1006_5006_mine.ipynb": "no assignment has a notebook named 'mine.ipynb', nor its cells",
        "cy_1003_5003_rmsnorm.ipynb": "cy has more than one rmsnorm notebook here: "
                                      "'cy_1003_5003_rmsnorm (1).ipynb' (the newest download) is graded instead"}
    assert got.flags == {"bo": ["rmsnorm: the LMS marked the download 'bo_LATE_1002_5002_RMSNorm-1.ipynb' late"],
                         "eve": ["rmsnorm: 'eve_1005_5005_RMSNorm final version \u2713.ipynb' is named 'RMSNorm final "
                                 "version \u2713.ipynb'; its cells are rmsnorm's notebook: graded as rmsnorm"]}
    for st, tag in [("ada", "ada"), ("bo", "bo late"), ("cy", "cy newer"), ("eve", "eve")]:
        landed = sorted(p.name for p in (course_copy / "submitted" / st / "rmsnorm").glob("*.ipynb"))
        assert landed == ["rmsnorm.ipynb"], (st, landed)  # renamed onto the released name
        assert _answer_of(course_copy / "submitted" / st / "rmsnorm" / "rmsnorm.ipynb") == f"# {tag}"
    assert not (course_copy / "submitted" / "fay").exists()


def test_a_notebook_handed_in_under_another_assignments_name_is_flagged(course_copy, tmp_path):
    """The layernorm notebook uploaded as rmsnorm.ipynb: graded as rmsnorm (what the LMS's slot
    and its name say), and the report says whose cells it holds."""
    from grader.intake.collect import assignment_by_cells
    from grader.ledger.course import CourseTree

    course = Course(course_copy)
    folder = tmp_path / "canvas"
    folder.mkdir()
    ln = nbformat.read(course_copy / "release" / "layernorm" / "layernorm.ipynb", as_version=4)
    nbformat.write(ln, folder / "emeka_1007_5007_rmsnorm.ipynb")
    tree = CourseTree(course_copy)
    both = ["rmsnorm", "layernorm"]
    assert assignment_by_cells(folder / "emeka_1007_5007_rmsnorm.ipynb", tree, both) == "layernorm"
    got = collect(course, folder, both)
    assert got.flags == {"emeka": ["rmsnorm: 'emeka_1007_5007_rmsnorm.ipynb' is named as rmsnorm's notebook but "
                                   "holds layernorm's cells (the wrong notebook handed in?): graded as rmsnorm; "
                                   "ask the student"]}


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

    from grader.intake.collect import ascii_id, lms_identity, resolve_students
    from grader.ledger.course import CourseTree

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

    from grader.intake.collect import write_roster

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
    from grader.intake.collect import zip_member_name

    assert zip_member_name(zipfile.ZipInfo("café_1_2_rmsnorm.ipynb")) == "café_1_2_rmsnorm.ipynb"
    flagged = zipfile.ZipInfo("m├╝ller_1_2_rmsnorm.ipynb")
    flagged.flag_bits |= 0x800  # the writer said UTF-8: the name is taken as it is
    assert zip_member_name(flagged) == "m├╝ller_1_2_rmsnorm.ipynb"


def _moodle_zip(path: Path, files: dict[str, str], nb) -> Path:
    """A Moodle "Download submissions in folders" zip: ``{path in the zip: marker}``."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, tag in files.items():
            zf.writestr(name, nbformat.writes(_marked(nb, tag)) if tag else "<p>typed online</p>")
    return path


def test_moodle_folders_are_collected_as_the_flat_layout_by_participant_id(course_copy, tmp_path):
    import csv

    from grader.intake.collect import LMS_FILES, lms_files, moodle_participants, write_roster
    from grader.outputs.lms import upload_name

    course = _only_rmsnorm(course_copy)
    nb = _release(course_copy)
    top = "L16-RMSNorm-42"  # Moodle's zip sometimes holds one folder, named for the assignment
    zpath = _moodle_zip(tmp_path / "moodle.zip", {
        f"{top}/Zoë Müller_1234567_assignsubmission_file_/rmsnorm.ipynb": "zoe",
        f"{top}/John Lee_1234568_assignsubmission_file_/work/RMSNorm (1).ipynb": "john 68",  # her own subfolder
        f"{top}/John Lee_1234569_assignsubmission_file_/rmsnorm.ipynb": "john 69",  # a namesake
        "Ada Byron_1234570_assignsubmission_file_rmsnorm.ipynb": "ada",  # the flat layout, same zip
        f"{top}/Ada Byron_1234570_assignsubmission_onlinetext_/onlinetext.html": "",
        f"__MACOSX/{top}/._Zoë Müller_1234567_assignsubmission_file_": ""}, nb)
    got = collect(course, zpath, ASSIGNMENTS)
    assert got.students == ["ada-byron", "john-lee-1234568", "john-lee-1234569", "zoe-muller"]
    assert got.skipped == {
        f"{top}/Ada Byron_1234570_assignsubmission_onlinetext_/onlinetext.html":
            "file name not recognised as an LMS submission",
        f"__MACOSX/{top}/._Zoë Müller_1234567_assignsubmission_file_":
            "a hidden or macOS metadata file, not a submission"}
    for st, tag in [("zoe-muller", "zoe"), ("john-lee-1234568", "john 68"), ("john-lee-1234569", "john 69"),
                    ("ada-byron", "ada")]:
        assert _answer_of(course_copy / "submitted" / st / "rmsnorm" / "rmsnorm.ipynb") == f"# {tag}"
    # the participant id is kept per assignment, as the grading worksheet's "Participant <id>"
    assert moodle_participants(course.tree) == {("rmsnorm", "zoe-muller"): "1234567", ("rmsnorm", "john-lee-1234568"):
                                                "1234568", ("rmsnorm", "john-lee-1234569"): "1234569",
                                                ("rmsnorm", "ada-byron"): "1234570"}
    with write_roster(course.tree, tmp_path / "roster.csv").open(encoding="utf-8") as f:
        rows = {r["student_id"]: (r["lms_id"], r["name"]) for r in csv.DictReader(f)}
    assert rows["zoe-muller"] == ("Participant 1234567 (rmsnorm)", "Zoë Müller")
    assert rows["john-lee-1234568"] == ("Participant 1234568 (rmsnorm)", "John Lee")
    # the feedback upload goes back into the same participant folder
    download = lms_files(course.tree)[("rmsnorm", "john-lee-1234568")]
    assert download == "John Lee_1234568_assignsubmission_file_RMSNorm (1).ipynb"
    assert upload_name(download, "rmsnorm.html") == "John Lee_1234568_assignsubmission_file_/rmsnorm.html"
    assert (course.tree.logs / LMS_FILES).is_file()


def test_a_moodle_student_is_one_student_across_assignments_though_moodle_renumbers_them(course_copy):
    """Moodle's number is a participant id, new in each assignment: the name links assignments,
    a participant id seen before keeps its student, namesakes in one assignment stay apart."""
    import json

    from grader.intake.collect import LMS_FILES, resolve_students
    from grader.ledger.course import CourseTree

    tree = CourseTree(course_copy)
    tree.logs.mkdir()
    (tree.logs / LMS_FILES).write_text(json.dumps({  # as the rmsnorm batch left them
        "zoe-muller/rmsnorm": "Zoë Müller_1234567_assignsubmission_file_rmsnorm.ipynb",
        "john-lee-1234568/rmsnorm": "John Lee_1234568_assignsubmission_file_rmsnorm.ipynb",
        "john-lee-1234569/rmsnorm": "John Lee_1234569_assignsubmission_file_rmsnorm.ipynb",
        "ada-byron/rmsnorm": "Ada Byron_1234570_assignsubmission_file_rmsnorm.ipynb"}))
    names = ["Zoë Müller_2234567_assignsubmission_file_layernorm.ipynb",  # her layernorm participant id
             "John Lee_2234568_assignsubmission_file_layernorm.ipynb",  # which John? Moodle does not say
             "John Lee_2234569_assignsubmission_file_layernorm.ipynb",
             "Ada Byron_1234570_assignsubmission_file_rmsnorm (1).ipynb",  # rmsnorm again: known id
             "Bo Chen_2234571_assignsubmission_file_layernorm.ipynb"]
    assert resolve_students(tree, names) == {
        names[0]: "zoe-muller", names[1]: "john-lee-2234568", names[2]: "john-lee-2234569",
        names[3]: "ada-byron", names[4]: "bo-chen"}
    # a second Ada Byron in rmsnorm is not the first one
    assert resolve_students(tree, ["Ada Byron_1234999_assignsubmission_file_rmsnorm.ipynb"]) == {
        "Ada Byron_1234999_assignsubmission_file_rmsnorm.ipynb": "ada-byron-1234999"}


def _corrupt_member(path: Path, marker: bytes) -> None:
    """Damage one stored entry's bytes (its CRC no longer matches) by changing its marker."""
    blob = path.read_bytes()
    assert blob.count(marker) == 1
    path.write_bytes(blob.replace(marker, marker[:-1] + b"X"))


def test_bad_files_in_a_download_each_get_one_reason_and_nothing_good_is_lost(course_copy, tmp_path):
    import csv
    import unicodedata

    from grader.intake.collect import write_roster

    course = _only_rmsnorm(course_copy)
    nb = _release(course_copy)
    good = {name: nbformat.writes(_marked(nb, tag)) for name, tag in {
        "ada_1001_5001_rmsnorm.ipynb": "ada",
        "cy_1003_5003_rmsnorm.ipynb": "cy CORRUPTME",  # damaged in the zip
        "eve_1005_5005_rmsnorm.ipynb": "eve earlier",  # her later upload is not a notebook
        "fay_1006_5006_rmsnorm.ipynb": "fay",
        "fay_1006_5006_rmsnorm (1).ipynb": "fay",  # the same file twice
        "gus_1007_5007_rmsnorm.ipynb": "gus first",
        "gus_1007_5008_rmsnorm.ipynb": "gus second",  # Canvas's later attachment, same name otherwise
        unicodedata.normalize("NFD", "müllerzoë_1008_5009_rmsnorm.ipynb"): "zoe"}.items()}
    good["fay_1006_5006_rmsnorm (1).ipynb"] = good["fay_1006_5006_rmsnorm.ipynb"]
    bad = {"dee_1004_5004_rmsnorm.ipynb": "{not json",  # her only file
           "eve_1005_5099_rmsnorm.ipynb": ""}
    zpath = tmp_path / "canvas.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_STORED) as zf:
        for name, text in {**good, **bad}.items():
            zf.writestr(name, text)
    _corrupt_member(zpath, b"cy CORRUPTME")
    got = collect(course, zpath, ASSIGNMENTS)
    assert got.students == ["ada", "dee", "eve", "fay", "gus", "mullerzoe"]
    assert set(got.skipped) == {"cy_1003_5003_rmsnorm.ipynb", "eve_1005_5099_rmsnorm.ipynb",
                                "fay_1006_5006_rmsnorm.ipynb", "gus_1007_5007_rmsnorm.ipynb"}
    assert got.skipped["cy_1003_5003_rmsnorm.ipynb"].startswith(
        "could not be read from the zip (BadZipFile: Bad CRC-32 for file 'cy_1003_5003_rmsnorm.ipynb'); "
        "the other files were collected")
    assert got.skipped["eve_1005_5099_rmsnorm.ipynb"] == (
        "not a notebook (eve_1005_5099_rmsnorm.ipynb is not valid JSON (Expecting value at line 1)); "
        "'eve_1005_5005_rmsnorm.ipynb' is graded instead")
    assert got.skipped["fay_1006_5006_rmsnorm.ipynb"] == (
        "the same file as 'fay_1006_5006_rmsnorm (1).ipynb' (uploaded twice), which is graded")
    assert got.skipped["gus_1007_5007_rmsnorm.ipynb"] == (
        "gus has more than one rmsnorm notebook here: 'gus_1007_5008_rmsnorm.ipynb' (the newest download) "
        "is graded instead")
    assert got.flags == {
        "dee": ["rmsnorm: the download 'dee_1004_5004_rmsnorm.ipynb' is not a notebook (dee_1004_5004_rmsnorm.ipynb "
                "is not valid JSON (Expecting property name enclosed in double quotes at line 1)): graded as a "
                "blank notebook (0 points); ask the student to upload it again"],
        "eve": ["rmsnorm: the newest download 'eve_1005_5099_rmsnorm.ipynb' is not a notebook "
                "(eve_1005_5099_rmsnorm.ipynb is not valid JSON (Expecting value at line 1)): the earlier "
                "'eve_1005_5005_rmsnorm.ipynb' is graded; ask the student which one counts"]}
    for st, tag in [("ada", "ada"), ("eve", "eve earlier"), ("fay", "fay"), ("gus", "gus second"),
                    ("mullerzoe", "zoe")]:
        assert _answer_of(course_copy / "submitted" / st / "rmsnorm" / "rmsnorm.ipynb") == f"# {tag}"
    # dee's file is collected as she sent it (repair then grades it as blank, with the reason)
    assert (course_copy / "submitted" / "dee" / "rmsnorm" / "rmsnorm.ipynb").read_text() == "{not json"
    with write_roster(course.tree, tmp_path / "roster.csv").open(encoding="utf-8") as f:
        names = {r["student_id"]: r["name"] for r in csv.DictReader(f)}
    assert names["mullerzoe"] == "müllerzoë" == unicodedata.normalize("NFC", "müllerzoë")  # one form: NFC
    # a zip that is not a zip at all is refused before anything is written, in one line
    (tmp_path / "broken.zip").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match=r"broken.zip: not a readable zip \(File is not a zip file\): "
                                         "download it again from the LMS"):
        check_input(course_copy, tmp_path / "broken.zip", ASSIGNMENTS)


@pytest.mark.slow
def test_a_moodle_folders_zip_is_graded_and_its_worksheet_filled_by_participant_id(course_copy, tmp_path):
    """One real ``python -m grader`` run: Moodle's "Download submissions in folders" zip (nested
    in the assignment's folder) reaches grades.csv with each answer's known points (the answer
    bank's), namesakes apart; the worksheet comes back filled by participant id; the feedback zip
    holds each student's feedback in their own participant folder."""
    import csv
    import subprocess
    import sys

    from grader.demo import fill_answers
    from grader.demo.answer_bank import ANSWERS

    _only_rmsnorm(course_copy)
    release = course_copy / "release" / "rmsnorm" / "rmsnorm.ipynb"
    top = "L16-RMSNorm-42"
    students = {"Zoë Müller_1234567": "correct", "John Lee_1234568": "correct", "John Lee_1234569": "unbiased_variance"}
    zpath = tmp_path / "moodle.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for folder, variant in students.items():
            zf.writestr(f"{top}/{folder}_assignsubmission_file_/rmsnorm.ipynb",
                        nbformat.writes(fill_answers(release, ANSWERS["rmsnorm"][variant])))
    sheet = tmp_path / "Grades-L16-RMSNorm-42.csv"
    sheet.write_text("Identifier,Full name,Email address,Status,Grade,Maximum Grade\n"
                     "Participant 1234567,Zoë Müller,zm@x.org,Submitted,,5.00\n"
                     "Participant 1234568,John Lee,jl1@x.org,Submitted,,5.00\n"
                     "Participant 1234569,John Lee,jl2@x.org,Submitted,,5.00\n"
                     "Participant 1234570,Sam Absent,sa@x.org,No submission,,5.00\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "grader", "--submissions", str(zpath), "--jobs", "2",
                          "--lms-gradebook", str(sheet), "--course-root", str(course_copy)],
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "skipped" not in out.stdout
    with (course_copy / "grades.csv").open() as f:
        grades = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    assert grades == {"zoe-muller": 5.0, "john-lee-1234568": 5.0, "john-lee-1234569": 0.0}
    assert (course_copy / "lms-import-moodle-rmsnorm.csv").read_text(encoding="utf-8").splitlines() == [
        "Identifier,Full name,Email address,Status,Grade,Maximum Grade",
        "Participant 1234567,Zoë Müller,zm@x.org,Submitted,5,5.00",
        "Participant 1234568,John Lee,jl1@x.org,Submitted,5,5.00",
        "Participant 1234569,John Lee,jl2@x.org,Submitted,0,5.00",
        "Participant 1234570,Sam Absent,sa@x.org,No submission,,5.00"]
    assert "left blank (no submission here): Sam Absent (Participant 1234570)" in out.stdout
    with (course_copy / "roster.csv").open(encoding="utf-8") as f:
        roster = {r["student_id"]: (r["lms_id"], r["name"]) for r in csv.DictReader(f)}
    assert roster == {"zoe-muller": ("Participant 1234567 (rmsnorm)", "Zoë Müller"),
                      "john-lee-1234568": ("Participant 1234568 (rmsnorm)", "John Lee"),
                      "john-lee-1234569": ("Participant 1234569 (rmsnorm)", "John Lee")}
    with zipfile.ZipFile(course_copy / "feedback-moodle-rmsnorm.zip") as zf:
        assert sorted(zf.namelist()) == [f"{folder}_assignsubmission_file_/rmsnorm.html" for folder in sorted(students)]
