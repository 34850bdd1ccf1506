"""The grader's static scan of submissions: the scan itself is :mod:`normref.tamper` (one code,
shared with the student's self-check, so grading flags exactly what the self-check names), and
what only the grader looks at: modules and start-up files in a submission's folder.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from normref.tamper import Finding, protected_bindings, scan

#: The grader's scan (:mod:`normref.tamper`'s, the self-check's too) and what only the grader reads.
__all__ = ["Finding", "protected_bindings", "scan", "shadowing_modules", "startup_files", "STARTUP_NAMES"]


def shadowing_modules(folder: Path) -> list[str]:
    """What in a submission's folder has the name of a module the grading kernel can import.

    nbgrader copies the student's whole folder next to the notebook, and IPython puts that
    folder first on ``sys.path``: a ``torch.py`` or a ``normref/`` package there would be
    imported instead of the course's. The grading kernel moves the folder to the end of
    ``sys.path`` (:mod:`grader.kernel_guard`), so such files are ignored; this names them for
    the report.

    Args:
        folder: ``submitted/<student>/<assignment>/``.

    Returns:
        One line per ``.py`` file, package (a folder with ``__init__.py``) or extension module
        whose name is a standard-library or installed module, e.g. ``"torch.py shadows the
        installed module 'torch'"``; ``[]`` when there is none.
    """
    out = []
    for p in sorted(Path(folder).iterdir()):
        if p.is_file() and p.suffix in (".py", ".pyc", ".so", ".pyd"):
            name = p.name.split(".")[0]
        elif p.is_dir() and (p / "__init__.py").is_file():
            name = p.name
        else:
            continue
        if not name.isidentifier():
            continue
        if name in sys.stdlib_module_names or name in sys.builtin_module_names:
            out.append(f"{p.name}{'/' if p.is_dir() else ''} shadows the standard-library module {name!r}")
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        origin = getattr(spec, "origin", None) or ""
        inside = spec is not None and str(Path(folder).resolve()) in str(Path(origin).resolve())
        if spec is not None and not inside:
            out.append(f"{p.name}{'/' if p.is_dir() else ''} shadows the installed module {name!r}")
    return out


#: Start-up files Python or IPython would run before any cell, were they where it looks.
STARTUP_NAMES = ("sitecustomize.py", "usercustomize.py", "ipython_config.py", "ipython_kernel_config.py",
                 "jupyter_config.py", "jupyter_notebook_config.py", "jupyter_server_config.py")


def startup_files(folder: Path) -> list[str]:
    """Start-up files in a submission: what a Python or IPython process runs before any cell
    when it finds them (``sitecustomize.py``/``usercustomize.py`` on the path at start, a
    ``*.pth`` file in a site folder, ``ipython_config.py``/``ipython_kernel_config.py`` and an
    IPython profile's ``startup/*.py``, e.g. under ``.ipython/``).

    The grading kernel loads none of them: the sandbox starts Python with its own script's
    folder first on the path (not the student's), ``PYTHONNOUSERSITE=1``, ``HOME`` and
    ``IPYTHONDIR`` in its private tmpfs (an empty profile), and IPython (8.0.1 and later) reads
    no configuration from the working directory. This names them for the report.

    Args:
        folder: ``submitted/<student>/<assignment>/``.

    Returns:
        One line per file (paths relative to ``folder``, at most 20), e.g.
        ``"sitecustomize.py is a Python start-up file"``; ``[]`` when there is none.
    """
    folder = Path(folder)
    out = []
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or p.is_symlink():
            continue
        rel = p.relative_to(folder)
        name = p.name
        if name in STARTUP_NAMES or p.suffix == ".pth":
            out.append(f"{rel} is a Python start-up file")
        elif any(part == ".ipython" or part.startswith("profile_") for part in rel.parts[:-1]):
            out.append(f"{rel} is part of an IPython profile (start-up scripts, configuration)")
        if len(out) >= 20:
            break
    return out
