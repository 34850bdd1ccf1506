"""The one autograde engine (grader/autograde/engine.py): this machine's process pool behind the interface
Dask's client has too (submit, futures, as_completed), a worker that dies under a task, Ctrl-C and
kill -9, and a submission whose kernel died: its reason taken from the task's own exception and
its regrade sent through the same engine.

The pool's tests run plain functions (no nbgrader); the grading test runs the real task in the
bubblewrap sandbox on one assignment, with points derived by hand (the answer bank)."""
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from grader.autograde.engine import ALLOWED_FAILURES, LocalEngine, WorkerCrashed, autograde, regrade_dead_kernels

REPO = Path(__file__).resolve().parents[1]


def _runs(folder: Path, name: str) -> int:
    """Append a line to ``folder/name.runs``; how many lines it has now (this is run number ...)."""
    with (folder / f"{name}.runs").open("a") as f:
        f.write(f"{os.getpid()}\n")
    return len((folder / f"{name}.runs").read_text().splitlines())


def _wait_for(path: Path, lines: int, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= lines:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} never had {lines} lines")


def _bystander(folder: str) -> str:
    """Runs until the pool ends its worker, twice; returns on its third run."""
    if _runs(Path(folder), "ada") < 3:
        time.sleep(120)
    return "ada graded"


def _crasher(folder: str) -> None:
    """Kills its worker process once the bystander is running beside it (each time)."""
    n = _runs(Path(folder), "chen")
    _wait_for(Path(folder) / "ada.runs", n)
    os._exit(3)


def test_a_task_that_kills_its_pool_worker_is_given_up_and_a_task_beside_it_is_sent_again(tmp_path):
    """As on Dask: a task under whom ALLOWED_FAILURES + 1 workers died is reported with the reason;
    a task whose worker the pool ended because another one died is not counted against, and runs
    again until it finishes."""
    with LocalEngine(2) as engine:
        futures = [engine.submit(_bystander, str(tmp_path), key="ada"),
                   engine.submit(_crasher, str(tmp_path), key="chen")]
        got = {}
        for key, fut in engine.as_completed(futures):
            assert key not in got  # each task comes back once
            got[key] = fut.exception() or fut.result()
    assert got["ada"] == "ada graded"
    assert isinstance(got["chen"], WorkerCrashed)
    assert engine.failure(got["chen"]) == (f"its task crashed {ALLOWED_FAILURES + 1} worker processes "
                                           "of this machine's pool")
    assert len((tmp_path / "chen.runs").read_text().splitlines()) == ALLOWED_FAILURES + 1
    assert len((tmp_path / "ada.runs").read_text().splitlines()) == 3  # ended twice beside chen, then done


def _sleeper(folder: str, name: str) -> None:
    _runs(Path(folder), name)
    time.sleep(120)


def _gone(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return True
    return fields[0] in ("Z", "X")


def _wait_gone(pids, seconds: float = 30) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(map(_gone, pids)):
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


def test_cancel_kills_every_worker_of_the_pool(tmp_path):
    engine = LocalEngine(2)
    futures = [engine.submit(_sleeper, str(tmp_path), name, key=name) for name in ("a", "b", "c")]
    _wait_for(tmp_path / "a.runs", 1)
    _wait_for(tmp_path / "b.runs", 1)
    pids = [int((tmp_path / f"{n}.runs").read_text()) for n in ("a", "b")]
    engine.cancel(futures)
    assert _wait_gone(pids) == []
    assert not (tmp_path / "c.runs").exists()  # the queued task never started
    engine.close()


_ORPHAN = """
import sys, time
sys.path.insert(0, {tests!r})
from grader.autograde.engine import LocalEngine
from test_engine import _sleeper
engine = LocalEngine(1)
engine.submit(_sleeper, {folder!r}, "w", key="w")
time.sleep(120)
"""


def test_a_killed_grading_process_leaves_no_pool_worker(tmp_path):
    """kill -9 of the grading process: its pool's workers die with it (PR_SET_PDEATHSIG)."""
    proc = subprocess.Popen([sys.executable, "-c", _ORPHAN.format(tests=str(REPO / "tests"), folder=str(tmp_path))],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        _wait_for(tmp_path / "w.runs", 1, seconds=120)
        worker = int((tmp_path / "w.runs").read_text())
        assert worker != proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert _wait_gone([worker]) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def _course_with_a_dead_kernel(root: Path) -> str:
    """rmsnorm, ada correct, dee correct except that the answer cell kills its kernel first;
    generated, with this run's graded inputs. Returns the course id."""
    from grader.ledger.apps import Course
    from grader.ledger.course import CourseTree
    from grader.demo import fill_answers
    from grader.demo.answer_bank import ANSWERS
    from grader.scoring.inputs import prepare_inputs
    from normref.handback_files import HANDBACK_ENV as ENV

    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    for sub in ("source", "release"):
        shutil.copytree(REPO / sub / "rmsnorm", root / sub / "rmsnorm")
    release = next((root / "release" / "rmsnorm").glob("*.ipynb"))
    correct = ANSWERS["rmsnorm"]["correct"]
    dying = {**correct, "rms_norm_impl": "import faulthandler\nfaulthandler._sigsegv()\n" + correct["rms_norm_impl"]}
    for st, answers in {"ada": correct, "dee": dying}.items():
        dest = root / "submitted" / st / "rmsnorm"
        dest.mkdir(parents=True)
        nbformat.write(fill_answers(release, answers), dest / release.name)
    course = Course(CourseTree(root))
    course.generate_assignment("rmsnorm")
    os.environ[ENV] = str(prepare_inputs(root, log=lambda *_: None)[1])
    return course.api.coursedir.course_id


class _Counting(LocalEngine):
    """The pool, counting the tasks sent to it."""

    sent = 0

    def submit(self, fn, *args, key, workers=None):
        self.sent += 1
        return super().submit(fn, *args, key=key, workers=workers)


@pytest.mark.slow
def test_a_dead_kernel_is_reported_from_its_exception_and_regraded_through_the_same_engine(
        tmp_path, bubblewrap, monkeypatch):
    from nbgrader.api import Gradebook

    from grader.ledger.course import CourseTree
    from normref.handback_files import HANDBACK_ENV as ENV

    monkeypatch.setenv(ENV, "")  # set by _course_with_a_dead_kernel, put back after
    root = tmp_path / "c"
    course_id = _course_with_a_dead_kernel(root)
    lines = []
    with _Counting(2) as engine:
        out = autograde(root, ["rmsnorm"], engine, course_id=course_id, log=lines.append)
        # the reason is the exception nbgrader's execution raised in the task, as a line
        assert out.failed == {("rmsnorm", "dee"): "nbclient.exceptions.DeadKernelError: Kernel died"}
        assert out.graded == [("rmsnorm", "ada")] and engine.sent == 2
        assert lines == ["autograde failed: student dee, assignment rmsnorm: "
                         "nbclient.exceptions.DeadKernelError: Kernel died"]
        asked = []

        def grade(pr):
            asked.append(pr)
            return autograde(root, ["rmsnorm"], engine, course_id=course_id, pairs=[pr], log=lambda *_: None)

        regraded = regrade_dead_kernels(CourseTree(root), out, grade)
    # unchanged first (it dies again), then without its one answer cell: 2 more tasks on the same pool
    assert asked == [("rmsnorm", "dee")] * 2 and engine.sent == 4
    assert regraded == {("rmsnorm", "dee"): ("nbclient.exceptions.DeadKernelError: Kernel died", ["rms_norm_impl"])}
    assert out.failed == {} and sorted(out.graded) == [("rmsnorm", "ada"), ("rmsnorm", "dee")]
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course_id) as gb:
        # the kernel's own points (the hand-back's are scored later, outside it): ada's visible
        # check passes; dee's answer cell is the stub, so rms_norm is never defined
        assert gb.find_grade("rms_norm_shape", "rmsnorm", "rmsnorm", "ada").auto_score == 1.0
        assert gb.find_grade("rms_norm_shape", "rmsnorm", "rmsnorm", "dee").auto_score == 0.0
    stubbed = nbformat.read(next((root / "autograded" / "dee" / "rmsnorm").glob("*.ipynb")), 4)
    impl = [c for c in stubbed.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "rms_norm_impl"]
    assert impl and "removed by the grader" in impl[0].source
    # submitted/ keeps what dee handed in: the stub was for grading only
    handed_in = nbformat.read(next((root / "submitted" / "dee" / "rmsnorm").glob("*.ipynb")), 4)
    own = [c for c in handed_in.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "rms_norm_impl"]
    assert own and "removed by the grader" not in own[0].source


def _descendants(pid: int) -> dict[int, str]:
    """``{pid: start time}`` of every live process below ``pid``."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with_stat = _stat(int(d.name))
            if with_stat:
                children.setdefault(int(with_stat[1]), []).append(int(d.name))
    out, todo = {}, [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if (st := _stat(c)) and st[0] not in ("Z", "X"):
                out[c] = st[19]
            todo.append(c)
    return out


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
def test_sigterm_stops_a_process_pool_run_and_leaves_no_worker_or_kernel(tmp_path, course_copy, bubblewrap):
    """``python -m grader --engine processes``, SIGTERM while a kernel runs: every process the run
    started (pool workers, zygotes, sandboxes, kernels) is gone at once, and the run is logged as
    interrupted by SIGTERM."""
    import json

    from grader.demo import fill_answers
    from grader.demo.answer_bank import ANSWERS

    for sub in ("source", "release"):
        for d in (course_copy / sub).iterdir():
            if d.is_dir() and d.name != "rmsnorm":
                shutil.rmtree(d)
    release = next((course_copy / "release" / "rmsnorm").glob("*.ipynb"))
    sleeper = "import time\ntime.sleep(600)\n"
    for st, impl in {"ada": ANSWERS["rmsnorm"]["correct"]["rms_norm_impl"], "dee": sleeper}.items():
        dest = tmp_path / "in" / st / "rmsnorm"
        dest.mkdir(parents=True)
        nbformat.write(fill_answers(release, {**ANSWERS["rmsnorm"]["correct"], "rms_norm_impl": impl}),
                       dest / release.name)
    run = subprocess.Popen([sys.executable, "-m", "grader", "--submissions", str(tmp_path / "in"), "--course-root",
                            str(course_copy), "--engine", "processes", "--jobs", "2", "--cell-timeout", "60"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        # ada's notebook recorded: the autograde stage runs (not the canary), dee's kernel sleeps
        while not list((course_copy / "autograded" / "ada" / "rmsnorm").glob("*.ipynb")):
            assert run.poll() is None, run.stdout.read()
            assert time.monotonic() < deadline, "ada was not graded in 300 s"
            time.sleep(0.2)
        procs = _descendants(run.pid)
        assert any("zygote.py" in _cmdline(p) or "kernel_guard" in _cmdline(p) for p in procs), procs
        os.kill(run.pid, signal.SIGTERM)
        t0, alive = time.monotonic(), procs
        while time.monotonic() - t0 < 5 and (alive or run.poll() is None):
            alive = {p: t for p, t in procs.items() if (st := _stat(p)) and st[19] == t and st[0] not in ("Z", "X")}
            time.sleep(0.1)
        assert not alive, {p: _cmdline(p) for p in alive}
        assert run.poll() is not None, "python -m grader still running 5 s after SIGTERM"
    finally:
        if run.poll() is None:
            run.kill()
        run.wait()
    (record,) = [json.loads(ln) for ln in (course_copy / "logs" / "runs.jsonl").read_text().splitlines()]
    assert (record["status"], record["error"]) == ("interrupted", "SIGTERM"), record
