"""Collect: bring submissions into nbgrader's ``submitted/<student>/<assignment>/`` tree.

Three inputs are recognised, in this order:

1. an nbgrader ``submitted/`` tree (``<student>/<assignment>/*.ipynb``): copied as is; the course's
   own ``submitted/`` (a JupyterHub's, after ``nbgrader collect --update``) is graded in place,
   each notebook changed since it was last graded as a resubmission (:mod:`grader.inplace`);
2. a folder or ``.zip`` of ``.ipynb`` files named the way an LMS download names them: handed
   to nbgrader's own ``zip_collect`` app, once per assignment, with
   :class:`LmsFileNameCollector` reading the student id, timestamp and notebook name from the
   file name (Canvas, Moodle, Blackboard and plain ``<student>_<notebook>.ipynb`` patterns).
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

import json
import os
import re
import shutil
import tempfile
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.plugins.zipcollect import FileNameCollectorPlugin

from .apps import Course
from .course import CourseTree
from .inplace import files_hash, sort_out as sort_out_in_place

# Canvas:     doejane_12345_67890_rmsnorm.ipynb   (late: doejane_LATE_12345_67890_rmsnorm.ipynb)
# Moodle:     Jane Doe_12345_assignsubmission_file_rmsnorm.ipynb
# Blackboard: Lesson 16_jdoe_attempt_2026-11-20-09-00-00_rmsnorm.ipynb
# Plain:      jdoe_rmsnorm.ipynb  /  jdoe-rmsnorm.ipynb
# Names may hold any letter (müllerzoë, muñozjosé), apostrophes and, in Moodle, spaces.
# Moodle's number is its *participant id* (``assign_user_mapping.id``: one per student and
# assignment, the number its grading worksheet writes as ``Participant 12345``), not the user id:
# the same student has another one in each assignment.
_PATTERNS = [
    re.compile(r"^.*?_(?P<student_id>[^_]+)_attempt_(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)_(?P<file_id>.+)$"),
    re.compile(r"^(?P<student_id>[^_]+)_(?P<lms_id>\d+)_assignsubmission_file_(?P<file_id>.+)$"),
    re.compile(r"^(?P<student_id>[^_]+?)_(?P<late>LATE_)?(?P<lms_id>\d+)_(?P<attachment>\d+)_(?P<file_id>.+)$"),
    re.compile(r"^(?P<student_id>[^_\s]+?)[_-](?P<file_id>[^_]+)$"),
]


def ascii_id(name: str) -> str:
    """A student id from a name as an LMS writes it: letters folded to ASCII (``zoë.müller`` ->
    ``zoe.muller``, ``muñozjosé`` -> ``munozjose``), lower case, spaces as ``-``, apostrophes
    and other signs dropped (``o'brienpat`` -> ``obrienpat``); ``""`` when nothing is left."""
    folded = unicodedata.normalize("NFKD", name.replace("ß", "ss").replace("ø", "o").replace("Ø", "O"))
    folded = "".join(c for c in folded if not unicodedata.combining(c)).lower()
    folded = re.sub(r"\s+", "-", folded.strip())
    return re.sub(r"[^a-z0-9.\-]", "", folded).strip(".-")


def display_name(name: str) -> str:
    """A name as the LMS wrote it, in one form: Unicode NFC (a macOS zip writes ``ë`` as ``e`` and
    a combining diaeresis, NFD), bytes a file system could not decode replaced by ``�``."""
    name = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return unicodedata.normalize("NFC", name)


def lms_identity(filename: str) -> tuple[str | None, str]:
    """``(LMS id or None, name as the LMS wrote it)`` from a download's file name: Canvas's user id
    (the first number), Moodle's participant id (one per student and assignment, see
    :data:`_PATTERNS`); Blackboard names carry none. The name is NFC (:func:`display_name`)."""
    stem = os.path.basename(filename)[: -len(".ipynb")]
    for pat in _PATTERNS:
        m = pat.match(stem)
        if m:
            gd = m.groupdict()
            return gd.get("lms_id"), display_name(gd["student_id"])
    return None, ""


def notebook_key(name: str) -> str:
    """Normalise a notebook file name so LMS renames still match the released one:
    ``'RMSNorm (1).ipynb'``, ``'rmsnorm-2.ipynb'``, ``'rms norm.ipynb'`` -> ``'rmsnorm'``."""
    stem = Path(name).stem if name.endswith(".ipynb") else name
    stem = re.sub(r"\s*\(\d+\)$", "", stem)  # "(1)" copies
    stem = re.sub(r"-\d+$", "", stem)  # Canvas resubmission "-1"
    return re.sub(r"[^a-z0-9]", "", stem.lower())


def parse_lms_name(filename: str) -> dict | None:
    """``{'student_id', 'file_id'[, 'timestamp'][, 'late']}`` from an LMS download's file name,
    or None. ``late`` is True where the LMS wrote it into the name (Canvas ``_LATE_``)."""
    base = os.path.basename(filename)
    if not base.endswith(".ipynb"):
        return None
    stem = base[: -len(".ipynb")]
    for pat in _PATTERNS:
        m = pat.match(stem)
        if m:
            gd = {k: v for k, v in m.groupdict().items() if v is not None}
            sid = ascii_id(gd["student_id"]) or (f"lms{gd['lms_id']}" if gd.get("lms_id") else "")
            if not re.fullmatch(r"[a-z0-9][a-z0-9_.\-]*", sid):  # never "", "." or ".."
                return None
            out = {"student_id": sid, "file_id": gd["file_id"] + ".ipynb"}
            if gd.get("late"):
                out["late"] = True
            if "timestamp" in gd:
                d = gd["timestamp"].split("-")
                out["timestamp"] = f"{d[0]}-{d[1]}-{d[2]} {d[3]}:{d[4]}:{d[5]}"
            return out
    return None


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

    def collect(self, submitted_file: str) -> dict | None:
        info = parse_lms_name(submitted_file)
        if info is None:
            self.log.warning("Not an LMS submission name, skipped: %s", submitted_file)
            return None
        info["student_id"] = self.resolved.get(os.path.basename(submitted_file), info["student_id"])
        keys = {notebook_key(r): r for r in self._released()}
        real = keys.get(notebook_key(info["file_id"]))
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
            (:func:`grader.handgrades.capture`), to carry over where the answer is unchanged.
        in_place: the course's own ``submitted/`` was the input (:mod:`grader.inplace`).
        changed: in place, ``{(assignment, student): the run that graded it, or None}`` for each
            notebook changed since it was last graded (graded again as a resubmission).
        notes: lines for the run's log about what was collected (not about one file).
        as_collected: ``{"<student>/<assignment>": sha256}`` of the notebooks to grade as they
            were before repair (:func:`grader.inplace.remember_graded` records them once graded).
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


#: ``{"<student>/<assignment>": sha256}`` of what was last received for each submission.
RECEIVED = "received.json"


#: ``{"<student>/<assignment>": true}`` where the LMS marked the graded download late (Canvas).
LMS_LATE = "lms_late.json"

#: ``{"<student>/<assignment>": file name}``: the LMS download each graded submission came from
#: (its name carries what the LMS's bulk feedback upload matches on, :func:`grader.lms.feedback_zips`).
LMS_FILES = "lms_files.json"


def _received(tree: CourseTree, name: str = RECEIVED) -> dict:
    path = tree.logs / name
    return json.loads(path.read_text()) if path.is_file() else {}


def received_hashes(tree: CourseTree) -> dict[str, str]:
    """``{"<student>/<assignment>": sha256}`` of the files last received for each submission
    (``logs/received.json``; graded in place from ``submitted/``: its notebooks as found there
    when new or changed, :mod:`grader.inplace`)."""
    return _received(tree)


def lms_late(tree: CourseTree) -> set[tuple[str, str]]:
    """``(assignment, student)`` whose graded download the LMS marked late."""
    return {(k.split("/")[1], k.split("/")[0]) for k, v in _received(tree, LMS_LATE).items() if v}


def lms_files(tree: CourseTree) -> dict[tuple[str, str], str]:
    """``{(assignment, student): file name}`` of the LMS download each submission was collected
    from (the latest batch's, for a resubmission); students from an nbgrader tree have none."""
    return {(k.split("/")[1], k.split("/")[0]): v for k, v in _received(tree, LMS_FILES).items()}


def lms_kind(filename: str) -> str | None:
    """``"canvas"``, ``"moodle"`` or ``"blackboard"``: which LMS named this download (by the
    pattern of :data:`_PATTERNS` its name matches), or None."""
    stem = os.path.basename(filename).removesuffix(".ipynb")
    for kind, pat in zip(("blackboard", "moodle", "canvas"), _PATTERNS):
        if pat.match(stem):
            return kind
    return None


def _remember(tree: CourseTree, entries: dict, name: str = RECEIVED) -> None:
    tree.logs.mkdir(parents=True, exist_ok=True)
    path = tree.logs / name
    part = path.with_suffix(".part")
    part.write_text(json.dumps({**_received(tree, name), **entries}, indent=1, sort_keys=True))
    os.replace(part, path)


_hash = files_hash


def _sort_out(course: Course, out: Collected, incoming: dict[tuple[str, str], list[Path]]) -> dict[str, str]:
    """Which incoming submissions are unchanged (same bytes as last received, still there), which
    replace an earlier one (moved aside, hand grades captured); returns their new hashes."""
    tree, seen = course.tree, _received(course.tree)
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


#: The zip header flag that says an entry's name is UTF-8 (APPNOTE.TXT, general purpose bit 11).
ZIP_UTF8_FLAG = 0x800


def zip_member_name(member: zipfile.ZipInfo) -> str:
    """An entry's name as its writer meant it. Without the UTF-8 flag, Python's ``zipfile``
    decodes a name as cp437 (the format's default); but Linux ``zip`` and most LMS exports write
    UTF-8 bytes without setting the flag, so ``müllerzoë`` would read as ``m├╝llerzo├½``. The
    name's bytes are decoded again as UTF-8 when they are valid UTF-8 (a real cp437 name with
    letters above 127 almost never is), else left as cp437."""
    if member.flag_bits & ZIP_UTF8_FLAG:
        return member.filename
    try:
        return member.filename.encode("cp437").decode("utf-8")
    except UnicodeError:  # not cp437-decoded (a metadata_encoding was given) or not UTF-8 bytes
        return member.filename


#: A participant's folder in Moodle's "Download submissions in folders" zip:
#: ``<Full name>_<participant id>_assignsubmission_<plugin>_/`` (the file plugin's files below it,
#: in the student's own subfolders if they made any).
_MOODLE_FOLDER = re.compile(r"^[^_/]+_\d+_assignsubmission_[a-z]+_$")

#: What reading a zip entry raises when its bytes are damaged (CRC, deflate stream, truncation).
_ZIP_ENTRY_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError)


def download_name(parts: list[str]) -> str:
    """The name a file of an LMS download is collected under, from its path in the download:
    its own name, or in a Moodle participant folder the flat name Moodle gives it without
    folders (``Jane Doe_12345_assignsubmission_file_/rmsnorm.ipynb`` ->
    ``Jane Doe_12345_assignsubmission_file_rmsnorm.ipynb``), so that both layouts identify the
    student alike."""
    for folder in reversed(parts[:-1]):
        if _MOODLE_FOLDER.match(folder):
            return folder + parts[-1]
    return parts[-1]


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
        for i, f in enumerate(sorted(p for p in path.rglob("*") if p.is_file())):
            put(i, f.relative_to(path).as_posix(), f.read_bytes)
    return out


def _newest_first(info: dict, filename: str = "") -> tuple:
    """Sort key among one student's files for one assignment, oldest first: the LMS timestamp
    (Blackboard), Canvas's attachment id (a later upload has a higher one), then the re-download
    number (``rmsnorm (2).ipynb`` after ``rmsnorm (1).ipynb``)."""
    stem = info["file_id"][: -len(".ipynb")]
    m = re.search(r"(?:\((\d+)\)|-(\d+))$", stem)
    copy = int(next(g for g in m.groups() if g is not None)) if m else 0
    m = _PATTERNS[2].match(os.path.basename(filename).removesuffix(".ipynb"))
    attachment = int(m["attachment"]) if m and lms_kind(filename) == "canvas" else 0
    return (info.get("timestamp", ""), attachment, copy)


def notebook_problem(path: Path) -> str | None:
    """Why the file at ``path`` cannot be graded as a notebook (not JSON, not a notebook), or None
    (:func:`grader.notebooks.read_notebook_leniently`, which repair uses too)."""
    from .notebooks import read_notebook_leniently

    return read_notebook_leniently(path)[2]


@dataclass
class _Found:
    """One file of the download for one student and assignment."""

    info: dict
    file: Path
    where: str  # its path in the download
    problem: str | None = None  # why it is not a readable notebook


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
        if a is None:
            skipped[where] = f"no assignment has a notebook named {info['file_id']!r}"
            continue
        candidates.setdefault((a, info["student_id"]), []).append(_Found(info, f, where, notebook_problem(f)))
    if not candidates:
        shown = "; ".join(f"{n}: {why}" for n, why in list(skipped.items())[:5])
        hint = f"; for an nbgrader tree, give {path / 'submitted'}" if (path / "submitted").is_dir() else ""
        raise ValueError(f"{path}: none of its {len(files)} files is a notebook of an assignment "
                         f"named the way an LMS names downloads ({shown or 'no files'}){hint}")
    return candidates


def _choose(a: str, st: str, found: list[_Found], out: Collected) -> _Found:
    """The one file of ``found`` to grade: the newest readable notebook (:func:`_newest_first`),
    else the newest; every other one is listed in ``out.skipped`` with the reason, and a newer
    download that is not a notebook is flagged."""
    order = sorted(found, key=lambda c: (c.problem is None, _newest_first(c.info, c.file.name), c.where))
    chosen = order[-1]
    newest = max(found, key=lambda c: (_newest_first(c.info, c.file.name), c.where))
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
    return chosen


def _known_lms_ids(tree: CourseTree) -> dict[str, str]:
    """``{LMS user id: student id}`` of the students already in the gradebook."""
    from nbgrader.api import Gradebook

    from sqlalchemy.exc import SQLAlchemyError

    from .state import gradebook_problem

    if tree.is_sqlite and (not tree.gradebook_path.is_file() or gradebook_problem(tree)):
        # Opening an empty or broken file with nbgrader would write a new schema into it: leave
        # it untouched for the run's own check, which refuses it and names a good backup.
        return {}
    try:
        with Gradebook(tree.gradebook_url) as gb:
            return {s.lms_user_id: s.id for s in gb.students if s.lms_user_id}
    except SQLAlchemyError:  # an unreadable gradebook is refused by the run's own check, with a backup named
        return {}


def moodle_participants(tree: CourseTree) -> dict[tuple[str, str], str]:
    """``{(assignment, student): Moodle participant id}`` of the students collected from Moodle
    downloads (read from each one's download name, ``logs/lms_files.json``). Moodle numbers a
    student anew in each assignment (``assign_user_mapping``), and its grading worksheet writes
    that number as ``Participant <id>``."""
    return {k: lms_identity(v)[0] for k, v in lms_files(tree).items() if lms_kind(v) == "moodle"}


def resolve_students(tree: CourseTree, names: list[str]) -> dict[str, str]:
    """``{file name: student id}`` for LMS downloads that carry an LMS id (Canvas, Moodle).

    Canvas: a student the gradebook already knows by that Canvas user id keeps their id (stable
    across batches). A new one gets the id made from their name (:func:`ascii_id`), unless another
    Canvas user has it already, in the gradebook or in this download: then both new ones get
    ``<name>-<user id>`` (``leejohn-10011``, ``leejohn-10012``).

    Moodle: its number is a participant id, one per student *and assignment*, so it only says
    who a student is within one assignment: a participant id seen before keeps its student; a new
    one gets the id made from the full name, which links a student's assignments (Moodle gives
    nothing else to link them by), unless two participants of one assignment have that name, or
    the student with that id already has another participant id in this assignment: then
    ``<name>-<participant id>``.

    The gradebook keeps the name as written and the Canvas user id (:func:`record_identities`),
    ``logs/lms_files.json`` the Moodle participant ids, and ``roster.csv`` lists them.
    """
    known = _known_lms_ids(tree)
    taken: dict[str, set[str]] = {}  # the name an id was made from -> Canvas ids that hold it
    for lms, sid in known.items():
        taken.setdefault(sid.removesuffix(f"-{lms}"), set()).add(lms)
    moodle_known: dict[str, str] = {}  # participant id -> student
    moodle_held: dict[tuple[str, str], set[str]] = {}  # (student, notebook) -> participant ids
    for (a, st), name in lms_files(tree).items():
        if lms_kind(name) == "moodle":
            pid = lms_identity(name)[0]
            moodle_known[pid] = st
            moodle_held.setdefault((st, notebook_key(parse_lms_name(name)["file_id"])), set()).add(pid)
    parsed = {}
    for n in names:
        info = parse_lms_name(n)
        lms = lms_identity(n)[0] if info is not None else None
        if lms:
            parsed[n] = (info["student_id"], lms, lms_kind(n), notebook_key(info["file_id"]))
    by_base: dict[str, set[str]] = {}
    moodle_new: dict[tuple[str, str], set[str]] = {}
    for base, lms, kind, nb in parsed.values():
        if kind == "moodle" and lms not in moodle_known:
            moodle_new.setdefault((base, nb), set()).add(lms)
        elif kind != "moodle" and lms not in known:
            by_base.setdefault(base, set()).add(lms)
    out = {}
    for n, (base, lms, kind, nb) in parsed.items():
        if kind == "moodle":
            if lms in moodle_known:
                out[n] = moodle_known[lms]
            elif (len(moodle_new[(base, nb)]) > 1 or moodle_held.get((base, nb), {lms}) != {lms}
                  or base in taken):
                out[n] = f"{base}-{lms}"
            else:
                out[n] = base
        elif lms in known:
            out[n] = known[lms]
        elif len(by_base[base]) > 1 or taken.get(base, {lms}) != {lms}:
            out[n] = f"{base}-{lms}"
        else:
            out[n] = base
    return out


def record_identities(tree: CourseTree, names: dict[str, str]) -> None:
    """Keep each student's name (as the LMS wrote it, NFC) and Canvas user id in the gradebook:
    ``{file name: student id}``. A Moodle participant id is not a user id (one per assignment):
    it stays in ``logs/lms_files.json`` (:func:`moodle_participants`)."""
    from nbgrader.api import Gradebook

    with Gradebook(tree.gradebook_url) as gb:
        for n, sid in sorted(names.items()):
            lms, display = lms_identity(n)
            first, _, last = display.partition(" ") if " " in display else ("", "", display)
            extra = {"lms_user_id": lms} if lms_kind(n) == "canvas" else {}
            gb.update_or_create_student(sid, first_name=first or None, last_name=last or None, **extra)


def write_roster(tree: CourseTree, path: Path) -> Path:
    """``roster.csv``: ``student_id,lms_id,name`` for every student in the gradebook. ``lms_id`` is
    the Canvas user id, or for a student from Moodle downloads the identifier of each assignment's
    grading worksheet, ``Participant <participant id> (<assignment>)``, joined by ``; ``."""
    import csv

    from nbgrader.api import Gradebook

    moodle: dict[str, list[str]] = {}
    for (a, st), pid in sorted(moodle_participants(tree).items()):
        moodle.setdefault(st, []).append(f"Participant {pid} ({a})")
    with Gradebook(tree.gradebook_url) as gb:
        rows = sorted((s.id, "; ".join(moodle[s.id]) if s.id in moodle else s.lms_user_id or "",
                       " ".join(x for x in (s.first_name, s.last_name) if x)) for s in gb.students)
    part = Path(path).with_name(Path(path).name + ".part")
    try:
        with open(part, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["student_id", "lms_id", "name"])
            w.writerows(rows)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return Path(path)


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
            course.zip_collect(a, "grader.collect.LmsFileNameCollector")
        _remember(tree, hashes)
        _remember(tree, {k: v for k, v in late.items() if k in hashes}, LMS_LATE)
        _remember(tree, {f"{st}/{a}": fs[0].name for (a, st), fs in chosen.items()}, LMS_FILES)
        record_identities(tree, {f.name: st for (a, st), fs in chosen.items() for f in fs})
    out.students = sorted({st for _, st in batch})
    return out


def _drop_earlier(course: Course, assignment: str, student: str, out: Collected) -> None:
    """Before a resubmission: the earlier one's hand grades are captured, it moves from
    ``submitted/`` to ``logs/replaced/<student>/<assignment>/`` and leaves the gradebook (so that
    its timestamp, and lateness, do not stay with the new one)."""
    from .handgrades import capture

    out.hand_grades += capture(course.tree, assignment, student)
    keep = course.tree.logs / "replaced" / student / assignment
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
        _remember(tree, sort_out_in_place(course, out, pairs, _received(tree)))
    else:  # a resubmission replaces the earlier one whole
        hashes = _sort_out(course, out, {(a, st): sorted((submissions / st / a).glob("*.ipynb"))
                                         for a, st in pairs})
        for a, st in out.pairs:
            shutil.rmtree(tree.submitted(st, a), ignore_errors=True)
            try:
                shutil.copytree(submissions / st / a, tree.submitted(st, a))
            except OSError:  # a full disk leaves no half-copied submission
                shutil.rmtree(tree.submitted(st, a), ignore_errors=True)
                raise
        _remember(tree, hashes)
    out.students = sorted({st for _, st in pairs})
    return out
