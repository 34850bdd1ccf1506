"""Command line for ``make grade``, ``make clean`` and restoring a backup:

    python -m grader [--submissions PATH] [--jobs N] ...   # grade (no PATH: the demo class)
    python -m grader restore [--backup FILE]               # put a gradebook backup back
    python -m grader restore --state [ARCHIVE] [--yes]     # put a whole state backup back
    python -m grader clean [--yes]                         # remove grading state, after a backup
    python -m grader release [--keep] [ASSIGNMENT ...]     # release/ from source/ (make release)

Each is a thin layer over a keyword-only function (:func:`grader.pipeline.grade_class`,
:func:`grader.ledger.state.restore_gradebook`, :func:`grader.ledger.reset.restore_state`,
:func:`grader.ledger.reset.start_over`). Each command imports only what it runs: ``--help``, ``clean``
and ``restore`` load neither the grading pipeline (nbgrader's apps, torch, the report's
plotting) nor the notebook converters.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re
import signal
import sys
from pathlib import Path

from .ledger.course import REPO_ROOT
from .ledger.store import RUN_LOG
from .options import add_arguments, from_args

#: A file that a finished grading run's :class:`~grader.batch.GradeRun` is pickled to, when set: the
#: tests run ``make grade`` as README.md writes it and read the run (tests/graded_class.py).
ENV_RUN_PICKLE = "NORMREF_RUN_PICKLE"


def _grade_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m grader",
        description="Grade a class with nbgrader in one command: generate (release/ if stale), "
        "collect, autograde in parallel, feedback, grades.csv, class report. With no "
        "--submissions, grades the embedded demo class in a course folder of its own "
        "(build/demo-course/). Real submissions are graded in batches: each run adds its students "
        "to the gradebook (a student's new submission replaces the earlier one) and autogrades "
        "only them; --fresh starts over. Other commands: `python -m grader restore` (a gradebook "
        "backup), `python -m grader clean` (remove grading state, after a backup).",
    )
    add_arguments(p)  # one flag per GradeOptions field (grader/options.py)
    return p


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (read from /proc), children first."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(0), []):
            out.append(c)
            todo.append(c)
    return out


def _stop_on_signals() -> None:
    """Ctrl-C, SIGTERM and SIGHUP end the run at once: every process the run started (autograde
    workers, Dask workers, sandboxes, kernels) is killed, then KeyboardInterrupt lets every
    ``finally`` run (the run lock is released, the run is logged)."""
    def handler(signum, _frame):
        for pid in _descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


_DISK_ERRORS = (("No space left on device", "the disk is full", "free some space"),
                ("Read-only file system", "the file system is read-only", "grade in a writable copy"),
                ("Permission denied", "no permission to write", "fix the permissions (or run as the owner)"))


def _short(message: str) -> str:
    """An nbgrader failure that is really a full disk or a permission error, in one line."""
    for needle, what, todo in _DISK_ERRORS:
        if needle in message:
            seg = message[message.index(needle):][:1000]
            where = re.search(r"->\s*'(/[^']+)'", seg) or re.search(r"'(/[^']+)'", seg)
            return f"{what}{f' (writing {where.group(1)})' if where else ''}: {todo} and run again"
    return message


def _os_error_line(e: OSError) -> str:
    """One line for a failed write: what, where, what to do."""
    if e.errno is None:  # shutil.Error: a list of the files that failed
        return _short(str(e))
    where = e.filename or "the course folder"
    if e.errno == errno.ENOSPC:
        return f"the disk is full (writing {where}): free some space and run again"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"no permission to write {where}: fix its permissions (or run as its owner) and run again"
    return f"{e.strerror or e} ({where})"


def grade(argv: list[str]) -> int:
    p = _grade_parser()
    args = p.parse_args(argv)  # --help and a usage error end here, before the pipeline is loaded
    from .stages.canary import CanaryFailed
    from .pipeline import GradingError, format_table, grade_class, summary_text
    from .ledger.state import CourseStateError

    try:
        options = from_args(args, progress=True, command=" ".join(["python -m grader", *argv]))
    except ValueError as e:
        p.error(str(e))
    if options.submissions is None:
        from .demo import demo_course

        root = demo_course(options.course_root)
        print(f"demo class: graded in its own course folder {root} "
              f"(nothing in {options.course_root.resolve()} is read or written)")
        options = options.replace(course_root=root)
    _stop_on_signals()
    try:
        run = grade_class(options)
    except (GradingError, CanaryFailed, FileNotFoundError, ValueError, CourseStateError) as e:
        print(f"error: {_short(str(e))}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {_os_error_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        again = ("grade the demo class again (it starts over)" if options.submissions is None
                 else "finish the batch (what was graded is kept)")
        print(f"stopped ({str(e) or 'SIGINT'}) before the run finished, and its workers with it; run the same "
              f"command again to {again}", file=sys.stderr)
        return 130
    if os.environ.get(ENV_RUN_PICKLE):  # the tests' copy of the run (tests/graded_class.py)
        import pickle

        Path(os.environ[ENV_RUN_PICKLE]).write_bytes(pickle.dumps(run))
    print()
    print(format_table(run))
    print()
    print(summary_text(run.report))
    print()
    print(f"grades:       {run.grades_csv}")
    print(f"per question: {run.questions_csv}")
    print(f"feedback:     {run.feedback_dir}/<student>/<assignment>/<notebook>.html")
    print(f"class report: {run.report_html}")
    if run.lms_import:
        print(f"LMS import:   {run.lms_import}")
    for path in run.feedback_zips:
        print(f"LMS feedback: {path} (bulk feedback upload)")
    print(f"run log:      {run.course_root / 'logs' / RUN_LOG} (backups: {run.course_root / 'logs' / 'backups'})")
    print(f"done in {run.seconds:.1f} s")
    return 0


def restore(argv: list[str]) -> int:
    from .ledger.course import CourseTree
    from .ledger.reset import restore_state, state_backups
    from .ledger.state import CourseStateError, restore_gradebook, run_lock

    p = argparse.ArgumentParser(
        prog="python -m grader restore",
        description="Put a backup from logs/backups/ back. By default the gradebook alone: a gradebook "
        "backup (gradebook-<run>-before.db / -after.db, written before every run that writes and as each "
        "successful run leaves it; the newest by default) becomes gradebook.db, the one it replaces kept "
        "beside the backups; an older one names the runs it rolls back, whose submissions the next run "
        "grades again. With --state, a whole course state (state-<run>.tar.gz, written "
        "before `clean` and --fresh): the gradebook with its hand grades, submitted/, autograded/, "
        "feedback/, the CSVs, roster.csv and the LMS's late marks and download names; grading state "
        "here now is replaced only with --yes (or a yes at the terminal), after a backup of it.")
    p.add_argument("--backup", type=Path, default=None, help="the gradebook backup file (default: the newest)")
    p.add_argument("--state", type=Path, nargs="?", const="newest", default=None, metavar="ARCHIVE",
                   help="restore a whole state backup, state-<run>.tar.gz (no ARCHIVE: the newest)")
    p.add_argument("--yes", action="store_true",
                   help="with --state: replace the grading state here (after backing it up)")
    p.add_argument("--course-root", type=Path, default=REPO_ROOT)
    args = p.parse_args(argv)
    if args.state is not None and args.backup is not None:
        p.error("give --backup (a gradebook) or --state (a whole state), not both")
    tree = CourseTree(args.course_root)
    try:
        with run_lock(tree, " ".join(["python -m grader restore", *argv])):
            if args.state is None:
                restore_gradebook(tree, args.backup)
            else:
                archive = args.state
                if str(archive) == "newest":
                    found = state_backups(tree)
                    if not found:
                        raise CourseStateError(f"no state backup (state-*.tar.gz) under {tree.logs / 'backups'}")
                    archive = found[-1]
                if not Path(archive).is_file():
                    raise CourseStateError(f"no state backup at {archive}")
                restore_state(tree, Path(archive), yes=args.yes)
    except CourseStateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def clean(argv: list[str]) -> int:
    from .ledger.course import CourseTree
    from .ledger.reset import start_over
    from .ledger.state import CourseStateError, run_id, run_lock

    p = argparse.ArgumentParser(prog="python -m grader clean",
                                description="Remove all grading state (submitted/, autograded/, feedback/, "
                                "gradebook.db, reports/, ...), keeping logs/backups/ and logs/runs.jsonl. With "
                                "real students graded here, a yes is needed (--yes, or typed at the terminal), and "
                                "then the gradebook and the rest are backed up before anything is removed.")
    p.add_argument("--yes", action="store_true")
    p.add_argument("--course-root", type=Path, default=REPO_ROOT)
    args = p.parse_args(argv)
    tree = CourseTree(args.course_root)
    try:
        with run_lock(tree, " ".join(["python -m grader clean", *argv])):
            start_over(tree, yes=args.yes, tag=run_id())
    except CourseStateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"clean: the grading state of {tree.root} is removed (backups and the run log are kept in {tree.logs})")
    return 0


def release(argv: list[str]) -> int:
    """``make release``: regenerate ``release/`` from ``source/`` with nbgrader's
    generate_assignment, refusing every assignment whose ``release/`` holds work written in it
    (:mod:`grader.ledger.release`) unless ``--keep``."""
    from .ledger.apps import AppError, Course
    from .ledger.release import ReleaseHoldsWork, refusal, written_work
    from .ledger.state import run_id
    from .ledger.store import release_kept

    p = argparse.ArgumentParser(
        prog="python -m grader release",
        description="Regenerate release/<assignment>/ from source/<assignment>/ (nbgrader generate_assignment). "
        "An assignment whose release/ holds work written in it (answer cells that are not nbgrader's stubs, "
        "cells or files added) is refused, nothing regenerated, unless --keep, which moves that folder "
        "to logs/release-kept/<run>/ first.")
    p.add_argument("assignments", nargs="*", help="default: every folder of source/")
    p.add_argument("--keep", action="store_true",
                   help="move a release/<assignment>/ that holds work to logs/release-kept/<run>/, then regenerate")
    p.add_argument("--course-root", type=Path, default=REPO_ROOT)
    args = p.parse_args(argv)
    course = Course(args.course_root)
    names = args.assignments or sorted(d.name for d in course.tree.source().iterdir() if d.is_dir())
    kept_root = release_kept(course.tree, run_id())
    found = {a: written_work(course.tree.release(a), course.tree.source(a)) for a in names}
    if any(found.values()) and not args.keep:
        kept_at = kept_root.relative_to(course.root)
        for a in (a for a in names if found[a]):
            print("error: " + refusal(f"release/{a}", found[a],
                                      f"Move release/{a} somewhere outside release/, then run `make release` again; "
                                      f"or run `make release KEEP=1`, which moves it to {kept_at}/{a}/ and "
                                      "regenerates."), file=sys.stderr)
        return 1
    for a in names:
        print(f"generate_assignment {a}")
        try:
            kept = course.generate_assignment(a, keep=kept_root if args.keep else None)
        except (AppError, ReleaseHoldsWork) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        if kept:
            print(f"  release/{a} held work written in it ({'; '.join(kept.work)}): moved to "
                  f"{kept.path.relative_to(course.root)}/ before it was regenerated")
    return 0


class _QuietWhenClosed:
    """``sys.stdout`` that goes quiet instead of failing when its reader has gone
    (``make grade | head``): the run goes on and finishes; what it would have printed is in
    ``grades.csv``, the report and ``logs/runs.jsonl``. Standard error is untouched."""

    def __init__(self, stream):
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._quiet()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._quiet()

    def _quiet(self) -> None:
        self._gone = True
        # what is still buffered would fail again at exit: the descriptor now writes nowhere
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    stdout = sys.stdout
    # stdout closed before the start (`>&-`, some cron setups): Python leaves sys.stdout None
    sys.stdout = _QuietWhenClosed(stdout if stdout is not None else open(os.devnull, "w"))
    try:
        commands = {"restore": restore, "clean": clean, "release": release}
        if argv and argv[0] in commands:
            return commands[argv[0]](argv[1:])
        return grade(argv)
    finally:
        sys.stdout = stdout


if __name__ == "__main__":
    sys.exit(main())
