"""docs/SCALE.md's command blocks, run as written (tests/docrun.py) by a normal unix user made
here, in copies of the course (tests/graded_class.py's ``instructor_course``): a real ``dask
scheduler`` and ``dask worker`` started from the course's ``.venv`` with the doc's lines (no
PYTHONPATH: the scheduler imports ``grader`` to unpickle the task graph), then each line of the
first block (an existing cluster, a PostgreSQL gradebook, the process pool) in a course folder
of its own, grading a small batch of ``practice`` to the answer bank's points with warm kernels;
nothing of the user's is left running. Apart from the session's graded class, so that it can
run on the other pytest-xdist worker.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import docrun
import pytest
from graded_class import instructor_course
from hubkit import stop
from test_docs_grade import BATCH, POINTS, _fresh_course, _grades, _inputs

pytestmark = pytest.mark.slow

SCALE, DASK, WORKERS = "docs/SCALE.md", "Dask for the work, PostgreSQL for the gradebook", "Workers elsewhere"
USER = "nrscale-" + os.environ.get("PYTEST_XDIST_WORKER", "main")


def test_the_scale_commands_as_written(bubblewrap, postgres, tmp_path):
    """docs/SCALE.md: a scheduler and workers started as written, then each line of its first
    block in a course folder of its own (its own gradebook): the batch's points every time."""
    with instructor_course(USER) as (user, course):
        _scale(user, course, postgres, tmp_path)


def _scale(user: str, course: Path, postgres, tmp_path: Path) -> None:
    home = course.parent
    (home / "scale").mkdir()
    subprocess.run(["chown", f"{user}:{user}", str(home / "scale")], check=True)
    values = _inputs(user, home / "scale")
    from services import free_port

    port = free_port()
    values.update(scheduler_address=f"127.0.0.1:{port}", scheduler_port=f"--port {port}",
                  database=postgres.create_database("scale_docs").split("://", 1)[1])
    batch = {st: POINTS[v] for st, v in BATCH.items()}
    procs = []
    try:
        workers = docrun.section_commands(SCALE, WORKERS)
        assert len(workers) == 2 and docrun.WHERE[(SCALE, WORKERS)].test == "tests/test_docs_scale.py"
        for i, cmd in enumerate(workers):
            procs.append(docrun.start(cmd, user, course, values, tmp_path / f"dask-{i}.log"))
            _wait_for_dask(values["scheduler_address"], tmp_path / f"dask-{i}.log", procs[-1], workers=2 * i)
        for i, cmd in enumerate(docrun.section_commands(SCALE, DASK)):
            here = _fresh_course(user, course, f"scale-{i}")
            out = docrun.run(cmd, user, here, values, timeout=1800)
            assert _grades(here) == batch, (out.stdout + out.stderr)[-3000:]
            assert "fresh kernel" not in out.stdout, out.stdout[-3000:]
    finally:
        for p in reversed(procs):
            stop(p)
    left = docrun.processes_of(user)
    assert not left, f"SCALE.md's commands left processes running: {left}"


def _wait_for_dask(address: str, log: Path, proc: subprocess.Popen, workers: int) -> None:
    """Until the scheduler at ``address`` answers with at least ``workers`` workers."""
    from distributed import Client

    deadline = time.monotonic() + 180
    while True:
        if proc.poll() is not None:
            pytest.fail(f"exited {proc.returncode}:\n{log.read_text()[-3000:]}", pytrace=False)
        try:
            with Client(f"tcp://{address}", timeout=5) as c:
                if len(c.scheduler_info()["workers"]) >= workers:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"no scheduler with {workers} workers at {address}:\n{log.read_text()[-3000:]}",
                        pytrace=False)
        time.sleep(1)
