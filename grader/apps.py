"""nbgrader's apps run in this process, through its Python API (``nbgrader.apps.NbGraderAPI``).

Each ``nbgrader <app>`` command starts a fresh interpreter and spends about 4 s importing
nbgrader before it does any work; a class run needs a dozen of them (generate, due dates,
feedback and export for every assignment). :class:`Course` loads the course's
``nbgrader_config.py`` once and runs the same apps, with the same configuration and the same
preprocessors, in this process. Autograde is not run here: it executes student code and runs
in separate (sandboxed) processes, see :mod:`grader.parallel`.
"""
from __future__ import annotations

import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from .course import CourseTree, put_interpreter_on_path, split_round_robin
from .parallel import die_with_parent


#: Where ``generate_assignment`` writes before its output replaces ``release/<assignment>``.
STAGING = ".release-staging"


class AppError(RuntimeError):
    """An nbgrader app reported failure; the message quotes its log and traceback."""


class Course:
    """One nbgrader course root, its ``nbgrader_config.py`` loaded once.

    Args:
        course: the course (:class:`~grader.course.CourseTree`, or its root folder, which holds
            ``nbgrader_config.py``, ``source/`` and ``release/``).

    Raises:
        FileNotFoundError: the root has no ``nbgrader_config.py``.
    """

    def __init__(self, course: CourseTree | Path):
        from nbgrader.apps import NbGraderAPI
        from traitlets.config import Config
        from traitlets.config.loader import PyFileConfigLoader

        put_interpreter_on_path()  # nbgrader runs `alembic` from PATH when it creates a gradebook
        self.tree = course if isinstance(course, CourseTree) else CourseTree(course)
        self.root = self.tree.root
        cfg_file = self.root / "nbgrader_config.py"
        if not cfg_file.is_file():
            raise FileNotFoundError(f"{self.root} has no nbgrader_config.py: is it the course root?")
        config = Config()
        config.merge(PyFileConfigLoader(cfg_file.name, path=str(self.root)).load_config())
        config.CourseDirectory.root = str(self.root)
        config.CourseDirectory.db_url = self.tree.gradebook_url
        self.config = config
        self.api = NbGraderAPI(config=config)
        self.api.log.setLevel("ERROR")

    def _gradebook(self) -> str:
        """The gradebook's URL, the gradebook created first if it is new
        (:func:`grader.database.create_gradebook`: nbgrader would run ``alembic heads`` for it)."""
        from .database import create_gradebook

        create_gradebook(self.tree.gradebook_url)
        return self.tree.gradebook_url

    def _check(self, what: str, result: dict) -> dict:
        if not result.get("success"):
            raise AppError(f"`nbgrader {what}` failed:\n{result.get('log', '')[-3000:]}\n"
                           f"{result.get('error', '')[-3000:]}")
        return result

    def generate_assignment(self, assignment: str) -> None:
        """``nbgrader generate_assignment <assignment> --force``: ``source/`` -> ``release/``,
        and the assignment's notebooks and cells recorded in the gradebook. nbgrader writes into
        a staging folder, swapped in for ``release/<assignment>`` only when it succeeded: a
        failure leaves the committed ``release/`` as it was.

        Raises:
            AppError: nbgrader failed (its log is quoted).
        """
        from nbgrader.utils import temp_attrs

        self._gradebook()  # nbgrader records the assignment in it
        staging = self.root / STAGING
        shutil.rmtree(staging, ignore_errors=True)
        cwd = os.getcwd()
        try:  # nbgrader resolves some paths against the working directory
            os.chdir(self.root)
            with temp_attrs(self.api.coursedir, release_directory=STAGING):
                self._check(f"generate_assignment {assignment}",
                            self.api.generate_assignment(assignment, force=True, create=True))
            new, current = staging / assignment, self.tree.release(assignment)
            if current.exists():  # swapped in only now that nbgrader succeeded
                os.replace(current, staging / f"{assignment}.old")
            current.parent.mkdir(exist_ok=True)
            os.replace(new, current)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            os.chdir(cwd)

    def generate_feedback(self, assignment: str) -> None:
        """``nbgrader generate_feedback <assignment> --force`` for every autograded student.

        Raises:
            AppError: nbgrader failed (its log is quoted).
        """
        cwd = os.getcwd()
        try:
            os.chdir(self.root)
            self._check(f"generate_feedback {assignment}",
                        self.api.generate_feedback(assignment, force=True))
        finally:
            os.chdir(cwd)

    def zip_collect(self, assignment: str, collector_plugin: str) -> None:
        """``nbgrader zip_collect <assignment> --force``: the files in
        ``downloaded/<assignment>/archive/`` into ``submitted/<student>/<assignment>/``.

        Args:
            collector_plugin: dotted name of the ``FileNameCollectorPlugin`` that reads
                student ids from file names.

        Raises:
            AppError: nbgrader failed (its log is quoted).
        """
        from nbgrader.apps.zipcollectapp import ZipCollectApp
        from nbgrader.utils import capture_log, temp_attrs
        from traitlets.config import Config

        config = Config(self.config)
        config.ZipCollectApp.collector_plugin = collector_plugin
        config.ZipCollectApp.force = True
        config.ExtractorPlugin.force = True
        with temp_attrs(self.api.coursedir, assignment_id=assignment):
            app = ZipCollectApp(coursedir=self.api.coursedir, config=config)
            app.log.setLevel("ERROR")
            self._check(f"zip_collect {assignment}", capture_log(app))

    def remove_submission(self, assignment: str, student: str) -> None:
        """Remove one student's submission of one assignment (and its grades) from the
        gradebook, as a resubmission does before it is collected; nothing if there is none."""
        from nbgrader.api import Gradebook, MissingEntry

        with Gradebook(self._gradebook(), self.api.coursedir.course_id) as gb:
            try:
                gb.remove_submission(assignment, student)
            except MissingEntry:
                pass

    def set_due_date(self, assignment: str, duedate: str) -> None:
        """Record a due date in the gradebook (as ``nbgrader db assignment add --duedate``).

        Args:
            duedate: a date nbgrader parses, e.g. ``"2026-11-20 23:59:00 UTC"``.
        """
        from nbgrader.api import Gradebook
        from nbgrader.utils import parse_utc

        with Gradebook(self._gradebook(), self.api.coursedir.course_id) as gb:
            gb.update_or_create_assignment(assignment, duedate=parse_utc(duedate))

    def export_csv(self, path: Path) -> Path:
        """``nbgrader export --to <path>``: one row per (assignment, student) with nbgrader's
        columns (score, max_score, timestamp, duedate, late_submission_penalty, ...).

        Raises:
            AppError: nbgrader failed (its log is quoted).
        """
        from nbgrader.apps.exportapp import ExportApp
        from nbgrader.utils import capture_log
        from traitlets.config import Config

        config = Config(self.config)
        config.CsvExportPlugin.to = str(path)
        app = ExportApp(coursedir=self.api.coursedir, config=config)
        app.log.setLevel("ERROR")
        self._check(f"export --to {path}", capture_log(app))
        return Path(path)


def _feedback_worker(args: tuple[CourseTree, list[str]]) -> None:
    tree, assignments = args
    course = Course(tree)
    for a in assignments:
        course.generate_feedback(a)


def generate_feedback_parallel(course: Course, assignments: list[str], jobs: int) -> None:
    """``generate_feedback`` for several assignments in up to ``jobs`` forked processes
    (each assignment writes its own ``feedback/<student>/<assignment>/`` folders and only
    reads the gradebook).

    Raises:
        AppError: nbgrader failed for one of them (its log is quoted).
    """
    jobs = max(1, min(jobs, len(assignments)))
    if jobs == 1:
        for a in assignments:
            course.generate_feedback(a)
        return
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("fork"), initializer=die_with_parent) as pool:
        for _ in pool.map(_feedback_worker, [(course.tree, g) for g in split_round_robin(assignments, jobs)]):
            pass
