"""The ``scoring`` stage: the trusted scores of the handed-back outputs (:mod:`grader.scoring.scores`), and
only then the record of what is graded."""
from __future__ import annotations

from ..intake import inplace
from ..scoring import scores
from ..ledger import store
from ..batch import Batch
from .collect import graded_pairs


def trusted_scoring(b: Batch) -> None:
    """:func:`grader.scoring.scores.scoring_stage`; only then are the submissions recorded as graded
    (``logs/graded.json``): a run stopped between autograde and scoring leaves them to the
    rerun, which grades them again (a red-team instructor's Ctrl-C there once left a correct
    submission at the kernel's 0 for good)."""
    from ..ledger.handgrades import forget

    scores.scoring_stage(b)
    out = b.run.autograde
    if out is not None:
        tree, log = b.services.tree, b.services.log
        done = set(out.graded) - set(out.failed)
        inplace.remember_graded(tree, sorted(done), b.found.collected.as_collected, b.services.run_id, log=log)
        store.write_graded(tree, (graded_pairs(tree, b.run.assignments) | set(out.graded)) - set(out.failed), log=log)
        forget(tree, b.found.hand_grades_done)  # applied (or named as to redo): the record may go
