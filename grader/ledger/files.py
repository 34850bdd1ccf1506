"""Files a run copies or writes beside the ledger: a student's handed-in tree, copied without its
links (:func:`copy_plain_tree`), and a notebook written over one that nbgrader left read-only
(:func:`write_notebook`, through :func:`grader.ledger.store.atomic_path`)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from .store import atomic_path


def copy_plain_tree(src: Path, dest: Path, root: Path | None = None) -> list[str]:
    """Copy the folder ``src`` to ``dest`` (made; may exist) with its regular files and folders only:
    a symbolic link (to a file, a folder, nothing, or a loop), a FIFO, a socket or a device is never
    followed or copied, nor is ``src`` when it, or a folder between ``root`` and it, is a link.
    What a student hands in is copied by this, so a link to the course's files brings nothing of
    them and a broken one costs nothing. Returns the paths left out, relative to ``src``
    (``"notes.txt (a symbolic link)"``), sorted.

    Raises:
        OSError: a file cannot be read or written (a full disk).
    """
    import stat

    src, dest = Path(src), Path(dest)
    left: list[str] = []
    below = [src, *(src.parents[:len(src.relative_to(root).parts) - 1] if root is not None else [])]
    if any(p.is_symlink() for p in below):
        dest.mkdir(parents=True, exist_ok=True)
        return [f"{src.relative_to(root) if root is not None else src} (a symbolic link, not followed)"]

    def ignore(folder: str, names: list[str]) -> set[str]:
        out = set()
        for name in names:
            mode = os.lstat(os.path.join(folder, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                what = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                left.append(f"{Path(folder, name).relative_to(src).as_posix()} ({what})")
                out.add(name)
        return out

    shutil.copytree(src, dest, ignore=ignore, dirs_exist_ok=True)
    return sorted(left)


def write_notebook(nb: Any, path: Path) -> None:
    """The notebook ``nb`` (an ``nbformat.NotebookNode``) written over ``path`` through
    :func:`atomic_path`, keeping the mode of the file it replaces: nbgrader leaves the notebooks it
    writes read-only (``Autograde.permissions``, 444), which a user who is not root cannot open for
    writing, though the folder lets them be replaced.

    Raises:
        OSError: the folder cannot be written.
    """
    import nbformat

    path = Path(path)
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    with atomic_path(path) as part:
        nbformat.write(nb, part)
        if mode is not None:
            os.chmod(part, mode)
