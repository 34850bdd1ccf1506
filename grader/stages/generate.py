"""The ``generate`` stage: ``source/`` -> ``release/`` with nbgrader, never losing work written in
``release/`` (:mod:`grader.ledger.release`)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from ..ledger import state, store
from ..ledger.apps import AppError, Course
from ..batch import Batch, GradingError


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def generate(b: Batch) -> None:
    """``nbgrader generate_assignment`` for each assignment (this also records its cells in the
    gradebook, which autograde needs); says which ``release/`` folders were written, stale, or
    held work written in them, which is moved to ``logs/release-kept/<run>/`` first, never lost
    (:mod:`grader.ledger.release`).

    Raises:
        GradingError: nbgrader failed (its log is quoted).
    """
    tree, log = b.services.tree, b.services.log
    log(f"generate: {', '.join(b.run.assignments)}")
    b.services.course = Course(tree)
    kept_root = store.release_kept(tree, b.services.run_id or state.run_id())
    for a in b.run.assignments:
        rel = tree.release(a)
        existed = rel.is_dir()
        before = _digest(rel) if existed else ""
        try:
            done = b.services.course.generate_unless_unchanged(a, keep=kept_root)
        except AppError as e:
            raise GradingError(str(e)) from e
        if done.skipped:
            log(f"generate: {a} skipped: {done.skipped}")
        elif done.kept:
            log(f"generate: release/{a} held work written in it ({'; '.join(done.kept.work)}): moved to "
                f"{_shown(done.kept.path, tree.root)}, then release/{a} was generated again from source/{a}")
        elif not existed:
            log(f"generate: release/{a} written from source/{a}")
        elif _digest(rel) != before:
            log(f"generate: release/{a} was stale and has been regenerated from source/{a} (it held no "
                "work: every cell as nbgrader generated it)")


def _shown(path: Path, root: Path) -> str:
    """``path`` relative to the course root when it is inside it, with a trailing slash."""
    try:
        return f"{path.relative_to(root)}/"
    except ValueError:
        return f"{path}/"
