"""Grading at scale: autograde as Dask tasks on a real cluster, the gradebook on a real PostgreSQL.

The services are real and started by the tests themselves (tests/services.py): a PostgreSQL 15
server and a ``dask scheduler`` with two ``dask worker ADDRESS`` processes. Expected points come
from the demo class's answer bank (hand-derived, ``grader.demo.expected_points``), never from a
run of the code under test.
"""
import os
import shutil
import time
from pathlib import Path

import pytest

from grader import cluster
from grader.apps import Course
from grader.course import CourseTree
from grader.demo import apply_due_dates, demo_class, expected_points, write_demo_submissions
from grader.pipeline import read_gradebook

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


def test_dask_cluster_runs_tasks_on_two_worker_processes(dask_cluster):
    from distributed import Client

    with Client(dask_cluster.address, timeout=10) as client:
        pids = set(client.run(os.getpid).values())
        assert len(pids) == 2 and os.getpid() not in pids

        def where():
            import importlib.util

            return importlib.util.find_spec("grader").origin

        # the workers import this checkout's grader (started in the checkout, as documented)
        assert client.submit(where, pure=False).result(timeout=60) == str(REPO / "grader" / "__init__.py")


def _small_class(root: Path, db_url: str | None, assignments=("rmsnorm",), students: int = 4) -> CourseTree:
    """A course copy with ``assignments`` only, generated into ``db_url`` (default SQLite), and
    the first ``students`` demo students submitted (due dates recorded as the demo does)."""
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    for sub in ("source", "release"):
        for a in assignments:
            shutil.copytree(REPO / sub / a, root / sub / a)
    tree = CourseTree(root, db_url=db_url)
    course = Course(tree)
    for a in assignments:
        course.generate_assignment(a)
    write_demo_submissions(root, tree.submitted(), students)
    apply_due_dates(root, course.set_due_date)
    return tree


def _expected(tree: CourseTree, assignments) -> dict:
    roster = {st.student_id: st for st in demo_class(list(assignments))}
    return {(a, s): expected_points(roster[s], a) for a, s in tree.pairs(list(assignments))}


@pytest.mark.slow
def test_cluster_into_postgres_gives_the_grades_of_nbgrader_processes(tmp_path, postgres, dask_cluster, bubblewrap):
    from grader.parallel import autograde as autograde_processes

    asg = ("rmsnorm", "layernorm")
    plain = _small_class(tmp_path / "plain", None, asg)  # today's way: nbgrader processes, SQLite
    out = autograde_processes(plain, list(asg), jobs=2, log=lambda *_: None)
    assert not out.failed
    want = _expected(plain, asg)
    assert len(want) == 8 and read_gradebook(plain, list(asg))[0] == want

    url = postgres.create_database("gb_cluster")
    tree = _small_class(tmp_path / "pg", url, asg)
    lines = []
    got = cluster.autograde(tree, list(asg), scheduler=dask_cluster.address, log=lines.append)
    assert not got.failed and sorted(got.graded) == sorted(want)
    assert read_gradebook(tree, list(asg))[0] == want  # read back from PostgreSQL
    assert not (tree.root / "gradebook.db").exists()  # nothing went to a SQLite file
    for a, s in want:  # the autograded notebooks came back from the workers
        assert tree.has_notebook("autograded", s, a)
    # the submission timestamps (timestamp.txt, read on the worker) reached the gradebook
    from nbgrader.api import Gradebook

    with Gradebook(url, COURSE_ID) as gb:
        assert str(gb.find_submission("rmsnorm", "ada").timestamp).startswith("2026-11-")


@pytest.mark.slow
def test_a_worker_killed_mid_run_changes_no_grade(tmp_path, dask_cluster, bubblewrap):
    from distributed import Client

    tree = _small_class(tmp_path / "c", None, ("rmsnorm",), students=4)
    want = _expected(tree, ("rmsnorm",))
    killed = []

    def kill_a_busy_worker(done, total):
        if killed or done < 1:
            return
        with Client(dask_cluster.address, timeout=10) as c:
            busy = {addr: keys for addr, keys in c.processing().items() if keys}
            names = {addr: w["name"] for addr, w in c.scheduler_info(n_workers=-1)["workers"].items()}
        if busy:  # a worker in the middle of grading someone
            addr = sorted(busy)[0]
            killed.append((names[addr], busy[addr]))
            dask_cluster.kill_worker(int(str(names[addr]).lstrip("w")))

    got = cluster.autograde(tree, ["rmsnorm"], scheduler=dask_cluster.address, progress=kill_a_busy_worker,
                            log=lambda *_: None)
    assert killed and killed[0][1], "no worker was killed while it was grading"
    assert dask_cluster.n_workers() == 1
    assert not got.failed and sorted(got.graded) == sorted(want)
    assert read_gradebook(tree, ["rmsnorm"])[0] == want


def _crash_for_chen(assignment, submission, options):
    """Grades like :func:`grader.cluster.grade_submission`, except that chen's task kills its worker."""
    if submission["student"] == "chen":
        os._exit(1)
    return cluster.grade_submission(assignment, submission, options)


@pytest.mark.slow
def test_a_task_that_crashes_its_worker_twice_is_reported_not_retried_forever(tmp_path, dask_cluster, bubblewrap):
    tree = _small_class(tmp_path / "c", None, ("rmsnorm",), students=3)
    want = _expected(tree, ("rmsnorm",))
    lines = []
    t0 = time.perf_counter()
    got = cluster.autograde(tree, ["rmsnorm"], scheduler=dask_cluster.address, task=_crash_for_chen,
                            log=lines.append)
    assert time.perf_counter() - t0 < 240
    assert set(got.failed) == {("rmsnorm", "chen")}, [lines, got.failed]
    assert "could not be graded" in got.failed[("rmsnorm", "chen")]
    assert "2 Dask workers" in got.failed[("rmsnorm", "chen")]
    assert any("chen" in ln and "could not be graded" in ln for ln in lines)
    scores = read_gradebook(tree, ["rmsnorm"])[0]
    assert {k: v for k, v in scores.items() if k[1] != "chen"} == {k: v for k, v in want.items() if k[1] != "chen"}


def test_a_wrong_scheduler_address_fails_in_seconds_with_one_line(tmp_path):
    from services import free_port

    address = f"tcp://127.0.0.1:{free_port()}"
    t0 = time.perf_counter()
    with pytest.raises(cluster.ClusterError) as err:
        with cluster.connect(address):
            pass
    assert time.perf_counter() - t0 < cluster.CONNECT_TIMEOUT_S + 5
    msg = str(err.value)
    assert "\n" not in msg and f"cannot reach the Dask scheduler at {address}" in msg
