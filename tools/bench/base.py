"""The baseline of ``make bench`` (:mod:`tools.bench`, :mod:`tools.bench.warm`): plain nbgrader,
one command after another, on a fresh copy of this repository's course.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from normref.handback_files import HANDBACK_ENV

from grader.ledger.course import CONFIG, GRADES_CSV, REPO_ROOT, nbgrader_env
from grader.demo import apply_due_dates, write_demo_submissions
from grader.pipeline import list_assignments
from grader.scoring.inputs import prepare_inputs


def course_copy(dst: Path) -> Path:
    """A fresh course in ``dst``: this repository's ``nbgrader_config.py``, ``source/`` and ``release/``."""
    dst.mkdir(parents=True)
    shutil.copy(REPO_ROOT / CONFIG, dst)
    shutil.copytree(REPO_ROOT / "source", dst / "source")
    shutil.copytree(REPO_ROOT / "release", dst / "release")
    return dst


def _nbg(root: Path, *args: str, env: dict | None = None) -> None:
    subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=ERROR"], cwd=root,
                   check=False, capture_output=True, env={**nbgrader_env(), **(env or {})})


def sequential_nbgrader(root: Path, limit: int | None = None) -> tuple[float, float]:
    """Plain nbgrader, one command after another. Returns (pipeline seconds, autograde seconds)."""
    t0 = time.perf_counter()
    assignments = list_assignments(root)
    for a in assignments:
        _nbg(root, "generate_assignment", a, "--force")
    write_demo_submissions(root, root / "submitted", limit)
    apply_due_dates(root, lambda a, due: _nbg(root, "db", "assignment", "add", a, f"--duedate={due}"))
    # the hidden tests' inputs (nbgrader autograde without them refuses: GradedByMakeGrade)
    _, inputs = prepare_inputs(root, log=lambda *_: None)
    t1 = time.perf_counter()
    _nbg(root, "autograde", "*", "--force", env={HANDBACK_ENV: str(inputs)})
    auto = time.perf_counter() - t1
    for a in assignments:
        _nbg(root, "generate_feedback", a, "--force")
    _nbg(root, "export", "--to", GRADES_CSV)
    return time.perf_counter() - t0, auto


__all__ = ["course_copy", "sequential_nbgrader"]
