"""What the grader's clean room (grader/kernel/cleanroom.py) costs per graded notebook: the core-seconds of
its whole process tree, per assignment, median of several runs.

Each run is ``grader.kernel.cleanroom.run_notebook`` on the assignment's source notebook (its solutions:
a correct submission, hidden tests included) with a run's drawn inputs, sandboxed as ``make grade``
runs it on a worker (a SandboxSession's cgroups and environment): the worker's own part (the
units, the calls of the grader's handed-in objects), the zygote's child and bubblewrap, the clean
room's process. CPU is read from a cgroup v1 ``cpuacct`` group this process moves itself into
first (everything it starts, the zygote included, is counted); without one, this process and its
reaped children only (the warm clean room is the zygote's child: then missed). One run per
assignment first, not counted, starts the worker's zygote (its start is shared by every notebook
of the worker, as in grading). Figures to read, never a test.

    .venv/bin/python tools/bench_cleanroom.py [RUNS] [--fresh]
"""
from __future__ import annotations

import contextlib
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def _cgroup() -> Path | None:
    if not os.access(CPUACCT, os.W_OK):
        return None
    group = CPUACCT / f"normref-bench-cleanroom-{os.getpid()}"
    group.mkdir()
    (group / "cgroup.procs").write_text(str(os.getpid()))
    return group


def _cpu(group: Path | None) -> float:
    if group is not None:
        return int((group / "cpuacct.usage").read_text()) / 1e9
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main(runs: int, fresh: bool) -> None:
    import nbformat

    from grader.kernel import cleanroom, sandbox, warm
    from grader.scoring.inputs import QUESTIONS, question_inputs

    group = _cgroup()
    for var in sandbox.SINGLE_THREAD_VARS:
        os.environ[var] = "1"
    os.environ[sandbox.WARM_SWITCH] = "0" if fresh else "1"
    inputs = {gid: question_inputs(gid, 2026) for gid in QUESTIONS}
    rows = []
    with tempfile.TemporaryDirectory() as td, sandbox.SandboxSession(Path(td) / "course") as sb:
        os.environ.update(sb.worker(0)[1])
        for a in ("rmsnorm", "layernorm", "layernorm_backward", "block", "modern"):
            source = nbformat.read(REPO / "source" / a / f"{a}.ipynb", as_version=4)
            cpu, wall, how = [], [], set()
            for i in range(runs + 1):
                nb = nbformat.reads(nbformat.writes(source), as_version=4)
                c0, w0 = _cpu(group), time.perf_counter()
                entry = cleanroom.run_notebook(nb, inputs, sandboxed=True)
                c1, w1 = _cpu(group), time.perf_counter()
                assert not entry["notes"] and all("missing" not in b for b in entry["bundles"].values()), entry
                if i:  # the first: the zygote's start
                    cpu.append(c1 - c0)
                    wall.append(w1 - w0)
                    how.add(entry["how"])
            rows.append((a, statistics.median(cpu), min(cpu), max(cpu), statistics.median(wall), "/".join(sorted(how))))
        warm.stop_zygote()
    load = os.getloadavg()
    print(f"clean room per notebook, {runs} runs each, CPU from "
          f"{'cgroup v1 cpuacct (whole tree)' if group else 'rusage (this process and reaped children)'}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("| assignment | CPU s median (min-max) | wall s median | how |\n|---|---|---|---|")
    for a, med, lo, hi, w, how in rows:
        print(f"| {a} | {med:.2f} ({lo:.2f}-{hi:.2f}) | {w:.2f} | {how} |")
    if group is not None:
        (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
        with contextlib.suppress(OSError):
            group.rmdir()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(args[0]) if args else 5, "--fresh" in sys.argv)
