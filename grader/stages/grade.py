"""The stages around autograde: ``repair`` before it (structural repair and the tamper scan) and
``scoring`` after it (the trusted scores, and only then the record of what is graded)."""
from __future__ import annotations

from .. import inplace, scores, store
from ..batch import Batch
from ..repair import Repair, remember_unreadable, repair_all, repair_submission, unreadable, unreadable_note
from .collect import graded_pairs


def repair(b: Batch) -> None:
    """Structural repair and the tamper scan of the submissions to grade (:mod:`grader.repair`);
    the files as they were before repair go to ``logs/batches/<run id>/originals/``. A file that
    cannot be read as a notebook is recorded in ``logs/unreadable.json`` before autograde
    (:func:`grader.repair.remember_unreadable`), and a submission graded again whose record holds
    (its stand-in, the released notebook, reads fine) keeps that reason.

    Raises:
        OSError: ``submitted/`` or ``logs/`` cannot be written."""
    tree, log, to_grade = b.services.tree, b.services.log, b.found.to_grade
    keep = store.batch(tree, b.services.run_id, "originals")
    if to_grade is None:
        b.run.repairs = repair_all(tree, b.run.assignments, keep=keep)
    else:  # only what is graded: a notebook left alone keeps its bytes (grader/inplace.py compares them)
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


def trusted_scoring(b: Batch) -> None:
    """:func:`grader.scores.scoring_stage`; only then are the submissions recorded as graded
    (``logs/graded.json``): a run stopped between autograde and scoring leaves them to the
    rerun, which grades them again (a red-team instructor's Ctrl-C there once left a correct
    submission at the kernel's 0 for good)."""
    from ..handgrades import forget

    scores.scoring_stage(b)
    out = b.run.autograde
    if out is not None:
        tree, log = b.services.tree, b.services.log
        done = set(out.graded) - set(out.failed)
        inplace.remember_graded(tree, sorted(done), b.found.collected.as_collected, b.services.run_id, log=log)
        store.write_graded(tree, (graded_pairs(tree, b.run.assignments) | set(out.graded)) - set(out.failed), log=log)
        forget(tree, b.found.hand_grades_done)  # applied (or named as to redo): the record may go
