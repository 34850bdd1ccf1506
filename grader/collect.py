"""Collect: bring submissions into nbgrader's ``submitted/<student>/<assignment>/`` tree.

Three inputs are recognised, in this order:

1. an nbgrader ``submitted/`` tree (``<student>/<assignment>/*.ipynb``): copied as is;
2. a folder or ``.zip`` of ``.ipynb`` files named the way an LMS download names them: handed
   to nbgrader's own ``zip_collect`` app, once per assignment, with
   :class:`LmsFileNameCollector` reading the student id, timestamp and notebook name from the
   file name (Canvas, Moodle, Blackboard and plain ``<student>_<notebook>.ipynb`` patterns);
The demo class (:mod:`grader.demo`) is written as an nbgrader ``submitted/`` tree first and
collected as case 1.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import unicodedata
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.plugins.zipcollect import FileNameCollectorPlugin

from .apps import Course
from .course import CourseTree

# Canvas:     doejane_12345_67890_rmsnorm.ipynb   (late: doejane_LATE_12345_67890_rmsnorm.ipynb)
# Moodle:     Jane Doe_12345_assignsubmission_file_rmsnorm.ipynb
# Blackboard: Lesson 16_jdoe_attempt_2026-11-20-09-00-00_rmsnorm.ipynb
# Plain:      jdoe_rmsnorm.ipynb  /  jdoe-rmsnorm.ipynb
# Names may hold any letter (müllerzoë, muñozjosé), apostrophes and, in Moodle, spaces.
_PATTERNS = [
    re.compile(r"^.*?_(?P<student_id>[^_]+)_attempt_(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)_(?P<file_id>.+)$"),
    re.compile(r"^(?P<name>[^_]+)_(?P<student_id>\d+)_assignsubmission_file_(?P<file_id>.+)$"),
    re.compile(r"^(?P<student_id>[^_]+?)_(?P<late>LATE_)?(?P<lms_id>\d+)_\d+_(?P<file_id>.+)$"),
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


def lms_identity(filename: str) -> tuple[str | None, str]:
    """``(LMS user id or None, name as the LMS wrote it)`` from a download's file name: Canvas's
    user id (the first number), Moodle's participant id; Blackboard names carry none."""
    stem = os.path.basename(filename)[: -len(".ipynb")]
    for pat in _PATTERNS:
        m = pat.match(stem)
        if m:
            gd = m.groupdict()
            if gd.get("name"):  # Moodle: "Jane Doe_12345_..."
                return gd["student_id"], gd["name"]
            return gd.get("lms_id"), gd["student_id"]
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
            same download): kept as they are, not a resubmission.
        flags: ``{student: [notes]}`` for the report (e.g. the LMS marked a file late).
        hand_grades: the hand grades of each replaced submission, with the answers they graded
            (:func:`grader.handgrades.capture`), to carry over where the answer is unchanged.
    """

    source: str
    students: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    replaced: list[tuple[str, str]] = field(default_factory=list)
    unchanged: list[tuple[str, str]] = field(default_factory=list)
    flags: dict[str, list[str]] = field(default_factory=dict)
    hand_grades: list = field(default_factory=list)

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


def _hash(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in sorted(files, key=lambda p: p.name):
        h.update(f.read_bytes())
    return h.hexdigest()


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


def _lms_files(path: Path, tmp: Path) -> list[Path]:
    if path.is_file() and path.suffix == ".zip":
        with zipfile.ZipFile(path) as zf:
            for i, member in enumerate(zf.infolist()):
                name = os.path.basename(zip_member_name(member))
                if member.is_dir() or not name or name.startswith("."):
                    continue
                # flatten, never trust member paths (zip-slip); a name seen twice (two folders
                # of the zip) goes to a folder of its own and is sorted out like any duplicate
                dest = tmp / name if not (tmp / name).exists() else tmp / f"copy{i}" / name
                dest.parent.mkdir(exist_ok=True)
                dest.write_bytes(zf.read(member))
        return sorted(p for p in tmp.rglob("*") if p.is_file())
    return sorted(p for p in path.rglob("*") if p.is_file())


def _newest_first(info: dict) -> tuple:
    """Sort key among one student's files for one assignment: the latest LMS timestamp, then
    the highest re-download number (``rmsnorm (2).ipynb`` after ``rmsnorm (1).ipynb``)."""
    stem = info["file_id"][: -len(".ipynb")]
    m = re.search(r"(?:\((\d+)\)|-(\d+))$", stem)
    copy = int(next(g for g in m.groups() if g is not None)) if m else 0
    return (info.get("timestamp", ""), copy)


def _lms_candidates(tree: CourseTree, path: Path, assignments: list[str], tmp: Path,
                    skipped: dict[str, str]) -> dict[tuple[str, str], list[tuple[dict, Path]]]:
    """``{(assignment, student): [(parsed name, file)]}`` for the LMS download at ``path``
    (a zip is extracted into ``tmp``); what is not collected goes into ``skipped``.

    Raises:
        ValueError: no file is a notebook of an assignment with an LMS-style name.
    """
    files = _lms_files(path, tmp)
    candidates: dict[tuple[str, str], list[tuple[dict, Path]]] = {}
    ids = resolve_students(tree, [f.name for f in files])
    for f in files:
        info = parse_lms_name(f.name)
        if info is None:
            skipped[f.name] = "file name not recognised as an LMS submission"
            continue
        info["student_id"] = ids.get(f.name, info["student_id"])
        a = _assignment_of(info["file_id"], tree, assignments)
        if a is None:
            skipped[f.name] = f"no assignment has a notebook named {info['file_id']!r}"
            continue
        candidates.setdefault((a, info["student_id"]), []).append((info, f))
    if not candidates:
        shown = "; ".join(f"{n}: {why}" for n, why in list(skipped.items())[:5])
        hint = f"; for an nbgrader tree, give {path / 'submitted'}" if (path / "submitted").is_dir() else ""
        raise ValueError(f"{path}: none of its {len(files)} files is a notebook of an assignment "
                         f"named the way an LMS names downloads ({shown or 'no files'}){hint}")
    return candidates


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


def resolve_students(tree: CourseTree, names: list[str]) -> dict[str, str]:
    """``{file name: student id}`` for LMS downloads that carry an LMS user id (Canvas, Moodle).

    A student the gradebook already knows by that LMS id keeps their id (stable across batches).
    A new one gets the id made from their name (:func:`ascii_id`), unless another LMS user has
    it already, in the gradebook or in this download: then both new ones get ``<name>-<lms id>``
    (``leejohn-10011``, ``leejohn-10012``). The gradebook keeps the LMS id and the name as
    written (:func:`record_identities`), and ``roster.csv`` lists them.
    """
    known = _known_lms_ids(tree)
    taken: dict[str, set[str]] = {}  # the name an id was made from -> LMS ids that hold it
    for lms, sid in known.items():
        taken.setdefault(sid.removesuffix(f"-{lms}"), set()).add(lms)
    parsed = {}
    for n in names:
        info = parse_lms_name(n)
        lms = lms_identity(n)[0] if info is not None else None
        if lms:
            parsed[n] = (info["student_id"], lms)
    by_base: dict[str, set[str]] = {}
    for base, lms in parsed.values():
        if lms not in known:
            by_base.setdefault(base, set()).add(lms)
    out = {}
    for n, (base, lms) in parsed.items():
        if lms in known:
            out[n] = known[lms]
        elif len(by_base[base]) > 1 or taken.get(base, {lms}) != {lms}:
            out[n] = f"{base}-{lms}"
        else:
            out[n] = base
    return out


def record_identities(tree: CourseTree, names: dict[str, str]) -> None:
    """Keep each student's LMS user id and name (as the LMS wrote it) in the gradebook:
    ``{file name: student id}``."""
    from nbgrader.api import Gradebook

    with Gradebook(tree.gradebook_url) as gb:
        for n, sid in sorted(names.items()):
            lms, display = lms_identity(n)
            first, _, last = display.partition(" ") if " " in display else ("", "", display)
            gb.update_or_create_student(sid, first_name=first or None, last_name=last or None,
                                        lms_user_id=lms)


def write_roster(tree: CourseTree, path: Path) -> Path:
    """``roster.csv``: ``student_id,lms_id,name`` for every student in the gradebook."""
    import csv

    from nbgrader.api import Gradebook

    with Gradebook(tree.gradebook_url) as gb:
        rows = sorted((s.id, s.lms_user_id or "", " ".join(x for x in (s.first_name, s.last_name) if x))
                      for s in gb.students)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "lms_id", "name"])
        w.writerows(rows)
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
        for (a, st), found in sorted(candidates.items()):
            # one submission per student and assignment: the newest download
            found.sort(key=lambda c: _newest_first(c[0]), reverse=True)
            info, f = found[0]
            for _, other in found[1:]:
                out.skipped[str(other.name)] = (f"{st} has more than one {a} notebook here: "
                                                f"{f.name!r} (the newest download) is graded instead")
            by_assignment.setdefault(a, []).append(f)
            late[f"{st}/{a}"] = bool(info.get("late"))
            if info.get("late"):
                out.flags.setdefault(st, []).append(f"{a}: the LMS marked the download {f.name!r} late")
        batch = set(candidates)
        chosen = {pr: [sorted(found, key=lambda c: _newest_first(c[0]))[-1][1]] for pr, found in candidates.items()}
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
    if submissions == tree.submitted().resolve():
        out._pairs = pairs
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
