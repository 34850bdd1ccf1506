"""What the canary costs (grader/canary.py): the demo pipeline twice in one cgroup v1 ``cpuacct``
group of its own (this process, its Dask workers, zygotes and kernels), first with the canary
run (a new cache), then with its pass cached; and the canary's own CPU, read at its start and
end. Needs root (a cpuacct cgroup). Prints figures, asserts nothing.

    .venv/bin/python tools/bench_canary.py [STUDENTS]
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader import canary, pipeline, sandbox  # noqa: E402
from grader.bench_warm import CpuAccount  # noqa: E402
from grader.demo import demo_course  # noqa: E402


def main() -> None:
    students = int(sys.argv[1]) if len(sys.argv) > 1 else None
    os.environ[sandbox.ENV_CANARY_CACHE] = tempfile.mkdtemp(prefix="bench-canary-")
    course = demo_course(pipeline.REPO_ROOT)
    (course / "logs" / canary.CACHE).unlink(missing_ok=True)
    inner, seen = canary.stage, []
    with CpuAccount() as cpu:
        def timed(b):
            c0, t0 = cpu.seconds(), time.perf_counter()
            inner(b)
            seen.append((cpu.seconds() - c0, time.perf_counter() - t0))

        canary.stage = timed
        rows = []
        for label in ("canary run", "canary cached"):
            c0, t0 = cpu.seconds(), time.perf_counter()
            run = pipeline.grade_class(course_root=course, demo_students=students, log=lambda *_: None)
            rows.append((label, cpu.seconds() - c0, time.perf_counter() - t0, len(run.autograde.graded)))
    print(f"load {os.getloadavg()}")
    for (label, core_s, wall, n), (c_core, c_wall) in zip(rows, seen):
        print(f"{label}: pipeline {core_s:.1f} core-s, {wall:.1f} s wall, {n} notebooks; canary stage "
              f"{c_core:.2f} core-s ({100 * c_core / core_s:.1f}%), {c_wall:.1f} s wall")
    print(f"marginal: {rows[0][1] - rows[1][1]:.1f} core-s "
          f"({100 * (rows[0][1] - rows[1][1]) / rows[1][1]:.1f}% of the cached run)")


if __name__ == "__main__":
    main()
