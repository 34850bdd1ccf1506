"""Grading at scale: autograde as Dask tasks on a real cluster, the gradebook on a real PostgreSQL.

The services are real and started by the tests themselves (tests/services.py): a PostgreSQL 15
server and a ``dask scheduler`` with two ``dask worker ADDRESS`` processes. Expected points come
from the demo class's answer bank (hand-derived, ``grader.demo.expected_points``), never from a
run of the code under test.
"""
import csv
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grader.autograde import cluster
from grader import grade_class
from grader.ledger.apps import Course
from grader.ledger.course import CourseTree
from grader.demo import demo_class, expected_points, write_demo_submissions

REPO = Path(__file__).resolve().parents[1]
COURSE_ID = "lesson16-normalization"


def test_nbgrader_gradebook_on_the_test_postgres_server(postgres):
    from nbgrader.api import Gradebook

    url = postgres.create_database("gb_smoke")
    with Gradebook(url, COURSE_ID) as gb:
        gb.update_or_create_assignment("rmsnorm", duedate="2026-11-21 09:00:00")
        gb.update_or_create_student("ada", first_name="Ada")
    with Gradebook(url, COURSE_ID) as gb:  # a second connection reads it back
        assert [a.name for a in gb.assignments] == ["rmsnorm"]
        assert gb.find_student("ada").first_name == "Ada"
        assert str(gb.find_assignment("rmsnorm").duedate) == "2026-11-21 09:00:00"


def test_a_new_postgres_gradebook_is_created_in_process_with_nbgraders_alembic_head(postgres, monkeypatch):
    """grader.ledger.database.create_gradebook on an empty PostgreSQL database: nbgrader's tables and the
    stamp `alembic heads` gives (nbgrader runs it as a subprocess), made without a subprocess."""
    import subprocess

    from nbgrader.api import Gradebook, get_alembic_version
    from sqlalchemy import text

    from grader.ledger.course import put_interpreter_on_path
    from grader.ledger.database import create_gradebook

    put_interpreter_on_path()
    heads = get_alembic_version()
    url = postgres.create_database("gb_in_process")

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"a subprocess was started: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    assert create_gradebook(url) is True
    assert create_gradebook(url) is False  # a gradebook with tables is left as it is
    with Gradebook(url, COURSE_ID) as gb:
        gb.update_or_create_assignment("rmsnorm")
        assert gb.db.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [heads]
    with Gradebook(url, COURSE_ID) as gb:
        assert [a.name for a in gb.assignments] == ["rmsnorm"]


@pytest.fixture(scope="module")
def shared_cluster():
    """One real Dask cluster (a scheduler, two workers) for the tests of this module that kill no
    worker; those that do start their own (the ``dask_cluster`` fixture)."""
    from services import dask_cluster as start

    with start(n_workers=2) as c:
        yield c


def test_dask_cluster_runs_tasks_on_two_worker_processes(shared_cluster):
    dask_cluster = shared_cluster
    from distributed import Client

    with Client(dask_cluster.address, timeout=10) as client:
        pids = set(client.run(os.getpid).values())
        assert len(pids) == 2 and os.getpid() not in pids

        def where():
            import importlib.util

            return importlib.util.find_spec("grader").origin

        # the workers import this checkout's grader (started in the checkout, as documented)
        assert client.submit(where, pure=False).result(timeout=60) == str(REPO / "grader" / "__init__.py")


def _course(root: Path, assignments=None) -> Path:
    """A course copy (config, source/, release/) with just ``assignments`` (default: all)."""
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    for sub in ("source", "release"):
        for d in sorted((REPO / sub).iterdir()):
            if d.is_dir() and (assignments is None or d.name in assignments):
                shutil.copytree(d, root / sub / d.name)
    return root


def _expected(run) -> dict:
    """The answer bank's hand-derived points for every submission of the run's demo students."""
    roster = {st.student_id: st for st in demo_class(run.assignments)}
    return {(a, s): expected_points(roster[s], a) for s in run.students for a in roster[s].variants}


def _rows(csv_path: Path) -> list[dict]:
    with csv_path.open() as f:
        return sorted(csv.DictReader(f), key=lambda r: (r["assignment"], r["student_id"]))


@pytest.mark.slow
def test_demo_class_on_a_dask_cluster_into_postgres_has_the_grades_of_the_default_run(
        tmp_path, postgres, shared_cluster, graded_class):
    # the default way: the session's demo class (tests/graded_class.py), SQLite gradebook; its
    # first 3 students against the same 3 graded on the cluster into PostgreSQL
    plain, dask_cluster = graded_class.run, shared_cluster
    url = postgres.create_database("gb_demo")
    lines = []
    run = grade_class(course_root=_course(tmp_path / "pg"), demo_students=3, scheduler=dask_cluster.address,
                      db_url=url, log=lines.append)
    want = _expected(run)
    assert len(want) >= 14 and run.students == ["ada", "bruno", "chen"]
    assert {k: v for k, v in plain.scores.items() if k in want} == want  # the default run's grades
    assert any(f"Dask tasks on the Dask cluster at {dask_cluster.address} (2 workers)" in ln for ln in lines)
    assert run.scores == want and not run.autograde.failed  # read back from PostgreSQL
    assert set(run.autograde.workers) and sum(run.autograde.workers.values()) == len(want)
    assert not (run.course_root / "gradebook.db").exists()  # nothing went to a SQLite file
    # nbgrader's export through the same gradebook gives the same table (scores, timestamps, late)
    plain_rows = [r for r in _rows(plain.grades_csv) if r["student_id"] in run.students]
    drop = {"raw_score", "late"} & set(plain_rows[0])
    same = [{k: v for k, v in r.items() if k not in drop} for r in _rows(run.grades_csv)]
    assert same == [{k: v for k, v in r.items() if k not in drop} for r in plain_rows]
    # ... and so does a plain `nbgrader export` command pointed at the PostgreSQL gradebook
    out = subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--CourseDirectory.db_url={url}",
                          "--to", str(tmp_path / "by-hand.csv")], cwd=run.course_root,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [(r["assignment"], r["student_id"], r["score"]) for r in _rows(tmp_path / "by-hand.csv")] == \
        [(r["assignment"], r["student_id"], r["score"]) for r in _rows(run.grades_csv)]


def _kill_a_busy_worker(cluster, course_root: Path, stop: threading.Event, killed: list) -> None:
    """Once a first submission is back, SIGKILL a worker that is grading someone."""
    from distributed import Client

    with Client(cluster.address, timeout=10) as c:
        while not stop.is_set():
            if any((course_root / "autograded").glob("*/*/*.ipynb")):
                busy = {addr: keys for addr, keys in c.processing().items() if keys}
                if busy:
                    addr = sorted(busy)[0]
                    name = c.scheduler_info(n_workers=-1)["workers"][addr]["name"]
                    cluster.kill_worker(int(str(name).lstrip("w")))
                    killed.append((name, busy[addr]))
                    return
            time.sleep(0.1)


@pytest.mark.slow
def test_a_worker_killed_mid_run_changes_no_grade(tmp_path, dask_cluster, bubblewrap):
    root = _course(tmp_path / "c", {"rmsnorm"})
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_a_busy_worker, args=(dask_cluster, root, stop, killed))
    killer.start()
    try:
        run = grade_class(course_root=root, demo_students=5, scheduler=dask_cluster.address, log=lambda *_: None)
    finally:
        stop.set()
        killer.join(timeout=30)
    assert killed and killed[0][1], "no worker was killed while it was grading"
    assert dask_cluster.n_workers() == 1
    assert run.scores == _expected(run) and not run.autograde.failed and len(run.autograde.graded) == 5


def _crash_for_chen(assignment, submission, options):
    """Grades like :func:`grader.autograde.cluster.grade_submission`, except that chen's task kills its worker."""
    if submission["student"] == "chen":
        os._exit(1)
    return cluster.grade_submission(assignment, submission, options)


@pytest.mark.slow
def test_a_task_that_crashes_its_worker_twice_is_reported_not_retried_forever(tmp_path, dask_cluster, bubblewrap,
                                                                           monkeypatch):
    from grader.scoring.inputs import prepare_inputs
    from normref.handback_files import HANDBACK_ENV as ENV

    root = _course(tmp_path / "c", {"rmsnorm"})
    write_demo_submissions(root, root / "submitted", 3)
    course = Course(CourseTree(root))
    course.generate_assignment("rmsnorm")
    # the run's inputs, as make grade draws them (without them nbgrader autograde refuses to run)
    monkeypatch.setenv(ENV, str(prepare_inputs(root, log=lambda *_: None)[1]))
    lines = []
    got = cluster.autograde(root, ["rmsnorm"], scheduler=dask_cluster.address, task=_crash_for_chen,
                            log=lines.append)  # retried forever, it would never return
    assert set(got.failed) == {("rmsnorm", "chen")}, got.failed
    assert "could not be graded" in got.failed[("rmsnorm", "chen")]
    assert f"{cluster.ALLOWED_FAILURES + 1} Dask workers" in got.failed[("rmsnorm", "chen")]
    assert any("chen" in ln and "could not be graded" in ln for ln in lines)
    assert sorted(got.graded) == [("rmsnorm", "ada"), ("rmsnorm", "bruno")]  # the others are graded
    assert not (root / "autograded" / "chen").exists()


def _digest(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _cli(root: Path, tmp_path: Path, *more: str) -> tuple[subprocess.CompletedProcess, float]:
    subs = tmp_path / "subs"
    if not subs.exists():
        write_demo_submissions(root, subs, 2)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "grader", "--course-root", str(root), "--submissions", str(subs),
                          *more], capture_output=True, text=True, timeout=CLI_BOUND_S)
    seconds = time.perf_counter() - t0
    print(f"\n`python -m grader {' '.join(more)}` failed in {seconds:.1f} s")
    return out, seconds


#: A command that fails at once is still given this long (generous: no load makes it fail; the
#: grader's own bounds on what it waits for are its connect timeouts, checked below).
CLI_BOUND_S = 300


def test_a_wrong_scheduler_address_fails_in_seconds_with_one_line_touching_nothing(tmp_path):
    from services import free_port

    root = _course(tmp_path / "c", {"rmsnorm"})
    before = _digest(root)
    address = f"tcp://127.0.0.1:{free_port()}"
    out, seconds = _cli(root, tmp_path, "--scheduler", address)
    assert out.returncode == 1, (out.returncode, seconds, out.stderr[-2000:])
    (line,) = out.stderr.strip().splitlines()
    # the wait is the grader's own, 10 s at most, and it says so
    assert cluster.CONNECT_TIMEOUT_S <= 10
    assert line.startswith(f"error: cannot reach the Dask scheduler at {address} within {cluster.CONNECT_TIMEOUT_S} s")
    assert _digest(root) == before


def test_a_wrong_database_url_fails_in_seconds_with_one_line_touching_nothing(tmp_path, postgres):
    from grader.ledger import database

    assert database.CONNECT_TIMEOUT_S <= 10  # what the driver may wait for a server, at most
    root = _course(tmp_path / "c", {"rmsnorm"})
    before = _digest(root)
    for url, why in [(postgres.url("no_such_gradebook"), 'database "no_such_gradebook" does not exist'),
                     (f"postgresql://postgres:secret@127.0.0.1:{postgres.port + 1}/x", "Connection refused"),
                     ("postgres", "is not a database URL")]:
        out, seconds = _cli(root, tmp_path, "--db", url, "--engine", "processes")
        assert out.returncode == 1, (url, out.returncode, seconds, out.stderr[-2000:])
        (line,) = out.stderr.strip().splitlines()
        assert line.startswith("error: ") and why in line, line
        assert "secret" not in line  # a password is never printed
    assert _digest(root) == before


@pytest.mark.slow
def test_ctrl_c_cancels_the_runs_tasks_on_the_cluster(tmp_path, shared_cluster, bubblewrap):
    import signal

    dask_cluster = shared_cluster
    from distributed import Client

    root = _course(tmp_path / "c", {"rmsnorm", "layernorm"})
    subs = tmp_path / "subs"
    write_demo_submissions(root, subs, 6)
    proc = subprocess.Popen([sys.executable, "-m", "grader", "--course-root", str(root), "--submissions", str(subs),
                             "--scheduler", dask_cluster.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    with Client(dask_cluster.address, timeout=10) as c:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not any(c.processing().values()):
            time.sleep(0.2)
        assert any(c.processing().values()), "the run never reached the cluster"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and "stopped" in err, err[-2000:]
        deadline = time.monotonic() + 30  # its tasks leave the scheduler: none queued, none running
        while time.monotonic() < deadline and (c.processing() and any(c.processing().values())
                                               or c.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))):
            time.sleep(0.5)
        assert not any(c.processing().values())
        assert c.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) == 0


_HEARTBEAT_SCRIPT = """
import logging
from grader.autograde.cluster import DaskCluster

def emit():
    import logging
    log = logging.getLogger("distributed.worker")
    try:
        raise OSError("comm closed")
    except OSError:
        log.exception("Failed to communicate with scheduler during heartbeat.")
    log.error("a real worker error stays visible")

with DaskCluster(jobs=1) as c:
    c.client(use_sandbox=False).run(emit)
"""


def test_embedded_workers_drop_the_heartbeat_traceback_and_keep_other_errors():
    """A successful Dask run printed a worker's "Failed to communicate with scheduler during
    heartbeat." traceback (red-team instructor): the embedded cluster's forked workers drop that
    record; any other ERROR of theirs still reaches the terminal."""
    out = subprocess.run([sys.executable, "-c", _HEARTBEAT_SCRIPT], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert "a real worker error stays visible" in out.stderr
    assert "heartbeat" not in out.stderr and "OSError" not in out.stderr, out.stderr
