"""Command line for ``make grade``: ``python -m normref.grading [--submissions PATH]``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .pipeline import REPO_ROOT, GradingError, format_table, grade_class


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m normref.grading",
        description="Grade a class with nbgrader: generate, collect, autograde, feedback, grades.csv. "
        "With no --submissions, grades the embedded demo class.",
    )
    p.add_argument("--submissions", type=Path, default=None,
                   help="an nbgrader submitted/<student>/<assignment>/ tree (default: the demo class)")
    p.add_argument("--course-root", type=Path, default=REPO_ROOT,
                   help="the nbgrader course root (default: this repository)")
    args = p.parse_args(argv)
    try:
        run = grade_class(course_root=args.course_root, submissions=args.submissions)
    except (GradingError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print()
    print(format_table(run))
    print()
    print(f"grades:       {run.grades_csv}")
    print(f"per question: {run.questions_csv}")
    print(f"feedback:     {run.feedback_dir}/<student>/<assignment>/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
