"""Structural repair of submissions before nbgrader sees them, with a per-student report.

For every ``submitted/<student>/<assignment>/`` this finds the notebook(s), repairs what a real
class mangles, and writes back a notebook nbgrader can grade, keeping as much of the student's
work as possible. The original files are kept under ``logs/originals/``. What is repaired:

* file level: a renamed notebook (spaces, ``(1)`` suffixes, other case) is mapped back onto the
  released name; several notebooks for one released notebook: the one with most answers is
  graded, the others set aside; text that is not UTF-8 is decoded (cp1252/latin-1); a file
  that is not JSON, or not a notebook, cannot be graded: the released notebook is graded in
  its place (so every question scores 0) with the reason in the report; older nbformat
  versions are converted to v4 and invalid fields normalised;
* cell level, against the source notebook: nbgrader metadata restored from the released
  notebook (an old or edited ``schema_version`` stops nbgrader for the whole class); an answer
  cell split in two or more (one grade_id several times) is merged back; graded cells turned
  into markdown or raw are turned back; a deleted answer or test cell is re-inserted from the
  *released* notebook (never the source, which holds the solution), and an answer cell that
  lost its metadata is recognised by the function or class it defines and re-attached;
  edited locked cells are reported (nbgrader restores them; nbgrader's ``OverwriteKernelspec``
  and ``Execute.kernel_name`` also give every notebook the course's kernel);
* nothing the student wrote is removed for what the tamper scan finds in it: grading runs
  every cell as handed in, scores each question on its outputs, and flags what the scan finds
  for the instructor's review (:mod:`grader.scoring.scores`, with the self-check's reading of the same
  cells); only a reference seen running inside the student's call takes points. (No removal is
  needed to keep the kernel alive: a cell that kills or hangs it is stubbed by the dead-kernel
  regrade, ``grader.autograde.engine.regrade_dead_kernels``, with the reason.)
"""
from __future__ import annotations

import ast
import copy
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from normref._syntax import parse

from ..ledger import store
from ..ledger.course import CourseTree
from .lms_names import notebook_key
from ..ledger.store import UNREADABLE
from .notebooks import read_notebook_leniently

#: How a cell the grader replaced starts, followed by the reason (``grader.autograde.engine.STUB``, a cell
#: whose kernel died; read back by :mod:`grader.scoring.scores`).
REMOVED_PREFIX = "# The grader removed this cell: "


@dataclass
class Repair:
    """What repair did to one student's assignment: ``notes`` for the report, ``flags`` for
    tampering, and ``unrecoverable`` when the student's file could not be graded at all."""

    student: str
    assignment: str
    notes: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    unrecoverable: str | None = None


def _nbg(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _answered_count(nb) -> int:
    return sum(1 for c in nb.cells if _nbg(c).get("solution") and "NotImplementedError" not in c.get("source", ""))


def _defined_names(src: str) -> set[str]:
    try:
        tree = parse(src)
    except SyntaxError:
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))}


def repair_notebook(nb, release_nb, rep: Repair) -> nbformat.NotebookNode:
    """Repair one notebook against its released version (see the module docstring)."""
    rel_cells = [c for c in release_nb.cells if _nbg(c).get("grade_id")]
    rel_by_id = {_nbg(c)["grade_id"]: c for c in rel_cells}
    order = [_nbg(c)["grade_id"] for c in rel_cells]
    out = _restore_metadata(nb.cells, rel_by_id, rep)
    _restore_missing(out, order, rel_by_id, rep)
    nb.cells = out
    return nb


def _restore_metadata(cells: list, rel_by_id: dict, rep: Repair) -> list:
    """Step 1, metadata: unknown grade_ids dropped, known ones restored; split cells merged."""
    out = []
    seen: dict[str, int] = {}
    for cell in cells:
        gid = _nbg(cell).get("grade_id")
        if gid is None:
            if "nbgrader" in cell.get("metadata", {}):
                cell.metadata.pop("nbgrader")
            out.append(cell)
            continue
        if gid not in rel_by_id:
            cell.metadata.pop("nbgrader", None)
            rep.notes.append(f"cell with unknown grade_id {gid!r}: kept as an ordinary cell")
            out.append(cell)
            continue
        rel = rel_by_id[gid]
        if gid in seen:
            first = out[seen[gid]]
            if _nbg(rel).get("solution"):
                first.source = first.source.rstrip("\n") + "\n\n" + cell.get("source", "")
                rep.notes.append(f"answer cell {gid!r} was split into several cells: merged back")
            else:
                rep.notes.append(f"graded cell {gid!r} appeared twice: the copy was dropped")
            continue
        seen[gid] = len(out)
        out.append(_restore_cell(cell, rel, gid, rep))
    return out


def _restore_cell(cell, rel, gid: str, rep: Repair):
    """A graded cell as released: its type, a locked cell's source, its nbgrader metadata."""
    if cell.cell_type != rel.cell_type:
        rep.notes.append(f"cell {gid!r} had been turned into {cell.cell_type}: restored as {rel.cell_type}")
        new = (nbformat.v4.new_code_cell if rel.cell_type == "code" else nbformat.v4.new_markdown_cell)(
            cell.get("source", ""))
        new.metadata = cell.get("metadata", {})
        cell = new
    if _nbg(rel).get("locked") and cell.get("source", "") != rel.source:
        rep.notes.append(f"locked cell {gid!r} had been edited: restored from the released version")
        cell.source = rel.source
    cell.metadata["nbgrader"] = copy.deepcopy(_nbg(rel))
    return cell


def _restore_missing(out: list, order: list, rel_by_id: dict, rep: Repair) -> None:
    """Step 2, deleted graded cells: re-attach an orphaned answer, else insert the released cell.

    Kept although nbgrader_config.py turns on OverwriteCells.add_missing_cells: nbgrader 0.9.6
    raises KeyError when the deleted cell follows a locked cell without a grade
    (block_warmup_why after warmup_plots) or a cell deleted too, failing the whole notebook,
    and never re-inserts a deleted answer cell (tests/test_repair.py shows both)."""
    present = {_nbg(c).get("grade_id") for c in out}
    for gid in order:
        if gid in present:
            continue
        rel = rel_by_id[gid]
        if not _adopt_orphan(out, gid, rel, rep):
            idx = order.index(gid)
            prev = next((g for g in reversed(order[:idx]) if g in present), None)
            pos = 0 if prev is None else next(i for i, c in enumerate(out) if _nbg(c).get("grade_id") == prev) + 1
            out.insert(pos, copy.deepcopy(rel))
            what = "answer" if _nbg(rel).get("solution") else "graded"
            rep.notes.append(f"{what} cell {gid!r} was missing: re-inserted from the released notebook")
        present.add(gid)


def _adopt_orphan(out: list, gid: str, rel, rep: Repair) -> bool:
    """Re-attach ``rel``'s metadata to an ungraded code cell defining all its answer's names;
    True if one was found."""
    if not (_nbg(rel).get("solution") and rel.cell_type == "code"):
        return False
    want = _defined_names(rel.source)
    for c in out:
        if c.cell_type == "code" and not _nbg(c) and want and want <= _defined_names(c.source):
            c.metadata["nbgrader"] = copy.deepcopy(_nbg(rel))
            rep.notes.append(f"answer cell {gid!r} had lost its nbgrader metadata: re-attached")
            return True
    return False


def unreadable_note(reason: str) -> str:
    """The repair note of a submission whose file could not be read as a notebook."""
    return f"{reason}: the released notebook is graded in its place (0 points)"


# ``logs/unreadable.json`` (:data:`grader.ledger.store.UNREADABLE`): ``{"<student>/<assignment>":
# {"reason": why, "received": sha256}}`` for each submission whose file could not be read as a
# notebook (its ``submitted/`` notebook is the released one since), with the hash of the files as
# received (``logs/received.json``): the entry holds until another file is received for it.


def unreadable(course: CourseTree | Path) -> dict[tuple[str, str], str]:
    """``{(assignment, student): why}`` for every submission in ``submitted/`` whose file, as last
    received, could not be read as a notebook (:func:`remember_unreadable`); an entry whose
    submission has been received again since (another hash in ``logs/received.json``) or is gone
    is not one. An unreadable record reads as ``{}``."""
    tree = course if isinstance(course, CourseTree) else CourseTree(course)
    hashes = store.received(tree)
    out = {}
    for key, entry in store.unreadable(tree).items():
        a, st = store.pair(key)
        if entry.get("received") == hashes.get(key) and tree.has_notebook("submitted", st, a):
            out[(a, st)] = str(entry.get("reason", ""))
    return out


def set_aside_damaged_unreadable(course: CourseTree | Path) -> str | None:
    """A damaged ``logs/unreadable.json`` set aside (:func:`grader.ledger.store.set_aside`: moved to
    ``unreadable.json.damaged``, never written over) with one line saying so; None when it is
    fine or absent. The submissions it recorded are then graded as their ``submitted/`` notebooks
    (0 points either way) until received again."""
    tree = course if isinstance(course, CourseTree) else CourseTree(course)
    return store.set_aside(tree, UNREADABLE)


def remember_unreadable(course: CourseTree | Path, repairs: dict[tuple[str, str], Repair], log=print) -> None:
    """Add the submissions of ``repairs`` found unreadable (``Repair.unrecoverable``) to
    ``logs/unreadable.json`` (written whole, atomically; a damaged one is set aside first and said
    in ``log``), so that every later run reports them as could not be graded until another file
    is received for them (:func:`unreadable`); entries that no longer hold are dropped.

    Raises:
        OSError: ``logs/`` cannot be written.
    """
    tree = course if isinstance(course, CourseTree) else CourseTree(course)
    hashes = store.received(tree)
    entries = {store.key(a, st): {"reason": why, "received": hashes.get(store.key(a, st))}
               for (a, st), why in unreadable(tree).items()}
    new = {store.key(a, st): {"reason": rep.unrecoverable, "received": hashes.get(store.key(a, st))}
           for (a, st), rep in repairs.items() if rep.unrecoverable}
    if not new and not (tree.logs / UNREADABLE).is_file():
        return
    store.write_unreadable(tree, {**entries, **new}, log=log)


def repair_submission(course: CourseTree | Path, student: str, assignment: str,
                      keep: Path | None = None) -> Repair:
    """Repair ``submitted/<student>/<assignment>/`` in place; the files as they were go to
    ``<keep>/<student>/<assignment>/`` (default ``keep``: ``logs/originals``)."""
    tree = course if isinstance(course, CourseTree) else CourseTree(course)
    rep = Repair(student, assignment)
    sub = tree.submitted(student, assignment)
    keep = (keep or store.originals(tree)) / student / assignment
    released = sorted(tree.release(assignment).glob("*.ipynb"))
    files = sorted(p for p in sub.iterdir() if p.is_file() and p.suffix.lower() == ".ipynb")
    # start-up files and shadowing modules beside the notebook are described after autograde, from
    # what the grading kernel recorded them doing (grader.intake.handed_in, grader/stages/autograde.py)
    if not files:
        return rep
    keep.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy2(f, keep / f.name)
    parsed: dict[Path, tuple] = {f: read_notebook_leniently(f) for f in files}
    unused = set(files)
    for rel_path in released:
        key = notebook_key(rel_path.name)
        cands = [f for f in files if f in unused and notebook_key(f.name) == key]
        if not cands and len(released) == 1:
            cands = [f for f in files if f in unused]
        if not cands:
            rep.notes.append(f"{rel_path.name} was not submitted")
            continue
        good = [f for f in cands if parsed[f][0] is not None]
        chosen = max(good, key=lambda f: (_answered_count(parsed[f][0]), f.stat().st_mtime)) if good else cands[0]
        unused -= set(cands)
        for other in cands:
            if other != chosen:
                rep.notes.append(f"several notebooks for {rel_path.name}: graded {chosen.name}, set aside {other.name}")
        if chosen.name != rel_path.name:
            rep.notes.append(f"{chosen.name!r} was renamed: graded as {rel_path.name}")
        nb, notes, bad = parsed[chosen]
        rep.notes.extend(notes)
        release_nb = nbformat.read(rel_path, as_version=4)
        if nb is None:
            rep.unrecoverable = bad
            rep.notes.append(unreadable_note(bad))
            # recorded before its file is replaced: a run stopped in between keeps the record
            remember_unreadable(tree, {(assignment, student): rep})
            nb = copy.deepcopy(release_nb)
        else:
            nb = repair_notebook(nb, release_nb, rep)
        # the repaired notebook first, then the files it replaces: a run stopped in between
        # leaves the submission readable or as received, never without a notebook
        with store.atomic_path(sub / rel_path.name) as part:
            nbformat.write(nb, part)
        for f in cands:
            if f.name != rel_path.name:
                f.unlink()
    for f in unused:
        rep.notes.append(f"{f.name} matches no released notebook: set aside")
        f.unlink()
    return rep


def repair_all(course: CourseTree | Path, assignments: list[str], only: list[str] | None = None,
               keep: Path | None = None) -> dict[tuple[str, str], Repair]:
    """Repair every submission (of the students in ``only``, if given; originals under ``keep``,
    see :func:`repair_submission`); returns ``{(assignment, student): Repair}`` for those with
    notes."""
    tree = course if isinstance(course, CourseTree) else CourseTree(course)
    out = {}
    for st in tree.students():
        if only is not None and st not in only:
            continue
        for a in assignments:
            if tree.submitted(st, a).is_dir():
                rep = repair_submission(tree, st, a, keep)
                if rep.notes or rep.flags or rep.unrecoverable:
                    out[(a, st)] = rep
    return out
