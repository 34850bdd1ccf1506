import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# nbgrader runs `alembic` from PATH: make the venv's bin/ visible even when pytest is run directly.
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
# The canary's passes (grader/stages/canary.py) are shared by this session's course copies, by content hash,
# and never read from (or left in) the user's own cache; a test that counts canaries sets its own.
os.environ.setdefault("NORMREF_CANARY_CACHE", tempfile.mkdtemp(prefix="normref-canary-cache-"))


@pytest.fixture
def course_copy(tmp_path: Path) -> Path:
    """A throwaway nbgrader course root: the repo's config, source/ and release/."""
    root = tmp_path / "course"
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    shutil.copytree(REPO / "source", root / "source")
    shutil.copytree(REPO / "release", root / "release")
    return root


def ensure_debian_package(package: str, path: str) -> Path:
    """Install a Debian package with apt-get when ``path`` is missing (CI starts without it).

    Fails the test with what to do by hand when this machine cannot (no apt-get, not root).
    """
    import subprocess

    if Path(path).exists():
        return Path(path)
    why = f"this test needs {path} from Debian's `{package}` and installs it with apt-get"
    if shutil.which("apt-get") is None:
        pytest.fail(f"{why}, but there is no apt-get here: install {package} by hand", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail(f"{why}, which needs root: run `sudo apt-get install -y {package}` once", pytrace=False)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
        try:
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{why}: `{' '.join(cmd)}` took over 15 minutes", pytrace=False)
        if out.returncode != 0:
            pytest.fail(f"{why}: `{' '.join(cmd)}` failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}", pytrace=False)
    if not Path(path).exists():
        pytest.fail(f"{why}: apt-get succeeded but {path} is still missing", pytrace=False)
    return Path(path)


@pytest.fixture(scope="session")
def bubblewrap() -> Path:
    """Debian's bubblewrap (the grading sandbox), installed when missing."""
    return ensure_debian_package("bubblewrap", "/usr/bin/bwrap")


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium (Playwright's own browser download fails here), installed when missing."""
    return ensure_debian_package("chromium", "/usr/bin/chromium")


@pytest.fixture(scope="session")
def postgres():
    """A private PostgreSQL 15 server for the session (tests/services.py); Debian's `postgresql`
    is installed when missing. Use ``postgres.create_database(name)`` for a database of your own."""
    from services import PG_BIN, postgres_server

    ensure_debian_package("postgresql", str(PG_BIN / "initdb"))
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def instructor_course(bubblewrap):
    """A normal unix user made for the session and their copy of this course
    (tests/graded_class.py): ``(user, course folder)``; removed after the session."""
    from graded_class import instructor_course as make

    with make() as made:
        yield made


@pytest.fixture(scope="session")
def graded_class(instructor_course, bubblewrap):
    """The embedded demo class (every answer-bank variant), graded once for the session by
    README.md's ``make grade`` as written, run by a normal user with the sandbox and warm kernels
    (tests/graded_class.py): test_grading's and test_assignments' assertions read it."""
    from grader.kernel.sandbox import available
    from graded_class import grade_demo_class

    if not available():
        pytest.fail(f"{bubblewrap} is installed but cannot create namespaces on this machine")
    return grade_demo_class(*instructor_course)


@pytest.fixture(scope="session")
def recording(tmp_path_factory, bubblewrap):
    """Real kernel outputs for the notebooks the course-state tests hand in (tests/replay.py:
    ``RECORDED`` and the instructor's solutions), from one real sandboxed ``grade_class`` run of
    this session, with the seed every replayed run then uses."""
    from grader.kernel.sandbox import available
    from replay import RECORDED, record

    if not available():
        pytest.fail(f"{bubblewrap} is installed but cannot create namespaces on this machine")
    base = tmp_path_factory.mktemp("recording")
    root = base / "course"
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    for sub in ("source", "release"):
        for a in sorted({a for a, _ in RECORDED.values()}):
            shutil.copytree(REPO / sub / a, root / sub / a)
    return record(root, base)


@pytest.fixture
def replayed(recording, monkeypatch, tmp_path_factory):
    """Grading runs in this test replay real kernel outputs instead of starting kernels
    (tests/replay.py): for tests of what a run records, not of what a kernel computes."""
    from replay import stand_in

    cache = tmp_path_factory.getbasetemp() / "replayed-canary-cache"
    with stand_in(recording, monkeypatch, cache) as rec:
        yield rec


@pytest.fixture
def dask_cluster():
    """A real ``dask scheduler`` and two ``dask worker ADDRESS`` processes (tests/services.py),
    ended after the test (which may kill a worker)."""
    from services import dask_cluster as start

    with start(n_workers=2) as cluster:
        yield cluster


#: The test files that read the session's costly fixtures (graded_class, recording): under
#: pytest-xdist (``-n 2 --dist loadfile``, pyproject's addopts) they run on one worker, as one unit,
#: so the demo class and the recording are each graded once in a session.
SHARED_SESSION_FILES = ("test_assignments.py", "test_cluster.py", "test_course_state.py", "test_grading.py",
                        "test_docs_grade.py", "test_verdicts.py")
COSTLY_SESSION_FIXTURES = ("graded_class", "recording", "instructor_course")


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (each file's tests on one worker, so its module-scoped fixtures, e.g.
    one Dask cluster or one JupyterLab, are made once), with :data:`SHARED_SESSION_FILES` as one
    file. (pytest-xdist's ``loadgroup`` cannot group tests under pytest 9.2: it renames node ids
    through an attribute pytest no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "shared-session-fixtures" if Path(path).name in SHARED_SESSION_FILES else path

    return Scheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist: a test that reads a costly session fixture from a file not in
    :data:`SHARED_SESSION_FILES` would make that fixture again on another worker; say so."""
    if not hasattr(config, "workerinput"):
        return
    stray = sorted({item.nodeid.split("::", 1)[0] for item in items
                    if set(COSTLY_SESSION_FIXTURES) & set(getattr(item, "fixturenames", ()))
                    and Path(item.nodeid.split("::", 1)[0]).name not in SHARED_SESSION_FILES})
    if stray:
        raise pytest.UsageError(f"{', '.join(stray)} read(s) {' or '.join(COSTLY_SESSION_FIXTURES)}: add the file to "
                                "SHARED_SESSION_FILES in tests/conftest.py (else each xdist worker grades it again)")
