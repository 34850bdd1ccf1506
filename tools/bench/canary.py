"""What the canary costs (grader/stages/canary.py): the demo pipeline twice in one cgroup v1 ``cpuacct``
group of its own (this process, its Dask workers, zygotes and kernels), three times: first
(generate and the canary), then with the canary's pass cached, then with it run again; and the
canary's own CPU, read at its start and
end, apart from the engine's start (which the autograde stage reuses). Needs root (a cpuacct
cgroup). Prints figures, asserts nothing.

    .venv/bin/python -m tools.bench.canary [STUDENTS]
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from grader.stages import canary
from grader import pipeline
from grader.kernel import sandbox
from tools.bench.warm import CpuAccount
from grader.demo import demo_course


def main() -> None:
    students = int(sys.argv[1]) if len(sys.argv) > 1 else None
    cache_dir = Path(tempfile.mkdtemp(prefix="bench-canary-"))
    os.environ[sandbox.ENV_CANARY_CACHE] = str(cache_dir)
    course = demo_course(pipeline.REPO_ROOT)

    def forget_the_pass() -> None:
        (course / "logs" / canary.CACHE).unlink(missing_ok=True)
        shutil.rmtree(cache_dir / "canary", ignore_errors=True)

    forget_the_pass()
    inner, seen = canary.stage, []
    with CpuAccount() as cpu:
        def timed(b):
            c0, t0 = cpu.seconds(), time.perf_counter()
            if b.services.engine is not None:  # the engine's start (workers, zygotes), which autograde reuses
                b.services.engine.executor(use_sandbox=b.options.use_sandbox is not False)
            c1 = cpu.seconds()
            inner(b)
            seen.append((cpu.seconds() - c1, time.perf_counter() - t0, c1 - c0))

        canary.stage = timed
        rows = []
        # the first run also generates the course; the second finds the canary's pass cached; the
        # third runs it again (its pass forgotten), everything else as the second
        for label in ("first run", "canary cached", "canary run"):
            if label == "canary run":
                forget_the_pass()
            c0, t0 = cpu.seconds(), time.perf_counter()
            run = pipeline.grade_class(course_root=course, demo_students=students, log=lambda *_: None)
            rows.append((label, cpu.seconds() - c0, time.perf_counter() - t0, len(run.autograde.graded)))
    print(f"load {os.getloadavg()}")
    for (label, core_s, wall, n), (c_core, c_wall, start) in zip(rows, seen):
        print(f"{label}: pipeline {core_s:.1f} core-s, {wall:.1f} s wall, {n} notebooks; the engine's start "
              f"{start:.2f} core-s; the canary stage {c_core:.2f} core-s ({100 * c_core / core_s:.1f}%), "
              f"{c_wall:.1f} s wall with the start")
    cached, again = rows[1][1], rows[2][1]
    print(f"marginal (canary run - canary cached): {again - cached:.1f} core-s ({100 * (again - cached) / cached:.1f}% "
          "of the cached run; its zygotes' start is autograde's when the canary is cached)")


if __name__ == "__main__":
    main()
