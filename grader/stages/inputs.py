"""The ``inputs`` stage: this run's graded inputs, drawn from a new secret seed
(:func:`grader.scoring.inputs.prepare_inputs`)."""
from __future__ import annotations

from ..batch import Batch
from ..scoring.inputs import prepare_inputs


def inputs(b: Batch) -> None:
    """Draw this run's graded inputs (a new seed, :func:`grader.scoring.inputs.prepare_inputs`)."""
    b.found.scoring_seed, _ = prepare_inputs(b.services.tree.root, log=b.services.log)
