"""Autograde on Dask: on this machine (an embedded local cluster) or on any Dask cluster.

:class:`DaskCluster` is the :class:`~grader.autograde.engine.Engine` whose executor is a
:class:`distributed.Client`: the run's tasks (:func:`grader.autograde.task.grade_submission`, one per
submission, carrying everything as bytes: no file system shared with the instructor's machine)
are sent, collected and recorded by :func:`grader.autograde.engine.autograde`, as on this machine's process
pool. The embedded cluster's workers are forked from this process with nbgrader imported.

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
from pathlib import Path

from ..ledger.course import CourseTree
from .engine import ALLOWED_FAILURES, CLOSE_TIMEOUT_S, AutogradeOutcome, Engine, default_jobs
from .engine import autograde as run_tasks
from .task import assignment_definitions, grade_submission, record  # noqa: F401 - this module's names before

#: :class:`~grader.autograde.engine.AutogradeOutcome` (its name here before the engines were one).
ClusterOutcome = AutogradeOutcome
#: Dask settings of the embedded cluster, whose scheduler and workers share this machine's cores
#: with the kernels: no statistical profiler, a 1 s event-loop tick (20 ms by default), system
#: monitors every 5 s (0.5 s), and no dashboard (a dashboard is printed for an existing cluster
#: that serves one). Diagnostics only; what runs and where is unchanged.
EMBEDDED_QUIET = {"distributed.worker.profile.enabled": False,
                  "distributed.admin.tick.interval": "1s",
                  "distributed.admin.system-monitor.interval": "5s"}
#: Seconds to wait for a scheduler to answer, and for a cluster to show at least one worker.
CONNECT_TIMEOUT_S = 10


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


# -- connecting, and the run ----------------------------------------------------------------------

def scheduler_address(scheduler: str | None = None) -> str | None:
    """The scheduler to use: ``scheduler``, else ``$DASK_SCHEDULER_ADDRESS``, else None (embedded)."""
    return scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or None


def _preload() -> str:  # run on every worker when a run starts (imports paid once, in parallel)
    import nbgrader.apps  # noqa: F401

    from ..kernel import sandbox

    return "sandboxed" if sandbox.available() else "no-sandbox"


class _Queued:
    """A task :meth:`DaskCluster.submit` holds until a worker thread is free; ``future`` once sent."""

    def __init__(self, key: str, fn, args: tuple, workers: list[str] | None):
        self.key, self.fn, self.args, self.workers = key, fn, args, workers
        self.future = None


class DaskCluster(Engine):
    """The Dask client of one grading run: to ``scheduler`` (or ``$DASK_SCHEDULER_ADDRESS``), or to
    an embedded local cluster of ``jobs`` single-threaded worker processes (default: all cores).

    An existing scheduler is reached in the constructor, so a wrong address fails before
    anything is touched; the embedded cluster starts when :meth:`client` is first called (the
    canary, or the autograde stage), its workers forked from this process with nbgrader already
    imported (0.2 s instead of ~9 s each). Use as a context manager, or call :meth:`close`.

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

    executor = client
    name, label = "dask", "Dask tasks"

    def submit(self, fn, *args, key: str, workers: list[str] | None = None) -> "_Queued":
        """The task, queued here: :meth:`as_completed` sends it to the cluster once a worker
        thread is free (a worker never holds a task queued behind the one it runs, so a worker
        that dies is held against the task it was running alone; Dask's ``worker-saturation``
        does that only for large groups of like tasks, not for one task per submission)."""
        return _Queued(key, fn, args, workers)

    def _send(self, task: "_Queued"):
        task.future = self.client(use_sandbox=False).submit(
            task.fn, *task.args, pure=False, workers=task.workers, allow_other_workers=False, key=task.key)
        return task.future

    def _threads(self, workers: list[str] | None) -> int:
        """Worker threads the tasks may use (those of ``workers`` only, when given); at least 1."""
        return max(1, sum(n for w, n in self._client.nthreads().items() if not workers or w in workers))

    def as_completed(self, futures):
        """``(key, future)`` of each task as it finishes; the tasks :meth:`submit` queued are sent
        as worker threads free up: no more at once than the workers they may run on have threads
        (asked again as each finishes, so workers that join are used). A worker's death then
        counts against the task it ran; a task Dask moves to another worker after that death may
        queue there behind one, which can be held against an innocent task once, never twice
        (the culprit has crashed its ``allowed-failures + 1`` workers by then)."""
        from distributed import as_completed

        waiting = [t for t in futures if isinstance(t, _Queued) and t.future is None]
        sent = as_completed([t.future if isinstance(t, _Queued) else t for t in futures
                             if not isinstance(t, _Queued) or t.future is not None], loop=self._client.loop)
        running = sent.count()

        def fill() -> int:
            n = 0
            while waiting and running + n < self._threads(waiting[0].workers):
                sent.add(self._send(waiting.pop(0)))
                n += 1
            return n

        running += fill()
        for fut in sent:
            running -= 1
            running += fill()
            yield fut.key, fut

    def failure(self, exc: BaseException) -> str:
        from distributed.scheduler import KilledWorker

        if isinstance(exc, KilledWorker):
            return f"its task crashed {ALLOWED_FAILURES + 1} Dask workers ({' '.join(str(exc).split())[:200]})"
        return super().failure(exc)

    def cancel(self, futures) -> None:
        sent = [t.future if isinstance(t, _Queued) else t for t in futures]
        sent = [f for f in sent if f is not None]
        if self._client is not None and sent:
            self._client.cancel(sent, force=True)

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


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


def _scheduler_has_bokeh(client) -> bool:
    """The scheduler's web server shows the dashboard only with bokeh installed there."""
    try:
        return bool(client.run_on_scheduler(_has_bokeh))
    except Exception:  # noqa: BLE001 - a scheduler that refuses run_on_scheduler: say nothing
        return False




def autograde(course: CourseTree | Path, assignments: list[str], *, scheduler: str | None = None,
              jobs: int | None = None, course_id: str | None = None, log=print, **more) -> AutogradeOutcome:
    """:func:`grader.autograde.engine.autograde` on a :class:`DaskCluster` of its own: the cluster of
    ``scheduler`` (default: ``$DASK_SCHEDULER_ADDRESS``, else an embedded local cluster of ``jobs``
    workers), closed after the run. ``course_id``: default, read from the course's config; ``more``:
    :func:`grader.autograde.engine.autograde`'s other options.

    Raises:
        ClusterError: see :class:`DaskCluster`.
    """
    tree = course if isinstance(course, CourseTree) else CourseTree(course)
    if course_id is None:
        from ..ledger.apps import Course

        course_id = Course(tree).api.coursedir.course_id
    with DaskCluster(scheduler, jobs, log=log) as dc:
        log(f"autograde: {dc.label} on {dc.describe()}")
        return run_tasks(tree, assignments, dc, course_id=course_id, log=log, **more)


__all__ = ["autograde", "DaskCluster", "ClusterOutcome", "grade_submission", "record", "assignment_definitions",
           "scheduler_address", "ClusterError", "ALLOWED_FAILURES"]
