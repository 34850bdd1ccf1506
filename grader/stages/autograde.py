"""The ``autograde`` stage: nbgrader's autograde of the submissions to grade, sandboxed, as Dask
tasks or processes; a submission whose kernel died is graded again without the answer that killed
it; then the hand grades of resubmitted notebooks are carried over where the answer is unchanged."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import nbformat

from .. import sandbox, warm
from ..batch import Batch, GradeRun, GradingError
from ..course import CourseTree
from ..parallel import autograde
from ..repair import Repair


def autograde_stage(b: Batch) -> None:
    """nbgrader's autograde as Dask tasks (``b.dask``) or ``jobs`` parallel processes, sandboxed
    when bubblewrap works; a batch grades its own students and anyone an earlier run left ungraded."""
    tree, run, log = b.tree, b.run, b.log
    ok = sandbox.available()
    if b.use_sandbox and not ok:
        raise GradingError("the grading sandbox needs bubblewrap (`apt-get install bubblewrap`), "
                           "and it cannot start here")
    run.sandboxed = ok if b.use_sandbox is None else b.use_sandbox
    if not run.sandboxed:
        log("WARNING: grading WITHOUT the sandbox (bubblewrap not available): student code runs "
            "with your rights and can read source/ and gradebook.db")
    extra = [f"--Execute.timeout={b.cell_timeout}"] if b.cell_timeout else []
    if b.dask is None:
        log(f"autograde: {b.jobs} parallel nbgrader process{'es' if b.jobs > 1 else ''}"
            f"{', sandboxed' if run.sandboxed else ''}")
    session = sandbox.SandboxSession(tree.root) if run.sandboxed else contextlib.nullcontext()
    with session as sb:
        setup = sb.worker if run.sandboxed else None
        swept = getattr(sb, "swept", None) or {}
        if any(swept.values()):
            log(f"sandbox: swept {swept['cgroups']} stale normref cgroup(s) and {swept['ipc']} kernel-socket "
                f"folder(s) left by killed runs, killing {swept.get('killed', 0)} sandbox process(es) that "
                f"outlived them ({swept['in_use']} still in use, kept)")
        try:
            if b.dask is not None:  # Dask tasks (grader/cluster.py): this machine or a cluster
                from .. import cluster

                client = b.dask.client(use_sandbox=run.sandboxed)
                log(f"autograde: Dask tasks on {b.dask.describe()}{', sandboxed' if run.sandboxed else ''}")
                run.autograde = cluster.autograde(tree, run.assignments, client=client, log=log,
                                                  extra_args=extra, use_sandbox=run.sandboxed,
                                                  progress=_progress_bar() if b.progress else None,
                                                  course_id=b.course.api.coursedir.course_id,
                                                  pairs=b.to_grade)
            else:
                run.autograde = autograde(tree, run.assignments, jobs=b.jobs, log=log, extra_args=extra,
                                          progress=_progress_bar() if b.progress else None,
                                          worker_setup=setup, pairs=b.to_grade)
            _regrade_dead_kernels(tree, run, extra, setup, log)
        except RuntimeError as e:
            raise GradingError(str(e)) from e
        if run.sandboxed:  # the sandbox's caps a kernel ran into (process count, bytes written)
            hits = sandbox.limit_flags(tree.root, sb, run.autograde.graded)
            for pr, notes in getattr(run.autograde, "limit_flags", {}).items():  # seen on Dask workers
                hits.setdefault(pr, []).extend(n for n in notes if n not in hits[pr])
            for (a, st), notes in hits.items():
                run.repairs.setdefault((a, st), Repair(st, a)).flags.extend(notes)
                for note in notes:
                    log(f"autograde: {st} ({a}): {note}")
            kernels = warm.merge(warm.kernel_counts(sb.records), getattr(run.autograde, "kernels", None))
            if line := warm.describe(kernels, sb.warm_off):  # a fresh kernel instead of a warm one: said once
                log(line)
    log(f"autograde: {len(run.autograde.graded)} notebooks in {run.autograde.seconds:.1f} s")
    carry_hand_grades(b)


def _progress_bar():
    from tqdm import tqdm

    bar = None

    def update(done: int, total: int):
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc="autograde", unit="notebook", file=sys.stderr,
                       dynamic_ncols=True, disable=None)
        bar.n = done
        bar.refresh()
        if done >= total:
            bar.close()

    return update


def _answer_ids(nb) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution")]


def _regrade_dead_kernels(tree: CourseTree, run: GradeRun, extra, setup, log) -> None:
    """A submission nbgrader could not finish (its kernel died or stopped answering) is graded
    again: first unchanged (a kernel can fail to start on a loaded machine), then with one
    answer cell at a time replaced by a stub that raises, until it finishes: that question
    scores 0 with the reason, and every other question keeps its points."""
    out = run.autograde
    for (a, st), reason in sorted(out.failed.items()):
        sub = tree.submitted(st, a)
        nbs = sorted(sub.glob("*.ipynb"))
        if not nbs:
            continue
        originals = {p: p.read_text(encoding="utf-8") for p in nbs}
        cells = [(p, gid) for p in nbs for gid in _answer_ids(nbformat.reads(originals[p], 4))]
        stubbed: list[tuple[Path, str]] | None = None
        attempts = [[]] + [[c] for c in cells] + [cells[: k + 1] for k in range(1, len(cells))]
        for attempt in attempts:
            for p, text in originals.items():
                nb = nbformat.reads(text, 4)
                for c in nb.cells:
                    gid = c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                    if (p, gid) in attempt:
                        c.source = ("# The grader removed this cell: the grading kernel died or hung "
                                    "while running this question's code.\nraise RuntimeError("
                                    "'removed by the grader: the kernel died in this question')")
                nbformat.write(nb, p)
            again = autograde(tree, [a], jobs=1, log=lambda *_: None, extra_args=extra,
                              worker_setup=setup, only=[st])
            if (a, st) in again.graded:
                stubbed = attempt
                break
        if stubbed is not None:
            del out.failed[(a, st)]
            out.graded.append((a, st))
            rep = run.repairs.setdefault((a, st), Repair(st, a))
            if not stubbed:
                rep.notes.append(f"nbgrader failed once ({reason}); graded again unchanged")
            for _, gid in stubbed:
                rep.flags.append(f"the grading kernel died or hung in answer cell {gid!r} ({reason}): "
                                 "that question scores 0; the rest was graded")
            log(f"autograde: {st} ({a}) regraded" + (f" without {', '.join(g for _, g in stubbed)}"
                                                     if stubbed else " unchanged"))
        else:
            for p, text in originals.items():
                p.write_text(text, encoding="utf-8")


def carry_hand_grades(b: Batch) -> None:
    """Hand grades and formgrader comments of replaced submissions (``logs/handgrades.json``,
    written when they were captured, so an earlier run stopped before this point left them
    there) go back where the answer is unchanged, for the submissions autograded in this run;
    the others are named (log and report) as to redo. They leave the record once the submission
    is recorded as graded (:func:`trusted_scoring`)."""
    from ..handgrades import carry_over, pending

    graded = set(b.run.autograde.graded)
    captured = {hg.key: hg for hg in b.collected.hand_grades}
    captured.update({hg.key: hg for hg in pending(b.tree)})
    todo = [hg for hg in captured.values() if (hg.assignment, hg.student) in graded]
    if not todo:
        return
    kept, redo = carry_over(b.tree, todo)
    b.hand_grades_done = kept + redo
    for hg in kept:
        if hg.manual_score is not None:
            b.log(f"hand grade kept: {hg.student} ({hg.assignment}) {hg.grade_id} = {hg.manual_score:g}: "
                  + ("the answers it tests are unchanged" if hg.test else "the answer is unchanged"))
        if hg.comment is not None:
            b.log(f"comment kept: {hg.student} ({hg.assignment}) {hg.grade_id}: the answer is unchanged")
    for hg in redo:
        what = (f"hand grade of {hg.grade_id} ({hg.manual_score:g})" if hg.manual_score is not None
                else f"formgrader comment on {hg.grade_id}")
        why = ("an answer cell above that autograded test changed, so the override was dropped" if hg.test
               else "the resubmitted answer changed")
        b.collected.flags.setdefault(hg.student, []).append(f"{hg.assignment}: {what} must be redone: {why}")
        b.log(f"{'hand grade' if hg.manual_score is not None else 'comment'} to redo: {hg.student} "
              f"({hg.assignment}) {hg.grade_id}: {why}")
