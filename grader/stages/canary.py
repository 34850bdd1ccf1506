"""The canary: before any student is graded, the instructor's own solutions are.

Each run first grades ``source/``'s solutions as a student's submission (the released notebook
with every answer cell holding the solution, its ``### BEGIN/END SOLUTION`` lines removed) in a
scratch course folder, through what the students get: nbgrader's generate and autograde, the
run's engine (:mod:`grader.autograde.engine`: its Dask cluster or this machine's process pool), the bubblewrap sandbox,
the hand-back and the scoring outside the kernel (:mod:`grader.scoring.inputs`). If any automatic
question (an autograder test cell; written answers are graded by hand) scores below full, the
run stops before the course's gradebook is touched (:class:`CanaryFailed`, one line naming first
the first error the kernel or the worker raised, e.g. that the sandboxed kernel could not import
torch, from a cell's output or from a case the hand-back kept, then the assignment and the
questions it cost), and ``logs/runs.jsonl`` records it as ``failed``.

It is skipped while nothing it depends on changed since the last passing canary: ``source/``
and ``nbgrader_config.py``, the installed packages (every distribution's name and version, and
the ``normref`` and ``grader`` packages' files), the sandbox settings, this host, and over an
existing Dask cluster every worker's packages and sandbox (:func:`facts`). A pass is kept by
the hash of those in ``logs/canary.json`` (kept by ``make clean``), and in the user's cache
(:func:`grader.ledger.store.user_cache_dir`, ``$NORMREF_CANARY_CACHE``; ``0`` turns it off) so a
second course folder with the same ``source/`` on the same machine and environment skips it too.
Over an existing cluster, the canary runs once per distinct worker environment, on a worker
that has it: a worker whose environment differs is caught as well.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from ..kernel import sandbox, warm
from ..ledger import store
from ..batch import Batch, Findings, GradeRun, GradingError, Services, read_gradebook
from ..ledger.course import CONFIG, CourseTree

CACHE = store.CANARY
STUDENT = "canary"
_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


class CanaryFailed(RuntimeError):
    """The instructor's own solutions did not score full (the message is one line)."""


#: How a failed canary's error starts in the run log (``grade_class`` records that run as failed).
FAILED = CanaryFailed.__name__ + ":"


# -- what the result depends on -------------------------------------------------------------------

def _digest_files(files) -> str:
    h = hashlib.sha256()
    for base, p in files:
        h.update(str(p.relative_to(base)).encode() + b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()


def _tree_files(folder: Path, pattern: str = "*"):
    return [(folder, p) for p in sorted(folder.rglob(pattern)) if p.is_file() and "__pycache__" not in p.parts]


def environment_digest() -> str:
    """SHA-256 of this interpreter's installed packages: every distribution's name and version,
    the Python version, and the files of the ``normref`` and ``grader`` packages (an editable
    install keeps its version when its code changes)."""
    dists = sorted({f"{(d.metadata['Name'] or '').lower()}=={d.version}" for d in importlib.metadata.distributions()})
    here = Path(__file__).resolve().parents[1]  # the grader package
    normref = Path(sandbox._normref_dir())
    h = hashlib.sha256("\n".join([sys.version, sys.executable, *dists]).encode())
    h.update(_digest_files(_tree_files(here, "*.py") + _tree_files(normref, "*.py")).encode())
    return h.hexdigest()


def facts() -> dict:
    """What a canary's result depends on in the process that grades (this one, or a Dask
    worker, where it is run with ``client.run``): the packages, the sandbox, the host."""
    return {"environment": environment_digest(), "host": os.uname().nodename,
            "sandbox": sandbox.available(), "memory_cgroup": sandbox.memory_cgroups_work(),
            "mem_mb": sandbox.default_mem_mb(), "as_mb": os.environ.get(sandbox.ENV_KERNEL_AS_MB),
            "max_procs": sandbox.MAX_PROCS, "max_write_bytes": sandbox.MAX_WRITE_BYTES,
            "warm": os.environ.get(warm.SWITCH, "1") != "0"}


def _course_digest(tree: CourseTree, assignments: list[str]) -> str:
    files = [(tree.root, tree.root / CONFIG)]
    for a in assignments:
        files += [(tree.root, p) for _, p in _tree_files(tree.source(a))]
    return _digest_files(files)


def _key(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _worker_groups(b) -> dict[str, list[str]]:
    """``{key of a worker's facts: [worker addresses]}`` of an existing Dask cluster; ``{"": []}``
    without one (the embedded cluster's workers are forked from this process)."""
    if b.services.engine is None or b.services.engine.address is None:
        return {"": []}
    client = b.services.engine.client(use_sandbox=b.options.use_sandbox is not False)
    groups: dict[str, list[str]] = {}
    for addr, f in client.run(facts).items():
        groups.setdefault(_key(f), []).append(addr)
    return groups


# -- the cache -----------------------------------------------------------------------------------

def cached(tree: CourseTree, key: str) -> dict | None:
    """The passing canary recorded for ``key`` (this course's ``logs/canary.json``, else the
    user's cache), or None."""
    for rec in (store.canary(tree), store.cached(f"canary/{key}.json")):
        if rec and rec.get("key") == key and rec.get("status") == "passed":
            return rec
    return None


def _remember(tree: CourseTree, rec: dict, log=print) -> None:
    with contextlib.suppress(OSError):  # a pass not kept only means the next run grades it again
        store.write_canary(tree, rec, log=log)
    store.cache(f"canary/{rec['key']}.json", rec)


# -- the instructor's submission -------------------------------------------------------------------

def solution_text(source: str) -> str:
    """A solution cell's source as the instructor's answer: the solution markers' lines removed."""
    return "\n".join(ln for ln in source.splitlines() if ln.strip() not in _MARKERS)


def write_submission(scratch: CourseTree, assignment: str) -> list[str]:
    """``submitted/canary/<assignment>/``: each released notebook with its answer cells holding
    ``source/``'s solutions. Returns the automatic questions' grade ids (autograder tests)."""
    auto = []
    dest = scratch.submitted(STUDENT, assignment)
    dest.mkdir(parents=True, exist_ok=True)
    for rel in sorted(scratch.release(assignment).glob("*.ipynb")):
        src = nbformat.read(scratch.source(assignment) / rel.name, as_version=4)
        meta = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in src.cells}
        nb = nbformat.read(rel, as_version=4)
        for c in nb.cells:
            nbg = c.metadata.get("nbgrader", {})
            if nbg.get("solution") and nbg.get("grade_id") in meta:
                c.source = solution_text(meta[nbg["grade_id"]].source)
            if nbg.get("grade") and not nbg.get("solution"):
                auto.append(nbg["grade_id"])
        nbformat.write(nb, dest / rel.name)
    return auto


# -- what went wrong, in one line -----------------------------------------------------------------

def _in_words(ename: str, evalue: str, context: str, where: str) -> str:
    """One error of the kernel, in words: an import that failed names its module and the fix."""
    evalue = " ".join(str(evalue).split())[:240]
    if ename in ("ImportError", "ModuleNotFoundError") or (ename == "OSError" and "import" in context):
        named = re.search(r"No module named '([\w.]+)'", evalue)
        module = named[1] if named else next((m for m in ("torch", "numpy", "normref") if m in evalue + context),
                                             "a module")
        return f"the sandboxed kernel could not import {module}: {ename}: {evalue}; see README: Install"
    return f"the kernel's first error, {where}: {ename}: {evalue}"


def kernel_error(nb_path: Path) -> str | None:
    """The first error a cell of the autograded notebook ``nb_path`` raised, in words: "the
    sandboxed kernel could not import torch: OSError: ...; see README: Install" for an import,
    else "the kernel's first error, in cell <id>: <type>: <message>"."""
    try:
        nb = nbformat.read(nb_path, as_version=4)
    except Exception:  # noqa: BLE001 - said as "no autograded notebook" by the caller
        return None
    for i, c in enumerate(nb.cells):
        for out in c.get("outputs", []) if c.cell_type == "code" else []:
            if out.get("output_type") != "error":
                continue
            where = c.metadata.get("nbgrader", {}).get("grade_id") or f"#{i}"
            return _in_words(out.get("ename", ""), out.get("evalue", ""),
                             c.source + "\n".join(out.get("traceback", [])), f"in cell {where}")
    return None


def _first_raised(record) -> tuple[str, str] | None:
    """The first ``{"raised": [type, message]}`` anywhere in a hand-back (a function's call, a
    class's constructor or step: :mod:`normref.handback`), depth first."""
    if isinstance(record, dict):
        raised = record.get("raised")
        if isinstance(raised, list) and len(raised) == 2 and all(isinstance(x, str) for x in raised):
            return raised[0], raised[1]
        record = list(record.values())
    if isinstance(record, list):
        for item in record:
            found = _first_raised(item)
            if found:
                return found
    return None


def handback_error(nb_path: Path) -> str | None:
    """The first exception the instructor's solution raised in a hidden test's case, from the
    hand-backs of the autograded notebook ``nb_path`` (read before the scoring replaces them):
    the hand-back keeps each case's exception and the cell itself raises nothing, so an import
    that fails inside a case (torch unimportable in the sandbox only) is named here, in the
    words of :func:`kernel_error`."""
    from normref.wire import MIME

    try:
        nb = nbformat.read(nb_path, as_version=4)
    except Exception:  # noqa: BLE001 - said as "no autograded notebook" by the caller
        return None
    for c in nb.cells:
        gid = c.get("metadata", {}).get("nbgrader", {}).get("grade_id") or "?"
        for out in c.get("outputs", []) if c.cell_type == "code" else []:
            found = _first_raised(out.get("data", {}).get(MIME))
            if found:
                return _in_words(found[0], found[1], "", f"in a case of question {gid}")
    return None


def _why(scratch: CourseTree, a: str, outcome, flags: dict, raised: dict) -> str:
    if (a, STUDENT) in outcome.failed:
        why = f"nbgrader could not grade it: {' '.join(str(outcome.failed[(a, STUDENT)]).split())[:240]}"
    else:
        nbs = sorted(scratch.autograded(STUDENT, a).glob("*.ipynb"))
        why = next((e for e in map(kernel_error, nbs) if e), None) or raised.get(a) or \
            "no cell raised an error: the grader's scoring of the handed-back outputs gave less than full"
    notes = flags.get((a, STUDENT), [])
    return why + (f" ({'; '.join(dict.fromkeys(notes))})" if notes else "")


# -- the run --------------------------------------------------------------------------------------

def grade_solutions(b, scratch_root: Path, workers: list[str] | None = None) -> dict:
    """Grade ``source/``'s solutions in ``scratch_root`` with the run ``b``'s engine and sandbox.

    Returns:
        ``{"failures": [(the first error, the questions it cost) per assignment], "questions":
        automatic questions graded, "peak_mb": {assignment: a kernel's peak memory in MiB (where
        kernels have a memory cgroup)}}``.

    Raises:
        CanaryFailed: generate failed for ``source/`` (nbgrader's log quoted).
    """
    from ..scoring.scores import scoring_stage
    from .autograde import autograde_stage
    from .generate import generate
    from .inputs import inputs

    tree, assignments = b.services.tree, b.run.assignments
    shutil.copy2(tree.root / CONFIG, scratch_root / CONFIG)
    for a in assignments:
        shutil.copytree(tree.source(a), scratch_root / "source" / a)
    scratch = CourseTree(scratch_root)
    quiet = lambda *_: None  # noqa: E731 - the canary's own lines are said by stage()
    # the run's own stages, on a scratch course whose one student is the instructor's solutions
    sb_b = Batch(options=b.options.replace(submissions=None, fresh=True, progress=False, duedates={},
                                           course_root=scratch_root),
                 services=Services(tree=scratch, log=quiet, run_id=b.services.run_id, command=b.services.command,
                                   jobs=max(1, min(b.services.jobs, len(assignments))), engine=b.services.engine,
                                   workers=workers),
                 run=GradeRun(course_root=scratch_root, assignments=assignments), found=Findings(fresh=True))
    try:
        generate(sb_b)
    except GradingError as e:  # source/ itself is broken: said as nbgrader said it, the run recorded failed
        raise CanaryFailed(str(e)) from e
    auto = {a: write_submission(scratch, a) for a in assignments}
    inputs(sb_b)
    autograde_stage(sb_b)
    out = sb_b.run.autograde
    flags = {pr: list(rep.flags) for pr, rep in sb_b.run.repairs.items()}  # the caps a kernel ran into
    peak = {a: round(mb, 1) for (a, _), mb in out.peak_mb.items()}
    raised = {a: e for a in assignments  # read before the scoring replaces the hand-backs
              if (e := next(filter(None, map(handback_error, sorted(scratch.autograded(STUDENT, a).glob("*.ipynb")))),
                            None))}
    scoring_stage(sb_b)
    scores, max_points = read_gradebook(scratch, assignments)
    failures = []
    for a in assignments:
        got = scores.get((a, STUDENT), {})
        short = [(gid, got.get(gid, 0.0), max_points[a].get(gid, 0.0)) for gid in auto[a]
                 if got.get(gid, 0.0) < max_points[a].get(gid, 0.0)]
        if short:
            gid, pts, mx = short[0]
            more = f", {len(short) - 1} more below full" if len(short) > 1 else ""
            failures.append((_why(scratch, a, out, flags, raised), f"{a}, question {gid}: {pts:g}/{mx:g}{more}"))
    return {"failures": failures, "questions": sum(map(len, auto.values())), "peak_mb": peak}


def stage(b) -> None:
    """Part of ``grade_class``'s first stage, before anything is written: the canary (the module
    docstring), or its cached pass. Sets ``b.run.stage_seconds["canary"]``.

    Raises:
        CanaryFailed: an automatic question of the instructor's solutions scored below full, or
            generate failed for ``source/`` (nbgrader's log quoted).
    """
    t0 = time.perf_counter()
    try:
        _stage(b)
    finally:
        b.run.stage_seconds["canary"] = time.perf_counter() - t0


def _stage(b) -> None:

    tree, assignments = b.services.tree, b.run.assignments
    groups = _worker_groups(b)
    local = facts()
    base = {"course": _course_digest(tree, assignments), "assignments": assignments, "here": local,
            "sandbox_asked": b.options.use_sandbox, "cell_timeout": b.options.cell_timeout,
            "engine": b.services.engine.name if b.services.engine is not None else "processes"}
    todo = []
    for group, workers in groups.items():
        key = _key({**base, "workers": group})
        hit = cached(tree, key)
        if hit:
            b.services.log(f"canary: skipped: source/, the installed packages and the sandbox settings are those "
                           f"of the passing canary of {hit.get('time')} ({hit.get('course')})")
        else:
            todo.append((key, workers))
    for key, workers in todo:  # the canary's graded inputs are its scratch course's own
        t = time.perf_counter()
        where = f" on Dask worker {workers[0]}" if workers else ""
        b.services.log(f"canary: grading the instructor's solutions of {len(assignments)} assignments{where} first")
        with tempfile.TemporaryDirectory(prefix="normref-canary-") as td:
            got = grade_solutions(b, Path(td), workers[:1] or None)
        if got["failures"]:
            (cause, cost), more = got["failures"][0], len(got["failures"]) - 1
            others = f" ({more} more assignments too)" if more else ""
            raise CanaryFailed(f"canary{where}: {cause}; so the instructor's own solutions did not score full, "
                               f"nothing was graded: {cost}{others}")
        seconds = round(time.perf_counter() - t, 2)
        b.services.log(f"canary: the instructor's solutions scored full on all {got['questions']} automatic questions "
                       f"({seconds:.1f} s)")
        _remember(tree, {"key": key, "status": "passed", "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                         "run_id": b.services.run_id, "course": str(tree.root), "seconds": seconds,
                         "kernel_peak_mb": got["peak_mb"], "workers": workers, "facts": local}, log=b.services.log)


__all__ = ["stage", "CanaryFailed", "facts", "environment_digest", "grade_solutions", "kernel_error", "handback_error",
           "write_submission", "solution_text", "cached", "CACHE"]
