"""Work written in ``release/<assignment>/``, found before anything regenerates it.

The README tells students to work in ``release/<assignment>/``, and an instructor may try an
answer there; ``nbgrader generate_assignment`` replaces that folder whole. Every path that
regenerates or replaces it asks :func:`written_work` first, and keeps or refuses:

* ``make grade`` (the generate stage, :meth:`grader.ledger.apps.Course.generate_assignment`): the folder
  is moved to ``logs/release-kept/<run>/<assignment>/`` (:func:`grader.ledger.store.release_kept`, which
  ``make clean`` keeps) before the new one takes its place, and the run's log says where; a run
  must not stop because a clone holds answers;
* ``make release`` (``python -m grader release``): refused, with what was found and what to do
  (``KEEP=1`` keeps a copy under ``logs/release-kept/`` and regenerates);
* ``make student-repo`` (``tools/student_repo.py``): refused, both for the course's own
  ``release/`` (exporting answers would hand them to every student) and for a previous export it
  would replace.

"Written" is what nbgrader itself can tell apart from what it generated, not a guess: each cell
nbgrader generated carries the checksum of the text it was generated with (``nbgrader.checksum``,
:func:`nbgrader.utils.compute_checksum`, what ``nbgrader validate`` and autograde compare against):
a cell whose text no longer matches it was written there (an answer cell that is no longer its
stub, an edited locked cell). So is a cell nbgrader did not generate (no ``grade_id``) that holds
text, a notebook that is not readable, and any other file that ``source/<assignment>/`` does not
have (generate copies those). A release that is only stale (``source/`` changed after it was
generated) holds none of these: its cells still match the checksums they were generated with.
Outputs, execution counts and JupyterLab's checkpoints (``.ipynb_checkpoints/``) are not work.
"""
from __future__ import annotations

import shutil
from pathlib import Path

#: Folders under ``release/<assignment>/`` that hold no work of their own (regenerating loses nothing).
NOT_WORK = {".ipynb_checkpoints", "__pycache__"}


def _names(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def notebook_work(path: Path, generated: Path | None = None) -> str | None:
    """What was written in the released notebook ``path``, as one phrase (``"answer cells
    rms_norm_impl, rms_why differ from the stubs nbgrader generated; 1 cell added"``), or None
    when every cell is as nbgrader generated it (outputs aside).

    A cell is compared with the checksum nbgrader recorded in it; one without (a notebook copied
    from ``source/``, say) with the cell of the same ``grade_id`` in ``generated`` (the notebook
    nbgrader generates now), and counts as written when there is none to compare with."""
    import nbformat
    from nbgrader.utils import compute_checksum

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # noqa: BLE001 - a notebook that cannot be read is still someone's file
        return f"not a notebook nbgrader can read ({type(e).__name__})"
    fresh = {}
    if generated is not None and generated.is_file():
        fresh = {c.metadata["nbgrader"]["grade_id"]: c.source for c in nbformat.read(generated, 4).cells
                 if (c.get("metadata", {}).get("nbgrader") or {}).get("grade_id")}
    answers, edited, added = [], [], 0
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader") or {}
        if not meta.get("grade_id"):
            added += bool(cell.get("source", "").strip())
            continue
        if "checksum" in meta:
            try:
                same = compute_checksum(cell) == meta["checksum"]
            except (KeyError, TypeError, ValueError):  # metadata edited out of shape
                same = False
        elif not (meta.get("solution") or meta.get("locked") or meta.get("grade")):
            continue  # a cell nbgrader keeps no checksum for (a task cell)
        else:
            same = fresh.get(meta["grade_id"]) == cell.get("source")
        if not same:
            (answers if meta.get("solution") else edited).append(meta["grade_id"])
    parts = []
    if answers:
        many = len(answers) > 1
        parts.append(f"answer cell{'s' if many else ''} {_names(answers)} differ{'' if many else 's'} from "
                     f"the stub{'s' if many else ''} nbgrader generated")
    if edited:
        parts.append(f"locked cell{'s' if len(edited) > 1 else ''} {_names(edited)} edited")
    if added:
        parts.append(f"{added} cell{'s' if added > 1 else ''} added")
    return "; ".join(parts) or None


def written_work(release: Path, source: Path, generated: Path | None = None) -> list[str]:
    """What regenerating ``release`` (a ``release/<assignment>/`` folder) from ``source`` (its
    ``source/<assignment>/``) would destroy, one line per file (``"modern.ipynb: answer cell
    dyt_impl differs from the stub nbgrader generated"``, ``"scratch.py: a file source/ does not
    have"``); ``[]`` when there is none, or no such folder. ``generated``: the folder nbgrader
    generates now, if at hand (see :func:`notebook_work`)."""
    release, source = Path(release), Path(source)
    if not release.is_dir():
        return []
    out = []
    for p in sorted(release.rglob("*")):
        rel = p.relative_to(release)
        if not p.is_file() or NOT_WORK & set(rel.parts):
            continue
        if p.suffix == ".ipynb" and len(rel.parts) == 1:
            if not (source / rel).is_file():
                out.append(f"{rel}: a notebook source/ does not have")
            elif what := notebook_work(p, None if generated is None else Path(generated) / rel):
                out.append(f"{rel}: {what}")
        elif not (source / rel).is_file():  # generate copies source/'s other files: those are its own
            out.append(f"{rel}: a file source/ does not have")
    return out


class ReleaseHoldsWork(RuntimeError):
    """``release/<assignment>/`` holds work that regenerating it would destroy; nothing was
    written. The message says what was found and what to do."""


def keep_folder(folder: Path, kept_root: Path) -> Path:
    """Move ``folder`` to ``kept_root/<its name>/`` (a free name: ``-2``, ``-3`` ... if taken);
    returns where it went."""
    kept_root.mkdir(parents=True, exist_ok=True)
    dest, n = kept_root / folder.name, 1
    while dest.exists():
        n += 1
        dest = kept_root / f"{folder.name}-{n}"
    shutil.move(str(folder), dest)
    return dest


def refusal(where: str, found: list[str], todo: str) -> str:
    """The one message of a refusal: ``where`` holds ``found``; nothing was written; ``todo``."""
    shown = "\n  ".join(found[:8]) + (f"\n  ... and {len(found) - 8} more" if len(found) > 8 else "")
    return f"{where} holds work written in it, which this would destroy:\n  {shown}\nNothing was written. {todo}"


__all__ = ["written_work", "notebook_work", "ReleaseHoldsWork", "keep_folder", "refusal", "NOT_WORK"]
