"""``grade_class``: one run of the grader, as the list of its stages (:data:`STAGES`).

``check`` (refuse bad input, nothing written) -> ``canary`` (the instructor's solutions graded
by this list's own stages in a scratch course, :mod:`grader.stages.canary`) -> ``prepare`` (a backup, or
starting over; damaged records set aside) -> ``generate`` -> ``collect`` -> ``repair`` ->
``inputs`` (drawn from a secret seed) -> ``autograde`` (Dask tasks or processes, sandboxed) ->
``scoring`` (outside the kernels) -> ``feedback`` -> ``export`` (grades.csv) -> ``score``
(per-question CSV) -> ``report``. Every grading step is one of nbgrader's own apps run in the
course root; the stages arrange the submissions, run the apps and read nbgrader's gradebook. Each
stage is a function of the run's :class:`~grader.batch.Batch`, one file each in
:mod:`grader.stages`; what a run keeps under ``logs/`` between runs is :mod:`grader.ledger.store`'s.
docs/ARCHITECTURE.md describes each stage; tests/test_docs.py checks that it, the README and this
list name :data:`STAGES`.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from .stages import canary
from .ledger import database, state
from .batch import Batch, GradeRun, GradingError, Services, read_gradebook, run_record  # noqa: F401
from .ledger.course import REPO_ROOT, CourseTree
from .autograde.engine import default_jobs
from .options import DEFAULT_ENGINE, GradeOptions, args_doc, parse_duedates, signature_of  # noqa: F401
from .outputs.report import summary_text  # noqa: F401 - the CLI prints it after format_table
from .ledger.reset import GRADING_STATE, KEPT_LOGS, clean, start_over  # noqa: F401 - `make clean`'s names
from .stages.autograde import autograde_stage
from .stages.check import check
from .stages.collect import collect_submissions
from .stages.export import export
from .stages.feedback import feedback
from .stages.generate import generate
from .stages.inputs import inputs
from .stages.prepare import prepare
from .stages.repair import repair
from .stages.report import report
from .stages.score import score
from .stages.scoring import trusted_scoring
from .ledger.store import GRADED  # noqa: F401 - logs/graded.json, as tests knew it here
from .outputs.table import format_table  # noqa: F401

#: The stages of a run, in order; ``GradeRun.stage_seconds`` has one entry per stage.
STAGES = (("check", check), ("canary", canary.stage), ("prepare", prepare), ("generate", generate),
          ("collect", collect_submissions), ("repair", repair), ("inputs", inputs), ("autograde", autograde_stage),
          ("scoring", trusted_scoring), ("feedback", feedback), ("export", export), ("score", score),
          ("report", report))


def list_assignments(course_root: Path) -> list[str]:
    """Assignment names: the folders of ``source/`` that hold a notebook.

    Raises:
        GradingError: ``course_root`` has no ``source/`` folder.
    """
    try:
        return CourseTree(course_root).assignments()
    except FileNotFoundError as e:
        raise GradingError(str(e)) from e


def grade_class(options: GradeOptions | None = None, /, *, log=print, **kwargs) -> GradeRun:
    """Grade a class end to end with nbgrader: the :data:`STAGES` in order, holding the course's
    run lock, with one record per run appended to ``logs/runs.jsonl``.

    Called with a :class:`~grader.options.GradeOptions`, or with its fields as keyword arguments
    (``grade_class(submissions=..., jobs=4)``); the options are declared once, in
    :mod:`grader.options`, and ``python -m grader``'s flags are made from the same declaration.

    Args:
{args}
        log: where progress lines go.

    Returns:
        :class:`GradeRun` with the paths to ``grades.csv``, the per-question CSV, the
        feedback and the class report.

    Raises:
        TypeError: an option that does not exist, or both ``options`` and keyword options.
        GradingError: an nbgrader step failed for a reason other than a student's code; the
            ``scheduler`` does not answer or has no workers (before anything is touched).
        FileNotFoundError: ``submissions`` does not exist.
        ValueError: an option :class:`~grader.options.GradeOptions` refuses; ``submissions`` is
            not a recognised kind of input or holds no submission of any assignment; ``db_url``
            cannot be opened (one line, before anything is touched).
        CourseStateError: another run holds the course; the gradebook is missing, empty or
            corrupt; real students would be removed without a yes; the demo class was asked
            for in a real course. Nothing was written.
    """
    t0 = time.perf_counter()
    if options is not None and kwargs:
        raise TypeError("grade_class takes GradeOptions or keyword options, not both")
    o = options if options is not None else GradeOptions(**kwargs)
    if o.db_url:
        database.check_url(o.db_url)  # a wrong URL: one line, in seconds, nothing touched
    tree = CourseTree(o.course_root, db_url=o.db_url or None)
    jobs = o.jobs or default_jobs()
    b = Batch(options=o, run=GradeRun(course_root=tree.root, assignments=list_assignments(tree.root)),
              services=Services(tree=tree, log=log, run_id=state.run_id(), jobs=jobs,
                                command=o.command or " ".join(sys.argv)))
    b.services.engine = _engine(o.scheduler, o.engine, jobs, log)
    with b.services.engine, state.run_lock(tree, b.services.command, log=log):
        _run_stages(b, t0)
    return b.run


grade_class.__signature__ = signature_of(grade_class)
grade_class.__doc__ = grade_class.__doc__.replace("{args}", args_doc())


def _engine(scheduler: str | None, engine: str, jobs: int, log):
    """The engine autograde runs on (:mod:`grader.autograde.engine`): a Dask cluster (an existing one at
    ``scheduler``, or an embedded one of ``jobs`` workers for the ``"dask"`` engine), or this
    machine's process pool of ``jobs`` workers (``"processes"``).

    Raises:
        GradingError: the scheduler does not answer or has no workers (before anything is touched).
    """
    from .autograde.cluster import ClusterError, DaskCluster, scheduler_address
    from .autograde.engine import LocalEngine

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
    from .autograde.cluster import ClusterError

    run, tree = b.run, b.services.tree
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
            state.backup_gradebook(tree, f"{b.services.run_id}-after", log=b.services.log)
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
