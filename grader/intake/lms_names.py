"""LMS downloads' file names, and who is who: what a name says (student, LMS id, notebook, time),
and the student ids the grader gives the people behind them.

* :func:`parse_lms_name` reads Canvas, Moodle, Blackboard and plain ``<student>_<notebook>.ipynb``
  names (:data:`_PATTERNS`); :func:`download_name` reads Moodle's "in folders" layout as its flat
  one; :func:`zip_member_name` decodes a zip entry's name as its writer meant it.
* :func:`resolve_students` turns LMS names into stable student ids across batches (Canvas user
  ids kept in the gradebook, Moodle participant ids in ``logs/lms_files.json``);
  :func:`write_roster` lists them in ``roster.csv``.
"""
from __future__ import annotations

import os
import re
import unicodedata
import zipfile
from pathlib import Path

from ..ledger import store
from ..ledger.course import CourseTree

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


def lms_kind(filename: str) -> str | None:
    """``"canvas"``, ``"moodle"`` or ``"blackboard"``: which LMS named this download (by the
    pattern of :data:`_PATTERNS` its name matches), or None."""
    stem = os.path.basename(filename).removesuffix(".ipynb")
    for kind, pat in zip(("blackboard", "moodle", "canvas"), _PATTERNS):
        if pat.match(stem):
            return kind
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


def newest_first(info: dict, filename: str = "") -> tuple:
    """Sort key among one student's files for one assignment, oldest first: the LMS timestamp
    (Blackboard), Canvas's attachment id (a later upload has a higher one), then the re-download
    number (``rmsnorm (2).ipynb`` after ``rmsnorm (1).ipynb``)."""
    stem = info["file_id"][: -len(".ipynb")]
    m = re.search(r"(?:\((\d+)\)|-(\d+))$", stem)
    copy = int(next(g for g in m.groups() if g is not None)) if m else 0
    m = _PATTERNS[2].match(os.path.basename(filename).removesuffix(".ipynb"))
    attachment = int(m["attachment"]) if m and lms_kind(filename) == "canvas" else 0
    return (info.get("timestamp", ""), attachment, copy)



def lms_late(tree: CourseTree) -> set[tuple[str, str]]:
    """``(assignment, student)`` whose graded download the LMS marked late (``logs/lms_late.json``)."""
    return {store.pair(k) for k, late in store.lms_late(tree).items() if late}


def lms_files(tree: CourseTree) -> dict[tuple[str, str], str]:
    """``{(assignment, student): file name}`` of the LMS download each submission was collected
    from (the latest batch's, for a resubmission; ``logs/lms_files.json``); students from an
    nbgrader tree have none."""
    return {store.pair(k): v for k, v in store.lms_files(tree).items()}


def _known_lms_ids(tree: CourseTree) -> dict[str, str]:
    """``{LMS user id: student id}`` of the students already in the gradebook."""
    from nbgrader.api import Gradebook

    from sqlalchemy.exc import SQLAlchemyError

    from ..ledger.state import gradebook_problem

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
    with store.atomic_path(path) as part, open(part, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "lms_id", "name"])
        w.writerows(rows)
    return Path(path)

