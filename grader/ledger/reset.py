"""Starting over and putting a course state back: ``python -m grader clean`` and ``restore --state``.

:func:`clean` removes nbgrader's grading state (:data:`GRADING_STATE`) and keeps what protects it
(:data:`KEPT_LOGS`); :func:`start_over` does that only with a yes when real students are graded
here, after a backup (a state archive ``logs/backups/state-<tag>.tar.gz``); :func:`restore_state`
puts such an archive back. A module of its own, apart from :mod:`grader.pipeline`, so that
``python -m grader clean`` and ``restore`` load neither nbgrader's converters nor torch nor the
report's plotting (:mod:`grader.pipeline` re-exports every name).
"""
from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import sys
from pathlib import Path

from . import database, state, store
from .course import GRADEBOOK, GRADES_CSV, QUESTIONS_CSV, ROSTER_CSV, CourseTree
from .store import KEPT_LOGS

#: Written when the grading state is the embedded demo class's (removed before real work).
DEMO_MARKER = ".demo-class"
#: What a fresh run removes (nbgrader's grading state; never source/ or release/).
GRADING_STATE = ("submitted", "autograded", "feedback", "downloaded", "reports", "logs", GRADEBOOK,
                 GRADES_CSV, QUESTIONS_CSV, ROSTER_CSV, DEMO_MARKER)
#: Grading state named per LMS and assignment (grader.outputs.lms's import files and feedback zips).
GRADING_STATE_PATTERNS = ("lms-import-*.csv", "feedback-*.zip")


def _state_names(root: Path) -> list[str]:
    """:data:`GRADING_STATE`, then the files of ``root`` matching :data:`GRADING_STATE_PATTERNS`."""
    found = sorted({p.name for pat in GRADING_STATE_PATTERNS for p in Path(root).glob(pat) if p.is_file()})
    return list(GRADING_STATE) + found


def clean(course_root: Path) -> None:
    """Remove nbgrader's grading state (``GRADING_STATE``) from a course root, except what
    protects it: ``logs/backups/`` and the run history ``logs/runs.jsonl``. No questions asked:
    :func:`start_over` is the careful way."""
    root = Path(course_root)
    for name in _state_names(root):
        p = root / name
        if name == "logs" and p.is_dir():
            for child in p.iterdir():
                if child.name not in KEPT_LOGS:
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
        elif p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    (root / "autograded").mkdir(exist_ok=True)
    (root / "autograded" / ".gitkeep").touch()
    # the run log is kept, but the runs it holds graded a class that is gone: the next class
    # starts without a gradebook and must not be told to restore the old one
    store.write_cleaned(CourseTree(root))


def start_over(tree: CourseTree, *, yes: bool, tag: str, log=print) -> None:
    """:func:`clean`, only with a yes when real students are graded here, and then after a backup.

    The gradebook is backed up with SQLite's backup API and, with every other piece of grading
    state (``submitted/``, ``autograded/``, ``feedback/``, the CSVs, ``reports/``, and what
    ``logs/`` holds besides the backups and the run log: the LMS's late marks and download names,
    the batches as received), archived as ``logs/backups/state-<tag>.tar.gz`` before anything is
    removed; :func:`restore_state` puts such an archive back.

    Raises:
        CourseStateError: real students are here and nobody said yes (``--yes``, or ``yes`` typed
            at the terminal); nothing was removed.
    """
    real = state.has_grading_state(tree) and not (tree.root / DEMO_MARKER).exists()
    if real:
        n = len(tree.students())
        if not state.confirm(f"This removes the grading state of {n} students in {tree.root} "
                             f"(it is backed up under {store.backups(tree)} first).", yes):
            raise state.CourseStateError(
                f"{tree.root} holds the grading state of {n} students: starting over needs --yes "
                f"(make ... YES=1) or a yes at the terminal; nothing was removed or written")
        # only now, when the state will go: a refusal writes nothing (refusals used to push real
        # backups out of the last KEEP_BACKUPS)
        gb = state.backup_gradebook(tree, tag, log=log)
        archive = _archive_state(tree, tag, gb)
        log(f"backup: {', '.join(str(p) for p in (gb, archive) if p)}")
    clean(tree.root)
    if not tree.is_sqlite:  # a server gradebook (--db): nbgrader's tables go, as the file would
        database.reset(tree.gradebook_url)


def _logs_state(tree: CourseTree) -> list[Path]:
    """What ``logs/`` holds that :func:`clean` removes (all but :data:`KEPT_LOGS`)."""
    if not tree.logs.is_dir():
        return []
    return sorted(c for c in tree.logs.iterdir() if c.name not in KEPT_LOGS and not c.name.endswith(".part"))


def _archive_state(tree: CourseTree, tag: str, gradebook: Path | None = None) -> Path | None:
    """``logs/backups/state-<tag>.tar.gz``: the grading state :func:`clean` removes, with the
    gradebook backup ``gradebook`` as ``gradebook.db`` (one archive is a whole course state)."""
    import tarfile

    names = [n for n in _state_names(tree.root) if n not in ("logs", GRADEBOOK) and (tree.root / n).exists()]
    logs = _logs_state(tree)
    if not names and not logs and gradebook is None:
        return None
    dest = store.backups(tree) / f"state-{tag}.tar.gz"
    with store.atomic_path(dest) as part, tarfile.open(part, "w:gz") as tf:
        for n in names:
            tf.add(tree.root / n, arcname=n)
        for c in logs:
            tf.add(c, arcname=f"logs/{c.name}")
        if gradebook is not None:
            tf.add(gradebook, arcname=GRADEBOOK_IN_ARCHIVE)
    for old in sorted(dest.parent.glob("state-*.tar.gz"))[:-state.KEEP_BACKUPS]:
        old.unlink()
    return dest


#: The gradebook's name inside a state archive.
GRADEBOOK_IN_ARCHIVE = GRADEBOOK


def state_backups(tree: CourseTree) -> list[Path]:
    """The state archives ``logs/backups/state-*.tar.gz``, oldest first."""
    d = store.backups(tree)
    return sorted(d.glob("state-*.tar.gz")) if d.is_dir() else []


def current_state(tree: CourseTree) -> list[str]:
    """What grading state the course root holds now (what a restore would replace): the
    gradebook, the non-empty folders and files of :data:`GRADING_STATE`, and ``logs/`` entries
    besides the backups and the run log. ``[]`` after :func:`clean`."""
    out = []
    if tree.gradebook_path.is_file() and tree.gradebook_path.stat().st_size:
        out.append(GRADEBOOK_IN_ARCHIVE)
    for n in _state_names(tree.root):
        p = tree.root / n
        if n in ("logs", GRADEBOOK) or not p.exists():
            continue
        if p.is_dir():
            if any(f.name != ".gitkeep" for f in p.rglob("*")):
                out.append(f"{n}/")
        else:
            out.append(n)
    return out + [f"logs/{c.name}" for c in _logs_state(tree)]


def _restorable(name: str) -> bool:
    """True for an archive member :func:`restore_state` may write: under a name of
    :data:`GRADING_STATE` or ``logs/<entry>`` other than the backups and the run log."""
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts:
        return False
    if parts[0] == "logs":
        return len(parts) == 1 or parts[1] not in KEPT_LOGS
    return parts[0] in GRADING_STATE or (len(parts) == 1 and any(fnmatch.fnmatch(parts[0], pat)
                                                                  for pat in GRADING_STATE_PATTERNS))


def restore_state(tree: CourseTree, archive: Path, *, yes: bool, log=print) -> list[str]:
    """Put a state archive (``logs/backups/state-<tag>.tar.gz``, written by :func:`start_over`
    before ``clean`` and ``--fresh``) back: the gradebook, ``submitted/``, ``autograded/``,
    ``feedback/``, the CSVs and ``roster.csv``, and ``logs/``' state (the LMS's late marks
    ``lms_late.json``, download names ``lms_files.json``, the batches as received). An archive
    written before archives held the gradebook takes it from ``logs/backups/gradebook-<tag>.db``.

    When the course holds grading state now (:func:`current_state`), it is replaced only with a
    yes (``yes``, or typed at the terminal), and backed up first as :func:`start_over` does.

    Returns:
        What was put back, one entry per top-level name (e.g. ``"submitted/ (2 students)"``).

    Raises:
        CourseStateError: no such archive, not a readable one, a member outside the grading
            state, no gradebook for it, a gradebook that is not a readable nbgrader gradebook, or
            state here and no yes. Nothing was changed.
    """
    import sqlite3
    import tarfile

    archive = Path(archive).resolve()
    fail = state.CourseStateError
    gb_backup = _check_archive(tree, archive)
    here = current_state(tree)
    if here and not state.confirm(f"Restoring {archive.name} replaces the grading state of {tree.root} "
                                  f"({', '.join(here)}); it is backed up first.", yes):
        raise fail(f"{tree.root} holds grading state ({', '.join(here)}): restoring {archive.name} would "
                   "replace it; run again with --yes to back it up under logs/backups/ first and "
                   "replace it; nothing was changed")
    staging = tree.root / ".restore-staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        with tarfile.open(archive) as tf:
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: no links out, no devices, no absolute paths
                tf.extractall(staging, filter="data")
            else:  # older: _check_archive let through plain files and folders only, under safe names
                tf.extractall(staging)
        gb = staging / GRADEBOOK_IN_ARCHIVE
        if not gb.is_file():
            shutil.copy2(gb_backup, gb)
        problem = state._gradebook_file_problem(gb)
        if problem:
            raise fail(f"the gradebook of {archive.name}: {problem.replace(str(gb), 'it')}; nothing was changed")
        with contextlib.closing(sqlite3.connect(f"file:{gb}?mode=ro", uri=True)) as db:
            n_students = db.execute("select count(*) from student").fetchone()[0]
            n_subs = db.execute("select count(*) from submitted_assignment").fetchone()[0]
        if here:
            start_over(tree, yes=True, tag=state.run_id(), log=log)
        else:
            clean(tree.root)
        done = [f"{GRADEBOOK_IN_ARCHIVE} ({n_students} students, {n_subs} submissions)"] + _move_in(tree, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"restore: {tree.root} is now the state of {archive.name}: {', '.join(done)}")
    return done


def _check_archive(tree: CourseTree, archive: Path) -> Path:
    """The gradebook backup of ``archive``'s run (used when the archive holds no gradebook), after
    checking that the archive is readable and holds only grading state.

    Raises:
        CourseStateError: not a readable archive, a member outside the grading state, or no
            gradebook for it."""
    import tarfile

    fail = state.CourseStateError
    try:
        with tarfile.open(archive) as tf:
            members = tf.getmembers()
    except (OSError, tarfile.TarError, EOFError) as e:
        why = (str(e).splitlines() or [type(e).__name__])[0].rstrip(":")  # tarfile lists every method tried
        raise fail(f"{archive} is not a readable state backup ({why}); nothing was changed") from None
    bad = [m.name for m in members if not _restorable(m.name)]
    if bad:
        raise fail(f"{archive} holds {bad[0]!r}, which is not grading state: nothing was changed")
    odd = [m.name for m in members if not (m.isfile() or m.isdir())]
    if odd and not hasattr(tarfile, "data_filter"):  # this Python cannot extract links safely
        raise fail(f"{archive} holds {odd[0]!r}, a link or device, which this Python ({sys.version.split()[0]}) "
                   "cannot extract safely: nothing was changed (Python 3.11.4 or later can)")
    names = sorted({Path(m.name).parts[0] for m in members})
    tag = archive.name.removeprefix("state-").removesuffix(".tar.gz")
    gb_backup = store.backups(tree) / f"gradebook-{tag}.db"
    if GRADEBOOK_IN_ARCHIVE not in names and not gb_backup.is_file():
        raise fail(f"{archive} holds no gradebook and {gb_backup} is gone: nothing was changed "
                   "(restore its files by hand with tar if you mean to)")
    return gb_backup


def _move_in(tree: CourseTree, staging: Path) -> list[str]:
    """Move the archive extracted in ``staging`` into the (cleaned) course, its gradebook last;
    returns what was put back, one entry per top-level name. Moved, not written: each file is
    whole already, on the same file system."""
    done = []
    for item in sorted(staging.iterdir()):
        if item.name == GRADEBOOK_IN_ARCHIVE:
            continue
        for src in sorted(item.iterdir()) if item.name == "logs" else [item]:
            dest = tree.root / src.relative_to(staging)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.is_dir():  # autograded/ with only .gitkeep, left by clean()
                shutil.rmtree(dest)
            os.replace(src, dest)
            label = str(src.relative_to(staging)) + ("/" if dest.is_dir() else "")
            if src.name in ("submitted", "autograded", "feedback") and src.parent == staging:
                label += f" ({len(tree.students(src.name))} students)"
            done.append(label)
    os.replace(staging / GRADEBOOK_IN_ARCHIVE, tree.gradebook_path)
    return done


__all__ = ["DEMO_MARKER", "GRADEBOOK_IN_ARCHIVE", "GRADING_STATE", "GRADING_STATE_PATTERNS", "KEPT_LOGS", "clean",
           "current_state", "restore_state", "start_over", "state_backups"]
