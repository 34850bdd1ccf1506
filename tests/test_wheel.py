"""What `pip install .` gives a student: the normref package, and nothing of the grader.

Builds the wheel from pyproject.toml (offline: the venv's setuptools, no build isolation) in a
copy of the repository and reads its file list.
"""
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", ".pytest_cache",
                              "submitted", "autograded", "feedback", "logs", "reports", "gradebook.db")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "repo"
    shutil.copytree(REPO, src, ignore=SKIP)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation",
                          "--no-index", "-w", str(tmp / "dist"), "-q"], cwd=src, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    (whl,) = (tmp / "dist").glob("normref-*.whl")
    return whl


@pytest.fixture(scope="module")
def wheel_files(wheel) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_the_student_wheel_holds_normref_only(wheel_files):
    code = [n for n in wheel_files if not n.startswith("normref-")]  # the .dist-info is metadata
    assert "normref/__init__.py" in code and "normref/functional.py" in code
    assert {n.split("/")[0] for n in code} == {"normref"}, sorted({n.split("/")[0] for n in code})


def test_the_student_wheel_has_no_grader_answers_or_solutions(wheel_files):
    for name in wheel_files:
        parts = Path(name).parts
        assert "grader" not in parts and "grading" not in parts, name  # no grader module
        assert "answer_bank" not in name and "demo" not in parts, name  # no answer bank, no demo class
        assert parts[0] not in ("source", "release", "tests", "tools"), name  # no source/ (solutions)
        assert not name.endswith(".ipynb"), name


def test_the_student_wheel_registers_no_entry_point_it_does_not_ship(wheel, wheel_files):
    """The grader's kernel provisioner (normref-warm, grader/warm.py) is registered by the
    instructor's install alone (tools/grading-kernels): a student's wheel names no module it
    lacks, and no kernel provisioner."""
    import configparser

    eps = [n for n in wheel_files if n.endswith(".dist-info/entry_points.txt")]
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read(eps[0]).decode() if eps else ""
    groups = configparser.ConfigParser()
    groups.read_string(text)
    assert "jupyter_client.kernel_provisioners" not in groups.sections()
    for group in groups.sections():
        for name, value in groups.items(group):
            module = value.split(":")[0].strip().replace(".", "/")
            assert f"{module}.py" in wheel_files or f"{module}/__init__.py" in wheel_files, (group, name, value)
