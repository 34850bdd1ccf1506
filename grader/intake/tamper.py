"""The grader's static scan of submissions: the scan itself is :mod:`normref.tamper` (one code,
shared with the student's self-check, so grading flags exactly what the self-check names), and
what only the grader looks at: modules and start-up files in a submission's folder (found by
:mod:`grader.intake.handed_in`, which also describes what each did).
"""
from __future__ import annotations

from pathlib import Path

from normref.tamper import Finding, protected_bindings, scan

from .handed_in import STARTUP_NAMES, handed_in

#: The grader's scan (:mod:`normref.tamper`'s, the self-check's too) and what only the grader reads.
__all__ = ["Finding", "protected_bindings", "scan", "shadowing_modules", "startup_files", "STARTUP_NAMES"]


def shadowing_modules(folder: Path) -> list[str]:
    """What in a submission's folder has the name of a module the grading kernel can import
    (:func:`grader.intake.handed_in.handed_in`; what each did is :func:`grader.intake.handed_in.describe`'s).

    nbgrader copies the student's whole folder next to the notebook, and IPython puts that
    folder first on ``sys.path``: a ``torch.py`` or a ``normref/`` package there would be
    imported instead of the course's. The grading kernel moves the folder to the end of
    ``sys.path`` (:mod:`grader.kernel.kernel_guard`).

    Args:
        folder: ``submitted/<student>/<assignment>/``.

    Returns:
        One line per ``.py`` file, package (a folder with ``__init__.py``) or extension module
        whose name is a standard-library or installed module, e.g. ``"torch.py shadows the
        installed module 'torch'"``; ``[]`` when there is none.
    """
    return [f"{h.path} shadows the {h.kind} module {h.module!r}" for h in handed_in(folder) if not h.startup]


def startup_files(folder: Path) -> list[str]:
    """Start-up files in a submission: what a Python or IPython process runs before any cell
    when it finds them (``sitecustomize.py``/``usercustomize.py`` on the path at start, a
    ``*.pth`` file in a site folder, ``ipython_config.py``/``ipython_kernel_config.py`` and an
    IPython profile's ``startup/*.py``, e.g. under ``.ipython/``).

    The grading kernel loads none of them by itself: the sandbox starts Python with its own
    script's folder first on the path (not the student's), ``PYTHONNOUSERSITE=1``, ``HOME`` and
    ``IPYTHONDIR`` in its private tmpfs (an empty profile), and IPython (8.0.1 and later) reads
    no configuration from the working directory. The student's own code can run one
    (:func:`grader.intake.handed_in.describe` says whether it did).

    Args:
        folder: ``submitted/<student>/<assignment>/``.

    Returns:
        One line per file (paths relative to ``folder``, at most 20), e.g.
        ``"sitecustomize.py is a Python start-up file"``; ``[]`` when there is none.
    """
    return [f"{h.path} is {h.what}" for h in handed_in(folder) if h.startup]
