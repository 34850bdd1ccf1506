"""Command line for ``make grade``: ``python -m grader [--submissions PATH] [--jobs N]``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .pipeline import REPO_ROOT, GradingError, format_table, grade_class, parse_duedates, summary_text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m grader",
        description="Grade a class with nbgrader in one command: generate (release/ if stale), "
        "collect, autograde in parallel, feedback, grades.csv, class report. With no "
        "--submissions, grades the embedded demo class. Real submissions are graded in "
        "batches: each run adds its students to the gradebook (a student's new submission "
        "replaces the earlier one) and autogrades only them; --fresh starts over.",
    )
    p.add_argument("--submissions", type=Path, default=None, metavar="PATH",
                   help="an nbgrader submitted/<student>/<assignment>/ tree, or a folder or .zip of "
                   "LMS-downloaded notebooks (Canvas, Moodle, Blackboard names); default: the demo class")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="concurrent autograde processes (default: all cores)")
    p.add_argument("--fresh", action="store_true", default=None,
                   help="remove earlier grading state (submitted/, autograded/, feedback/, gradebook.db, "
                   "reports/, ...) first; always done for the demo class, and before real "
                   "submissions when the state is the demo class's")
    p.add_argument("--duedate", action="append", default=[], metavar="[ASSIGNMENT=]DATE",
                   help="record a due date, e.g. '2026-11-21 09:00 UTC' (every assignment) or "
                   "'rmsnorm=2026-11-21 09:00 UTC'; repeatable. A submission whose timestamp "
                   "(submitted/.../timestamp.txt, or the LMS file name) is later is marked late")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run student code without the bubblewrap sandbox (not recommended)")
    p.add_argument("--cell-timeout", type=int, default=None, metavar="S",
                   help="seconds a cell may run before it is interrupted (default: Execute.timeout "
                   "in nbgrader_config.py, 60)")
    p.add_argument("--course-root", type=Path, default=REPO_ROOT,
                   help="the nbgrader course root (default: this repository)")
    args = p.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        p.error("--jobs must be at least 1")
    try:
        duedates = parse_duedates(args.duedate)
    except ValueError as e:
        p.error(f"--duedate: {e}")
    try:
        run = grade_class(course_root=args.course_root, submissions=args.submissions, jobs=args.jobs,
                          fresh=args.fresh, progress=True, cell_timeout=args.cell_timeout,
                          duedates=duedates,
                          use_sandbox=False if args.no_sandbox else None)
    except (GradingError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print()
    print(format_table(run))
    print()
    print(summary_text(run.report))
    print()
    print(f"grades:       {run.grades_csv}")
    print(f"per question: {run.questions_csv}")
    print(f"feedback:     {run.feedback_dir}/<student>/<assignment>/<notebook>.html")
    print(f"class report: {run.report_html}")
    print(f"done in {run.seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
