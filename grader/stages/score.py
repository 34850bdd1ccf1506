"""The ``score`` stage: per-question points from the gradebook, ``grades_by_question.csv``."""
from __future__ import annotations

import csv

from ..ledger import store
from ..batch import Batch, read_gradebook


def score(b: Batch) -> None:
    """Per-question points from the gradebook, and ``grades_by_question.csv``."""
    run = b.run
    run.scores, run.max_points = read_gradebook(b.services.tree, run.assignments)
    run.questions_csv = b.services.tree.questions_csv
    with store.atomic_path(run.questions_csv) as part, part.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["assignment", "student_id", "grade_id", "score", "max_score"])
        for (a, s), row in sorted(run.scores.items()):
            for gid, pts in row.items():
                w.writerow([a, s, gid, f"{pts:g}", f"{run.max_points[a].get(gid, 0):g}"])
