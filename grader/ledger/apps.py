"""nbgrader's apps run in this process, through its Python API (``nbgrader.apps.NbGraderAPI``).

Each ``nbgrader <app>`` command starts a fresh interpreter and spends about 4 s importing
nbgrader before it does any work; a class run needs a dozen of them (generate, due dates,
feedback and export for every assignment). :class:`Course` loads the course's
``nbgrader_config.py`` once and runs the same apps, with the same configuration and the same
preprocessors, in this process. Autograde is not run here: it executes student code and runs
in worker processes, each kernel sandboxed, see :mod:`grader.autograde.engine`.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import NamedTuple

from . import store
from .course import CONFIG, CourseTree, put_interpreter_on_path, split_round_robin
from ..autograde.engine import die_with_parent
# ``logs/generated.json``: per assignment, the digest of what its last generate read and wrote
# (:func:`generate_inputs`) and of what it left in the gradebook (:func:`gradebook_record`)
from .store import GENERATED

#: Where ``generate_assignment`` writes before its output replaces ``release/<assignment>``.
STAGING = ".release-staging"


def _digest(h, folder: Path) -> None:
    for p in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + b"\0" + p.read_bytes() + b"\0")


def generate_inputs(tree: CourseTree, assignment: str) -> str:
    """SHA-256 (hex) of what ``generate_assignment`` reads and writes for ``assignment``: every file
    of ``source/<assignment>/`` and ``release/<assignment>/`` (names and bytes) and the course's
    ``nbgrader_config.py``."""
    h = hashlib.sha256()
    for folder in (tree.source(assignment), tree.release(assignment)):
        h.update(f"{folder.relative_to(tree.root)}\0".encode())
        _digest(h, folder)
    config = tree.root / CONFIG
    h.update(config.read_bytes() if config.is_file() else b"")
    return h.hexdigest()


def gradebook_record(tree: CourseTree, assignment: str, course_id: str) -> str | None:
    """SHA-256 (hex) of what the gradebook holds of ``assignment``'s definition: its notebooks and
    their grade, solution, task and source cells (row ids, sources, checksums, points), which a
    generate writes and autograde compares against; None when it holds no such assignment (or
    there is no gradebook). Due dates and students are not part of it. A gradebook made again
    (new row ids) or restored from before a change of ``source/`` gives another digest."""
    from nbgrader.api import Gradebook, MissingEntry

    if tree.is_sqlite and not (tree.gradebook_path.is_file() and tree.gradebook_path.stat().st_size):
        return None
    from .database import create_gradebook

    create_gradebook(tree.gradebook_url)  # an empty server database: nbgrader would make it (no subprocess)
    with Gradebook(tree.gradebook_url, course_id) as gb:
        try:
            asg = gb.find_assignment(assignment)
        except MissingEntry:
            return None
        rows = [asg.id, asg.name]
        for nb in sorted(asg.notebooks, key=lambda n: n.name):
            rows.append([nb.id, nb.name, nb.kernelspec])
            rows += sorted([c.id, c.name, c.max_score, c.cell_type] for c in nb.grade_cells)
            rows += sorted([c.id, c.name] for c in nb.solution_cells)
            rows += sorted([c.id, c.name, c.max_score, c.cell_type] for c in nb.task_cells)
            rows += sorted([c.id, c.name, c.cell_type, c.locked, c.source, c.checksum] for c in nb.source_cells)
    return hashlib.sha256(json.dumps(rows, default=str).encode()).hexdigest()


class AppError(RuntimeError):
    """An nbgrader app reported failure; the message quotes its log and traceback."""


class Kept(NamedTuple):
    """A ``release/<assignment>`` that held work, moved to ``path`` (under ``logs/release-kept/``)
    before it was regenerated; ``work``: what it held (:func:`grader.ledger.release.written_work`)."""

    path: Path
    work: list[str]


class Generated(NamedTuple):
    """What :meth:`Course.generate_unless_unchanged` did: ``skipped`` (why it did not generate) or
    ``kept`` (the ``release/<assignment>`` that held work, and where it went; None when it held none)."""

    skipped: str | None = None
    kept: Kept | None = None


class Course:
    """One nbgrader course root, its ``nbgrader_config.py`` loaded once.

    Args:
        course: the course (:class:`~grader.ledger.course.CourseTree`, or its root folder, which holds
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
        cfg_file = self.root / CONFIG
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
        (:func:`grader.ledger.database.create_gradebook`: nbgrader would run ``alembic heads`` for it)."""
        from .database import create_gradebook

        create_gradebook(self.tree.gradebook_url)
        return self.tree.gradebook_url

    def _check(self, what: str, result: dict) -> dict:
        if not result.get("success"):
            raise AppError(f"`nbgrader {what}` failed:\n{result.get('log', '')[-3000:]}\n"
                           f"{result.get('error', '')[-3000:]}")
        return result

    def generate_assignment(self, assignment: str, keep: Path | None = None) -> Kept | None:
        """``nbgrader generate_assignment <assignment> --force``: ``source/`` -> ``release/``,
        and the assignment's notebooks and cells recorded in the gradebook. nbgrader writes into
        a staging folder, swapped in for ``release/<assignment>`` only when it succeeded: a
        failure leaves the committed ``release/`` as it was.

        A ``release/<assignment>`` that holds work written in it (:func:`grader.ledger.release.written_work`:
        answer cells that are not nbgrader's stubs, cells or files added) is never deleted: with
        ``keep`` (a folder, e.g. :func:`grader.ledger.store.release_kept`) it is moved there whole before
        the new one takes its place; without, it is left as it is (nbgrader's output is discarded).

        Returns:
            :class:`Kept`: where the folder that held work went (under ``keep``) and what it held;
            None when it held none.

        Raises:
            AppError: nbgrader failed (its log is quoted).
            grader.ledger.release.ReleaseHoldsWork: the folder holds work and no ``keep`` was given.
        """
        from nbgrader.utils import temp_attrs

        from .release import ReleaseHoldsWork, keep_folder, refusal, written_work

        current = self.tree.release(assignment)
        self._gradebook()  # nbgrader records the assignment in it
        staging = self.root / STAGING
        shutil.rmtree(staging, ignore_errors=True)
        cwd = os.getcwd()
        kept = None
        try:  # nbgrader resolves some paths against the working directory
            os.chdir(self.root)
            with temp_attrs(self.api.coursedir, release_directory=STAGING):
                self._check(f"generate_assignment {assignment}",
                            self.api.generate_assignment(assignment, force=True, create=True))
            new = staging / assignment
            work = written_work(current, self.tree.source(assignment), generated=new)
            if work and keep is None:
                raise ReleaseHoldsWork(refusal(f"release/{assignment}", work,
                                               f"Move release/{assignment} out of release/, then generate again."))
            # swapped in only now that nbgrader succeeded (moved, not written: release/ is the
            # course's output, not bookkeeping, and nbgrader wrote it whole into staging/ beside it)
            if current.exists():
                if work:  # someone's answers: kept whole, never deleted
                    kept = Kept(keep_folder(current, keep), work)
                else:
                    os.replace(current, staging / f"{assignment}.old")
            current.parent.mkdir(exist_ok=True)
            os.replace(new, current)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            os.chdir(cwd)
        return kept

    def generate_unless_unchanged(self, assignment: str, keep: Path | None = None) -> Generated:
        """:meth:`generate_assignment`, unless nothing it reads or writes changed since the one
        that left the gradebook as it is: ``source/<assignment>/``, ``release/<assignment>/`` and
        ``nbgrader_config.py`` have the digest recorded in ``logs/generated.json`` right after that
        generate, and the gradebook's definition of the assignment (:func:`gradebook_record`) is
        the one recorded with it. A cleaned course (``logs/`` emptied), a new or restored
        gradebook, or any changed file generates again. ``keep``: as for :meth:`generate_assignment`.

        Returns:
            :class:`Generated`: why it did not generate (one line, for the run's log), or where
            a ``release/<assignment>`` that held work was moved to.

        Raises:
            AppError: nbgrader failed (its log is quoted).
            grader.ledger.release.ReleaseHoldsWork: the folder holds work and no ``keep`` was given.
        """
        course_id = self.api.coursedir.course_id
        done = store.generated(self.tree).get(assignment)
        inputs = generate_inputs(self.tree, assignment)
        if done and done.get("inputs") == inputs and \
                done.get("gradebook") == gradebook_record(self.tree, assignment, course_id):
            return Generated(skipped=f"source/{assignment}, release/{assignment} and nbgrader_config.py are "
                                     f"unchanged since the generate that recorded it in the gradebook "
                                     f"(logs/{GENERATED})")
        kept = self.generate_assignment(assignment, keep=keep)
        record = store.generated(self.tree)
        record[assignment] = {"inputs": generate_inputs(self.tree, assignment),
                              "gradebook": gradebook_record(self.tree, assignment, course_id)}
        store.write_generated(self.tree, record)
        return Generated(kept=kept)

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

    def export_csv(self, path: Path, assignments: list[str] | None = None) -> Path:
        """``nbgrader export --to <path>``: one row per (assignment, student) with nbgrader's
        columns (score, max_score, timestamp, duedate, late_submission_penalty, ...);
        ``assignments``: only these (nbgrader's ``ExportPlugin.assignment``; None: every one).

        Raises:
            AppError: nbgrader failed (its log is quoted).
        """
        from nbgrader.apps.exportapp import ExportApp
        from nbgrader.utils import capture_log
        from traitlets.config import Config

        config = Config(self.config)
        config.CsvExportPlugin.to = str(path)
        if assignments is not None:
            config.CsvExportPlugin.assignment = list(assignments) or ["(none)"]
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
