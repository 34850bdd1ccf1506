"""Grading ``submitted/`` in place: a changed notebook is a resubmission, an unchanged one is done.

On a JupyterHub the course's own ``submitted/`` is the input (``nbgrader collect --update``, then
``make grade SUBMISSIONS=submitted``): there is no download to compare with what was received
before, and nbgrader's collect has already written the new notebook over the one that was graded.
What was graded is known from two places instead:

* ``logs/graded_hashes.json`` (:data:`GRADED_HASHES`): for each submission, the SHA-256 of its
  notebooks as the run that graded it collected them and as it left them graded (after repair),
  and that run's id. It is written by every run that grades (in place or from a download), once,
  atomically, after the trusted scores are written (:func:`remember_graded`); a damaged one is
  moved aside (``graded_hashes.json.damaged``, then ``.damaged.1``, ...; never written over) and
  the run says so (:func:`set_aside_damaged`).
* ``autograded/<student>/<assignment>/``: the notebook as graded, whose answers the hand grades
  in the gradebook judged.

:func:`sort_out` (called by :func:`grader.intake.collect.collect` for ``submitted/`` itself) hashes each
submission: one whose hash is recorded as graded is unchanged (not autograded again: its grade,
seed and feedback stay); any other is graded. One the gradebook holds (graded before) is a
resubmission, as a download's is: the notebook as graded is kept in
``logs/replaced/<student>/<assignment>/``, its hand grades and formgrader comments are captured
against it into ``logs/handgrades.json`` (:mod:`grader.ledger.handgrades`), and it leaves the gradebook,
so that autograde writes fresh rows (a changed written answer waits for a grader, as nbgrader's
``needs_manual_grade`` says, and its old hand grade no longer counts); after autograde each hand
grade is written back where its answer is unchanged and named "to redo" otherwise.

A run stopped after deciding (Ctrl-C, ``kill -9``) loses nothing: the record of what was graded is
only written once the new grades are, so the rerun finds the notebook changed again and grades it;
the hand grades wait in ``logs/handgrades.json`` and the earlier notebook in ``logs/replaced/``.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from ..ledger import store
from ..ledger.course import CourseTree
# ``logs/graded_hashes.json``: ``{"<student>/<assignment>": {"hashes": [sha256, ...], "run": run id}}``,
# the notebooks of each submission as last graded (as collected, and as graded after repair)
from ..ledger.store import GRADED_HASHES


def files_hash(files: list[Path]) -> str:
    """SHA-256 of the bytes of ``files`` in name order (a submission's notebooks), hex."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda p: p.name):
        h.update(f.read_bytes())
    return h.hexdigest()


def notebook_hash(tree: CourseTree, assignment: str, student: str) -> str:
    """:func:`files_hash` of ``submitted/<student>/<assignment>/*.ipynb`` (``timestamp.txt`` is not
    part of it: the same notebook submitted again is not a new answer)."""
    return files_hash(sorted(tree.submitted(student, assignment).glob("*.ipynb")))


def set_aside_damaged(tree: CourseTree) -> str | None:
    """Move a damaged ``logs/graded_hashes.json`` (not JSON, not the record's shape: edited by hand,
    a full disk) aside (:func:`grader.ledger.store.set_aside`: ``graded_hashes.json.damaged``, then
    ``.damaged.1``, ...; never written over) and return one line saying so; None when it is fine
    or absent."""
    return store.set_aside(tree, GRADED_HASHES)


def graded_hashes(tree: CourseTree) -> dict[str, dict]:
    """``logs/graded_hashes.json`` as ``{"<student>/<assignment>": {"hashes": [...], "run": id}}``;
    ``{}`` when absent or damaged (:func:`set_aside_damaged` moves a damaged one aside)."""
    return store.graded_hashes(tree)


def sort_out(course, out, pairs: list[tuple[str, str]], received: dict[str, str]) -> dict[str, str]:
    """Sort the submissions of ``submitted/`` graded in place (``pairs``: ``(assignment,
    student)``) into ``out`` (a :class:`grader.intake.collect.Collected`): unchanged since last graded
    (``out.unchanged``), changed (``out.changed``: ``{pair: the run that graded it, or None}``),
    or new; a changed one the gradebook holds is dropped from it as a resubmission
    (:func:`_drop_graded`: ``out.replaced``, ``out.hand_grades``). The lines the run says go to
    ``out.notes``.

    Args:
        course: the :class:`grader.ledger.apps.Course`.
        received: ``logs/received.json``: for a submission with no entry in the record yet (graded
            before it existed), the notebook as last received counts as the one graded (one
            received but left ungraded by an earlier run is then graded by
            :func:`grader.stages.collect.collect_submissions`, which finishes what a run left).

    Returns:
        ``{"<student>/<assignment>": sha256}`` of the changed and new ones, as collected (for
        ``logs/received.json``).
    """
    from ..ledger import state

    tree = course.tree
    damaged = set_aside_damaged(tree)
    if damaged:
        out.notes.append(damaged)
    record = graded_hashes(tree)
    held = state.gradebook_pairs(tree)
    hashes, new, unknown = {}, [], []
    for a, st in pairs:
        key, h = f"{st}/{a}", notebook_hash(tree, a, st)
        out._pairs.append((a, st))
        rec = record.get(key)
        # no record yet (graded before it existed): as last received from a download, if it was
        known = set(rec["hashes"]) if rec else ({received[key]} if key in received else set())
        if h in known:
            out.unchanged.append((a, st))
            continue
        hashes[key] = h
        if rec is None and (a, st) not in held:
            new.append((a, st))
            continue
        out.changed[(a, st)] = rec.get("run") if rec else None
        if rec is None:
            unknown.append((a, st))
        else:
            out.notes.append(f"{st} ({a}) changed since it was graded (run {rec.get('run', '?')}): graded again "
                             "as a resubmission")
        if (a, st) in held:
            _drop_graded(course, a, st, out)
    if new:
        out.notes.append(f"{len(new)} new in {tree.submitted()}: {_named(new)}")
    if unknown:
        out.notes.append(f"{len(unknown)} graded before without a record of the notebook graded ({GRADED_HASHES} "
                         f"is written since): graded again as resubmissions: {_named(unknown)}")
    return hashes


def _named(pairs) -> str:
    per: dict[str, list[str]] = {}
    for a, st in pairs:
        per.setdefault(st, []).append(a)
    return ", ".join(f"{st} ({', '.join(per[st])})" for st in sorted(per))


def _drop_graded(course, assignment: str, student: str, out) -> None:
    """A changed submission the gradebook holds, before it is graded again: the notebook as
    graded (``autograded/``) is kept in ``logs/replaced/<student>/<assignment>/``, its hand
    grades and comments are captured against it (written to ``logs/handgrades.json`` at once),
    and it leaves the gradebook. Each step can be done again: a run stopped in between is
    finished by the next one (``autograded/`` is only removed by autograde, after this)."""
    from ..ledger.handgrades import capture

    tree = course.tree
    graded, keep = tree.autograded(student, assignment), store.replaced(tree, assignment, student)
    copied = any(graded.glob("*.ipynb"))
    if copied:  # else autograde never finished it: logs/replaced/ keeps what it held
        with store.atomic_dir(keep) as part:
            shutil.copytree(graded, part, dirs_exist_ok=True)
        out.notes.append(f"{student} ({assignment}): the notebook as graded is kept in {keep}")
    out.hand_grades += capture(tree, assignment, student, graded=keep if copied else graded)
    out.replaced.append((assignment, student))
    course.remove_submission(assignment, student)


def hashes_now(tree: CourseTree, pairs) -> dict[str, str]:
    """``{"<student>/<assignment>": sha256}`` of ``pairs``' notebooks in ``submitted/`` now (before
    repair: the run keeps them to record as graded)."""
    return {f"{st}/{a}": notebook_hash(tree, a, st) for a, st in pairs if tree.has_notebook("submitted", st, a)}


def remember_graded(tree: CourseTree, pairs, collected: dict[str, str], run_id: str, log=print) -> None:
    """Record ``pairs`` (``(assignment, student)``, graded and scored by run ``run_id``) in
    ``logs/graded_hashes.json``: the hash each had when collected (``collected``) and the hash
    of its notebooks now (after repair). One atomic write; a damaged record is set aside first
    and said in ``log``.

    Raises:
        OSError: ``logs/`` cannot be written.
    """
    pairs = [(a, st) for a, st in pairs if tree.has_notebook("submitted", st, a)]
    if not pairs:
        return
    record = graded_hashes(tree)
    for a, st in pairs:
        key = store.key(a, st)
        hashes = [h for h in (collected.get(key), notebook_hash(tree, a, st)) if h]
        record[key] = {"hashes": list(dict.fromkeys(hashes)), "run": run_id}
    store.write_graded_hashes(tree, record, log=log)
