"""The course's bookkeeping under ``logs/``: every record a run keeps for the next one, in one place.

Each record is one JSON file under ``logs/`` (:data:`RECORDS` says what each holds), and the run
history is ``logs/runs.jsonl``. The rest of the grader reads and writes them through the accessors
below (:func:`graded`, :func:`write_graded`, :func:`received`, ...), never with a path, ``json`` or
``os.replace`` of its own:

* **one writer**, :func:`atomic_path`: a file is written beside its place as
  ``<name>.<pid>-<n>.part``, flushed to disk (``fsync``), renamed over it (``os.replace``) and the
  folder flushed, so a run stopped at any point (Ctrl-C, ``kill -9``, a full disk) leaves the earlier
  file or the new one, whole; a write that fails removes its part. The grader's other outputs
  (``grades.csv``, ``roster.csv``, the LMS files, repaired notebooks, gradebook backups, state
  archives, the user's cache) are written by it too, and whole folders by :func:`atomic_dir`;
* **one rule for a damaged record** (not JSON, or not the record's shape: edited by hand, a disk
  that filled up): it reads as nothing recorded, is never written over, and is moved aside to
  ``<name>.damaged`` (``.damaged.1``, ... when that exists) by :func:`set_aside`, with one line that
  names it and says what the run does without it. A run sets every damaged record aside at the end
  of its prepare stage (:func:`set_aside_damaged`) and says each one there, once; a writer that still
  finds one in its way sets it aside first and says so.
* The run log is append-only (:func:`append_run`): a line that cannot be read (a run killed while
  it wrote that line) is skipped by :func:`read_runs`, and every other line is kept.

This module imports nothing of the grader's at run time: the kernel launcher (``grader/kernel/sandbox.py``,
run by path) uses it for the user's cache (:func:`cached`, :func:`cache`).
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:  # annotations only
    from .course import CourseTree

# --------------------------------------------------------------------------- the writer

_parts = itertools.count()


def _part_of(path: Path) -> Path:
    """A name beside ``path`` that no other writer uses: ``<name>.<pid>-<n>.part``."""
    return path.with_name(f"{path.name}.{os.getpid()}-{next(_parts)}.part")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _fsync(path: Path, flags: int = os.O_RDONLY) -> None:
    with contextlib.suppress(OSError):  # a file system that cannot fsync (some FUSE mounts) still renames
        fd = os.open(path, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Write ``path`` whole or not at all: the ``with`` block writes the yielded part file (which
    does not exist yet) beside it; when the block ends the part is flushed to disk and renamed
    over ``path`` (the folder is made first if need be). An exception in the block (a full disk,
    Ctrl-C) removes the part and leaves ``path`` as it was.

    Raises:
        OSError: the folder cannot be made, or the rename fails (the part is removed).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = _part_of(path)
    try:
        yield part
        _fsync(part)
        os.replace(part, path)
    except BaseException:
        _remove(part)
        raise
    _fsync(path.parent, os.O_RDONLY | os.O_DIRECTORY)


@contextlib.contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """A folder put in place whole: the ``with`` block fills the yielded part folder (made empty);
    when it ends an earlier ``path`` is removed and the part renamed to ``path``. An exception
    (a full disk) removes the part and leaves ``path`` as it was."""
    path = Path(path)
    part = _part_of(path)
    part.mkdir(parents=True)
    try:
        yield part
        if path.exists():
            _remove(path)
        os.replace(part, path)
    finally:
        _remove(part)


def write_json(path: Path, value: Any) -> None:
    """``value`` as JSON (indented, keys sorted, UTF-8) at ``path``, through :func:`atomic_path`."""
    text = json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    with atomic_path(path) as part:
        part.write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------- the records

def key(assignment: str, student: str) -> str:
    """A submission's key in the records: ``"<student>/<assignment>"``."""
    return f"{student}/{assignment}"


def pair(k: str) -> tuple[str, str]:
    """``(assignment, student)`` of a record's key ``"<student>/<assignment>"``."""
    student, _, assignment = k.partition("/")
    return assignment, student


def _dict_of(entry: str, ok: Callable[[str, Any], bool]) -> Callable[[Any], str | None]:
    """A shape check: a dict whose every item passes ``ok``; ``entry`` says what one should be."""
    def check(data: Any) -> str | None:
        if not isinstance(data, dict):
            return f"it holds a {type(data).__name__}, not one entry per {entry.split(':')[0]}"
        bad = next((k for k, v in data.items() if not ok(k, v)), None)
        return None if bad is None else f"its entry {bad!r} is not {entry}"
    return check


def _per_submission(value_ok: Callable[[Any], bool]) -> Callable[[str, Any], bool]:
    return lambda k, v: k.count("/") == 1 and value_ok(v)


def _pairs_shape(data: Any) -> str | None:
    if not isinstance(data, list):
        return f"it holds a {type(data).__name__}, not a list of [assignment, student]"
    bad = next((p for p in data if not (isinstance(p, list) and len(p) == 2
                                        and all(isinstance(s, str) for s in p))), None)
    return None if bad is None else f"its item {bad!r} is not [assignment, student]"


_HAND_GRADE = {"assignment", "student", "notebook", "grade_id", "manual_score", "answer"}
_HAND_GRADE_MORE = {"comment", "test"}


def _hand_grades_shape(data: Any) -> str | None:
    if not isinstance(data, list):
        return f"it holds a {type(data).__name__}, not a list of hand grades"
    bad = next((g for g in data if not (isinstance(g, dict)
                                        and _HAND_GRADE <= set(g) <= _HAND_GRADE | _HAND_GRADE_MORE)), None)
    return None if bad is None else f"its item {bad!r} is not a hand grade ({', '.join(sorted(_HAND_GRADE))})"


def _flags_ok(k: str, v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(n, list) and all(isinstance(s, str) for s in n) for n in v.values())


@dataclass(frozen=True)
class Record:
    """One bookkeeping file under ``logs/``.

    Attributes:
        name: its file name.
        holds: what it holds, in words (docs/STATE.md says the same).
        empty: what it reads as when absent or damaged.
        shape: what is wrong with a parsed value (None: nothing).
        without: what a run does without it (said when a damaged one is set aside).
        kept: kept by ``make clean`` (not grading state).
    """

    name: str
    holds: str
    empty: Callable[[], Any]
    shape: Callable[[Any], str | None]
    without: str
    kept: bool = False


GRADED = "graded.json"
COLLECTED_BY = "collected_by.json"
UNREADABLE = "unreadable.json"
HANDGRADES = "handgrades.json"
GRADED_HASHES = "graded_hashes.json"
RECEIVED = "received.json"
LMS_LATE = "lms_late.json"
LMS_FILES = "lms_files.json"
GENERATED = "generated.json"
CANARY = "canary.json"
FLAGS = "flags.json"
CLEANED = "cleaned.json"
RUN_LOG = "runs.jsonl"

_RECORDS = [
    Record(GRADED, "[[assignment, student], ...]: the submissions whose autograde and scoring finished",
           lambda: None, _pairs_shape,
           "every submission with an autograded notebook counts as graded, as in a course graded before "
           "this record was kept"),
    Record(COLLECTED_BY, '{"<student>/<assignment>": run id}: the run that received each submission',
           dict, _dict_of("student/assignment: a run id", _per_submission(lambda v: isinstance(v, (str, int)))),
           "a submission an earlier run left ungraded is named without that run's id"),
    Record(UNREADABLE, '{"<student>/<assignment>": {"reason", "received"}}: files that were not notebooks',
           dict, _dict_of("student/assignment: {'reason': ..., 'received': ...}",
                          _per_submission(lambda v: isinstance(v, dict))),
           "the submissions it listed as unreadable are no longer reported so (their scores stay 0)"),
    Record(HANDGRADES, "[hand grade, ...]: hand grades and comments of replaced submissions, not yet written back",
           list, _hand_grades_shape,
           "the hand grades and comments it held are not written back: the resubmitted answers wait for a "
           "grader in formgrader (what they were is in that file)"),
    Record(GRADED_HASHES, '{"<student>/<assignment>": {"hashes": [sha256], "run": id}}: notebooks as graded',
           dict, _dict_of("student/assignment: {'hashes': [...], 'run': ...}", _per_submission(
               lambda v: isinstance(v, dict) and isinstance(v.get("hashes"), list)
               and all(isinstance(h, str) for h in v["hashes"]))),
           "every submission graded in place is graded again (hand grades kept where the answer is unchanged)"),
    Record(RECEIVED, '{"<student>/<assignment>": sha256}: the files last received',
           dict, _dict_of("student/assignment: a sha256", _per_submission(lambda v: isinstance(v, str))),
           "a notebook handed in again unchanged counts as a resubmission, and files recorded as unreadable "
           "are no longer reported so"),
    Record(LMS_LATE, '{"<student>/<assignment>": true}: downloads the LMS marked late',
           dict, _dict_of("student/assignment: true or false", _per_submission(lambda v: isinstance(v, bool))),
           "earlier batches' LMS late marks are not in grades.csv's late column"),
    Record(LMS_FILES, '{"<student>/<assignment>": file name}: the LMS download each submission came from',
           dict, _dict_of("student/assignment: a file name", _per_submission(lambda v: isinstance(v, str))),
           "earlier batches' students are left out of the LMS feedback zips, and a Moodle participant seen "
           "before is named as a new one"),
    Record(GENERATED, '{assignment: {"inputs", "gradebook"}}: what the last generate read and left',
           dict, _dict_of("assignment: {'inputs': ..., 'gradebook': ...}", lambda k, v: isinstance(v, dict)),
           "every assignment is generated again"),
    Record(CANARY, "the canary's last pass: its key, time, run and facts",
           dict, lambda d: None if isinstance(d, dict) else f"it holds a {type(d).__name__}, not a canary's pass",
           "the canary grades the instructor's solutions again (unless the user's cache holds its pass)",
           kept=True),
    Record(FLAGS, '{student: {assignment or "": [note]}}: every batch\'s flags, for the class report',
           dict, _dict_of("student: {assignment: [notes]}", _flags_ok),
           "the class report shows the flags of this run's submissions only"),
    Record(CLEANED, '{"runs": n}: how many lines the run log had when the course was cleaned',
           dict, lambda d: None if isinstance(d, dict) and isinstance(d.get("runs"), int)
           else "it is not {'runs': <number of lines>}",
           "every run in the run log counts as this class's (starting over may ask for a yes)", kept=True),
]
#: ``{file name: Record}``: every JSON record under ``logs/``.
RECORDS = {r.name: r for r in _RECORDS}
#: ``logs/backups/``: gradebook backups (:mod:`grader.ledger.state`) and state archives (:mod:`grader.ledger.reset`).
BACKUPS = "backups"
#: ``logs/release-kept/``: ``release/<assignment>/`` folders that held work when they were
#: regenerated (:mod:`grader.ledger.release`): someone's answers, never grading state.
RELEASE_KEPT = "release-kept"
#: What ``make clean`` keeps of ``logs/``: the backups, the run log, the kept release folders and
#: the records that are not grading state.
KEPT_LOGS = (BACKUPS, RUN_LOG, RELEASE_KEPT, *(r.name for r in _RECORDS if r.kept))


# --------------------------------------------------------------------------- the folders

def backups(tree: CourseTree) -> Path:
    """``logs/backups/``: ``gradebook-<run>[-before|-after].db`` and ``state-<run>.tar.gz``."""
    return tree.logs / BACKUPS


def batch(tree: CourseTree, run_id: str, what: str) -> Path:
    """``logs/batches/<run id>/<what>/``: a batch ``received`` as handed in, and its notebooks as
    they were before repair (``originals``); never overwritten."""
    return tree.logs / "batches" / run_id / what


def release_kept(tree: CourseTree, run_id: str) -> Path:
    """``logs/release-kept/<run id>/``: where a run (or ``make release KEEP=1``) moves each
    ``release/<assignment>/`` that held work before regenerating it (:mod:`grader.ledger.release`)."""
    return tree.logs / RELEASE_KEPT / run_id


def originals(tree: CourseTree) -> Path:
    """``logs/originals/``: notebooks as they were before a repair outside a run (a run keeps its
    own, :func:`batch`)."""
    return tree.logs / "originals"


def replaced(tree: CourseTree, assignment: str, student: str) -> Path:
    """``logs/replaced/<student>/<assignment>/``: a resubmitted assignment's earlier notebooks."""
    return tree.logs / "replaced" / student / assignment


#: ``logs/lms-exports/`` relative to the course root: earlier LMS files kept before a different
#: one replaced them (:mod:`grader.outputs.lms`).
LMS_EXPORTS = Path("logs") / "lms-exports"


def _read(path: Path, rec: Record) -> tuple[Any, str | None]:
    """``(value, what is wrong with the file)``: the empty value when absent or damaged."""
    if not path.is_file():
        return rec.empty(), None
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        return rec.empty(), f"it could not be read ({type(e).__name__}: {e})"
    problem = rec.shape(data)
    return (rec.empty(), problem) if problem else (data, None)


def load(tree: CourseTree, name: str) -> Any:
    """The record ``name`` (a file name of :data:`RECORDS`) as stored; its empty value when absent
    or damaged. Reading never moves or writes anything."""
    return _read(tree.logs / name, RECORDS[name])[0]


def problem(tree: CourseTree, name: str) -> str | None:
    """What is wrong with the record ``name`` (None: sound, or absent)."""
    return _read(tree.logs / name, RECORDS[name])[1]


def set_aside(tree: CourseTree, name: str) -> str | None:
    """Move a damaged record to ``<name>.damaged`` (``.damaged.1``, ... when that exists: never
    written over) and return the one line that says so; None when it is sound or absent."""
    what = problem(tree, name)
    if what is None:
        return None
    path = tree.logs / name
    aside, n = tree.logs / f"{name}.damaged", 0
    while aside.exists():
        n += 1
        aside = tree.logs / f"{name}.damaged.{n}"
    os.replace(path, aside)
    return f"{path}: {what}; kept as {aside}: {RECORDS[name].without}; check it by hand"


def set_aside_damaged(tree: CourseTree) -> list[str]:
    """Every damaged record set aside (:func:`set_aside`), one line each; the parts of writes a
    killed run left (``*.part`` in ``logs/``) removed. Called once per run, holding its lock."""
    if not tree.logs.is_dir():
        return []
    for part in tree.logs.glob("*.part"):
        _remove(part)
    return [line for name in RECORDS if (line := set_aside(tree, name))]


def save(tree: CourseTree, name: str, value: Any, log: Callable[[str], Any] = print) -> None:
    """Write the record ``name`` whole (:func:`write_json`); a damaged one in its way is set aside
    first and said in ``log``.

    Raises:
        ValueError: ``value`` is not the record's shape (a bug: nothing is written).
        OSError: ``logs/`` cannot be written.
    """
    rec = RECORDS[name]
    wrong = rec.shape(json.loads(json.dumps(value)))
    if wrong:
        raise ValueError(f"not written to logs/{name}: {wrong}")
    said = set_aside(tree, name)
    if said:
        log(said)
    write_json(tree.logs / name, value)


def _merge(tree: CourseTree, name: str, entries: dict, log) -> None:
    save(tree, name, {**load(tree, name), **entries}, log)


# --------------------------------------------------------------------------- one accessor per record

def graded(tree: CourseTree) -> set[tuple[str, str]] | None:
    """``logs/graded.json``: ``{(assignment, student)}`` whose autograde and scoring finished;
    None when there is no record (a course graded before it was kept, or a damaged one)."""
    data = load(tree, GRADED)
    return None if data is None else {(a, st) for a, st in data}


def write_graded(tree: CourseTree, pairs, log=print) -> None:
    save(tree, GRADED, sorted([a, st] for a, st in pairs), log)


def collected_by(tree: CourseTree) -> dict[str, str]:
    """``logs/collected_by.json``: ``{"<student>/<assignment>": the run id that received it}``."""
    return {k: str(v) for k, v in load(tree, COLLECTED_BY).items()}


def add_collected_by(tree: CourseTree, pairs, run_id: str, log=print) -> None:
    """Record ``run_id`` as the run that received ``pairs`` (``(assignment, student)``)."""
    _merge(tree, COLLECTED_BY, {key(a, st): run_id for a, st in pairs}, log)


def unreadable(tree: CourseTree) -> dict[str, dict]:
    """``logs/unreadable.json``: ``{"<student>/<assignment>": {"reason": why, "received": sha256}}``."""
    return load(tree, UNREADABLE)


def write_unreadable(tree: CourseTree, entries: dict[str, dict], log=print) -> None:
    save(tree, UNREADABLE, entries, log)


def hand_grades(tree: CourseTree) -> list[dict]:
    """``logs/handgrades.json``: the captured hand grades not yet written back, as dicts."""
    return load(tree, HANDGRADES)


def write_hand_grades(tree: CourseTree, grades: list[dict], log=print) -> None:
    """The hand grades still to write back; the file is removed when there are none."""
    if grades:
        save(tree, HANDGRADES, grades, log)
    elif problem(tree, HANDGRADES) is None:
        (tree.logs / HANDGRADES).unlink(missing_ok=True)
    elif said := set_aside(tree, HANDGRADES):
        log(said)


def graded_hashes(tree: CourseTree) -> dict[str, dict]:
    """``logs/graded_hashes.json``: ``{"<student>/<assignment>": {"hashes": [...], "run": id}}``."""
    return load(tree, GRADED_HASHES)


def write_graded_hashes(tree: CourseTree, record: dict[str, dict], log=print) -> None:
    save(tree, GRADED_HASHES, record, log)


def received(tree: CourseTree) -> dict[str, str]:
    """``logs/received.json``: ``{"<student>/<assignment>": sha256}`` of the files last received."""
    return load(tree, RECEIVED)


def add_received(tree: CourseTree, hashes: dict[str, str], log=print) -> None:
    _merge(tree, RECEIVED, hashes, log)


def lms_late(tree: CourseTree) -> dict[str, bool]:
    """``logs/lms_late.json``: ``{"<student>/<assignment>": marked late by the LMS}``."""
    return load(tree, LMS_LATE)


def add_lms_late(tree: CourseTree, marks: dict[str, bool], log=print) -> None:
    _merge(tree, LMS_LATE, marks, log)


def lms_files(tree: CourseTree) -> dict[str, str]:
    """``logs/lms_files.json``: ``{"<student>/<assignment>": the LMS download's file name}``."""
    return load(tree, LMS_FILES)


def add_lms_files(tree: CourseTree, names: dict[str, str], log=print) -> None:
    _merge(tree, LMS_FILES, names, log)


def generated(tree: CourseTree) -> dict[str, dict]:
    """``logs/generated.json``: ``{assignment: {"inputs": digest, "gradebook": digest}}``."""
    return load(tree, GENERATED)


def write_generated(tree: CourseTree, record: dict[str, dict], log=print) -> None:
    save(tree, GENERATED, record, log)


def canary(tree: CourseTree) -> dict:
    """``logs/canary.json``: the canary's last pass in this course (``{}``: none)."""
    return load(tree, CANARY)


def write_canary(tree: CourseTree, rec: dict, log=print) -> None:
    save(tree, CANARY, rec, log)


def flags(tree: CourseTree) -> dict[str, dict[str, list[str]]]:
    """``logs/flags.json``: ``{student: {assignment or "": [note]}}`` across batches."""
    return load(tree, FLAGS)


def write_flags(tree: CourseTree, history: dict, log=print) -> None:
    save(tree, FLAGS, history, log)


# --------------------------------------------------------------------------- the run log

def _run_lines(tree: CourseTree) -> list[str]:
    path = tree.logs / RUN_LOG
    return [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()] if path.is_file() else []


def _parsed(line: str) -> dict | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def append_run(tree: CourseTree, record: dict) -> Path:
    """Append one run's record to ``logs/runs.jsonl`` (one JSON object per line)."""
    path = tree.logs / RUN_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return path


def read_runs(tree: CourseTree) -> list[dict]:
    """``logs/runs.jsonl``, one dict per run, oldest first (a line that cannot be read is skipped)."""
    return [r for r in map(_parsed, _run_lines(tree)) if r is not None]


def runs_since_clean(tree: CourseTree) -> list[dict | None]:
    """The run log's records written since the course was last cleaned (:func:`write_cleaned`;
    all of them when it never was); None for a line that cannot be read."""
    at = load(tree, CLEANED).get("runs", 0)
    return [_parsed(ln) for ln in _run_lines(tree)[max(at, 0):]]


def write_cleaned(tree: CourseTree) -> None:
    """``logs/cleaned.json``: the run log's length now (its runs graded a class that is gone).
    Written over whatever is there: it is made from the run log alone, and a damaged one holds
    nothing to check by hand."""
    write_json(tree.logs / CLEANED, {"runs": len(_run_lines(tree))})


# --------------------------------------------------------------------------- the user's cache

#: This user's cache folder (``0`` turns the cache off); see :func:`user_cache_dir`.
ENV_CANARY_CACHE = "NORMREF_CANARY_CACHE"


def user_cache_dir() -> Path | None:
    """This user's cache of what depends only on the installed environment (a kernel's measured
    address space; the canary's passes, by content hash): ``$NORMREF_CANARY_CACHE``, else
    ``$XDG_CACHE_HOME/normref`` (``~/.cache/normref``); None when that variable is ``0``."""
    var = os.environ.get(ENV_CANARY_CACHE)
    if var == "0":
        return None
    if var:
        return Path(var)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "normref"


def cached(name: str) -> dict | None:
    """The user's cache entry ``name`` (e.g. ``canary/<key>.json``), or None (no cache, no such
    entry, or one that cannot be read: the cache is only a shortcut, an entry is made again)."""
    d = user_cache_dir()
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((d / name).read_text(encoding="utf-8")) if d else None
        return data if isinstance(data, dict) else None
    return None


def cache(name: str, value: dict) -> None:
    """Keep ``value`` as the user's cache entry ``name`` (:func:`write_json`: several processes may
    write one at once); nothing when there is no cache or it cannot be written."""
    d = user_cache_dir()
    if d is not None:
        with contextlib.suppress(OSError):
            write_json(d / name, value)
