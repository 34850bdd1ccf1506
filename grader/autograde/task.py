"""One submission's autograde as a task: its payload in, its result out, recorded by one writer.

:func:`grade_submission` is the one task of every autograde run (:mod:`grader.autograde.engine`), in a
worker process of this machine's pool or on a Dask worker; it assumes no file system shared
with the instructor's machine:

* **in** (bytes): the course's ``nbgrader_config.py``; the assignment's definition as a small
  SQLite gradebook (its notebooks, grade/solution/task cells, locked source cells with their
  checksums and its due date), copied out of the course's configured gradebook, whatever
  database that is (:func:`assignment_definitions`); the non-notebook files of
  ``source/<assignment>/`` that nbgrader's autograde copies over the student's (never the
  solution notebooks); this run's graded inputs (:mod:`grader.scoring.inputs`, the course's
  ``logs/scoring/handback-inputs.json``; nbgrader's autograde is given it as
  ``--HandbackInputs.inputs_file``); and the student's
  ``submitted/<student>/<assignment>/`` files (notebooks, ``timestamp.txt``);
* **on the worker**: a scratch course folder with those files, and nbgrader's own autograde
  converter (``nbgrader.converters.Autograde``: the preprocessors of ``nbgrader autograde``)
  with every kernel in the bubblewrap sandbox (:mod:`grader.kernel.sandbox`), warm from the worker's
  zygote when it can be (:mod:`grader.kernel.warm`); then each autograded notebook's code questions
  called in its clean room (:mod:`grader.kernel.cleanroom`), their outputs put in their test cells;
* **out** (bytes): the files of ``autograded/<student>/<assignment>/`` (the executed notebook
  with its captured outputs), nbgrader's log, the grade rows the worker's scratch gradebook
  received (per cell: auto score, auto comment; per notebook: late penalty; the submission's
  timestamp), the sandbox caps its kernel ran into, its kernels' counts and peak memory; and,
  when nbgrader could not grade it, the reason: the exception the submission raised in nbgrader
  (its kernel died, stopped answering, ...), as a line.

The instructor's process is the one writer of the course's gradebook (:func:`record`): it
replays each task's rows through nbgrader's :class:`~nbgrader.api.Gradebook` API in a short
transaction per submission, with nbgrader's own rule for ``needs_manual_grade`` (an existing
manual score is kept and flagged for review), so many workers never write the database at once.
"""
from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import shutil
import tempfile
import threading
import time
import traceback
from pathlib import Path

from normref.handback_files import INPUTS_FILE, SCORING_DIR

from ..kernel import warm
from ..ledger.course import CONFIG, GRADEBOOK, CourseTree

#: The reason of a task whose nbgrader ran to the end without writing a notebook.
NO_NOTEBOOK = "nbgrader produced no autograded notebook"
_LOCK = threading.Lock()  # nbgrader's apps change the working directory: one at a time per process


# -- the instructor's side: payloads in, rows out -------------------------------------------------

def files_of(folder: Path, skip_notebooks: bool = False) -> dict[str, bytes]:
    """``{path relative to folder: bytes}`` of every file below ``folder`` (``{}`` if none)."""
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink() and not (skip_notebooks and p.suffix == ".ipynb")}


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

    from ..ledger.database import create_gradebook

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
            with Gradebook(f"sqlite:///{path}", course_id) as dst:
                _copy_definition(src.find_assignment(a), dst)
            out[a] = path.read_bytes()
    return out


def _copy_definition(asg, dst) -> None:
    """Assignment ``asg`` (of one gradebook) into the scratch gradebook ``dst``."""
    from sqlalchemy import text

    # a scratch file: nbgrader commits once per cell, and each commit would wait for the disk
    # (seconds per run before any task could start)
    dst.db.execute(text("PRAGMA synchronous=OFF"))
    dst.db.execute(text("PRAGMA journal_mode=MEMORY"))
    a = asg.name
    dst.update_or_create_assignment(a, duedate=asg.duedate)
    for nb in asg.notebooks:
        dst.update_or_create_notebook(nb.name, a, kernelspec=nb.kernelspec)
        for c in nb.grade_cells:
            dst.update_or_create_grade_cell(c.name, nb.name, a, max_score=c.max_score, cell_type=c.cell_type)
        for c in nb.task_cells:
            dst.update_or_create_task_cell(c.name, nb.name, a, max_score=c.max_score, cell_type=c.cell_type)
        for c in nb.solution_cells:
            dst.update_or_create_solution_cell(c.name, nb.name, a)
        for c in nb.source_cells:
            dst.update_or_create_source_cell(c.name, nb.name, a, cell_type=c.cell_type, locked=c.locked,
                                             source=c.source, checksum=c.checksum)


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

def exception_line(e: BaseException) -> str:
    """An exception as one line, as a traceback's last line says it
    (``nbclient.exceptions.DeadKernelError: Kernel died``), at most 300 characters."""
    return " ".join("".join(traceback.format_exception_only(type(e), e)).split())[:300]


@functools.cache
def _autograde_class():
    """nbgrader's :class:`~nbgrader.converters.Autograde`, keeping the first exception the
    submission raised while nbgrader graded it (nbgrader logs it, removes the half-written
    notebook and goes on): the task's reason, read from the exception itself."""
    from nbgrader.converters import Autograde

    class KeepingAutograde(Autograde):
        error: BaseException | None = None

        def _keep(self, step, *args):
            try:
                return step(*args)
            except Exception as e:
                self.error = self.error or e
                raise

        def init_assignment(self, assignment_id, student_id):
            return self._keep(super().init_assignment, assignment_id, student_id)

        def convert_single_notebook(self, notebook_filename):
            return self._keep(super().convert_single_notebook, notebook_filename)

    return KeepingAutograde


def _scratch_course(root: Path, assignment: dict, submission: dict) -> Path:
    """The task's course folder under ``root``; returns where its graded inputs file is (written
    only when the payload carries one)."""
    a, st = assignment["name"], submission["student"]
    (root / CONFIG).write_bytes(assignment["config"])
    (root / GRADEBOOK).write_bytes(assignment["gradebook"])
    _write_files(root / "source" / a, assignment["source_files"])
    (root / "source" / a).mkdir(parents=True, exist_ok=True)
    _write_files(root / "submitted" / st / a, submission["files"])
    inputs = root / "logs" / SCORING_DIR / INPUTS_FILE  # this run's graded inputs (grader.scoring.inputs)
    if assignment.get("handback_inputs"):  # outside the sandbox, as in the course: logs/scoring/
        inputs.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(inputs, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(assignment["handback_inputs"])
    return inputs


def autograde_config(root: Path, args: list[str]):
    """nbgrader's configuration of the scratch course ``root``: its ``nbgrader_config.py``, its
    own gradebook, then the options ``args`` (``--Section.name=value``), as a
    :class:`traitlets.config.Config`."""
    from traitlets.config import Config
    from traitlets.config.loader import KVArgParseConfigLoader, PyFileConfigLoader

    config = Config()
    config.merge(PyFileConfigLoader(CONFIG, path=str(root)).load_config())
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = f"sqlite:///{root / GRADEBOOK}"
    config.merge(KVArgParseConfigLoader(args).load_config())  # nbgrader's own parsing
    return config


def _autograde(root: Path, a: str, st: str, args: list[str], course_id: str) -> tuple[bool, str, str | None]:
    """nbgrader's autograde of student ``st``'s ``a`` in the scratch course ``root`` (this process
    in it, with the kernels' environment). Returns ``(success, nbgrader's log, reason or None)``."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.utils import temp_attrs

    api = NbGraderAPI(config=autograde_config(root, args))
    api.log.setLevel("ERROR")
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    with temp_attrs(api.coursedir, assignment_id=a, student_id=st):
        app = _autograde_class()(coursedir=api.coursedir, parent=api)
        app.force, app.create_student = True, True
        app.log.addHandler(handler)
        try:
            app.start()
            reason = None
        except (Exception, SystemExit) as e:  # noqa: BLE001 - nbgrader could not grade it: the reason
            reason = exception_line(app.error or e)
        finally:
            app.log.removeHandler(handler)
    return reason is None, buf.getvalue(), reason


def _rows(root: Path, a: str, st: str, course_id: str) -> dict:
    """The grade rows the scratch gradebook received for this submission."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / GRADEBOOK}", course_id) as gb:
        sub = gb.find_submission(a, st)
        stamped = (root / "submitted" / st / a / "timestamp.txt").exists()
        return {"timestamp": sub.timestamp if stamped else None,
                "notebooks": {nb.name: {"grades": {g.name: g.auto_score for g in nb.grades},
                                        "comments": {c.name: c.auto_comment for c in nb.comments},
                                        "late_submission_penalty": nb.late_submission_penalty}
                              for nb in sub.notebooks}}


@contextlib.contextmanager
def _kernel_process_state(root: Path, env: dict[str, str]):
    """This process as the kernels inherit it, for the ``with`` block: ``env`` added, the working
    directory ``root`` (nbgrader resolves some paths against it), stdout and stderr into
    ``root/kernel-output.log`` (the kernels' start-up chatter); all of it put back after."""
    saved_env, cwd = dict(os.environ), os.getcwd()
    saved_fds = (os.dup(1), os.dup(2))
    kernel_log = (root / "kernel-output.log").open("wb")
    try:
        os.dup2(kernel_log.fileno(), 1)
        os.dup2(kernel_log.fileno(), 2)
        os.environ.update(env)  # kernels inherit it (JUPYTER_PATH, scratch root, threads)
        os.chdir(root)
        yield
    finally:
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)
        kernel_log.close()
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def _sandbox_usage(sb, root: Path, a: str, st: str, submission: dict) -> dict:
    """What the submission's kernels ran into in sandbox session ``sb``: ``{"limit_flags",
    "kernels" (warm/fresh counts), "peak_mb"}``."""
    from ..kernel import sandbox

    notebooks = sum(name.endswith(".ipynb") for name in submission["files"])  # one kernel each
    return {"limit_flags": sandbox.limit_flags(root, sb, []).get((a, st), []),
            "kernels": warm.kernel_counts(sb.records, sb.warm_off, notebooks),
            "peak_mb": max(sb.peak_memory_mb().values(), default=None)}


def _clean_rooms(folder: Path, inputs: bytes, sandboxed: bool) -> dict:
    """Each autograded notebook of ``folder`` through the grader's clean room
    (:func:`grader.kernel.cleanroom.run_notebook`: its code questions' records into its metadata), in this
    worker, with the kernels' environment. Returns ``{notebook: {"how", "seconds", "notes"}}``."""
    import json

    import nbformat

    from ..kernel import cleanroom
    from ..ledger.files import write_notebook

    run_inputs = json.loads(inputs)
    out = {}
    for path in sorted(folder.glob("*.ipynb")):
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001 - nbgrader wrote it; one that does not read is scored 0 later
            continue
        entry = cleanroom.run_notebook(nb, run_inputs, sandboxed=sandboxed, folder=folder)
        write_notebook(nb, path)  # nbgrader left it read-only
        out[path.name] = {k: entry.get(k) for k in ("how", "seconds", "notes")}
    return out


def grade_submission(assignment: dict, submission: dict, options: dict) -> dict:
    """Autograde one submission in a scratch course folder on this worker (the engine's task).

    Args:
        assignment: ``{"name", "config": bytes, "gradebook": bytes, "source_files": {rel: bytes},
            "handback_inputs": bytes}`` (``handback_inputs``: the run's graded inputs, which the
            autograde preprocessor writes into the hidden tests; see :mod:`grader.scoring.inputs`).
        submission: ``{"student", "files": {rel: bytes}}`` (``submitted/<student>/<assignment>/``).
        options: ``{"sandbox": bool, "config_args": [nbgrader options], "course_id": str}``.

    Returns:
        ``{"assignment", "student", "success", "reason", "log", "kernel_output", "files": {rel: bytes},
        "rows": {"timestamp", "notebooks": {name: {"grades", "comments", "late_submission_penalty"}}},
        "limit_flags": [note], "kernels": {"warm", "fresh", "why"}, "peak_mb": float | None,
        "cleanroom": {notebook: {"how", "seconds", "notes"}}, "worker", "seconds"}``; ``success`` is
        False when nbgrader could not grade it, with ``reason`` the exception the submission raised
        there (e.g. its kernel died) as one line.

    Raises:
        RuntimeError: the sandbox was asked for and bubblewrap cannot start on this worker.
    """
    from ..kernel import sandbox

    t0 = time.perf_counter()
    a, st = assignment["name"], submission["student"]
    use_sandbox = options.get("sandbox", True)
    if use_sandbox and not sandbox.available():
        raise RuntimeError(f"the grading sandbox cannot start on worker {os.uname().nodename} "
                           "(install bubblewrap there: apt-get install bubblewrap)")
    course_id = options.get("course_id", "default_course")
    with _LOCK, tempfile.TemporaryDirectory(prefix="grade-") as td:
        root = Path(td)
        inputs = _scratch_course(root, assignment, submission)
        env = {**dict.fromkeys(sandbox.SINGLE_THREAD_VARS, "1"), "PYTHONWARNINGS": "ignore"}
        args = list(options.get("config_args", []))
        if assignment.get("handback_inputs"):  # the autograde preprocessor's (nbgrader_config.py), no kernel's
            args.append(f"--HandbackInputs.inputs_file={inputs}")
        out = {"assignment": a, "student": st, "limit_flags": [], "kernels": {}, "peak_mb": None,
               "files": {}, "rows": None, "cleanroom": {}, "worker": os.uname().nodename}
        with sandbox.SandboxSession(root) if use_sandbox else contextlib.nullcontext() as sb:
            if use_sandbox:
                more_args, more_env = sb.worker(0)
                args += more_args
                env.update(more_env)
            with _kernel_process_state(root, env):
                success, log, reason = _autograde(root, a, st, args, course_id)
                if success:  # the graded calls: apart, in clean rooms (the kernel made none of them)
                    os.environ["NBGRADER_EXECUTION"] = "autograde"  # as its kernels had it: one zygote serves both
                    out["cleanroom"] = _clean_rooms(root / "autograded" / st / a,
                                                    assignment.get("handback_inputs") or b"{}", use_sandbox)
            if use_sandbox:  # what its kernels ran into, read from their cgroups outside the sandbox
                out.update(_sandbox_usage(sb, root, a, st, submission))
        out["limit_flags"] = out["limit_flags"] + [  # a clean room that stopped: its questions scored 0, why
            f"{name}: the grader's clean room stopped ({note}): its code questions were not graded"
            for name, room in out["cleanroom"].items() for note in room.get("notes") or []]
        graded_dir = root / "autograded" / st / a
        if success and not any(graded_dir.glob("*.ipynb")):
            success, reason = False, NO_NOTEBOOK
        out.update(success=success, reason=reason, log=log,
                   kernel_output=(root / "kernel-output.log").read_bytes()[-20000:].decode(errors="replace"))
        if success:
            out["files"] = files_of(graded_dir)
            out["rows"] = _rows(root, a, st, course_id)
    out["seconds"] = time.perf_counter() - t0
    return out


__all__ = ["grade_submission", "record", "assignment_definitions", "files_of", "exception_line",
           "INPUTS_FILE", "SCORING_DIR", "NO_NOTEBOOK"]
