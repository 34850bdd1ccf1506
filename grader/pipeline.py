"""``grade_class``: one run of the grader, as the list of its stages (:data:`STAGES`).

``prepare`` (refuse bad input, the canary, a backup, start over if asked, damaged records set
aside) -> ``generate`` -> ``collect`` -> ``repair`` (and the tamper scan) -> ``inputs`` (drawn
from a secret seed) -> ``autograde`` (Dask tasks or processes, sandboxed) -> ``scoring`` (outside
the kernels) -> ``feedback`` -> ``export`` (grades.csv) -> ``score`` (per-question CSV) ->
``report``. Every grading step is one of nbgrader's own apps run in the course root; the stages
arrange the submissions, run the apps and read nbgrader's gradebook. Each stage is a function of
the run's :class:`~grader.batch.Batch`, in :mod:`grader.stages` (the scoring module's for
``inputs``); what a run keeps under ``logs/`` between runs is :mod:`grader.store`'s.
docs/ARCHITECTURE.md describes each stage; tests/test_docs.py checks that it, the README and this
list name :data:`STAGES`.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from . import canary, database, scoring, state
from .batch import Batch, GradeRun, GradingError, read_gradebook, run_record  # noqa: F401
from .course import REPO_ROOT, CourseTree
from .engine import default_jobs
from .report import summary_text  # noqa: F401 - the CLI prints it after format_table
from .reset import GRADING_STATE, KEPT_LOGS, clean, start_over  # noqa: F401 - `make clean`'s names
from .stages.autograde import autograde_stage
from .stages.collect import collect_submissions
from .stages.grade import repair, trusted_scoring
from .stages.output import export, feedback, report, score
from .stages.prepare import generate, parse_duedates, prepare
from .store import GRADED  # noqa: F401 - logs/graded.json, as tests knew it here
from .table import format_table  # noqa: F401

#: How autograde runs when no Dask scheduler is given (``grade_class(engine=...)``, ``--engine``).
DEFAULT_ENGINE = "dask"

#: The stages of a run, in order; ``GradeRun.stage_seconds`` has one entry per stage.
STAGES = (("prepare", prepare), ("generate", generate), ("collect", collect_submissions),
          ("repair", repair), ("inputs", scoring.inputs_stage), ("autograde", autograde_stage),
          ("scoring", trusted_scoring), ("feedback", feedback),
          ("export", export), ("score", score), ("report", report))


def list_assignments(course_root: Path) -> list[str]:
    """Assignment names: the folders of ``source/`` that hold a notebook.

    Raises:
        GradingError: ``course_root`` has no ``source/`` folder.
    """
    try:
        return CourseTree(course_root).assignments()
    except FileNotFoundError as e:
        raise GradingError(str(e)) from e


def grade_class(*, course_root: Path = REPO_ROOT, submissions: Path | None = None,
                jobs: int | None = None, fresh: bool | None = None, progress: bool = False,
                use_sandbox: bool | None = None, cell_timeout: int | None = None,
                duedates: dict[str, str] | None = None, yes: bool = False, command: str | None = None,
                demo_students: int | None = None, scheduler: str | None = None, db_url: str | None = None,
                engine: str | None = None, lms_gradebook: Path | None = None, groups: bool = True,
                log=print) -> GradeRun:
    """Grade a class end to end with nbgrader: the :data:`STAGES` in order, holding the course's
    run lock, with one record per run appended to ``logs/runs.jsonl``.

    Args:
        course_root: the nbgrader course root (holds ``nbgrader_config.py`` and ``source/``).
        submissions: an nbgrader ``submitted/`` tree, a folder or ``.zip`` of LMS-named
            notebooks, or None for the embedded demo class.
        jobs: concurrent autograde processes (default: all cores).
        fresh: remove earlier grading state first (default: True for the demo class, False
            otherwise, so a real class can be graded in several batches: a batch adds to the
            gradebook, replaces a student's earlier submission of the same assignment, and
            autogrades only its own students). Grading state left by the demo class is
            always removed before real submissions.
        duedates: ``{assignment: date}`` due dates to record in the gradebook (``"*"`` for
            every assignment), e.g. ``{"*": "2026-11-21 09:00 UTC"}``; a submission's
            ``timestamp.txt`` after it is marked late.
        progress: show a progress bar with an ETA on stderr.
        use_sandbox: run every kernel in the bubblewrap sandbox (default: when bwrap works
            here; True makes its absence an error).
        cell_timeout: seconds a cell may run before it is interrupted (default: the
            ``Execute.timeout`` of ``nbgrader_config.py``).
        yes: consent to remove real students' grading state when ``fresh`` (a backup is written
            first); without it a terminal is asked, and no terminal means no.
        command: how this run was started, for the lock and the run log (default: this
            process's command line).
        demo_students: with no ``submissions``, grade only the first N students of the demo
            class (a quick look; default: all 30).
        lms_gradebook: the LMS's own gradebook export (Canvas) or grading worksheet (Moodle):
            written back filled in as ``lms-import-<lms>.csv`` (:mod:`grader.lms`).
        groups: the groups of wrong answers in the class report (:mod:`grader.groups`: read
            from the outputs the scoring stage recorded; no student code runs again). On by
            default; False (``--no-groups``) leaves them out.
        scheduler: the address of a Dask scheduler (``tcp://HOST:8786``) whose workers run the
            autograde tasks (default: ``$DASK_SCHEDULER_ADDRESS``); see :mod:`grader.cluster`.
        db_url: the gradebook's SQLAlchemy URL, e.g. ``postgresql://USER@HOST:5432/DBNAME``
            (nbgrader's ``CourseDirectory.db_url``; default: ``gradebook.db`` here, SQLite).
        engine: where the autograde tasks run without a ``scheduler`` (:mod:`grader.engine`):
            ``"dask"`` (an embedded local Dask cluster of ``jobs`` workers) or ``"processes"``
            (this machine's process pool of ``jobs`` workers); default :data:`DEFAULT_ENGINE`.
        log: where progress lines go.

    Returns:
        :class:`GradeRun` with the paths to ``grades.csv``, the per-question CSV, the
        feedback and the class report.

    Raises:
        GradingError: an nbgrader step failed for a reason other than a student's code.
        FileNotFoundError: ``submissions`` does not exist.
        ValueError: ``submissions`` is not a recognised kind of input or holds no submission
            of any assignment; a due date nbgrader cannot read; ``db_url`` cannot be opened
            (one line, before anything is touched).
        GradingError: also when the ``scheduler`` does not answer or has no workers (before
            anything is touched).
        CourseStateError: another run holds the course; the gradebook is missing, empty or
            corrupt; real students would be removed without a yes; the demo class was asked
            for in a real course. Nothing was written.
    """
    t0 = time.perf_counter()
    engine = engine or DEFAULT_ENGINE
    if engine not in ("dask", "processes"):
        raise ValueError(f"engine must be 'dask' or 'processes', not {engine!r}")
    if db_url:
        database.check_url(db_url)  # a wrong URL: one line, in seconds, nothing touched
    tree = CourseTree(course_root, db_url=db_url or None)
    b = Batch(tree=tree, run=GradeRun(course_root=tree.root, assignments=list_assignments(tree.root)),
              submissions=None if submissions is None else Path(submissions),
              jobs=jobs or default_jobs(), fresh=fresh, progress=progress, use_sandbox=use_sandbox,
              cell_timeout=cell_timeout, duedates=dict(duedates or {}), log=log, yes=yes,
              run_id=state.run_id(), demo_students=demo_students,
              lms_gradebook=None if lms_gradebook is None else Path(lms_gradebook), groups=groups,
              command=command or " ".join(sys.argv))
    b.engine = _engine(scheduler, engine, b.jobs, log)
    with b.engine, state.run_lock(tree, b.command, log=log):
        _run_stages(b, t0)
    return b.run


def _engine(scheduler: str | None, engine: str, jobs: int, log):
    """The engine autograde runs on (:mod:`grader.engine`): a Dask cluster (an existing one at
    ``scheduler``, or an embedded one of ``jobs`` workers for the ``"dask"`` engine), or this
    machine's process pool of ``jobs`` workers (``"processes"``).

    Raises:
        GradingError: the scheduler does not answer or has no workers (before anything is touched).
    """
    from .cluster import ClusterError, DaskCluster, scheduler_address
    from .engine import LocalEngine

    try:  # a wrong scheduler address fails here, before anything is touched
        if scheduler_address(scheduler) is not None or engine == "dask":
            return DaskCluster(scheduler, jobs, log=log)
    except ClusterError as e:
        raise GradingError(str(e)) from None
    return LocalEngine(jobs, log=log)


def _run_stages(b: Batch, t0: float) -> None:
    """:data:`STAGES` in order (each one's seconds in ``GradeRun.stage_seconds``), the gradebook
    backed up as the run left it, and the run's line in ``logs/runs.jsonl`` however it ended:
    ``ok``, ``failed`` or ``interrupted`` (a run refused before it wrote anything leaves none)."""
    from .cluster import ClusterError

    run, tree = b.run, b.tree
    status, error = "failed", None
    try:
        for name, stage in STAGES:
            t = time.perf_counter()
            try:
                stage(b)
            except ClusterError as e:
                raise GradingError(str(e)) from None
            run.stage_seconds[name] = time.perf_counter() - t
        if tree.is_sqlite:  # the gradebook as this run left it: what a plain `restore` puts back
            state.backup_gradebook(tree, f"{b.run_id}-after", log=b.log)
        status = "ok"
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP through grader.__main__
        status, error = "interrupted", str(e) or "SIGINT"
        raise
    except BaseException as e:
        error = error_line(e)
        raise
    finally:
        run.seconds = time.perf_counter() - t0
        if status == "ok" or "prepare" in run.stage_seconds or str(error).startswith(canary.FAILED):
            state.record_run(tree, run_record(b, status, error))


def error_line(e: BaseException) -> str:
    """An exception as one line for the run log: its type and the first line of its message
    (an nbgrader failure quotes nbgrader's whole log below that line), at most 300 characters."""
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {first}"[:300] if first else type(e).__name__


__all__ = ["grade_class", "GradeRun", "GradingError", "STAGES", "parse_duedates", "format_table",
           "summary_text", "clean", "read_gradebook", "list_assignments", "REPO_ROOT"]
