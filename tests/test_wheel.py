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
    assert "normref/data/modern_runs.json" in code  # lesson 04's runs (lesson_runs reads them)
    assert {n.split("/")[0] for n in code} == {"normref"}, sorted({n.split("/")[0] for n in code})


def test_the_student_wheel_has_no_grader_answers_or_solutions(wheel_files):
    for name in wheel_files:
        parts = Path(name).parts
        assert "grader" not in parts and "grading" not in parts, name  # no grader module
        assert "answer_bank" not in name and "demo" not in parts, name  # no answer bank, no demo class
        assert parts[0] not in ("source", "release", "tests", "tools"), name  # no source/ (solutions)
        assert not name.endswith(".ipynb"), name


def test_the_student_wheel_registers_no_entry_point_it_does_not_ship(wheel, wheel_files):
    """The grader's kernel provisioner (normref-warm, grader/kernel/warm.py) is registered by the
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


#: How the analytic LayerNorm backward is written (grader/backward.py): the answer of the
#: backward challenge. None of it may be in the student's package.
_ANALYTIC = ("mean(g * xhat)", "(g * xhat).mean", "mean(g)", "g - g.mean", "xhat * mean", "- xhat *",
             "def layer_norm_backward", "def rms_norm_backward", "def bwd_model", "def evaluate_backward")


def test_the_student_wheel_has_no_analytic_backward(wheel, wheel_files):
    """The backward challenge's answer is the grader's: no file of the wheel writes it, and in
    a Python that has only the wheel, ``normref.layer_norm_backward?`` finds nothing, the
    self-check's source is a measurement through the forward, and a correct by-hand answer
    (written here) passes while a wrong one fails."""
    with zipfile.ZipFile(wheel) as zf:
        for name in wheel_files:
            if name.endswith(".py"):
                text = zf.read(name).decode()
                for pattern in _ANALYTIC:
                    assert pattern not in text, (name, pattern)
    probe = (
        "import inspect, sys\n"
        f"sys.path.insert(0, {str(wheel)!r})\n"
        "import numpy as np, normref, normref.backward, normref.checks.backward as cb\n"
        "assert normref.__file__.startswith(sys.path[0]), normref.__file__\n"
        "for name in ('layer_norm_backward', 'rms_norm_backward'):\n"
        "    assert not hasattr(normref, name), name\n"
        "src = inspect.getsource(normref.backward) + inspect.getsource(cb)\n"
        "assert 'complex step' in src and 'xhat * mean' not in src\n"
        "def mine(dy, x, w, eps=1e-5):\n"
        "    mu = x.mean(-1, keepdims=True); r = 1 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)\n"
        "    xh = (x - mu) * r; g = dy * w; lead = tuple(range(x.ndim - 1))\n"
        "    dx = r * (g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True))\n"
        "    return dx, (dy * xh).sum(lead), dy.sum(lead)\n"
        "def no_mean(dy, x, w, eps=1e-5):\n"
        "    dx, dw, db = mine(dy, x, w, eps)\n"
        "    return dx + (dy * w).mean(-1, keepdims=True) / np.sqrt(x.var(-1, keepdims=True) + eps), dw, db\n"
        "ok, bad = normref.check_layer_norm_backward(mine), normref.check_layer_norm_backward(no_mean)\n"
        "assert ok.score == 1.0, ok.report()\n"
        "assert bad.score == 0.0 and bad.faults == ['bwd_no_mean_term'], bad.report()\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=300,
                         cwd=wheel.parent)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
