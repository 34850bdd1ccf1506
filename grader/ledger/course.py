"""The course folder: every path, the gradebook URL and the nbgrader environment, defined once.

A course root is nbgrader's tree (``source/<assignment>/``, ``release/<assignment>/``,
``submitted/<student>/<assignment>/``, ``autograded/...``, ``feedback/...``, with
``nbgrader_config.py`` and ``gradebook.db`` at the root). :class:`CourseTree` names each
folder through nbgrader's own ``CourseDirectory.format_path``, so the grader and nbgrader
agree on where a student's notebook is; every module of the grader asks it instead of joining
paths by hand.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

# under ``logs/`` (:mod:`grader.ledger.store` owns every file there): one line per run, and the canary's
# last pass, both kept by ``clean``

#: How long a writer waits for the SQLite gradebook lock before giving up (seconds).
SQLITE_BUSY_TIMEOUT_S = 600
#: The gradebook's file name in the course root (nbgrader's default).
GRADEBOOK = "gradebook.db"
#: The course root's nbgrader configuration (it also marks the folder as a course root).
CONFIG = "nbgrader_config.py"
#: What a run exports beside the gradebook: nbgrader's export, one row per graded cell, who is who.
GRADES_CSV = "grades.csv"
QUESTIONS_CSV = "grades_by_question.csv"
ROSTER_CSV = "roster.csv"
#: This repository's own course root (the default ``--course-root``).
REPO_ROOT = Path(__file__).resolve().parents[2]


class CourseStateError(RuntimeError):
    """The course folder is not in a state a run may write to; nothing was written."""


def split_round_robin(items: list, n: int) -> list[list]:
    """``n`` groups of near-equal size (item ``i`` goes to group ``i mod n``), order kept within a
    group; empty groups dropped. ``split_round_robin([a, b, c], 2) == [[a, c], [b]]``."""
    groups = [items[i::n] for i in range(max(1, n))]
    return [g for g in groups if g]


def nbgrader_env(single_thread: bool = False) -> dict[str, str]:
    """The environment for an nbgrader subprocess: this interpreter's ``bin/`` first on PATH
    (nbgrader runs ``alembic`` from PATH when it creates a gradebook), warnings off, and with
    ``single_thread`` one BLAS/OpenMP thread (N kernels on N cores)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONWARNINGS"] = "ignore"
    if single_thread:
        from ..kernel.names import SINGLE_THREAD_VARS

        for var in SINGLE_THREAD_VARS:
            env[var] = "1"
    return env


def put_interpreter_on_path() -> None:
    """The same PATH fix for nbgrader apps run in this process (``alembic`` from this venv)."""
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])


@dataclass(frozen=True)
class CourseTree:
    """One nbgrader course root and the gradebook it grades into.

    Args:
        root: the folder holding ``nbgrader_config.py``, ``source/`` and ``release/``.
        db_url: the gradebook's SQLAlchemy URL (default: ``gradebook.db`` in the root, SQLite
            with a :data:`SQLITE_BUSY_TIMEOUT_S` busy timeout so that parallel writers wait for
            the lock instead of failing with "database is locked").
    """

    root: Path
    db_url: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root).resolve())

    def __getstate__(self):  # picklable for worker processes (the cached CourseDirectory is not)
        return {"root": self.root, "db_url": self.db_url}

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)

    # -- the gradebook
    @property
    def gradebook_path(self) -> Path:
        """The SQLite gradebook file (meaningful only when :attr:`is_sqlite`)."""
        return self.root / GRADEBOOK

    @property
    def gradebook_url(self) -> str:
        """The one gradebook URL every step uses (nbgrader apps, autograde workers, reads)."""
        return self.db_url or f"sqlite:///{self.gradebook_path}?timeout={SQLITE_BUSY_TIMEOUT_S}"

    @property
    def is_sqlite(self) -> bool:
        return self.gradebook_url.startswith("sqlite:")

    # -- folders, through nbgrader's own layout
    @cached_property
    def _coursedir(self):
        from nbgrader.coursedir import CourseDirectory

        return CourseDirectory(root=str(self.root))

    def path(self, step: str, student: str = ".", assignment: str = "") -> Path:
        """``<root>/<step>/<student>/<assignment>`` as nbgrader's ``CourseDirectory.format_path``
        lays it out (``student`` is ``"."`` for ``source``/``release``)."""
        return Path(os.path.normpath(self._coursedir.format_path(step, student, assignment)))

    def source(self, assignment: str = "") -> Path:
        return self.path("source", ".", assignment)

    def release(self, assignment: str = "") -> Path:
        return self.path("release", ".", assignment)

    def submitted(self, student: str = "", assignment: str = "") -> Path:
        return self.path("submitted", student or ".", assignment)

    def autograded(self, student: str = "", assignment: str = "") -> Path:
        return self.path("autograded", student or ".", assignment)

    def feedback(self, student: str = "", assignment: str = "") -> Path:
        return self.path("feedback", student or ".", assignment)

    def downloaded(self, assignment: str) -> Path:
        """Where ``nbgrader zip_collect`` reads an assignment's LMS files (``.../archive``)."""
        return self.root / "downloaded" / assignment / "archive"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def grades_csv(self) -> Path:
        return self.root / GRADES_CSV

    @property
    def questions_csv(self) -> Path:
        return self.root / QUESTIONS_CSV

    # -- what is there
    def assignments(self) -> list[str]:
        """Assignment names: the folders of ``source/`` that hold a notebook.

        Raises:
            FileNotFoundError: the root has no ``source/`` (not a course root).
        """
        src = self.source()
        if not src.is_dir():
            raise FileNotFoundError(f"{self.root} has no source/ folder: is it the course root?")
        return sorted(p.name for p in src.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))

    def released_notebooks(self, assignment: str) -> list[str]:
        """File names of an assignment's released notebooks."""
        return sorted(p.name for p in self.release(assignment).glob("*.ipynb"))

    def has_notebook(self, step: str, student: str, assignment: str) -> bool:
        """True if ``<step>/<student>/<assignment>/`` holds a notebook."""
        return any(self.path(step, student, assignment).glob("*.ipynb"))

    def students(self, step: str = "submitted") -> list[str]:
        """Student ids with a folder in ``step`` (``submitted`` by default)."""
        d = self.root / step
        return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.is_dir() else []

    def pairs(self, assignments: list[str], step: str = "submitted") -> list[tuple[str, str]]:
        """``(assignment, student)`` for every ``<step>/<student>/<assignment>/`` with a notebook,
        sorted by student then assignment order."""
        return [(a, s) for s in self.students(step) for a in assignments if self.has_notebook(step, s, a)]


__all__ = ["CourseTree", "CourseStateError", "split_round_robin", "nbgrader_env", "put_interpreter_on_path",
           "SQLITE_BUSY_TIMEOUT_S", "GRADEBOOK", "CONFIG", "GRADES_CSV", "QUESTIONS_CSV", "ROSTER_CSV"]
