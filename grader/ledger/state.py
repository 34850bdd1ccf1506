"""The course folder is the system of record: one run at a time, backups, a checked gradebook,
and a history of every run.

* :func:`run_lock`: a lock file in the course root (``.grader.lock``: PID, host, start time,
  command) held with ``flock`` for the whole run. A second run refuses with a message naming
  the first; a lock left by a run that died (``kill -9``, a crash) is not held by anyone, so the
  next run takes it over and says so.
* :func:`backup_gradebook`: before a run writes, the SQLite gradebook is copied with SQLite's
  online backup API into ``logs/backups/`` (the last :data:`KEEP_BACKUPS` are kept). A gradebook
  that is not SQLite (PostgreSQL for a large course) is skipped with a note: back it up with
  that database's own tools.
* :func:`check_gradebook`: a gradebook that should exist (grading state is here) but is missing,
  empty or corrupt stops the run before anything is written, naming the newest backup and the
  command that restores it (:func:`restore_gradebook`, ``python -m grader restore``).
* :func:`record_run`: one JSON line per run appended to ``logs/runs.jsonl``.

The files under ``logs/`` are read and written through :mod:`grader.ledger.store`.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
import socket
import sqlite3
import sys
from pathlib import Path

from . import store
from .course import CourseStateError, CourseTree

LOCK_FILE = ".grader.lock"
KEEP_BACKUPS = 10
#: Folders whose content means "a class has been graded here" (so a gradebook must exist).
_STATE_DIRS = ("submitted", "autograded", "feedback")


def now_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def run_id() -> str:
    """A sortable id for this run: ``20261201T074512Z-<pid>``."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"


# --------------------------------------------------------------------------- the lock

@contextlib.contextmanager
def run_lock(tree: CourseTree, command: str, log=print):
    """Hold the course's run lock for the ``with`` block.

    Raises:
        CourseStateError: another run holds the lock (the message names its PID, host, start
            time and command).
    """
    path = tree.root / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = _read_lock(path)
        os.close(fd)
        raise CourseStateError(
            f"another grading run is in progress in {tree.root}: pid {other.get('pid', '?')} on "
            f"{other.get('host', '?')}, started {other.get('started', '?')}: {other.get('command', '?')!r}. "
            "Wait for it to finish (or stop it) and run again.") from None
    earlier = _read_lock(path)
    if earlier:
        log(f"lock: the run of pid {earlier.get('pid')} on {earlier.get('host')} (started "
            f"{earlier.get('started')}: {earlier.get('command')!r}) did not finish; its lock is taken over")
    info = {"pid": os.getpid(), "host": socket.gethostname(), "started": now_utc(), "command": command}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
    try:
        yield info
    finally:
        os.ftruncate(fd, 0)  # a clean finish leaves an empty (free) lock file
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _read_lock(path: Path) -> dict:
    try:
        text = path.read_text().strip()
        return json.loads(text) if text else {}
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- backups

def _backup_order(path: Path) -> tuple[str, int]:
    """Sort key of a gradebook backup: by run id, and a run's ``-before`` backup ahead of its
    ``-after`` one (alphabetically it would come after)."""
    tag = path.stem.removeprefix("gradebook-")
    for rank, suffix in ((0, "-before"), (2, "-after")):
        if tag.endswith(suffix):
            return tag.removesuffix(suffix), rank
    return tag, 1


def backups(tree: CourseTree) -> list[Path]:
    """The gradebook backups, oldest first: ``gradebook-<run id>-before.db`` (written before a
    run writes), ``gradebook-<run id>-after.db`` (as a successful run left it) and
    ``gradebook-<run id>.db`` (before ``clean`` / ``--fresh``)."""
    d = store.backups(tree)
    return sorted(d.glob("gradebook-*.db"), key=_backup_order) if d.is_dir() else []


def _gradebook_file_problem(path: Path) -> str | None:
    """Why the SQLite file at ``path`` is not a usable nbgrader gradebook, or None."""
    if path.stat().st_size == 0:
        return f"{path} is empty (0 bytes)"
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            ok = db.execute("PRAGMA integrity_check").fetchone()[0]
            tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
    except sqlite3.DatabaseError as e:
        return f"{path} is not a readable SQLite database ({e})"
    if ok != "ok":
        return f"{path} is corrupt (SQLite integrity check: {ok})"
    if "assignment" not in tables:
        return f"{path} is not an nbgrader gradebook (no assignment table)"
    return None


def good_backups(tree: CourseTree) -> list[Path]:
    """The backups that are readable nbgrader gradebooks, oldest first (what restore may pick)."""
    return [p for p in backups(tree) if _gradebook_file_problem(p) is None]


def backup_gradebook(tree: CourseTree, tag: str, log=print) -> Path | None:
    """Copy the gradebook to ``logs/backups/gradebook-<tag>.db`` with SQLite's online backup API
    (consistent even while another process reads it); keep the newest :data:`KEEP_BACKUPS`.

    Returns:
        The backup's path, or None when there is nothing to back up (no gradebook yet, or not
        SQLite: said in ``log``).
    """
    if not tree.is_sqlite:
        log(f"backup: skipped, the gradebook is not SQLite ({tree.gradebook_url.split('@')[-1]}): "
            "back it up with your database's own tools")
        return None
    src = tree.gradebook_path
    if not src.is_file() or src.stat().st_size == 0:
        return None
    problem = gradebook_problem(tree)
    if problem:  # a broken gradebook must never become "the newest backup" that restore picks
        log(f"backup: skipped, {problem}")
        return None
    dest_dir = store.backups(tree)
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"gradebook-{tag}.db"
    with store.atomic_path(dest) as part:
        try:
            with contextlib.closing(sqlite3.connect(f"file:{src}?mode=ro", uri=True)) as s, \
                    contextlib.closing(sqlite3.connect(part)) as d:
                s.backup(d)
        except sqlite3.DatabaseError:  # unreadable as a database: keep its bytes as they are
            part.unlink(missing_ok=True)
            shutil.copy2(src, part)
    for old in backups(tree)[:-KEEP_BACKUPS]:
        old.unlink()
    return dest


def gradebook_pairs(tree: CourseTree) -> set[tuple[str, str]]:
    """``{(assignment, student)}`` of the submissions the gradebook holds (none without one)."""
    if tree.is_sqlite and not (tree.gradebook_path.is_file() and tree.gradebook_path.stat().st_size):
        return set()
    from nbgrader.api import Gradebook

    from .database import create_gradebook

    create_gradebook(tree.gradebook_url)  # a server database may be empty yet
    with Gradebook(tree.gradebook_url) as gb:
        return {(a.name, sub.student.id) for a in gb.assignments for sub in a.submissions}


def has_grading_state(tree: CourseTree) -> bool:
    """True if a class has been graded here: student folders, or runs logged since the course
    was last cleaned (``clean`` keeps the run log, and notes its length in :data:`grader.ledger.store.CLEANED`),
    other than runs stopped by the canary, which wrote nothing (:mod:`grader.stages.canary`)."""
    if any(tree.students(step) for step in _STATE_DIRS):
        return True
    return any(not _stopped_by_canary(rec) for rec in store.runs_since_clean(tree))


def _stopped_by_canary(rec: dict | None) -> bool:
    """True for the run log's record of a run the canary stopped (it wrote nothing); False for any
    other, and for a line that cannot be read (None)."""
    try:
        return str(rec.get("error", "")).startswith("CanaryFailed:") and "prepare" not in rec.get("stage_seconds", {})
    except (AttributeError, TypeError):
        return False


def gradebook_problem(tree: CourseTree) -> str | None:
    """Why the gradebook cannot be trusted (missing though expected, empty, corrupt), or None."""
    if not tree.is_sqlite:
        return None
    path = tree.gradebook_path
    if not path.exists():
        return f"{path} is missing, but this course has been graded before" if has_grading_state(tree) else None
    return _gradebook_file_problem(path)


def check_gradebook(tree: CourseTree) -> None:
    """Stop before anything is written when the gradebook cannot be trusted.

    Raises:
        CourseStateError: what is wrong, the newest backup, and the command that restores it.
    """
    problem = gradebook_problem(tree)
    if problem is None:
        return
    found = good_backups(tree)
    if found:
        how = (f"the newest good backup is {found[-1]} ({len(found)} kept); restore it with "
               f"`python -m grader restore --course-root {tree.root}` (or `cp {found[-1]} {tree.gradebook_path}`)")
    else:
        how = f"no backup exists under {store.backups(tree)}"
    raise CourseStateError(f"{problem}: nothing was written. {how}, then run again.")


def restore_gradebook(tree: CourseTree, backup: Path | None = None, log=print) -> Path:
    """Put a backup back as the gradebook (the newest by default: as the last successful run
    left it); the gradebook it replaces, if any, is kept as ``logs/backups/replaced-<time>.db``
    first.

    An older backup rolls back the runs after it (``logs/runs.jsonl``): they are named, and the
    submissions they graded that the restored gradebook lacks, or that they replaced, are taken
    off ``logs/graded.json`` so that the next run grades them again (instead of skipping them
    as done, and failing in ``generate_feedback`` for want of their gradebook rows).

    Raises:
        CourseStateError: there is no backup.
    """
    found = good_backups(tree)
    if backup is None:
        if not found:
            raise CourseStateError(f"no readable gradebook backup to restore under {store.backups(tree)}")
        backup = found[-1]
    backup = Path(backup)
    problem = (f"{backup} does not exist" if not backup.exists() else f"{backup} is not a file"
               if not backup.is_file() else _gradebook_file_problem(backup))
    if problem:
        newest = f"; the newest good backup is {found[-1]}" if found else ""
        raise CourseStateError(f"{problem}: nothing was restored{newest}")
    dest = tree.gradebook_path
    newer = _hand_grades_since(tree, backup) if dest.is_file() and _gradebook_file_problem(dest) is None else []
    if dest.exists() and dest.stat().st_size:
        keep = store.backups(tree) / f"replaced-{run_id()}.db"
        shutil.copy2(dest, keep)
        log(f"restore: the gradebook it replaces is kept as {keep}")
    with store.atomic_path(dest) as part:
        shutil.copy2(backup, part)
    log(f"restore: {dest} is now {backup}")
    _roll_back_graded(tree, backup, log)
    _keep_hand_grades(tree, newer, log)
    return dest


def _hand_grades_by_key(tree: CourseTree, url: str) -> dict:
    from nbgrader.api import Gradebook

    from .handgrades import read

    with Gradebook(url) as gb:
        pairs = [(a.name, s.student.id) for a in gb.assignments for s in a.submissions]
    return {g.key: g for a, st in pairs for g in read(tree, a, st, gradebook_url=url)}


def _hand_grades_since(tree: CourseTree, backup: Path) -> list:
    """The hand grades and comments of the gradebook now in place that ``backup`` does not hold
    (typed after it was written, e.g. in formgrader since the last run), each with the answer in
    ``submitted/`` it judged."""
    now = _hand_grades_by_key(tree, tree.gradebook_url)
    if not now:
        return []
    then = _hand_grades_by_key(tree, f"sqlite:///{backup.resolve()}")
    return [g for k, g in sorted(now.items()) if k not in then
            or (then[k].manual_score, then[k].comment) != (g.manual_score, g.comment)]


def _keep_hand_grades(tree: CourseTree, newer: list, log) -> None:
    """Write back into the restored gradebook the hand grades :func:`_hand_grades_since` found
    (a restore never drops a hand grade); those whose submission the restored gradebook lacks
    wait in ``logs/handgrades.json`` for the next run, which grades that submission again."""
    if not newer:
        return
    from .handgrades import PENDING, carry_over, forget, record

    record(tree, newer)  # on disk before the gradebook is touched
    kept, waiting = carry_over(tree, newer)
    forget(tree, kept)
    for g in kept:
        what = " and ".join(w for w, v in (("hand grade", g.manual_score), ("comment", g.comment)) if v is not None)
        log(f"restore: kept the {what} typed after that backup: {g.student} ({g.assignment}) {g.grade_id}")
    if waiting:
        log(f"restore: {len(waiting)} hand grade(s) typed after that backup wait in {tree.logs / PENDING} "
            "for the next run, which grades their submissions again: "
            + ", ".join(f"{g.student} ({g.assignment}) {g.grade_id}" for g in waiting))


def _rolled_back_runs(tree: CourseTree, backup: Path) -> list[dict]:
    """The runs of ``logs/runs.jsonl`` whose work ``backup`` does not hold: those after the run
    that wrote it (and that run itself for a ``-before`` backup). ``[]`` when the backup's run is
    not in the log (a backup from elsewhere)."""
    tag = backup.stem.removeprefix("gradebook-")
    rid, after = tag.removesuffix("-after").removesuffix("-before"), tag.endswith("-after")
    runs = read_runs(tree)
    at = [i for i, r in enumerate(runs) if r.get("run_id") == rid]
    if not at:
        return []
    return runs[at[-1] + (1 if after else 0):]


def _roll_back_graded(tree: CourseTree, backup: Path, log) -> None:
    """After ``backup`` was restored: name the runs it rolls back, and take off
    ``logs/graded.json`` the submissions the restored gradebook lacks or that a rolled-back run
    replaced. A replaced one's restored rows graded the earlier submission: their hand grades
    are captured against it (``logs/replaced/``) and the rows removed, so the next run carries
    them over like a resubmission's (kept where the answer is unchanged, named as to redo)."""
    later = _rolled_back_runs(tree, backup)
    if later:
        who = sorted({st for r in later for st in r.get("batch") or []})
        log(f"restore: rolled back {len(later)} run(s) after that backup ({', '.join(r['run_id'] for r in later)}; "
            f"students {', '.join(who) or 'none'}): their work is not in the restored gradebook")
    graded = store.graded(tree)
    if graded is None:
        return
    held = gradebook_pairs(tree)
    replaced = graded & held & {tuple(p) for r in later for p in r.get("replaced") or []}
    again = (graded - held) | replaced
    if not again:
        return
    if replaced:
        from nbgrader.api import Gradebook

        from .handgrades import capture

        for a, st in sorted(replaced):  # the earlier notebook gone: each hand grade is to redo
            capture(tree, a, st, graded=store.replaced(tree, a, st))
        with Gradebook(tree.gradebook_url) as gb:
            for a, st in sorted(replaced):
                gb.remove_submission(a, st)
    store.write_graded(tree, graded - again, log=log)
    log(f"restore: {len(again)} submission(s) will be graded again by the next run (kept in submitted/): "
        + ", ".join(f"{st} ({a})" for a, st in sorted(again)))


# --------------------------------------------------------------------------- history

record_run = store.append_run
read_runs = store.read_runs


def confirm(question: str, yes: bool) -> bool:
    """True when ``yes`` was given, or the person at the terminal types ``yes``; False when there is
    no terminal to ask."""
    if yes:
        return True
    if not sys.stdin.isatty():
        return False
    try:
        return input(f"{question} Type yes to go on: ").strip().lower() == "yes"
    except EOFError:
        return False
