"""``make bench``'s warm-kernel rows (issue 25): what a graded notebook costs with warm kernels
(:mod:`grader.kernel.warm`) and with fresh ones, from the same run.

CPU is the cgroup v1 ``cpuacct`` usage of this process's whole tree (it, the Dask workers or
``nbgrader autograde`` processes, the zygotes, sandboxes and kernels), read at the autograde
stage's first and last log lines; wall time is that stage's. Memory is sampled every 0.2 s from
``/proc/<pid>/smaps_rollup`` of the processes below this one (peaks: a worker, its zygote, a
kernel). Needs root (a cpuacct cgroup of its own); prints figures, asserts nothing.

``python -m tools.bench.warm [--students N] [--per-assignment N] [--jobs N]``
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from grader.kernel import sandbox, warm
from .base import course_copy, sequential_nbgrader
from grader.demo import write_demo_submissions
from grader.demo.answer_bank import ANSWERS
from grader.ledger.course import CONFIG
from grader.autograde.engine import default_jobs
from grader.pipeline import REPO_ROOT, grade_class

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
TARGET_CORE_S = 1.2


class CpuAccount:
    """This process (and so everything it starts) in a cpuacct cgroup of its own."""

    def __enter__(self) -> "CpuAccount":
        self.cg = CPUACCT / f"normref-bench-{os.getpid()}"
        self.cg.mkdir()
        (self.cg / "cgroup.procs").write_text(str(os.getpid()))
        return self

    def seconds(self) -> float:
        return int((self.cg / "cpuacct.usage").read_text()) / 1e9

    def __exit__(self, *exc) -> None:
        (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
        for _ in range(50):  # the run's last processes may take a moment to be reaped
            with contextlib.suppress(OSError):
                self.cg.rmdir()
                return
            time.sleep(0.1)


def _kib(pid: int) -> dict[str, int] | None:
    try:
        rows = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    except OSError:
        return None
    f = {r.split()[0].rstrip(":"): int(r.split()[1]) for r in rows if len(r.split()) >= 2}
    return {"rss": f.get("Rss", 0), "pss": f.get("Pss", 0),
            "private": f.get("Private_Clean", 0) + f.get("Private_Dirty", 0)}


class MemorySampler(threading.Thread):
    """Peak memory (KiB) of each kind of process below this one while it runs."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak: dict[str, dict[str, int]] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            procs = {}
            for d in Path("/proc").iterdir():
                with contextlib.suppress(OSError, ValueError, StopIteration):
                    status = (d / "status").read_text().splitlines()
                    ppid = int(next(x.split()[1] for x in status if x.startswith("PPid:")))
                    nspid = next(x.split()[1:] for x in status if x.startswith("NSpid:"))
                    procs[int(d.name)] = (ppid, (d / "cmdline").read_bytes().split(b"\0"), len(nspid))
            mine, todo = set(), [os.getpid()]
            while todo:
                p = todo.pop()
                kids = [c for c, (pp, _, _) in procs.items() if pp == p]
                mine.update(kids)
                todo += kids
            for pid, kind in _kinds({p: procs[p] for p in mine}).items():
                m = _kib(pid)
                if m:
                    peak = self.peak.setdefault(kind, dict.fromkeys(m, 0))
                    for k, v in m.items():
                        peak[k] = max(peak[k], v)


def _kinds(procs: dict[int, tuple[int, list[bytes], int]]) -> dict[int, str]:
    """``{pid: kind}``: zygote, its child (one per kernel), warm kernel, fresh kernel, and worker
    (the process a zygote or a fresh kernel's bubblewrap was started by; a forked Dask worker
    has its parent's command line, so it is known by its children)."""
    def script(pid: int) -> bytes:
        cmd = procs.get(pid, (0, [], 1))[1]
        return cmd[1] if len(cmd) > 1 else (cmd[0] if cmd else b"")

    out = {}
    for pid, (ppid, cmd, levels) in procs.items():
        if script(pid).endswith(b"grader/kernel/zygote.py"):
            if levels > 1:
                out[pid] = "warm kernel"
            elif script(ppid).endswith(b"grader/kernel/zygote.py"):
                out[pid] = "zygote's child"
            else:
                out[pid], out[ppid] = "zygote", "worker"
        elif script(pid).endswith(b"grader/kernel/kernel_guard.py") and levels > 1:
            out[pid] = "fresh kernel"
        elif cmd and cmd[0].endswith(b"bwrap") and not procs.get(ppid, (0, [b""], 1))[1][0].endswith(b"bwrap") \
                and not script(ppid).endswith(b"grader/kernel/zygote.py"):
            out.setdefault(ppid, "worker")
    return {pid: kind for pid, kind in out.items() if pid in procs}


def _course(td: Path, name: str, assignments: list[str] | None) -> Path:
    root = td / name
    root.mkdir(parents=True)
    shutil.copy(REPO_ROOT / CONFIG, root)
    for sub in ("source", "release"):
        shutil.copytree(REPO_ROOT / sub, root / sub)
        for d in (root / sub).iterdir():
            if assignments is not None and d.is_dir() and d.name not in assignments:
                shutil.rmtree(d)
    return root


def graded(td: Path, name: str, *, warm_on: bool, jobs: int, students: int | None,
           assignments: list[str] | None = None, engine: str = "dask") -> dict:
    """Grade the demo class (these assignments, the first ``students``) with warm or fresh
    kernels: ``{"cpu", "wall", "n", "scores", "memory", "lines"}`` of the autograde stage, and
    ``"cpu_run"``: the CPU of the whole ``grade_class`` (every stage, the engine's start)."""
    root = _course(td, name, assignments)
    write_demo_submissions(root, td / f"{name}-submitted", students)
    marks, lines = {}, []
    sampler = MemorySampler()

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith("autograde: ") and " tasks on " in line:  # the stage's first line (grader.pipeline)
            marks.setdefault("start", (acct.seconds(), time.perf_counter()))
        elif re.match(r"autograde: \d+ notebooks in", line):
            marks["end"] = (acct.seconds(), time.perf_counter())

    saved = os.environ.get(warm.SWITCH)
    os.environ[warm.SWITCH] = "1" if warm_on else "0"
    try:
        with CpuAccount() as acct:
            sampler.start()
            t0 = acct.seconds()
            run = grade_class(course_root=root, submissions=td / f"{name}-submitted", jobs=jobs, engine=engine,
                              fresh=True, yes=True, log=log)
            cpu_run = acct.seconds() - t0
            sampler.stop.set()
    finally:
        if saved is None:
            os.environ.pop(warm.SWITCH, None)
        else:
            os.environ[warm.SWITCH] = saved
    cpu = marks["end"][0] - marks["start"][0]
    wall = marks["end"][1] - marks["start"][1]
    return {"cpu": cpu, "wall": wall, "n": len(run.autograde.graded), "scores": run.scores, "pipeline": run.seconds,
            "cpu_run": cpu_run,
            "memory": sampler.peak,
            "lines": [x for x in lines if x.startswith("autograde: ") and ("warm" in x or "fresh kernel" in x)]}


def zygote_start_cpu() -> float:
    """CPU seconds one zygote takes to start (its imports), in a grading kernel's environment."""
    env = {**os.environ, **dict.fromkeys(sandbox.SINGLE_THREAD_VARS, "1")}
    with CpuAccount() as acct:
        t0 = acct.seconds()
        z = warm._Zygote(env)
        cpu = acct.seconds() - t0
        z.stop()
    return cpu


def _mib(kib: int) -> str:
    return f"{kib / 1024:.0f}"


def class_rows(td: Path, students: int | None, jobs: int, seq: tuple[float, float] | None = None) -> dict:
    """The demo class with fresh kernels, then warm ones (same run of this bench): core-seconds
    per submission (cpuacct, and the stage's wall time x workers), speed-ups, memory."""
    if not os.access(CPUACCT, os.W_OK):
        print(f"warm-kernel rows skipped: {CPUACCT} is not writable here (needs root)")
        return {}
    out = {}
    for mode in ("fresh", "warm"):
        out[mode] = graded(td, f"class-{mode}", warm_on=mode == "warm", jobs=jobs, students=students)
    n = out["warm"]["n"]
    same = out["warm"]["scores"] == out["fresh"]["scores"]
    print(f"warm kernels, demo class: {n} submissions, {jobs} Dask workers; grades equal to fresh: {same}")
    print("  kernels   core-s/sub (cpuacct)  wall x cores/sub  autograde wall  pipeline  speed-up over sequential "
          "nbgrader (autograde, pipeline)")
    for mode in ("fresh", "warm"):
        r = out[mode]
        speed = f"{seq[1] / r['wall']:.2f}x, {seq[0] / r['pipeline']:.2f}x" if seq else "- (not run)"
        print(f"  {mode:<8}{r['cpu'] / r['n']:>20.2f}{r['wall'] * jobs / r['n']:>18.2f}{r['wall']:>14.1f} s"
              f"{r['pipeline']:>8.1f} s  {speed}")
    ratio = out["fresh"]["cpu"] / out["warm"]["cpu"]
    verdict = "meets" if out["warm"]["cpu"] / n <= TARGET_CORE_S else "misses"
    print(f"  warm {verdict} the target of {TARGET_CORE_S} core-s per submission; fresh/warm CPU {ratio:.2f}x")
    for line in out["warm"]["lines"]:
        print(f"  ({line})")
    mem = out["warm"]["memory"]
    print("  memory, peak MiB (RSS / PSS / private): " + "; ".join(
        f"{k} {_mib(v['rss'])}/{_mib(v['pss'])}/{_mib(v['private'])}" for k, v in sorted(mem.items())))
    fresh_k = out["fresh"]["memory"].get("fresh kernel")
    if fresh_k:
        print(f"  a fresh kernel, for comparison: {_mib(fresh_k['rss'])}/{_mib(fresh_k['pss'])}/"
              f"{_mib(fresh_k['private'])}")
    return out


def engine_cpu_rows(td: Path, students: int | None, jobs: int, reps: int = 3) -> dict:
    """The two engines on the same class, ``reps`` runs each, alternating (warm kernels, SQLite):
    medians of core-seconds per notebook (cpuacct: the autograde stage; the whole run, the
    engine's start and the canary included), the stage's wall time and submissions per minute."""
    import statistics

    if not os.access(CPUACCT, os.W_OK):
        print(f"engine CPU rows skipped: {CPUACCT} is not writable here (needs root)")
        return {}
    runs: dict[str, list[dict]] = {"processes": [], "dask": []}
    for i in range(reps):
        for engine in (("processes", "dask") if i % 2 == 0 else ("dask", "processes")):
            runs[engine].append(graded(td, f"engine-{engine}-{i}", warm_on=True, jobs=jobs, students=students,
                                       engine=engine))
    same = all(r["scores"] == runs["processes"][0]["scores"] for rs in runs.values() for r in rs)
    print(f"autograde engines, {runs['dask'][0]['n']} notebooks, {jobs} workers, {reps} runs each (medians); "
          f"grades equal in every run: {same}")
    print("  engine                 core-s/notebook (stage)  core-s/notebook (run)  stage wall s  notebooks/min")
    out = {}
    for engine, rs in runs.items():
        med = {k: statistics.median(r[k] / (r["n"] if k.startswith("cpu") else 1) for r in rs)
               for k in ("cpu", "cpu_run", "wall")}
        out[engine] = med
        name = "process pool" if engine == "processes" else "Dask (local cluster)"
        print(f"  {name:<22}{med['cpu']:>25.2f}{med['cpu_run']:>23.2f}{med['wall']:>14.1f}"
              f"{60 * rs[0]['n'] / med['wall']:>15.1f}", flush=True)
    return out


def assignment_rows(td: Path, students: int) -> None:
    """Per assignment, one Dask worker (notebooks one after another): CPU and wall time per
    notebook, fresh vs warm (the zygote's start shared by the ``students`` notebooks)."""
    z = zygote_start_cpu()
    print(f"per notebook, by assignment (first {students} demo students, 1 worker; a zygote's start "
          f"is {z:.2f} CPU-s, included, shared by the notebooks):")
    print("  assignment            fresh CPU s  warm CPU s  (steady)  fresh wall s  warm wall s  ratio CPU")
    for a in sorted(ANSWERS):
        r = {m: graded(td, f"{a}-{m}", warm_on=m == "warm", jobs=1, students=students, assignments=[a])
             for m in ("fresh", "warm")}
        f, w = r["fresh"], r["warm"]
        steady = (w["cpu"] - z) / w["n"]
        print(f"  {a:<20}{f['cpu'] / f['n']:>13.2f}{w['cpu'] / w['n']:>12.2f}{steady:>10.2f}"
              f"{f['wall'] / f['n']:>14.2f}{w['wall'] / w['n']:>13.2f}{f['cpu'] / w['cpu']:>10.2f}x"
              + ("" if w["scores"] == f["scores"] else "  GRADES DIFFER"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.warm", description=__doc__)
    p.add_argument("--jobs", type=int, default=None, help="Dask workers for the class rows (default: all cores)")
    p.add_argument("--students", type=int, default=None, help="demo students in the class rows (default: all 30)")
    p.add_argument("--per-assignment", type=int, default=10, metavar="N",
                   help="demo students per assignment in the per-notebook rows (0: skip them)")
    p.add_argument("--sequential", action="store_true",
                   help="also plain sequential nbgrader on the same class, for the speed-ups (slow)")
    args = p.parse_args(argv)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as td:
        seq = None
        if args.sequential:
            seq = sequential_nbgrader(course_copy(Path(td) / "seq"), args.students)
            print(f"sequential nbgrader: pipeline {seq[0]:.1f} s, autograde {seq[1]:.1f} s", flush=True)
        class_rows(Path(td), args.students, args.jobs or default_jobs(), seq)
        if args.per_assignment and os.access(CPUACCT, os.W_OK):
            assignment_rows(Path(td), args.per_assignment)
    return 0


if __name__ == "__main__":
    sys.exit(main())
