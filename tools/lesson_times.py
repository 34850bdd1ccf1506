"""Each lesson's Run All, timed as a student's kernel runs it, and the kernel's peak memory.

    taskset -c 0 .venv/bin/python tools/lesson_times.py [--reps 3] [NN_name.ipynb ...]

Runs every cell of each lesson notebook in a fresh ``python3`` kernel (nbclient, as
tests/test_notebooks.py does), ``--reps`` times, and prints per lesson the wall time of Run All
(from the first cell's start to the last cell's end, the kernel's start-up excluded: what a
student waits for after **Run All**), min / median / max, the slowest cells, and the kernel's
peak resident memory (``VmHWM`` of the kernel process, read from ``/proc`` after the last cell),
and the CPU time the kernel spent on Run All (user + system, from ``/proc/<pid>/stat``): on an
idle core the wall time is about that, whatever else the machine is doing while it is measured.
Under ``taskset -c 0`` the kernel inherits the one-core affinity. A figure, not a test: the
machine's load (``os.getloadavg``) is printed with it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]


def _vmhwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def run_once(path: Path) -> tuple[float, list[tuple[float, int]], float, float]:
    """(Run All seconds, [(seconds, cell index)] of the code cells, kernel peak MiB, kernel CPU s)."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    cells: list[tuple[float, int]] = []
    with client.setup_kernel():
        pid = client.km.provisioner.process.pid
        cpu0 = _cpu_s(pid)
        t0 = time.perf_counter()
        for i, cell in enumerate(nb.cells):
            c0 = time.perf_counter()
            client.execute_cell(cell, i)
            if cell.cell_type == "code":
                cells.append((time.perf_counter() - c0, i))
        total = time.perf_counter() - t0
        cpu = _cpu_s(pid) - cpu0
        peak = _vmhwm_mib(pid)
    return total, sorted(cells, reverse=True), peak, cpu


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lessons", nargs="*", help="notebook names (default: every lesson)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    paths = [REPO / "notebooks" / n for n in args.lessons] or sorted((REPO / "notebooks").glob("[0-9]*.ipynb"))
    affinity = sorted(os.sched_getaffinity(0))
    print(f"cores allowed: {affinity}; load before: {os.getloadavg()[0]:.2f}")
    for path in paths:
        runs = [run_once(path) for _ in range(args.reps)]
        times = [r[0] for r in runs]
        slow = ", ".join(f"cell {i} {s:.1f} s" for s, i in runs[len(runs) // 2][1][:3])
        print(f"{path.name}: Run All {min(times):.1f} / {statistics.median(times):.1f} / {max(times):.1f} s "
              f"(min / median / max of {len(times)}); kernel CPU {statistics.median(r[3] for r in runs):.1f} s; "
              f"peak kernel memory {statistics.median(r[2] for r in runs):.0f} "
              f"MiB; slowest: {slow}; load {os.getloadavg()[0]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
