"""The ``prepare`` stage: the run's first writes (a backup, or starting over), once the check and the
canary have passed."""
from __future__ import annotations

from ..ledger import state, store
from ..batch import Batch
from ..ledger.reset import start_over


def prepare(b: Batch) -> None:
    """After the check and the canary, the first writes: start over (``fresh``) if asked,
    carefully (:func:`start_over`: a backup first, and a yes for real students), else back the
    gradebook up; set every damaged record of ``logs/`` aside, saying each
    (:func:`grader.ledger.store.set_aside_damaged`)."""
    tree = b.services.tree
    if b.found.fresh:
        start_over(tree, yes=b.options.yes, tag=b.services.run_id, log=b.services.log)
    else:
        state.backup_gradebook(tree, f"{b.services.run_id}-before", log=b.services.log)
    for line in store.set_aside_damaged(tree):  # said once, here; every later read finds them sound
        b.services.log(f"prepare: {line}")
