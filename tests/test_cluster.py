"""Grading at scale: autograde as Dask tasks on a real cluster, the gradebook on a real PostgreSQL.

The services are real and started by the tests themselves (tests/services.py): a PostgreSQL 15
server and a ``dask scheduler`` with two ``dask worker ADDRESS`` processes.
"""
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_nbgrader_gradebook_on_the_test_postgres_server(postgres):
    from nbgrader.api import Gradebook

    url = postgres.create_database("gb_smoke")
    with Gradebook(url, "lesson16-normalization") as gb:
        gb.update_or_create_assignment("rmsnorm", duedate="2026-11-21 09:00:00")
        gb.update_or_create_student("ada", first_name="Ada")
    with Gradebook(url, "lesson16-normalization") as gb:  # a second connection reads it back
        assert [a.name for a in gb.assignments] == ["rmsnorm"]
        assert gb.find_student("ada").first_name == "Ada"
        assert str(gb.find_assignment("rmsnorm").duedate) == "2026-11-21 09:00:00"


def test_dask_cluster_runs_tasks_on_two_worker_processes(dask_cluster):
    import os

    from distributed import Client

    with Client(dask_cluster.address, timeout=10) as client:
        pids = set(client.run(os.getpid).values())
        assert len(pids) == 2 and os.getpid() not in pids
        # the workers import this project's grader (started in the checkout, as documented)
        def where():
            import importlib.util

            return importlib.util.find_spec("grader").origin

        assert client.submit(where, pure=False).result(timeout=60) == str(REPO / "grader" / "__init__.py")
