"""``make bench``: ``make grade`` against plain sequential nbgrader on the demo class.

Prints, in seconds: the whole pipeline (generate, autograde, feedback, export) run as plain
nbgrader commands one after another, the same through ``grade_class`` with ``--jobs`` all
cores, the autograde stage alone both ways, and the per-submission floor (a fresh kernel that
imports torch and runs one correct submission's tests); first, per assignment, the core-seconds
of one graded notebook's start-up, cells and shutdown before and after issue 22
(:mod:`tools.bench.kernels`; ``--kernels-only`` for those alone). Not a test: figures to read
and record.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

from nbclient import NotebookClient

from . import warm as bench_warm
from .base import course_copy as _course_copy
from .base import sequential_nbgrader
from grader.demo.answer_bank import ANSWERS
from grader.demo import demo_class, fill_answers, write_demo_submissions
from grader.autograde.engine import default_jobs
from grader.pipeline import REPO_ROOT, grade_class


def floor_per_submission(root: Path) -> float:
    """Seconds for a fresh kernel to import torch and run one correct submission top to bottom,
    averaged over the assignments (one notebook each)."""
    times = []
    for a in sorted(ANSWERS):
        for nb_path in sorted((root / "release" / a).glob("*.ipynb")):
            nb = fill_answers(nb_path, ANSWERS[a]["correct"])
            t0 = time.perf_counter()
            NotebookClient(nb, timeout=120, kernel_name="python3",
                           extra_arguments=["--IPKernelApp.log_level=ERROR"],
                           resources={"metadata": {"path": str(nb_path.parent)}}).execute()
            times.append(time.perf_counter() - t0)
    return sum(times) / max(1, len(times))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__)
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: all cores)")
    p.add_argument("--students", type=int, default=None,
                   help="grade only the first N demo students (default: all 30)")
    p.add_argument("--db", default=None, metavar="URL",
                   help="a PostgreSQL database for the PostgreSQL rows (its nbgrader tables are "
                   "dropped); default: a private server started from Debian's postgresql, if installed")
    p.add_argument("--kernels-only", action="store_true",
                   help="only the kernel rows: one correct notebook per assignment, its start-up, cells and "
                   "shutdown in core-seconds, before and after issue 22 (tools/bench/kernels.py)")
    p.add_argument("--kernel-reps", type=int, default=3, metavar="N",
                   help="runs of each kernel row (the median is printed; default 3)")
    p.add_argument("--engines-only", action="store_true",
                   help="only the two engines side by side (this machine's process pool and local Dask, "
                   "--jobs workers each, SQLite, alternating, --reps runs each): core-seconds per notebook "
                   "(cpuacct, as root; else the stage's wall time x workers)")
    p.add_argument("--reps", type=int, default=3, metavar="N", help="runs of each engine with --engines-only")
    args = p.parse_args(argv)
    from .kernels import kernel_rows

    if args.kernels_only:
        kernel_rows(args.kernel_reps)
        return 0
    jobs = args.jobs or default_jobs()
    roster = demo_class()[: args.students]
    n = sum(len(st.variants) for st in roster)
    if args.engines_only:
        with tempfile.TemporaryDirectory() as td:
            print(f"demo class: {len(roster)} students, {n} submissions; {jobs} workers each; load "
                  + " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
            if not bench_warm.engine_cpu_rows(Path(td), args.students, jobs, args.reps):
                engine_rows(Path(td), args.students, n, jobs, None, None, None,
                            configs=[("processes", jobs, None), ("dask", jobs, None)])
        return 0
    with tempfile.TemporaryDirectory() as td:
        print(f"demo class: {len(roster)} students, {n} submissions over {len(ANSWERS)} "
              f"assignments; {jobs} jobs", flush=True)
        kernel_rows(args.kernel_reps)
        floor = floor_per_submission(_course_copy(Path(td) / "floor"))
        print(f"floor per submission (fresh kernel + torch + tests): {floor:.2f} s", flush=True)
        seq_total, seq_auto = sequential_nbgrader(_course_copy(Path(td) / "seq"), args.students)
        print(f"sequential nbgrader: pipeline {seq_total:.1f} s, autograde {seq_auto:.1f} s "
              f"({seq_auto / n:.2f} s per submission)", flush=True)
        par_root = _course_copy(Path(td) / "par")
        write_demo_submissions(par_root, Path(td) / "par-submitted", args.students)
        run = grade_class(course_root=par_root, submissions=Path(td) / "par-submitted", jobs=jobs,
                          log=lambda *_: None)
        par_auto = run.autograde.seconds
        per_sub = par_auto * jobs / n
        print(f"make grade (--jobs {jobs}): pipeline {run.seconds:.1f} s, autograde {par_auto:.1f} s "
              f"({per_sub:.2f} core-seconds per submission = {per_sub / floor:.2f}x the floor)")
        print("  stages: " + ", ".join(f"{k} {v:.1f} s" for k, v in run.stage_seconds.items()))
        print(f"autograde stage speed-up: {seq_auto / par_auto:.2f}x")
        print(f"speed-up over sequential nbgrader: {seq_total / run.seconds:.2f}x")
        engine_rows(Path(td), args.students, n, jobs, seq_total, seq_auto, args.db)
        bench_warm.class_rows(Path(td), args.students, jobs, (seq_total, seq_auto))  # issue 25: warm vs fresh
    diagnosis_bench()
    return 0


def engine_rows(td: Path, students: int | None, n: int, jobs: int, seq_total: float | None,
                seq_auto: float | None, db_url: str | None, configs: list | None = None) -> None:
    """Issue 15's rows: the whole pipeline with autograde on this machine's pool of ``jobs``
    processes (``jobs`` nbgrader processes before issue 24), as Dask tasks on an embedded local
    cluster of 1 and ``jobs`` workers, and the same with the gradebook on PostgreSQL (``db_url``,
    or a private server when Debian's postgresql is installed). Per row: submissions per minute
    and core-seconds per submission of the autograde stage, and the speed-up over sequential
    nbgrader (autograde stage; whole pipeline; "-" when sequential nbgrader was not run).
    ``configs``: ``[(engine, workers, None or "pg")]`` instead."""
    with contextlib.ExitStack() as stack:
        pg = db_url
        if configs is None:
            configs = [("processes", jobs, None), ("dask", 1, None), ("dask", jobs, None)]
            pg = db_url or _private_postgres(stack)
            if pg:
                configs += [("dask", 1, "pg"), ("dask", jobs, "pg"), ("processes", jobs, "pg")]
            else:
                print("(PostgreSQL rows skipped: no --db and no Debian postgresql here)")
        print("autograde engine          workers  gradebook   subs/min  core-s/sub  speed-up autograde  pipeline",
              flush=True)
        for i, (engine, workers, db) in enumerate(configs):
            root = _course_copy(td / f"engine-{i}")
            write_demo_submissions(root, td / f"engine-{i}-submitted", students)
            url = None if db is None else _fresh_database(pg, i, own=db_url is None)
            run = grade_class(course_root=root, submissions=td / f"engine-{i}-submitted", jobs=workers,
                              engine=engine, db_url=url, fresh=True, yes=True, log=lambda *_: None)
            auto = run.autograde.seconds
            name = "process pool" if engine == "processes" else "Dask (local cluster)"
            ratios = (f"{seq_auto / auto:>19.2f}x{seq_total / run.seconds:>9.2f}x" if seq_auto
                      else f"{'-':>20}{'-':>10}")
            print(f"{name:<26}{workers:>7}  {'PostgreSQL' if db else 'SQLite':<10}{60 * n / auto:>10.1f}"
                  f"{auto * workers / n:>12.2f}{ratios}  (pipeline {run.seconds:.1f} s)", flush=True)


def _private_postgres(stack: contextlib.ExitStack) -> str | None:
    """A private PostgreSQL server (tests/services.py) for the bench, if Debian's is installed."""
    services = REPO_ROOT / "tests" / "services.py"
    if not services.is_file() or not Path("/usr/lib/postgresql/15/bin/initdb").exists():
        return None
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_services", services)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    server = stack.enter_context(mod.postgres_server())
    return server.url("postgres")


def _fresh_database(url: str, i: int, own: bool) -> str:
    """A database of its own for row ``i`` on our private server; the given one, reset, otherwise."""
    if not own:
        from grader.ledger.database import reset

        reset(url)
        return url
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(url)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True) as c:
        c.execute(f"CREATE DATABASE bench_{i}")
    return u.set(database=f"bench_{i}").render_as_string(hide_password=False)


def diagnosis_bench() -> None:
    """Issue 17's figures: every variant of each checker's grammar played through the checker
    (``coverage`` of ``tests/diagnosis_coverage.py``, test tooling): how many, the share named,
    the slowest call."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    from diagnosis_coverage import CHECKERS, coverage

    from grader.scoring.questions import assignment_module

    assignment_module("layernorm_backward", "reference")  # the backward's grammar is the grader's

    print("diagnosis by search (every grammar variant run through its checker):", flush=True)
    slowest = (0.0, "")
    for name in CHECKERS:
        cov = coverage(name)
        print("  " + cov.line(), flush=True)
        slowest = max(slowest, (cov.slowest_s, f"{name}, {cov.slowest}"))
    print(f"slowest checker call: {slowest[0]:.2f} s ({slowest[1]})")


if __name__ == "__main__":
    sys.exit(main())
