"""The ``autograde`` stage: one autograde task per submission to grade on the run's engine
(:mod:`grader.autograde.engine`: this machine's process pool, or Dask), sandboxed; a submission whose kernel
died is graded again through the same engine without the answer that killed it; then the hand
grades of resubmitted notebooks are carried over where the answer is unchanged."""
from __future__ import annotations

import contextlib
import sys

from ..kernel import sandbox, warm
from ..batch import Batch, GradingError
from ..autograde.engine import autograde, regrade_dead_kernels
from ..intake.repair import Repair


def autograde_stage(b: Batch) -> None:
    """One autograde task per submission on the run's engine (:mod:`grader.autograde.engine`: this machine's
    process pool, or Dask), every kernel sandboxed when bubblewrap works; a batch grades its own
    students and anyone an earlier run left ungraded; a submission whose kernel died is graded
    again through the same engine (:func:`_regrade_dead_kernels`)."""
    tree, run, log, engine = b.services.tree, b.run, b.services.log, b.services.engine
    ok = sandbox.available()
    if b.options.use_sandbox and not ok:
        raise GradingError("the grading sandbox needs bubblewrap (`apt-get install bubblewrap`), "
                           "and it cannot start here")
    run.sandboxed = ok if b.options.use_sandbox is None else b.options.use_sandbox
    if not run.sandboxed:
        log("WARNING: grading WITHOUT the sandbox (bubblewrap not available): student code runs "
            "with your rights and can read source/ and gradebook.db")
    extra = [f"--Execute.timeout={b.options.cell_timeout}"] if b.options.cell_timeout else []
    session = sandbox.SandboxSession(tree.root) if run.sandboxed else contextlib.nullcontext()
    with session as sb:
        swept = getattr(sb, "swept", None) or {}
        if any(swept.values()):
            log(f"sandbox: swept {swept['cgroups']} stale normref cgroup(s) and {swept['ipc']} kernel-socket "
                f"folder(s) left by killed runs, killing {swept.get('killed', 0)} sandbox process(es) that "
                f"outlived them ({swept['in_use']} still in use, kept)")

        def grade(pairs, say=lambda *_: None, progress=None):
            return autograde(tree, run.assignments, engine, course_id=b.services.course.api.coursedir.course_id,
                             pairs=pairs, log=say, progress=progress, extra_args=extra, use_sandbox=run.sandboxed)

        try:
            engine.executor(use_sandbox=run.sandboxed)
            log(f"autograde: {engine.label} on {engine.describe()}{', sandboxed' if run.sandboxed else ''}")
            run.autograde = grade(b.found.to_grade, log, _progress_bar() if b.options.progress else None)
            _regrade_dead_kernels(b, lambda pr: grade([pr]))
        except RuntimeError as e:
            raise GradingError(str(e)) from e
        if run.sandboxed:  # the sandbox's caps a kernel ran into (process count, bytes written)
            hits = sandbox.limit_flags(tree.root, sb, run.autograde.graded)
            for pr, notes in run.autograde.limit_flags.items():  # seen by the workers, in the kernels' cgroups
                hits.setdefault(pr, []).extend(n for n in notes if n not in hits[pr])
            for (a, st), notes in hits.items():
                run.repairs.setdefault((a, st), Repair(st, a)).flags.extend(notes)
                for note in notes:
                    log(f"autograde: {st} ({a}): {note}")
            if line := warm.describe(run.autograde.kernels, sb.warm_off):  # a fresh kernel instead of a warm one
                log(line)
    log(f"autograde: {len(run.autograde.graded)} notebooks in {run.autograde.seconds:.1f} s")
    describe_handed_in(b)
    if b.found.collected is not None:  # the canary's scratch course collected nothing: no hand grades to carry
        carry_hand_grades(b)


def describe_handed_in(b: Batch) -> None:
    """Each start-up file and shadowing module handed in beside a notebook of this batch, flagged
    with what the grading kernel recorded it doing (:func:`grader.intake.handed_in.describe`: run or
    imported by the student's own code, in which cell, or never)."""
    from ..intake.handed_in import describe

    tree, graded = b.services.tree, set(b.run.autograde.graded)
    todo = b.found.to_grade if b.found.to_grade is not None else tree.pairs(b.run.assignments)  # None: every one
    for a, st in todo:
        folder = tree.submitted(st, a)
        if not folder.is_dir():
            continue
        lines = describe(folder, tree.autograded(st, a) if (a, st) in graded else None, b.run.sandboxed)
        if lines:
            b.run.repairs.setdefault((a, st), Repair(st, a)).flags.extend(lines)


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


def _regrade_dead_kernels(b: Batch, grade) -> None:
    """A submission nbgrader could not finish (its kernel died or stopped answering) is graded
    again through the run's engine (:func:`grader.autograde.engine.regrade_dead_kernels`): unchanged first,
    then with answer cells replaced by a stub that raises, until it finishes: that question scores
    0 with the reason (a flag), and every other question keeps its points."""
    for (a, st), (reason, stubbed) in regrade_dead_kernels(b.services.tree, b.run.autograde, grade).items():
        rep = b.run.repairs.setdefault((a, st), Repair(st, a))
        if not stubbed:
            rep.notes.append(f"nbgrader failed once ({reason}); graded again unchanged")
        for gid in stubbed:
            rep.flags.append(f"the grading kernel died or hung in answer cell {gid!r} ({reason}): "
                             "that question scores 0; the rest was graded")
        b.services.log(f"autograde: {st} ({a}) regraded"
                       + (f" without {', '.join(stubbed)}" if stubbed else " unchanged"))


def carry_hand_grades(b: Batch) -> None:
    """Hand grades and formgrader comments of replaced submissions (``logs/handgrades.json``,
    written when they were captured, so an earlier run stopped before this point left them
    there) go back where the answer is unchanged, for the submissions autograded in this run;
    the others are named (log and report) as to redo. They leave the record once the submission
    is recorded as graded (:func:`grader.stages.grade.trusted_scoring`)."""
    from ..ledger.handgrades import carry_over, pending

    graded = set(b.run.autograde.graded)
    captured = {hg.key: hg for hg in b.found.collected.hand_grades}
    captured.update({hg.key: hg for hg in pending(b.services.tree)})
    todo = [hg for hg in captured.values() if (hg.assignment, hg.student) in graded]
    if not todo:
        return
    kept, redo = carry_over(b.services.tree, todo)
    b.found.hand_grades_done = kept + redo
    for hg in kept:
        if hg.manual_score is not None:
            b.services.log(f"hand grade kept: {hg.student} ({hg.assignment}) {hg.grade_id} = {hg.manual_score:g}: "
                  + ("the answers it tests are unchanged" if hg.test else "the answer is unchanged"))
        if hg.comment is not None:
            b.services.log(f"comment kept: {hg.student} ({hg.assignment}) {hg.grade_id}: the answer is unchanged")
    for hg in redo:
        what = (f"hand grade of {hg.grade_id} ({hg.manual_score:g})" if hg.manual_score is not None
                else f"formgrader comment on {hg.grade_id}")
        why = ("an answer cell above that autograded test changed, so the override was dropped" if hg.test
               else "the resubmitted answer changed")
        b.found.collected.flags.setdefault(hg.student, []).append(f"{hg.assignment}: {what} must be redone: {why}")
        b.services.log(f"{'hand grade' if hg.manual_score is not None else 'comment'} to redo: {hg.student} "
                       f"({hg.assignment}) {hg.grade_id}: {why}")
