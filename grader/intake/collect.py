"""Collect: bring submissions into nbgrader's ``submitted/<student>/<assignment>/`` tree.

Three inputs are recognised, in this order:

1. an nbgrader ``submitted/`` tree (``<student>/<assignment>/*.ipynb``): copied as is; the course's
   own ``submitted/`` (a JupyterHub's, after ``nbgrader collect --update``) is graded in place,
   each notebook changed since it was last graded as a resubmission (:mod:`grader.intake.inplace`);
2. a folder or ``.zip`` of ``.ipynb`` files named the way an LMS download names them: handed
   to nbgrader's own ``zip_collect`` app, once per assignment, with
   :class:`LmsFileNameCollector` reading the student id, timestamp and notebook name from the
   file name (Canvas, Moodle, Blackboard and plain ``<student>_<notebook>.ipynb`` patterns,
   :mod:`grader.intake.lms_names`, which also decides who is who).
   Moodle's "Download submissions in folders" layout (``<Full name>_<participant id>_
   assignsubmission_file_/<file>``, at any depth of the zip) is read as its flat layout
   (:func:`download_name`). Every file not collected is listed with its reason, by its path in
   the download: a zip entry that cannot be read, a hidden file, a name no LMS writes, a notebook
   of no assignment, a student's older or duplicate upload, a file that is not a notebook when
   the student sent a readable one too (:func:`_choose`);
The demo class (:mod:`grader.demo`) is written as an nbgrader ``submitted/`` tree first and
collected as case 1.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.plugins.zipcollect import FileNameCollectorPlugin

from ..ledger import store
from ..ledger.files import copy_plain_tree
from ..ledger.apps import Course
from ..ledger.course import CourseTree
from .inplace import files_hash, sort_out as sort_out_in_place
# what LMS names say, and who is who (names kept here as the tests and callers knew them)
from .lms_names import (ascii_id, download_name, lms_files, lms_identity, lms_late,  # noqa: F401
                        moodle_participants, newest_first, notebook_key, parse_lms_name, resolve_students,
                        record_identities, write_roster, zip_member_name)
from ..ledger.store import LMS_FILES, LMS_LATE, RECEIVED  # noqa: F401

class LmsFileNameCollector(FileNameCollectorPlugin):
    """nbgrader ``zip_collect`` plugin: student id, timestamp and notebook from an LMS file name.

    The notebook part is mapped onto the released notebook it names (read from the
    ``zip_collect`` app's course directory), so a download renamed ``rmsnorm (1).ipynb`` is
    still collected as ``rmsnorm.ipynb``.
    """

    def _released(self) -> list[str]:
        cd = self.parent.coursedir
        return CourseTree(cd.root).released_notebooks(cd.assignment_id)

    #: ``{file name: student id}`` decided by :func:`resolve_students` before ``zip_collect`` runs
    #: (two Canvas students named alike are two students).
    resolved: dict[str, str] = {}
    #: ``{file name: released notebook}`` of the downloads a student renamed, known by their cells.
    renamed: dict[str, str] = {}

    def collect(self, submitted_file: str) -> dict | None:
        info = parse_lms_name(submitted_file)
        if info is None:
            self.log.warning("Not an LMS submission name, skipped: %s", submitted_file)
            return None
        info["student_id"] = self.resolved.get(os.path.basename(submitted_file), info["student_id"])
        keys = {notebook_key(r): r for r in self._released()}
        real = keys.get(notebook_key(info["file_id"])) or self.renamed.get(os.path.basename(submitted_file))
        if real is None:
            return None
        info["file_id"] = real
        return info


@dataclass
class Collected:
    """Result of :func:`collect`.

    Attributes:
        source: what was collected, in words.
        students: the students in this input (this batch), sorted.
        skipped: ``{file name: reason}`` for files that were not collected.
        replaced: ``(assignment, student)`` pairs whose earlier submission this batch replaced.
        unchanged: ``(assignment, student)`` pairs handed in again byte for byte (a rerun of the
            same download), or in place the same as when last graded: kept as they are, not a
            resubmission.
        flags: ``{student: [notes]}`` for the report (e.g. the LMS marked a file late).
        hand_grades: the hand grades of each replaced submission, with the answers they graded
            (:func:`grader.ledger.handgrades.capture`), to carry over where the answer is unchanged.
        in_place: the course's own ``submitted/`` was the input (:mod:`grader.intake.inplace`).
        changed: in place, ``{(assignment, student): the run that graded it, or None}`` for each
            notebook changed since it was last graded (graded again as a resubmission).
        notes: lines for the run's log about what was collected (not about one file).
        as_collected: ``{"<student>/<assignment>": sha256}`` of the notebooks to grade as they
            were before repair (:func:`grader.intake.inplace.remember_graded` records them once graded).
    """

    source: str
    students: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    replaced: list[tuple[str, str]] = field(default_factory=list)
    unchanged: list[tuple[str, str]] = field(default_factory=list)
    flags: dict[str, list[str]] = field(default_factory=dict)
    hand_grades: list = field(default_factory=list)
    in_place: bool = False
    changed: dict[tuple[str, str], str | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    as_collected: dict[str, str] = field(default_factory=dict)

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """The ``(assignment, student)`` submissions this batch brought in new or changed."""
        return sorted(set(self._pairs) - set(self.unchanged))

    _pairs: list[tuple[str, str]] = field(default_factory=list, repr=False)


_hash = files_hash


def _sort_out(course: Course, out: Collected, incoming: dict[tuple[str, str], list[Path]]) -> dict[str, str]:
    """Which incoming submissions are unchanged (same bytes as last received, still there), which
    replace an earlier one (moved aside, hand grades captured); returns their new hashes."""
    tree, seen = course.tree, store.received(course.tree)
    hashes = {}
    for (a, st), files in sorted(incoming.items()):
        key, h = f"{st}/{a}", _hash(files)
        out._pairs.append((a, st))
        if tree.has_notebook("submitted", st, a):
            if seen.get(key) == h:
                out.unchanged.append((a, st))
                continue
            out.replaced.append((a, st))
            _drop_earlier(course, a, st, out)
        hashes[key] = h
    return hashes


def is_submitted_tree(path: Path, assignments: list[str]) -> bool:
    """True if ``path`` looks like ``<student>/<assignment>/*.ipynb``."""
    if not path.is_dir():
        return False
    return any(any((d / a).is_dir() for a in assignments) for d in path.iterdir() if d.is_dir())


def _assignment_of(file_id: str, tree: CourseTree, assignments: list[str]) -> str | None:
    key = notebook_key(file_id)
    for a in assignments:
        if key in {notebook_key(n) for n in tree.released_notebooks(a)} or key == notebook_key(a):
            return a
    return None


def _grade_ids(path: Path) -> set[str]:
    """The nbgrader grade_ids of the notebook at ``path`` (empty when it does not read)."""
    from .notebooks import read_notebook_leniently

    nb = read_notebook_leniently(path)[0]
    return {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in (nb or {}).get("cells", [])} - {None}


_RELEASED: dict[tuple[str, float], set[str]] = {}


def _released_ids(path: Path) -> set[str]:
    """:func:`_grade_ids` of a released notebook, read once per version of the file (a class's
    every download is held against every assignment's)."""
    key = (str(path), path.stat().st_mtime)
    if key not in _RELEASED:
        _RELEASED[key] = _grade_ids(path)
    return _RELEASED[key]


def released_by_cells(path: Path, tree: CourseTree, assignment: str) -> str | None:
    """The released notebook of ``assignment`` that shares most cells with the one at ``path``."""
    got = _grade_ids(path)
    named = [(len(got & _released_ids(p)), p.name) for p in sorted(tree.release(assignment).glob("*.ipynb"))]
    return max(named)[1] if named and max(named)[0] else None


def assignment_by_cells(path: Path, tree: CourseTree, assignments: list[str]) -> str | None:
    """The assignment whose released notebook the notebook at ``path`` is, by its cells (nbgrader's
    grade_ids, which a renamed file keeps): the one assignment holding most of them, at least half
    of its own; None when none does or two tie."""
    got = _grade_ids(path)
    if not got:
        return None
    best: list[tuple[int, str]] = []
    for a in assignments:
        ids = set().union(*(_released_ids(p) for p in sorted(tree.release(a).glob("*.ipynb"))))
        if ids and 2 * len(got & ids) >= len(ids):
            best.append((len(got & ids), a))
    best.sort(reverse=True)
    return best[0][1] if best and (len(best) == 1 or best[0][0] > best[1][0]) else None


#: What reading a zip entry raises when its bytes are damaged (CRC, deflate stream, truncation).
_ZIP_ENTRY_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError)


def _hidden(parts: list[str]) -> bool:
    # macOS's resource forks (__MACOSX/, ._name) and dot files (.DS_Store) are no one's submission
    return parts[-1].startswith(".") or "__MACOSX" in parts


def _lms_files(path: Path, tmp: Path, skipped: dict[str, str]) -> list[tuple[Path, str]]:
    """``[(file, where it is in the download)]``: every file of the LMS download at ``path`` (a
    folder, or a zip extracted here), copied into ``tmp`` under its :func:`download_name`. Member
    paths are never trusted (zip-slip): a name seen twice goes to a folder of its own and is sorted
    out like any duplicate. Hidden files and zip entries that cannot be read go into ``skipped``.

    Raises:
        ValueError: ``path`` is a ``.zip`` that is not a readable zip.
    """
    out: list[tuple[Path, str]] = []

    def put(i: int, rel: str, read) -> None:
        # a name a folder's file system could not decode is shown with U+FFFD (it still prints)
        rel = rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        parts = [p for p in re.split(r"[/\\]", rel) if p not in ("", ".")]
        if not parts:
            return
        if _hidden(parts):
            skipped[rel] = "a hidden or macOS metadata file, not a submission"
            return
        try:
            data = read()
        except _ZIP_ENTRY_ERRORS as e:
            skipped[rel] = (f"could not be read from the zip ({type(e).__name__}: {e}); the other files were "
                            "collected: download the zip again from the LMS, or ask the student for this file")
            return
        name = download_name(parts)
        dest = tmp / name if not (tmp / name).exists() else tmp / f"copy{i}" / name
        dest.parent.mkdir(exist_ok=True)
        dest.write_bytes(data)
        out.append((dest, rel))

    if path.is_file() and path.suffix == ".zip":
        try:
            zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as e:
            raise ValueError(f"{path}: not a readable zip ({e}): download it again from the LMS") from None
        with zf:
            for i, member in enumerate(zf.infolist()):
                if not member.is_dir():
                    put(i, zip_member_name(member), lambda m=member: zf.read(m))
    else:
        for i, f in enumerate(sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink())):
            put(i, f.relative_to(path).as_posix(), f.read_bytes)
    return out


def notebook_problem(path: Path) -> str | None:
    """Why the file at ``path`` cannot be graded as a notebook (not JSON, not a notebook), or None
    (:func:`grader.intake.notebooks.read_notebook_leniently`, which repair uses too)."""
    from .notebooks import read_notebook_leniently

    return read_notebook_leniently(path)[2]


@dataclass
class _Found:
    """One file of the download for one student and assignment."""

    info: dict
    file: Path
    where: str  # its path in the download
    problem: str | None = None  # why it is not a readable notebook
    note: str | None = None  # what its cells said against its name (the report's flag)


def _lms_candidates(tree: CourseTree, path: Path, assignments: list[str], tmp: Path,
                    skipped: dict[str, str]) -> dict[tuple[str, str], list[_Found]]:
    """``{(assignment, student): [files]}`` for the LMS download at ``path`` (copied into
    ``tmp``, :func:`_lms_files`); what is not collected goes into ``skipped``, keyed by its path in
    the download.

    Raises:
        ValueError: no file is a notebook of an assignment with an LMS-style name.
    """
    files = _lms_files(path, tmp, skipped)
    candidates: dict[tuple[str, str], list[_Found]] = {}
    ids = resolve_students(tree, [f.name for f, _ in files])
    for f, where in files:
        info = parse_lms_name(f.name)
        if info is None:
            skipped[where] = "file name not recognised as an LMS submission"
            continue
        info["student_id"] = ids.get(f.name, info["student_id"])
        a = _assignment_of(info["file_id"], tree, assignments)
        by_cells = assignment_by_cells(f, tree, assignments)
        if a is None and by_cells is None:
            skipped[where] = f"no assignment has a notebook named {info['file_id']!r}, nor its cells"
            continue
        found = _Found(info, f, where, notebook_problem(f))
        if a is None:  # renamed by the student: its cells say which assignment's it is
            a = by_cells
            found.note = f"{a}: {where!r} is named {info['file_id']!r}; its cells are {a}'s notebook: graded as {a}"
        elif by_cells is not None and by_cells != a:
            found.note = (f"{a}: {where!r} is named as {a}'s notebook but holds {by_cells}'s cells (the wrong "
                          f"notebook handed in?): graded as {a}; ask the student")
        candidates.setdefault((a, info["student_id"]), []).append(found)
    if not candidates:
        shown = "; ".join(f"{n}: {why}" for n, why in list(skipped.items())[:5])
        hint = f"; for an nbgrader tree, give {path / 'submitted'}" if (path / "submitted").is_dir() else ""
        raise ValueError(f"{path}: none of its {len(files)} files is a notebook of an assignment "
                         f"named the way an LMS names downloads ({shown or 'no files'}){hint}")
    return candidates


def _choose(a: str, st: str, found: list[_Found], out: Collected) -> _Found:
    """The one file of ``found`` to grade: the newest readable notebook (:func:`newest_first`),
    else the newest; every other one is listed in ``out.skipped`` with the reason, and a newer
    download that is not a notebook is flagged."""
    order = sorted(found, key=lambda c: (c.problem is None, newest_first(c.info, c.file.name), c.where))
    chosen = order[-1]
    newest = max(found, key=lambda c: (newest_first(c.info, c.file.name), c.where))
    for other in found:
        if other is chosen:
            continue
        if other.file.read_bytes() == chosen.file.read_bytes():
            why = f"the same file as {chosen.where!r} (uploaded twice), which is graded"
        elif other.problem:
            why = f"not a notebook ({other.problem}); {chosen.where!r} is graded instead"
        else:
            why = f"{st} has more than one {a} notebook here: {chosen.where!r} (the newest download) is graded instead"
        out.skipped[other.where] = why
    if newest is not chosen and newest.problem:
        out.flags.setdefault(st, []).append(
            f"{a}: the newest download {newest.where!r} is not a notebook ({newest.problem}): "
            f"the earlier {chosen.where!r} is graded; ask the student which one counts")
    if chosen.problem:
        out.flags.setdefault(st, []).append(
            f"{a}: the download {chosen.where!r} is not a notebook ({chosen.problem}): graded as a blank "
            "notebook (0 points); ask the student to upload it again")
    if chosen.note:
        out.flags.setdefault(st, []).append(chosen.note)
    return chosen


def check_input(course: CourseTree | Path, submissions: Path, assignments: list[str]) -> None:
    """What :func:`collect` would refuse, found before anything in the course is touched.

    Raises:
        FileNotFoundError: ``submissions`` does not exist.
        ValueError: it is not a submitted tree, LMS folder or zip, or holds no submission.
    """
    tree = course if isinstance(course, CourseTree) else CourseTree(course)
    submissions = Path(submissions).resolve()
    if not submissions.exists():
        raise FileNotFoundError(f"no submissions at {submissions}")
    if is_submitted_tree(submissions, assignments):
        if not _tree_pairs(submissions, assignments):
            raise ValueError(f"{submissions}: no <student>/<assignment>/*.ipynb in it "
                             f"(assignments: {', '.join(assignments)})")
    elif submissions.suffix == ".zip" or (submissions.is_dir() and any(submissions.rglob("*.ipynb"))):
        with tempfile.TemporaryDirectory() as td:
            _lms_candidates(tree, submissions, assignments, Path(td), {})
    else:
        raise ValueError(f"{submissions}: expected an nbgrader submitted/<student>/<assignment>/ "
                         "tree, a folder of .ipynb files, or a .zip of them")


def _tree_pairs(tree: Path, assignments: list[str]) -> list[tuple[str, str]]:
    """``(assignment, student)`` in an input ``<student>/<assignment>/`` tree: the same walk as a
    course's ``submitted/`` (the tree read as the ``<name>`` step of its parent folder)."""
    return CourseTree(tree.parent).pairs(assignments, step=tree.name)


def collect_lms(course: Course, path: Path, assignments: list[str]) -> Collected:
    """LMS folder or zip -> ``submitted/`` through ``nbgrader zip_collect`` (one call per assignment)."""
    tree = course.tree
    out = Collected(source=f"LMS download {path}")
    with tempfile.TemporaryDirectory() as td:
        candidates = _lms_candidates(tree, path, assignments, Path(td), out.skipped)
        by_assignment: dict[str, list[Path]] = {}
        late: dict[str, bool] = {}
        chosen: dict[tuple[str, str], list[Path]] = {}
        for (a, st), found in sorted(candidates.items()):
            # one submission per student and assignment: the newest readable download
            pick = _choose(a, st, found, out)
            info, f = pick.info, pick.file
            chosen[(a, st)] = [f]
            by_assignment.setdefault(a, []).append(f)
            late[f"{st}/{a}"] = bool(info.get("late"))
            if info.get("late"):
                out.flags.setdefault(st, []).append(f"{a}: the LMS marked the download {pick.where!r} late")
        batch = set(candidates)
        hashes = _sort_out(course, out, chosen)
        for a, fs in by_assignment.items():
            fs = [f for f in fs if not any(chosen[pr] == [f] for pr in out.unchanged)]
            archive = tree.downloaded(a)
            if archive.exists():
                shutil.rmtree(archive)
            if not fs:
                continue
            archive.mkdir(parents=True)
            for f in fs:
                shutil.copy(f, archive / f.name)
            LmsFileNameCollector.resolved = {f.name: st for (_, st), fs in chosen.items() for f in fs}
            LmsFileNameCollector.renamed = {f.name: released_by_cells(f, tree, a) for f in fs
                                            if _assignment_of(parse_lms_name(f.name)["file_id"], tree, [a]) is None}
            course.zip_collect(a, "grader.intake.collect.LmsFileNameCollector")
        store.add_received(tree, hashes)
        store.add_lms_late(tree, {k: v for k, v in late.items() if k in hashes})
        store.add_lms_files(tree, {store.key(a, st): fs[0].name for (a, st), fs in chosen.items()})
        record_identities(tree, {f.name: st for (a, st), fs in chosen.items() for f in fs})
    out.students = sorted({st for _, st in batch})
    return out


def _drop_earlier(course: Course, assignment: str, student: str, out: Collected) -> None:
    """Before a resubmission: the earlier one's hand grades are captured, it moves from
    ``submitted/`` to ``logs/replaced/<student>/<assignment>/`` and leaves the gradebook (so that
    its timestamp, and lateness, do not stay with the new one)."""
    from ..ledger.handgrades import capture

    out.hand_grades += capture(course.tree, assignment, student)
    keep = store.replaced(course.tree, assignment, student)
    shutil.rmtree(keep, ignore_errors=True)
    keep.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(course.tree.submitted(student, assignment)), keep)
    course.remove_submission(assignment, student)


def collect(course: Course, submissions: Path, assignments: list[str]) -> Collected:
    """Fill ``submitted/`` of the course from ``submissions`` (see the module docstring).

    Raises:
        AppError: ``nbgrader zip_collect`` failed.
        FileNotFoundError: ``submissions`` does not exist.
        ValueError: ``submissions`` is neither a submitted tree, a folder of notebooks nor a zip.
    """
    tree = course.tree
    submissions = Path(submissions).resolve()
    check_input(tree, submissions, assignments)
    if not is_submitted_tree(submissions, assignments):
        return collect_lms(course, submissions, assignments)
    out = Collected(source=f"nbgrader submitted/ tree {submissions}")
    pairs = _tree_pairs(submissions, assignments)
    if submissions == tree.submitted().resolve():  # graded in place: changed since graded, or new
        out.in_place = True
        out.source = "the course's own submitted/ (graded in place)"
        store.add_received(tree, sort_out_in_place(course, out, pairs, store.received(tree)))
    else:  # a resubmission replaces the earlier one whole
        hashes = _sort_out(course, out, {(a, st): sorted((submissions / st / a).glob("*.ipynb"))
                                         for a, st in pairs})
        for a, st in out.pairs:
            shutil.rmtree(tree.submitted(st, a), ignore_errors=True)
            try:  # regular files and folders only: a symbolic link is never followed
                left = copy_plain_tree(submissions / st / a, tree.submitted(st, a), submissions)
                if left:
                    out.flags.setdefault(st, []).append(f"{a}: handed in and not copied: {', '.join(left)}")
                    if not any(tree.submitted(st, a).glob("*.ipynb")):  # said where the run's lines are read
                        out.skipped[f"{st}/{a}"] = f"no notebook to grade: {', '.join(left)} (links are never followed)"
            except OSError:  # a full disk leaves no half-copied submission
                shutil.rmtree(tree.submitted(st, a), ignore_errors=True)
                raise
        store.add_received(tree, hashes)
    out.students = sorted({st for _, st in pairs})
    return out
