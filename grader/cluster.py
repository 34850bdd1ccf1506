"""Autograde as Dask tasks: on this machine (an embedded local cluster) or on any Dask cluster.

One task grades one submission (an ``(assignment, student)`` pair) and assumes no file system
shared with the instructor's machine:

* **in** (bytes): the course's ``nbgrader_config.py``; the assignment's definition as a small
  SQLite gradebook (its notebooks, grade/solution/task cells, locked source cells with their
  checksums and its due date), copied out of the course's configured gradebook, whatever
  database that is; the non-notebook files of ``source/<assignment>/`` that nbgrader's
  autograde copies over the student's (never the solution notebooks); this run's graded inputs
  (:mod:`grader.scoring`, the file ``$NORMREF_HANDBACK_INPUTS`` names); and the student's
  ``submitted/<student>/<assignment>/`` files (notebooks, ``timestamp.txt``);
* **on the worker**: a scratch course folder with those files, and nbgrader's own autograde
  (``NbGraderAPI.autograde``: the same preprocessors as ``nbgrader autograde``) with every
  kernel in the bubblewrap sandbox (:mod:`grader.sandbox`);
* **out** (bytes): the files of ``autograded/<student>/<assignment>/`` (the executed notebook
  with its captured outputs), nbgrader's log, and the grade rows the worker's scratch
  gradebook received (per cell: auto score, auto comment; per notebook: late penalty; the
  submission's timestamp).

The instructor's process is the one writer of the course's gradebook: it replays each task's
rows through nbgrader's :class:`~nbgrader.api.Gradebook` API in a short transaction per
submission, with nbgrader's own rule for ``needs_manual_grade`` (an existing manual score
is kept and flagged for review), so many workers never write the database at once.

Faults: a worker that dies mid-task (killed, machine lost) has its tasks rerun by the Dask
scheduler on another worker; a task that has been on ``distributed.scheduler.allowed-failures
+ 1`` workers that died (1 + 1 in the embedded cluster; set it on your scheduler, see docs/SCALE.md)
is given up and that submission is reported as could not be graded, with the reason. Ctrl-C
cancels the run's tasks on the cluster.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from normref.handback_files import HANDBACK_ENV, INPUTS_FILE, SCORING_DIR

from . import warm
from .course import CONFIG, GRADEBOOK, CourseTree
from .parallel import AutogradeOutcome, _reason, default_jobs

#: How many workers may die while running one task before it is given up (embedded cluster).
ALLOWED_FAILURES = 1
#: Dask settings of the embedded cluster, whose scheduler and workers share this machine's cores
#: with the kernels: no statistical profiler, a 1 s event-loop tick (20 ms by default), system
#: monitors every 5 s (0.5 s), and no dashboard (a dashboard is printed for an existing cluster
#: that serves one). Diagnostics only; what runs and where is unchanged.
EMBEDDED_QUIET = {"distributed.worker.profile.enabled": False,
                  "distributed.admin.tick.interval": "1s",
                  "distributed.admin.system-monitor.interval": "5s"}
#: Seconds to wait for a scheduler to answer, and for a cluster to show at least one worker.
CONNECT_TIMEOUT_S = 10
#: Seconds the client and the embedded cluster get to close after Ctrl-C or SIGTERM.
CLOSE_TIMEOUT_S = 2
_LOCK = threading.Lock()  # nbgrader's apps change the working directory: one at a time per process


class _HeartbeatLost(logging.Filter):
    """Drops a worker's "Failed to communicate with scheduler during heartbeat." (an ``OSError``
    with its traceback, logged at ERROR). In the embedded cluster it comes from the worker side
    of a race at close, or from a heartbeat that timed out while the cores were busy with
    kernels: the next heartbeat retries, and a worker really lost fails its task, which the run
    reports. A successful run printed the traceback (red-team instructor)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to communicate with scheduler during heartbeat")


_HEARTBEAT_FILTER = _HeartbeatLost()


class ClusterError(RuntimeError):
    """The Dask cluster cannot run the grading (unreachable scheduler, no workers, no sandbox)."""


# -- the instructor's side: payloads in, rows out -------------------------------------------------

def _files(folder: Path, skip_notebooks: bool = False) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not (skip_notebooks and p.suffix == ".ipynb")}


def _write_files(folder: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        dest = (folder / rel).resolve()
        if not dest.is_relative_to(folder.resolve()):
            raise ValueError(f"refusing to write {rel!r} outside {folder}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)


def assignment_definitions(tree: CourseTree, assignments: list[str], course_id: str) -> dict[str, bytes]:
    """Each assignment's definition as the bytes of a small SQLite gradebook.

    Copied through nbgrader's Gradebook API out of the course's configured gradebook
    (``tree.gradebook_url``: SQLite or PostgreSQL): the assignment and its due date, its
    notebooks, grade, solution, task and source cells (with the checksums nbgrader's
    ``OverwriteCells`` and ``SaveAutoGrades`` compare against). No student rows.

    Returns:
        ``{assignment: sqlite file bytes}``.

    Raises:
        nbgrader.api.MissingEntry: an assignment is not in the gradebook (run generate first).
    """
    from nbgrader.api import Gradebook
    from sqlalchemy import text

    from .database import create_gradebook

    out: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="gradebook-template-") as td, \
            Gradebook(tree.gradebook_url, course_id) as src:
        # nbgrader's schema, stamped with the course gradebook's own alembic version (nbgrader
        # would run the `alembic` command for a new file: seconds, for the same answer)
        blank = Path(td) / "blank.db"
        create_gradebook(f"sqlite:///{blank}",
                         src.db.execute(text("SELECT version_num FROM alembic_version")).scalar())
        for a in assignments:
            path = Path(td) / f"{a}.db"
            shutil.copy(blank, path)
            asg = src.find_assignment(a)
            with Gradebook(f"sqlite:///{path}", course_id) as dst:
                # a scratch file: nbgrader commits once per cell, and each commit would wait for
                # the disk (seconds per run before any task could start)
                dst.db.execute(text("PRAGMA synchronous=OFF"))
                dst.db.execute(text("PRAGMA journal_mode=MEMORY"))
                dst.update_or_create_assignment(a, duedate=asg.duedate)
                for nb in asg.notebooks:
                    dst.update_or_create_notebook(nb.name, a, kernelspec=nb.kernelspec)
                    for c in nb.grade_cells:
                        dst.update_or_create_grade_cell(c.name, nb.name, a, max_score=c.max_score,
                                                        cell_type=c.cell_type)
                    for c in nb.task_cells:
                        dst.update_or_create_task_cell(c.name, nb.name, a, max_score=c.max_score,
                                                       cell_type=c.cell_type)
                    for c in nb.solution_cells:
                        dst.update_or_create_solution_cell(c.name, nb.name, a)
                    for c in nb.source_cells:
                        dst.update_or_create_source_cell(c.name, nb.name, a, cell_type=c.cell_type,
                                                         locked=c.locked, source=c.source,
                                                         checksum=c.checksum)
            out[a] = path.read_bytes()
    return out


def record(tree: CourseTree, course_id: str, result: dict, gradebook=None) -> None:
    """Write one task's result into the course: its files into ``autograded/<student>/<assignment>/``
    and its grade rows into the gradebook, as nbgrader's autograde would have (one writer, short
    transactions through nbgrader's Gradebook API).

    Args:
        result: what :func:`grade_submission` returned, with ``success`` True.
        gradebook: an open :class:`nbgrader.api.Gradebook` of the course (default: one is
            opened on ``tree.gradebook_url`` and closed again).
    """
    import warnings

    from nbgrader.api import Gradebook
    from sqlalchemy.exc import SAWarning

    a, st = result["assignment"], result["student"]
    dest = tree.autograded(st, a)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    _write_files(dest, result["files"])
    rows = result["rows"]
    opened = gradebook is None
    gb = Gradebook(tree.gradebook_url, course_id) if opened else gradebook
    with warnings.catch_warnings(), _rollback_on_error(gb, close=opened):
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's own autoflush notes, as in its apps
        gb.update_or_create_student(st)
        if rows["timestamp"] is not None:
            gb.update_or_create_submission(a, st, timestamp=rows["timestamp"])
        else:
            gb.update_or_create_submission(a, st)
        for nb_name, nb_rows in rows["notebooks"].items():
            nb = gb.find_submission_notebook(nb_name, a, st)
            nb.late_submission_penalty = nb_rows["late_submission_penalty"]
            for grade in nb.grades:
                if grade.name in nb_rows["grades"]:
                    grade.auto_score = nb_rows["grades"][grade.name]
                    # nbgrader's SaveAutoGrades: a manual score, or no auto score, needs review
                    grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
            for comment in nb.comments:
                if comment.name in nb_rows["comments"]:
                    comment.auto_comment = nb_rows["comments"][comment.name]
        gb.db.commit()


@contextlib.contextmanager
def _rollback_on_error(gb, close: bool):
    try:
        yield
    except BaseException:
        gb.db.rollback()
        raise
    finally:
        if close:
            gb.close()


# -- the worker's side ----------------------------------------------------------------------------

def grade_submission(assignment: dict, submission: dict, options: dict) -> dict:
    """Autograde one submission in a scratch course folder on this worker (a Dask task).

    Args:
        assignment: ``{"name", "config": bytes, "gradebook": bytes, "source_files": {rel: bytes},
            "handback_inputs": bytes}`` (``handback_inputs``: the run's graded inputs, which the
            autograde preprocessor writes into the hidden tests; see :mod:`grader.scoring`).
        submission: ``{"student", "files": {rel: bytes}}`` (``submitted/<student>/<assignment>/``).
        options: ``{"sandbox": bool, "cell_timeout": int | None, "course_id": str}``.

    Returns:
        ``{"assignment", "student", "success", "reason", "log", "kernel_output", "files": {rel: bytes},
        "rows": {"timestamp", "notebooks": {name: {"grades", "comments",
        "late_submission_penalty"}}}, "worker", "seconds"}``; ``success`` is False (with the
        ``reason`` nbgrader logged) when nbgrader could not grade it, e.g. its kernel died.

    Raises:
        RuntimeError: the sandbox was asked for and bubblewrap cannot start on this worker.
    """
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config
    from traitlets.config.loader import KVArgParseConfigLoader, PyFileConfigLoader

    from . import sandbox

    t0 = time.perf_counter()
    a, st = assignment["name"], submission["student"]
    with _LOCK, tempfile.TemporaryDirectory(prefix="grade-") as td:
        root = Path(td)
        (root / CONFIG).write_bytes(assignment["config"])
        (root / GRADEBOOK).write_bytes(assignment["gradebook"])
        _write_files(root / "source" / a, assignment["source_files"])
        (root / "source" / a).mkdir(parents=True, exist_ok=True)
        _write_files(root / "submitted" / st / a, submission["files"])
        inputs = root / "logs" / SCORING_DIR / INPUTS_FILE  # this run's graded inputs (grader.scoring)
        if assignment.get("handback_inputs"):  # outside the sandbox, as in the course: logs/scoring/
            inputs.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(inputs, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(assignment["handback_inputs"])
        config = Config()
        config.merge(PyFileConfigLoader(CONFIG, path=str(root)).load_config())
        config.CourseDirectory.root = str(root)
        config.CourseDirectory.db_url = f"sqlite:///{root / GRADEBOOK}"
        env = dict.fromkeys(sandbox.SINGLE_THREAD_VARS, "1")
        env["PYTHONWARNINGS"] = "ignore"
        if assignment.get("handback_inputs"):
            env[HANDBACK_ENV] = str(inputs)
        use_sandbox = options.get("sandbox", True)
        if use_sandbox and not sandbox.available():
            raise RuntimeError(f"the grading sandbox cannot start on Dask worker {os.uname().nodename} "
                               "(install bubblewrap there: apt-get install bubblewrap)")
        session = sandbox.SandboxSession(root) if use_sandbox else contextlib.nullcontext()
        saved_env, cwd, limits, kernels = dict(os.environ), os.getcwd(), [], {}
        saved_fds = (os.dup(1), os.dup(2))
        kernel_log = (root / "kernel-output.log").open("wb")
        try:
            # the kernels inherit stdout/stderr: their start-up chatter goes to this task's log
            os.dup2(kernel_log.fileno(), 1)
            os.dup2(kernel_log.fileno(), 2)
            with session as sb:
                args = list(options.get("config_args", []))
                if use_sandbox:
                    more_args, more_env = sb.worker(0)
                    args += more_args
                    env.update(more_env)
                config.merge(KVArgParseConfigLoader(args).load_config())  # nbgrader's own parsing
                os.environ.update(env)  # kernels inherit it (JUPYTER_PATH, scratch root, threads)
                os.chdir(root)  # nbgrader resolves some paths against the working directory
                api = NbGraderAPI(config=config)
                api.log.setLevel("ERROR")
                result = api.autograde(a, st, force=True, create=True)
                # the process cap a kernel ran into, read from its cgroup outside the sandbox
                limits = sandbox.limit_flags(root, sb, []).get((a, st), []) if use_sandbox else []
                notebooks = sum(name.endswith(".ipynb") for name in submission["files"])  # one kernel each
                kernels = warm.kernel_counts(sb.records, sb.warm_off, notebooks) if use_sandbox else {}
        finally:
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            for fd in saved_fds:
                os.close(fd)
            kernel_log.close()
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(saved_env)
        log = result.get("log", "") + result.get("error", "")
        kernel_output = (root / "kernel-output.log").read_bytes()[-20000:].decode(errors="replace")
        out = {"assignment": a, "student": st, "success": bool(result.get("success")), "log": log,
               "kernel_output": kernel_output, "limit_flags": limits, "kernels": kernels,
               "reason": None, "files": {}, "rows": None, "worker": os.uname().nodename}
        graded_dir = root / "autograded" / st / a
        if not out["success"] or not any(graded_dir.glob("*.ipynb")):
            out["success"] = False
            out["reason"] = _reason(log, st) if log else "nbgrader produced no autograded notebook"
        else:
            out["files"] = _files(graded_dir)
            with Gradebook(config.CourseDirectory.db_url, options.get("course_id", "default_course")) as gb:
                sub = gb.find_submission(a, st)
                stamped = (root / "submitted" / st / a / "timestamp.txt").exists()
                out["rows"] = {
                    "timestamp": sub.timestamp if stamped else None,
                    "notebooks": {nb.name: {
                        "grades": {g.name: g.auto_score for g in nb.grades},
                        "comments": {c.name: c.auto_comment for c in nb.comments},
                        "late_submission_penalty": nb.late_submission_penalty,
                    } for nb in sub.notebooks},
                }
    out["seconds"] = time.perf_counter() - t0
    return out


# -- connecting, and the run ----------------------------------------------------------------------

def scheduler_address(scheduler: str | None = None) -> str | None:
    """The scheduler to use: ``scheduler``, else ``$DASK_SCHEDULER_ADDRESS``, else None (embedded)."""
    return scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or None


def _preload() -> str:  # run on every worker when a run starts (imports paid once, in parallel)
    import nbgrader.apps  # noqa: F401

    from . import sandbox

    return "sandboxed" if sandbox.available() else "no-sandbox"


class DaskCluster:
    """The Dask client of one grading run: to ``scheduler`` (or ``$DASK_SCHEDULER_ADDRESS``), or to
    an embedded local cluster of ``jobs`` single-threaded worker processes (default: all cores).

    An existing scheduler is reached in the constructor, so a wrong address fails before
    anything is touched; the embedded cluster starts when :meth:`client` is first called (the
    autograde stage), its workers forked from this process with nbgrader already imported
    (0.2 s instead of ~9 s each). Use as a context manager, or call :meth:`close`.

    Raises:
        ClusterError: the scheduler does not answer within :data:`CONNECT_TIMEOUT_S` seconds or
            has no worker.
    """

    def __init__(self, scheduler: str | None = None, jobs: int | None = None, *, log=print):
        self.address = scheduler_address(scheduler)
        self.jobs = jobs or default_jobs()
        self.log = log
        self._client = self._cluster = None
        self._states: dict[str, str] = {}
        if self.address is not None:
            self._start()

    def _start(self) -> None:
        import dask
        from distributed import Client, LocalCluster

        if self.address is None:
            import nbgrader.apps  # noqa: F401 - the forked workers start with nbgrader imported

            # the workers are forked from this process: they inherit the filter
            worker_log = logging.getLogger("distributed.worker")
            if _HEARTBEAT_FILTER not in worker_log.filters:
                worker_log.addFilter(_HEARTBEAT_FILTER)
            with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES,
                                  # fork: a worker starts in 0.2 s instead of ~9 s (spawn re-imports)
                                  "distributed.worker.multiprocessing-method": "fork",
                                  # a worker holds only the task it runs: its death counts
                                  # against that task alone, never against one queued behind it
                                  "distributed.scheduler.worker-saturation": 1.0,
                                  # housekeeping that competes with the kernels for the cores on
                                  # a laptop (EMBEDDED_QUIET): each worker's stack sampler (every
                                  # 10 ms), every event loop's 20 ms tick, the system monitors
                                  **EMBEDDED_QUIET}):
                self._cluster = LocalCluster(n_workers=self.jobs, threads_per_worker=1, processes=True,
                                             dashboard_address=None, silence_logs=logging.ERROR,
                                             memory_limit=0)
            self._client = Client(self._cluster, set_as_default=False)
        else:
            try:
                self._client = Client(self.address, timeout=f"{CONNECT_TIMEOUT_S}s", set_as_default=False)
            except (OSError, TimeoutError, ValueError) as e:
                raise ClusterError(f"cannot reach the Dask scheduler at {self.address} within "
                                   f"{CONNECT_TIMEOUT_S} s ({' '.join(str(e).split())})") from None
            try:
                self._client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
            except TimeoutError:
                self.close()
                raise ClusterError(f"the Dask scheduler at {self.address} has no workers: start some with "
                                   f"`dask worker {self.address}` where this project is installed") from None
        self._states = self._client.run(_preload)

    def client(self, use_sandbox: bool = True):
        """The connected :class:`distributed.Client`.

        Args:
            use_sandbox: check that every worker can start the bubblewrap sandbox.

        Raises:
            ClusterError: a worker cannot run the sandbox.
        """
        if self._client is None:
            self._start()
        if use_sandbox and "no-sandbox" in self._states.values():
            bad = ", ".join(w for w, s in self._states.items() if s != "sandboxed")
            raise ClusterError(f"the grading sandbox (bubblewrap) cannot start on Dask worker(s) {bad}: "
                               "apt-get install bubblewrap there, or grade with --no-sandbox")
        return self._client

    def describe(self) -> str:
        """One line: where the tasks run, and the dashboard's address when there is one."""
        client = self.client(use_sandbox=False)
        n = len(client.scheduler_info(n_workers=-1)["workers"])
        where = "an embedded local Dask cluster" if self.address is None else f"the Dask cluster at {self.address}"
        line = f"{where} ({n} worker{'s' if n != 1 else ''})"
        if "dashboard" in client.scheduler_info().get("services", {}) and _scheduler_has_bokeh(client):
            line += f", dashboard {client.dashboard_link}"
        return line

    def close(self, timeout: float | None = None) -> None:
        """Close the client and the embedded cluster (within ``timeout`` seconds each, if given)."""
        if self._client is not None:
            with contextlib.suppress(TimeoutError) if timeout else contextlib.nullcontext():
                self._client.close(**({"timeout": timeout} if timeout else {}))
            self._client = None
        if self._cluster is not None:
            with contextlib.suppress(TimeoutError) if timeout else contextlib.nullcontext():
                self._cluster.close(timeout=timeout)
            self._cluster = None

    def __enter__(self) -> "DaskCluster":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        # after Ctrl-C or SIGTERM the workers are already dead (grader.__main__ kills every
        # process of the run), and an unbounded close waits on them for many seconds
        self.close(CLOSE_TIMEOUT_S if exc_type is not None and issubclass(exc_type, KeyboardInterrupt) else None)


@contextlib.contextmanager
def connect(scheduler: str | None = None, jobs: int | None = None, *, use_sandbox: bool = True, log=print):
    """A connected :class:`distributed.Client` for the ``with`` block (see :class:`DaskCluster`);
    logs where the tasks run and the dashboard's address when there is one.

    Raises:
        ClusterError: see :class:`DaskCluster` and :meth:`DaskCluster.client`.
    """
    with DaskCluster(scheduler, jobs, log=log) as dc:
        client = dc.client(use_sandbox)
        log(f"autograde: {dc.describe()}")
        yield client


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


def _scheduler_has_bokeh(client) -> bool:
    """The scheduler's web server shows the dashboard only with bokeh installed there."""
    try:
        return bool(client.run_on_scheduler(_has_bokeh))
    except Exception:  # noqa: BLE001 - a scheduler that refuses run_on_scheduler: say nothing
        return False


@dataclass
class ClusterOutcome(AutogradeOutcome):
    """:class:`~grader.parallel.AutogradeOutcome`, and what the workers' sandboxes saw.

    Attributes:
        limit_flags: ``{(assignment, student): [note]}`` for kernels that ran into the sandbox's
            process cap (read from their cgroups on the worker; see
            :func:`grader.sandbox.limit_flags`).
        workers: ``{worker host: submissions graded there}``.
    """

    limit_flags: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)
    kernels: dict = field(default_factory=lambda: {"warm": 0, "fresh": 0, "why": []})  # grader.warm.kernel_counts


def autograde(course: CourseTree | Path, assignments: list[str], *, jobs: int | None = None, progress=None,
              log=print, extra_args: list[str] | None = None, only: list[str] | None = None,
              pairs: list[tuple[str, str]] | None = None, client=None, scheduler: str | None = None,
              use_sandbox: bool = True, course_id: str | None = None, task=grade_submission,
              workers: list[str] | None = None) -> ClusterOutcome:
    """Autograde the submissions in ``submitted/`` as Dask tasks, one per (assignment, student).

    Args:
        course: the course (its gradebook must already hold the assignments: generate has run).
        assignments: the assignment names to grade.
        jobs: worker processes of the embedded cluster (default: all cores; ignored with a
            ``client`` or ``scheduler``).
        progress: ``progress(done, total)`` as submissions finish, or None.
        log: where per-submission failure lines go.
        extra_args: nbgrader options (``--Section.name=value``) applied on the workers, e.g.
            ``["--Execute.timeout=30"]``.
        only: grade just these students (default: everyone in ``submitted/``).
        pairs: grade just these ``(assignment, student)`` submissions.
        client: a connected :class:`distributed.Client` (default: :func:`connect` with
            ``scheduler`` and ``jobs``, closed after the run).
        scheduler: an existing scheduler's address (default: ``$DASK_SCHEDULER_ADDRESS``, else
            an embedded local cluster).
        use_sandbox: run every kernel in the bubblewrap sandbox on the workers.
        course_id: nbgrader's ``CourseDirectory.course_id`` (default: read from the config).
        task: the function each task runs (default :func:`grade_submission`; the tests wrap it).
        workers: run the tasks only on these workers (addresses; default: any).

    Returns:
        :class:`ClusterOutcome` (``logs`` is empty: each task's nbgrader log comes back in its
        result, and a failure quotes it).

    Raises:
        ClusterError: see :class:`DaskCluster`.
        KeyboardInterrupt: after cancelling this run's tasks on the cluster.
    """
    from distributed import as_completed
    from distributed.scheduler import KilledWorker

    tree = course if isinstance(course, CourseTree) else CourseTree(course)
    if course_id is None:
        from .apps import Course

        course_id = Course(tree).api.coursedir.course_id
    everyone = tree.pairs(assignments)
    if pairs is not None:
        everyone = [pr for pr in everyone if pr in set(pairs)]
    pairs = everyone if only is None else [(a, s) for a, s in everyone if s in set(only)]
    outcome = ClusterOutcome()
    if not pairs:
        return outcome
    if client is None:
        with connect(scheduler, jobs, use_sandbox=use_sandbox, log=log) as c:
            return autograde(tree, assignments, progress=progress, log=log, extra_args=extra_args, pairs=pairs,
                             client=c, use_sandbox=use_sandbox, course_id=course_id, task=task)
    t0 = time.perf_counter()
    config = (tree.root / CONFIG).read_bytes()
    # the run's graded inputs (grader.scoring.prepare_inputs names them in $NORMREF_HANDBACK_INPUTS),
    # which only the autograde preprocessor reads (HandbackInputs in nbgrader_config.py)
    inputs_file = Path(os.environ[HANDBACK_ENV]) if os.environ.get(HANDBACK_ENV) else None
    handback_inputs = inputs_file.read_bytes() if inputs_file and inputs_file.is_file() else None
    options = {"sandbox": use_sandbox, "config_args": list(extra_args or []), "course_id": course_id}
    for a, s in pairs:  # a regrade starts from nothing, as nbgrader autograde --force does
        old = tree.autograded(s, a)
        if old.is_dir():
            shutil.rmtree(old)
    futures = {}
    # one assignment's definition at a time, its tasks sent as soon as it is ready: the workers
    # start on the first assignment while the next definition is copied out of the gradebook
    for name in sorted({a for a, _ in pairs}, key=[a for a, _ in pairs].index):
        payload = {"name": name, "config": config, "handback_inputs": handback_inputs,
                   "gradebook": assignment_definitions(tree, [name], course_id)[name],
                   "source_files": _files(tree.source(name), skip_notebooks=True)}
        for a, s in pairs:
            if a == name:
                sub = {"student": s, "files": _files(tree.submitted(s, a))}
                fut = client.submit(task, payload, sub, options, pure=False, workers=workers,
                                    allow_other_workers=False, key=f"autograde-{a}-{s}-{os.urandom(4).hex()}")
                futures[fut] = (a, s)
    done = 0
    if progress is not None:
        progress(0, len(pairs))
    from nbgrader.api import Gradebook

    gradebook = Gradebook(tree.gradebook_url, course_id)  # the one writer, for the whole run
    try:
        for fut in as_completed(list(futures), loop=client.loop):
            a, s = futures[fut]
            try:
                result = fut.result()
            except KilledWorker as e:
                outcome.failed[(a, s)] = (f"could not be graded: its task crashed {ALLOWED_FAILURES + 1} "
                                          f"Dask workers ({' '.join(str(e).split())[:200]})")
            except Exception as e:  # a worker-side error that is not the student's code
                outcome.failed[(a, s)] = f"could not be graded: {type(e).__name__}: {str(e)[:300]}"
            else:
                outcome.workers[result["worker"]] = outcome.workers.get(result["worker"], 0) + 1
                if result["limit_flags"]:
                    outcome.limit_flags[(a, s)] = result["limit_flags"]
                warm.merge(outcome.kernels, result.get("kernels"))
                if result["success"]:
                    record(tree, course_id, result, gradebook)
                    outcome.graded.append((a, s))
                else:
                    outcome.failed[(a, s)] = result["reason"]
            if (a, s) in outcome.failed:
                log(f"autograde failed: student {s}, assignment {a}: {outcome.failed[(a, s)]}")
            done += 1
            if progress is not None:
                progress(done, len(pairs))
    except KeyboardInterrupt:
        client.cancel(list(futures), force=True)
        raise
    finally:
        gradebook.close()
    outcome.graded.sort(key=pairs.index)
    outcome.seconds = time.perf_counter() - t0
    return outcome


__all__ = ["autograde", "connect", "DaskCluster", "ClusterOutcome", "grade_submission", "record",
           "assignment_definitions", "scheduler_address", "ClusterError", "ALLOWED_FAILURES"]
