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
def wheel_files(tmp_path_factory) -> list[str]:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "repo"
    shutil.copytree(REPO, src, ignore=SKIP)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation",
                          "--no-index", "-w", str(tmp / "dist"), "-q"], cwd=src, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    (whl,) = (tmp / "dist").glob("normref-*.whl")
    with zipfile.ZipFile(whl) as zf:
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
