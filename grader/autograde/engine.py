"""The autograde engine: one :func:`~grader.autograde.task.grade_submission` task per submission, on an executor.

The executor is either this machine's process pool (:class:`LocalEngine`, ``--engine processes``:
a :class:`concurrent.futures.ProcessPoolExecutor` of ``jobs`` worker processes forked from this
one) or a Dask client (:class:`grader.autograde.cluster.DaskCluster`: an embedded local cluster,
``--engine dask``, the default, or an existing cluster, ``--scheduler``). Both are driven through
one interface, :class:`Engine` (``submit``, futures, ``as_completed``, ``cancel``), so one code path
(:func:`autograde`) sends the tasks, records each result as it comes back (the files into
``autograded/``, the grade rows into the gradebook: this process is its one writer, see
:func:`grader.autograde.task.record`), shows progress, reports a submission that could not be graded with
the reason its task gave (the exception it raised, or its result's reason), and stops every
task on Ctrl-C or SIGTERM. The dead-kernel regrade (:func:`regrade_dead_kernels`) and the
canary (:mod:`grader.stages.canary`) grade through the run's engine too.

Each worker process, of the pool or of Dask, runs the same task: a scratch course folder, the
bubblewrap sandbox per kernel (:mod:`grader.kernel.sandbox`), warm kernels forked from its own zygote
(:mod:`grader.kernel.warm`). The pool's workers are forked with nbgrader already imported, die with
this process (``PR_SET_PDEATHSIG``), and a worker that dies under a task (killed, out of
memory) is replaced: the unfinished tasks are sent again, and a task that has been under
:data:`ALLOWED_FAILURES` + 1 dying workers is given up and reported, as Dask's scheduler does.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ..kernel import warm
from ..ledger.course import CourseTree
from ..ledger.course import CONFIG
from .task import (INPUTS_FILE, SCORING_DIR, assignment_definitions, files_of, grade_submission,  # noqa: F401
                   record)

#: How many workers may die while running one task before it is given up (the pool, the
#: embedded Dask cluster).
ALLOWED_FAILURES = 1
#: Seconds the engine gets to close after Ctrl-C or SIGTERM.
CLOSE_TIMEOUT_S = 2
PR_SET_PDEATHSIG = 1


def default_jobs() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def die_with_parent() -> None:
    """In a child process (``preexec_fn``, a pool's initializer): the kernel sends it SIGKILL when
    its parent dies, so a ``kill -9`` of ``python -m grader`` leaves no worker behind (Linux
    ``prctl``)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


@dataclass
class AutogradeOutcome:
    """What the autograde stage did.

    Attributes:
        graded: ``(assignment, student)`` pairs with an autograded notebook.
        failed: ``{(assignment, student): reason}`` for submissions that could not be graded.
        seconds: wall time of the stage.
        limit_flags: ``{(assignment, student): [note]}`` for kernels that ran into the sandbox's
            process or memory cap (read from their cgroups on the worker; see
            :func:`grader.kernel.sandbox.limit_flags`).
        workers: ``{worker host: submissions graded there}``.
        kernels: warm and fresh kernel counts (:func:`grader.kernel.warm.kernel_counts`).
        peak_mb: ``{(assignment, student): a kernel's peak memory in MiB}`` (kernels with a memory cgroup).
    """

    graded: list[tuple[str, str]] = field(default_factory=list)
    failed: dict[tuple[str, str], str] = field(default_factory=dict)
    seconds: float = 0.0
    limit_flags: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)
    kernels: dict = field(default_factory=lambda: {"warm": 0, "fresh": 0, "why": []})
    peak_mb: dict[tuple[str, str], float] = field(default_factory=dict)

    def take(self, result: dict) -> None:
        """Count one task's result (its worker, sandbox caps, kernels, memory), graded or not."""
        pr = (result["assignment"], result["student"])
        self.workers[result["worker"]] = self.workers.get(result["worker"], 0) + 1
        if result.get("limit_flags"):
            self.limit_flags[pr] = result["limit_flags"]
        warm.merge(self.kernels, result.get("kernels"))
        if result.get("peak_mb") is not None:
            self.peak_mb[pr] = result["peak_mb"]


class Engine:
    """What :func:`autograde` needs of an executor; :class:`LocalEngine` and
    :class:`grader.autograde.cluster.DaskCluster` implement it. Use as a context manager, or call :meth:`close`.

    Attributes:
        name: ``"processes"`` or ``"dask"``.
        label: how the run's log names the tasks (``"Dask tasks"``).
        address: an existing Dask scheduler's address, else None (the tasks run on this machine).
        jobs: worker processes on this machine (the pool, the embedded cluster).
    """

    name = ""
    label = "tasks"
    address: str | None = None
    jobs = 1

    def executor(self, use_sandbox: bool = True):
        """The running :class:`concurrent.futures.Executor` or :class:`distributed.Client`
        (started on the first call); ``use_sandbox``: check that the workers can start it."""
        raise NotImplementedError

    def submit(self, fn: Callable, *args, key: str, workers: list[str] | None = None):
        """``fn(*args)`` as a task named ``key`` (``workers``: only on these, where that means anything)."""
        raise NotImplementedError

    def as_completed(self, futures) -> Iterator[tuple[str, object]]:
        """``(key, future)`` of each task as it finishes (a task sent again after its worker died
        comes back under its key)."""
        raise NotImplementedError

    def failure(self, exc: BaseException) -> str:
        """Why a task that raised ``exc`` could not grade its submission, in words."""
        return f"{type(exc).__name__}: {str(exc)[:300]}"

    def cancel(self, futures) -> None:
        """Stop the tasks of ``futures`` (Ctrl-C): none queued, none running (this machine's pool:
        every task, its workers killed)."""
        raise NotImplementedError

    def describe(self) -> str:
        """Where the tasks run, in words."""
        raise NotImplementedError

    def close(self, timeout: float | None = None) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc) -> None:
        # after Ctrl-C or SIGTERM the workers are already dead (grader.__main__ kills every
        # process of the run), and an unbounded close waits on them
        self.close(CLOSE_TIMEOUT_S if exc_type is not None else None)


class WorkerCrashed(RuntimeError):
    """A task's worker process died under it :data:`ALLOWED_FAILURES` + 1 times."""


_MARK: list[str | None] = [None]  # in a pool's worker: the running task's mark file


def _worker_start(marks: str) -> None:
    """A pool worker's start: it dies with this process; Ctrl-C is this process's to handle (it
    kills every worker); SIGTERM, which the pool sends the others when one died, ends it at once,
    its task's mark removed (that task did not kill the worker)."""
    die_with_parent()
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, _ended_by_the_pool)


def _ended_by_the_pool(signum, _frame) -> None:
    if _MARK[0]:
        with contextlib.suppress(OSError):
            os.unlink(_MARK[0])
    os._exit(128 + signum)


def _mark_name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _marked(marks: str, key: str, fn: Callable, *args):
    """In a pool worker: ``fn(*args)`` with a mark file naming the task while it runs, so that a
    worker that dies mid-task (its mark left behind) is known to have died under that task."""
    path = os.path.join(marks, _mark_name(key))
    with open(path, "w") as f:
        f.write(key)
    _MARK[0] = path
    try:
        return fn(*args)
    finally:
        _MARK[0] = None
        with contextlib.suppress(OSError):
            os.unlink(path)


def _broken(f: Future) -> bool:
    return not f.cancelled() and isinstance(f.exception(), BrokenProcessPool)


class LocalEngine(Engine):
    """This machine's process pool: ``jobs`` worker processes (default: all cores), forked from this
    process when the first task is sent (nbgrader already imported), one task at a time each."""

    name, label = "processes", "tasks"

    def __init__(self, jobs: int | None = None, *, log=print):
        self.jobs = jobs or default_jobs()
        self.log = log
        self._pool: ProcessPoolExecutor | None = None
        self._marks: str | None = None
        self._tasks: dict[Future, tuple[str, Callable, tuple, int]] = {}  # key, fn, args, strikes

    def executor(self, use_sandbox: bool = True) -> ProcessPoolExecutor:
        if self._pool is None:
            import multiprocessing

            import nbgrader.apps  # noqa: F401 - the forked workers start with nbgrader imported

            self._marks = self._marks or tempfile.mkdtemp(prefix="normref-pool-")
            self._pool = ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("fork"),
                                             initializer=_worker_start, initargs=(self._marks,))
        return self._pool

    def submit(self, fn: Callable, *args, key: str, workers: list[str] | None = None) -> Future:
        return self._send(key, fn, args, 0)

    def _send(self, key: str, fn: Callable, args: tuple, strikes: int) -> Future:
        fut = self.executor().submit(_marked, self._marks, key, fn, *args)
        self._tasks[fut] = (key, fn, args, strikes)
        return fut

    def as_completed(self, futures) -> Iterator[tuple[str, Future]]:
        pending = set(futures)
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            if any(_broken(f) for f in done):  # a worker died: the pool ends all its futures now
                wait(pending)
                done, pending = self._recover(pending)
            else:
                pending -= done
            for f in done:
                yield self._tasks.pop(f)[0], f

    def _recover(self, ended: set[Future]) -> tuple[set[Future], set[Future]]:
        """After a worker died: a new pool; every task the old one did not finish is sent again,
        but one that was running in the dead worker for the :data:`ALLOWED_FAILURES` + 1-th time
        fails with :class:`WorkerCrashed`. Returns ``(finished futures, futures sent again)``."""
        old, self._pool = self._pool, None
        old.shutdown(wait=True)  # its workers are gone, the others' marks removed (_ended_by_the_pool)
        culprits = set()
        for mark in Path(self._marks).iterdir():
            with contextlib.suppress(OSError):
                culprits.add(mark.read_text())
                mark.unlink()
        done, again = set(), set()
        for f in ended:
            if not _broken(f):
                done.add(f)
                continue
            key, fn, args, strikes = self._tasks.pop(f)
            strikes += key in culprits or not culprits  # nobody known: everyone unfinished
            if strikes > ALLOWED_FAILURES:
                g = Future()
                g.set_exception(WorkerCrashed(f"its task crashed {strikes} worker processes of this machine's pool"))
                self._tasks[g] = (key, fn, args, strikes)
                done.add(g)
            else:
                again.add(self._send(key, fn, args, strikes))
        return done, again

    def failure(self, exc: BaseException) -> str:
        return str(exc) if isinstance(exc, WorkerCrashed) else super().failure(exc)

    def cancel(self, futures=()) -> None:
        pool, self._pool = self._pool, None
        self._tasks.clear()
        if pool is None:
            return
        procs = list((getattr(pool, "_processes", None) or {}).values())
        for p in procs:  # each worker's kernels and zygote die with it
            with contextlib.suppress(OSError, ValueError, AttributeError):
                p.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            with contextlib.suppress(ValueError, AssertionError):
                p.join(timeout=CLOSE_TIMEOUT_S)

    def describe(self) -> str:
        return f"a pool of {self.jobs} worker process{'es' if self.jobs != 1 else ''} on this machine"

    def close(self, timeout: float | None = None) -> None:
        """Stop the workers: at once after an error or Ctrl-C (``timeout`` given), else once idle."""
        if timeout is not None:
            self.cancel()
        elif self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._marks is not None:
            shutil.rmtree(self._marks, ignore_errors=True)
            self._marks = None


# -- the run ----------------------------------------------------------------------------------------

def _payloads(tree: CourseTree, pairs, course_id: str) -> Iterator[tuple[dict, list[tuple[str, str]]]]:
    """``(assignment payload, its pairs)`` per assignment, in the pairs' order; one definition is
    copied out of the gradebook at a time, so the first tasks go out while the next is copied."""
    config = (tree.root / CONFIG).read_bytes()
    # the run's graded inputs (drawn by its inputs stage, grader.scoring.inputs.prepare_inputs, into the
    # course's logs/scoring/), which only the autograde preprocessor reads (HandbackInputs in nbgrader_config.py)
    inputs_file = tree.root / "logs" / SCORING_DIR / INPUTS_FILE
    handback_inputs = inputs_file.read_bytes() if inputs_file.is_file() else None
    for name in dict.fromkeys(a for a, _ in pairs):
        yield ({"name": name, "config": config, "handback_inputs": handback_inputs,
                "gradebook": assignment_definitions(tree, [name], course_id)[name],
                "source_files": files_of(tree.source(name), skip_notebooks=True)},
               [pr for pr in pairs if pr[0] == name])


def autograde(course: CourseTree | Path, assignments: list[str], engine: Engine, *, course_id: str,
              pairs: list[tuple[str, str]] | None = None, progress=None, log=print,
              extra_args: list[str] | None = None, use_sandbox: bool = True, task: Callable = grade_submission,
              workers: list[str] | None = None) -> AutogradeOutcome:
    """Autograde the submissions in ``submitted/``: one ``task`` per (assignment, student) on ``engine``.

    Args:
        course: the course (its gradebook must already hold the assignments: generate has run).
        assignments: the assignment names to grade.
        engine: where the tasks run (:class:`LocalEngine`, :class:`grader.autograde.cluster.DaskCluster`).
        course_id: nbgrader's ``CourseDirectory.course_id``.
        pairs: grade just these ``(assignment, student)`` submissions (default: all of ``assignments``).
        progress: ``progress(done, total)`` as submissions finish, or None.
        log: where per-submission failure lines go.
        extra_args: nbgrader options (``--Section.name=value``) applied on the workers, e.g.
            ``["--Execute.timeout=30"]``.
        use_sandbox: run every kernel in the bubblewrap sandbox on the workers.
        task: the function each task runs (default :func:`grader.autograde.task.grade_submission`; the tests wrap it).
        workers: run the tasks only on these Dask workers (addresses; default: any).

    Returns:
        :class:`AutogradeOutcome`. A student whose code fails is *not* a failure here: nbgrader
        records zero points for the failing cells and the notebook counts as graded.

    Raises:
        grader.autograde.cluster.ClusterError: the Dask cluster cannot run the tasks.
        KeyboardInterrupt: after stopping every task of the engine.
    """
    tree = course if isinstance(course, CourseTree) else CourseTree(course)
    todo = [pr for pr in tree.pairs(assignments) if pairs is None or pr in set(pairs)]
    outcome = AutogradeOutcome()
    if not todo:
        return outcome
    t0 = time.perf_counter()
    engine.executor(use_sandbox)  # started (the pool, the cluster) and checked before anything is removed
    for a, s in todo:  # a regrade starts from nothing, as nbgrader autograde --force does
        old = tree.autograded(s, a)
        if old.is_dir():
            shutil.rmtree(old)
    options = {"sandbox": use_sandbox, "config_args": list(extra_args or []), "course_id": course_id}
    keys: dict[str, tuple[str, str]] = {}
    futures = []
    try:
        for payload, group in _payloads(tree, todo, course_id):
            for a, s in group:
                key = f"autograde-{a}-{s}-{os.urandom(4).hex()}"
                keys[key] = (a, s)
                sub = {"student": s, "files": files_of(tree.submitted(s, a))}
                futures.append(engine.submit(task, payload, sub, options, key=key, workers=workers))
        _collect(tree, engine, futures, keys, outcome, course_id, progress, log)
    except KeyboardInterrupt:
        engine.cancel(futures)
        raise
    outcome.graded.sort(key=todo.index)
    outcome.seconds = time.perf_counter() - t0
    return outcome


def _collect(tree: CourseTree, engine: Engine, futures, keys, outcome: AutogradeOutcome, course_id: str,
             progress, log) -> None:
    """Each task's result as it comes back: recorded when graded, its reason when not."""
    from nbgrader.api import Gradebook

    if progress is not None:
        progress(0, len(keys))
    done = 0
    gradebook = Gradebook(tree.gradebook_url, course_id)  # the one writer, for the whole run
    try:
        for key, fut in engine.as_completed(futures):
            a, s = keys[key]
            try:
                result = fut.result()
            except Exception as e:  # noqa: BLE001 - a worker-side error that is not the student's code
                outcome.failed[(a, s)] = f"could not be graded: {engine.failure(e)}"
            else:
                outcome.take(result)
                if result["success"]:
                    record(tree, course_id, result, gradebook)
                    outcome.graded.append((a, s))
                else:
                    outcome.failed[(a, s)] = result["reason"]
            if (a, s) in outcome.failed:
                log(f"autograde failed: student {s}, assignment {a}: {outcome.failed[(a, s)]}")
            done += 1
            if progress is not None:
                progress(done, len(keys))
    finally:
        gradebook.close()


# -- the dead-kernel regrade --------------------------------------------------------------------------

#: What replaces an answer cell whose code killed or hung the grading kernel.
STUB = ("# The grader removed this cell: the grading kernel died or hung while running this question's "
        "code.\nraise RuntimeError('removed by the grader: the kernel died in this question')")


def _answer_ids(nb) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution")]


def _write_stubbed(originals: dict[Path, str], stubbed: list[tuple[Path, str]]) -> None:
    """The notebooks ``originals`` (``{path: text}``) with the answer cells ``stubbed`` replaced."""
    import nbformat

    for p, text in originals.items():
        nb = nbformat.reads(text, 4)
        for c in nb.cells:
            if (p, c.get("metadata", {}).get("nbgrader", {}).get("grade_id")) in stubbed:
                c.source = STUB
        nbformat.write(nb, p)


def regrade_dead_kernels(tree: CourseTree, outcome: AutogradeOutcome,
                         grade: Callable[[tuple[str, str]], AutogradeOutcome]) -> dict:
    """A submission that could not be graded (its kernel died or stopped answering) is graded again
    with ``grade((assignment, student))`` (the run's engine): first unchanged (a kernel can fail to
    start on a loaded machine), then with one answer cell at a time replaced by :data:`STUB`,
    then the first two, three, ... until it finishes: that question scores 0 with the reason, and
    every other question keeps its points. ``outcome`` is updated for each one graded. The stubs
    are written into ``submitted/`` only while it is graded again: afterwards it holds what the
    student handed in (the autograded copy shows what was graded).

    Returns:
        ``{(assignment, student): (the first failure's reason, [grade ids stubbed])}`` of those graded.
    """
    import nbformat

    regraded = {}
    for (a, st), reason in sorted(outcome.failed.items()):
        nbs = sorted(tree.submitted(st, a).glob("*.ipynb"))
        if not nbs:
            continue
        originals = {p: p.read_text(encoding="utf-8") for p in nbs}
        cells = [(p, gid) for p in nbs for gid in _answer_ids(nbformat.reads(originals[p], 4))]
        attempts = [[]] + [[c] for c in cells] + [cells[: k + 1] for k in range(1, len(cells))]
        try:
            for attempt in attempts:
                _write_stubbed(originals, attempt)
                again = grade((a, st))
                if (a, st) in again.graded:
                    del outcome.failed[(a, st)]
                    outcome.graded.append((a, st))
                    outcome.limit_flags.pop((a, st), None)
                    for k, v in again.workers.items():
                        outcome.workers[k] = outcome.workers.get(k, 0) + v
                    outcome.limit_flags.update(again.limit_flags)
                    outcome.peak_mb.update(again.peak_mb)
                    warm.merge(outcome.kernels, again.kernels)
                    regraded[(a, st)] = (reason, [gid for _, gid in attempt])
                    break
        finally:  # the stubs were for grading only: submitted/ keeps what the student handed in
            for p, text in originals.items():
                p.write_text(text, encoding="utf-8")
    return regraded


__all__ = ["autograde", "Engine", "LocalEngine", "AutogradeOutcome", "WorkerCrashed", "regrade_dead_kernels",
           "default_jobs", "die_with_parent", "ALLOWED_FAILURES"]
