"""Repair (grader/intake/repair.py) on real notebooks: what each mangled submission becomes, the note
the report shows, and the original kept byte for byte.

Fast: no kernel. Each case is the released rmsnorm (or block) notebook changed the way a real
class changes it, written with nbformat into ``submitted/<student>/<assignment>/`` of a
throwaway course root, then repaired in place.
"""
import copy
import json
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell

from grader.ledger.apps import Course
from grader.intake.repair import Repair, repair_notebook, repair_submission

ANSWER = ("def rms_norm(x, weight, eps=1e-6):\n    xf = x.float()\n"
          "    return (weight * xf / (xf.pow(2).mean(-1, keepdim=True) + eps).sqrt()).to(x.dtype)")


def _gid(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _released(root: Path, a: str = "rmsnorm") -> nbformat.NotebookNode:
    return nbformat.read(root / "release" / a / f"{a}.ipynb", as_version=4)


def _answered(root: Path) -> nbformat.NotebookNode:
    nb = _released(root)
    next(c for c in nb.cells if _gid(c) == "rms_norm_impl").source = ANSWER
    return nb


def _submit(root: Path, student: str, files: dict[str, bytes | nbformat.NotebookNode], a: str = "rmsnorm") -> Path:
    d = root / "submitted" / student / a
    d.mkdir(parents=True)
    for name, content in files.items():
        (d / name).write_bytes(content if isinstance(content, bytes) else nbformat.writes(content).encode())
    return d


def _graded(root: Path, student: str, a: str = "rmsnorm") -> nbformat.NotebookNode:
    files = sorted((root / "submitted" / student / a).glob("*.ipynb"))
    assert [f.name for f in files] == [f"{a}.ipynb"], files
    return nbformat.read(files[0], as_version=4)


def test_a_renamed_notebook_is_graded_under_the_released_name_and_the_original_kept(course_copy):
    raw = nbformat.writes(_answered(course_copy)).encode()
    _submit(course_copy, "ada", {"RMSNorm (1).ipynb": raw})
    rep = repair_submission(course_copy, "ada", "rmsnorm")
    assert rep.notes == ["'RMSNorm (1).ipynb' was renamed: graded as rmsnorm.ipynb"] and not rep.flags
    assert next(c for c in _graded(course_copy, "ada").cells if _gid(c) == "rms_norm_impl").source == ANSWER
    assert (course_copy / "logs" / "originals" / "ada" / "rmsnorm" / "RMSNorm (1).ipynb").read_bytes() == raw


def test_of_several_notebooks_the_one_with_answers_is_graded(course_copy):
    _submit(course_copy, "bo", {"rmsnorm.ipynb": _released(course_copy), "rmsnorm (2).ipynb": _answered(course_copy)})
    rep = repair_submission(course_copy, "bo", "rmsnorm")
    assert "several notebooks for rmsnorm.ipynb: graded rmsnorm (2).ipynb, set aside rmsnorm.ipynb" in rep.notes
    assert next(c for c in _graded(course_copy, "bo").cells if _gid(c) == "rms_norm_impl").source == ANSWER


def test_cp1252_text_is_decoded_and_kept(course_copy):
    nb = _answered(course_copy)
    next(c for c in nb.cells if _gid(c) == "rms_norm_impl").source = "# résumé\n" + ANSWER
    _submit(course_copy, "cy", {"rmsnorm.ipynb": json.dumps(nb, ensure_ascii=False).encode("cp1252")})
    rep = repair_submission(course_copy, "cy", "rmsnorm")
    assert rep.notes == ["rmsnorm.ipynb was not UTF-8; decoded as cp1252"]
    assert next(c for c in _graded(course_copy, "cy").cells if _gid(c) == "rms_norm_impl").source.startswith("# résumé")


def test_a_file_that_is_not_a_notebook_is_graded_as_the_released_one(course_copy):
    _submit(course_copy, "dee", {"rmsnorm.ipynb": b"%PDF-1.7 this is a pdf renamed"})
    rep = repair_submission(course_copy, "dee", "rmsnorm")
    assert rep.unrecoverable == "rmsnorm.ipynb is not valid JSON (Expecting value at line 1)"
    assert [c.source for c in _graded(course_copy, "dee").cells] == [c.source for c in _released(course_copy).cells]


def test_cell_level_damage_is_repaired_against_the_released_notebook(course_copy):
    rel = _released(course_copy)
    nb = _answered(course_copy)
    impl = next(i for i, c in enumerate(nb.cells) if _gid(c) == "rms_norm_impl")
    head, tail = nb.cells[impl].source.split("    xf = x.float()\n")
    second = copy.deepcopy(nb.cells[impl])
    second["id"] = "5b1a7c2e"  # JupyterLab's "split cell" gives the second part a new id
    nb.cells[impl].source, second.source = head.rstrip("\n"), "    xf = x.float()\n" + tail
    nb.cells.insert(impl + 1, second)  # the answer split in two cells with one grade_id
    shape = next(c for c in nb.cells if _gid(c) == "rms_norm_shape")
    shape.source = "assert True  # edited test"  # a locked cell edited
    shape.metadata["nbgrader"]["schema_version"] = 1  # edited nbgrader metadata
    battery = next(i for i, c in enumerate(nb.cells) if _gid(c) == "rms_norm_battery")
    nb.cells[battery] = new_markdown_cell(nb.cells[battery].source, metadata=nb.cells[battery].metadata)
    nb.cells.append(new_code_cell("print('my own scratch cell')"))  # inserted: kept
    _submit(course_copy, "eve", {"rmsnorm.ipynb": nb})
    rep = repair_submission(course_copy, "eve", "rmsnorm")
    assert rep.notes == ["answer cell 'rms_norm_impl' was split into several cells: merged back",
                         "locked cell 'rms_norm_shape' had been edited: restored from the released version",
                         "cell 'rms_norm_battery' had been turned into markdown: restored as code"]
    out = _graded(course_copy, "eve")
    assert [_gid(c) for c in out.cells] == [_gid(c) for c in rel.cells] + [None]
    by_id = {_gid(c): c for c in out.cells}
    assert by_id["rms_norm_impl"].source.replace("\n\n", "\n") == ANSWER
    assert by_id["rms_norm_shape"].source == next(c for c in rel.cells if _gid(c) == "rms_norm_shape").source
    assert by_id["rms_norm_shape"].metadata["nbgrader"] == next(
        c for c in rel.cells if _gid(c) == "rms_norm_shape").metadata["nbgrader"]
    assert by_id["rms_norm_battery"].cell_type == "code"
    assert out.cells[-1].source == "print('my own scratch cell')"


def test_an_answer_that_lost_its_metadata_is_reattached_by_what_it_defines(course_copy):
    nb = _answered(course_copy)
    impl = next(c for c in nb.cells if _gid(c) == "rms_norm_impl")
    impl.metadata = {}  # e.g. copied into a fresh cell
    _submit(course_copy, "fay", {"rmsnorm.ipynb": nb})
    rep = repair_submission(course_copy, "fay", "rmsnorm")
    assert rep.notes == ["answer cell 'rms_norm_impl' had lost its nbgrader metadata: re-attached"]
    assert next(c for c in _graded(course_copy, "fay").cells if _gid(c) == "rms_norm_impl").source == ANSWER


def test_a_tampering_cell_is_kept_as_handed_in(course_copy):
    """Repair removes nothing a student wrote for what the tamper scan finds: the cell runs as
    handed in, its question is scored on its outputs, and the finding is flagged for the
    instructor's review by the scoring (grader.scoring.scores, the self-check's own words)."""
    nb = _answered(course_copy)
    cell = ANSWER + "\ntorch.allclose = lambda *a, **k: True"
    next(c for c in nb.cells if _gid(c) == "rms_norm_impl").source = cell
    _submit(course_copy, "gus", {"rmsnorm.ipynb": nb})
    rep = repair_submission(course_copy, "gus", "rmsnorm")
    assert rep.flags == [] and rep.notes == []
    assert next(c for c in _graded(course_copy, "gus").cells if _gid(c) == "rms_norm_impl").source == cell


@pytest.mark.parametrize("assignment, deleted", [
    ("block", {"block_warmup_why"}),  # the cell before it is a locked cell with no grade
    ("rmsnorm", {"rms_norm_impl", "rms_norm_shape"}),  # an answer cell and the test after it
])
def test_deleted_graded_cells_are_reinserted_where_nbgrader_add_missing_cells_fails(course_copy, assignment, deleted):
    """Why repair re-inserts deleted cells although nbgrader_config.py turns on
    ``OverwriteCells.add_missing_cells``: nbgrader 0.9.6 looks up the deleted cell's predecessor
    among the submitted grade and answer cells only, so it raises KeyError when that predecessor
    is a locked cell without a grade or was deleted too (the whole notebook then fails to
    grade), and it never re-inserts an answer cell that is not also a grade cell."""
    from nbgrader.preprocessors import OverwriteCells

    course = Course(course_copy)
    course.generate_assignment(assignment)  # records the cells in the gradebook
    rel = _released(course_copy, assignment)
    nb = copy.deepcopy(rel)
    nb.cells = [c for c in nb.cells if _gid(c) not in deleted]
    resources = {"nbgrader": {"notebook": assignment, "assignment": assignment,
                              "db_url": course.tree.gradebook_url}}
    with pytest.raises(KeyError):
        OverwriteCells(add_missing_cells=True).preprocess(copy.deepcopy(nb), resources)

    rep = Repair("hal", assignment)
    out = repair_notebook(nb, rel, rep)
    assert [_gid(c) for c in out.cells] == [_gid(c) for c in rel.cells]
    assert sorted(rep.notes) == sorted(
        f"{'answer' if next(c for c in rel.cells if _gid(c) == g).metadata['nbgrader']['solution'] else 'graded'} "
        f"cell {g!r} was missing: re-inserted from the released notebook" for g in deleted)
    reinserted = {_gid(c): c.source for c in out.cells if _gid(c) in deleted}
    assert reinserted == {_gid(c): c.source for c in rel.cells if _gid(c) in deleted}  # never source/'s


def test_an_unreadable_file_is_recorded_before_it_is_replaced(course_copy, monkeypatch):
    """A run stopped (Ctrl-C, SIGHUP) between replacing an unreadable file with the released
    notebook and recording it lost the record for good: the rerun graded a readable blank."""
    import grader.intake.repair as repair
    from grader.intake.repair import unreadable

    _submit(course_copy, "dee", {"rmsnorm.ipynb": b"%PDF-1.7 this is a pdf renamed"})

    def stopped(*_a, **_k):
        raise KeyboardInterrupt("SIGHUP")

    monkeypatch.setattr(repair.nbformat, "write", stopped)  # the signal comes as the stand-in is written
    with pytest.raises(KeyboardInterrupt):
        repair_submission(course_copy, "dee", "rmsnorm")
    why = "rmsnorm.ipynb is not valid JSON (Expecting value at line 1)"
    assert unreadable(course_copy) == {("rmsnorm", "dee"): why}
    assert (course_copy / "submitted" / "dee" / "rmsnorm" / "rmsnorm.ipynb").is_file()  # as received


@pytest.mark.parametrize("damaged", [b'{"dee/rmsnorm": {"reas', b"[]", b"null", b"\xff\xfe"])
def test_a_damaged_unreadable_record_is_set_aside_never_written_over(course_copy, damaged):
    from grader.intake.repair import set_aside_damaged_unreadable, unreadable

    logs = course_copy / "logs"
    logs.mkdir()
    (logs / "unreadable.json").write_bytes(damaged)
    assert unreadable(course_copy) == {}  # read as nothing recorded, no crash
    _submit(course_copy, "eve", {"rmsnorm.ipynb": b"not a notebook"})
    repair_submission(course_copy, "eve", "rmsnorm")  # records eve: the damaged file goes aside first
    assert (logs / "unreadable.json.damaged").read_bytes() == damaged
    assert set(unreadable(course_copy)) == {("rmsnorm", "eve")}
    (logs / "unreadable.json").write_bytes(damaged)
    said = set_aside_damaged_unreadable(course_copy)
    assert said and "unreadable.json.damaged" in said and "check it by hand" in said
    assert set_aside_damaged_unreadable(course_copy) is None and not (logs / "unreadable.json").exists()
