"""The ``repair`` stage: structural repair of the submissions to grade (nothing is removed for what
the tamper scan finds: the scoring stage flags it for review)."""
from __future__ import annotations

from ..ledger import store
from ..batch import Batch
from ..intake.repair import (Repair, remember_unreadable, repair_all, repair_submission, unreadable,
                             unreadable_note)


def repair(b: Batch) -> None:
    """Structural repair and the tamper scan of the submissions to grade (:mod:`grader.intake.repair`);
    the files as they were before repair go to ``logs/batches/<run id>/originals/``. A file that
    cannot be read as a notebook is recorded in ``logs/unreadable.json`` before autograde
    (:func:`grader.intake.repair.remember_unreadable`), and a submission graded again whose record holds
    (its stand-in, the released notebook, reads fine) keeps that reason.

    Raises:
        OSError: ``submitted/`` or ``logs/`` cannot be written."""
    tree, log, to_grade = b.services.tree, b.services.log, b.found.to_grade
    keep = store.batch(tree, b.services.run_id, "originals")
    if to_grade is None:
        b.run.repairs = repair_all(tree, b.run.assignments, keep=keep)
    else:  # only what is graded: a notebook left alone keeps its bytes (grader/intake/inplace.py compares them)
        reps = {(a, st): repair_submission(tree, st, a, keep) for a, st in to_grade if tree.submitted(st, a).is_dir()}
        b.run.repairs = {k: r for k, r in reps.items() if r.notes or r.flags or r.unrecoverable}
    # before autograde: a stopped run's rerun reports it too
    remember_unreadable(tree, b.run.repairs, log=log)
    # graded again, an unreadable file's stand-in (the released notebook) reads fine: say what it is
    for (a, st), why in unreadable(tree).items():
        if to_grade is None or (a, st) in set(to_grade):
            rep = b.run.repairs.setdefault((a, st), Repair(st, a))
            if not rep.unrecoverable:
                rep.unrecoverable = why
                rep.notes.append(unreadable_note(why))
    for (a, st), rep in sorted(b.run.repairs.items()):
        for line in rep.notes + rep.flags:
            log(f"repair: {st} ({a}): {line}")
