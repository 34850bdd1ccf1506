"""``grade_class``: one run of the grader, as the list of its stages (:data:`STAGES`).

``prepare`` (refuse bad input, the canary, a backup, start over if asked) -> ``generate`` ->
``collect`` -> ``repair`` (and the tamper scan) -> ``inputs`` (drawn from a secret seed) ->
``autograde`` (Dask tasks or processes, sandboxed) -> ``scoring`` (outside the kernels) ->
``feedback`` -> ``export`` (grades.csv) -> ``score`` (per-question CSV) -> ``report``. Every
grading step is one of nbgrader's own apps run in the course root; the stages arrange the
submissions, run the apps and read nbgrader's gradebook. docs/ARCHITECTURE.md describes each
stage; tests/test_docs.py checks that it, the README and this list name :data:`STAGES`.
"""
from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import nbformat

from . import canary, database, inplace, sandbox, state, warm
from . import scores, scoring
from .apps import AppError, Course, generate_feedback_parallel
from .collect import Collected, check_input, collect, lms_late, write_roster
from .batch import Batch, GradeRun, read_gradebook
from .course import REPO_ROOT, ROSTER_CSV, CourseTree
from .parallel import AutogradeOutcome, autograde, default_jobs
from .repair import (Repair, remember_unreadable, repair_all, repair_submission, set_aside_damaged_unreadable,
                     unreadable, unreadable_note)
from .report import build_report, read_runs, summary_text, write_report
# starting over and restoring a state archive: grader/reset.py (light, for `python -m grader clean`)
from .reset import (DEMO_MARKER, GRADEBOOK_IN_ARCHIVE, GRADING_STATE, GRADING_STATE_PATTERNS,  # noqa: F401
                    KEPT_LOGS, _archive_state, _logs_state, _restorable, _state_names, clean, current_state,
                    restore_state, start_over, state_backups)


class GradingError(RuntimeError):
    """The pipeline itself failed (not a student's code): an nbgrader step exited non-zero."""


def list_assignments(course_root: Path) -> list[str]:
    """Assignment names: the folders of ``source/`` that hold a notebook.

    Raises:
        GradingError: ``course_root`` has no ``source/`` folder.
    """
    try:
        return CourseTree(course_root).assignments()
    except FileNotFoundError as e:
        raise GradingError(str(e)) from e


def parse_duedates(items: list[str]) -> dict[str, str]:
    """``--duedate`` values (``"DATE"`` for every assignment, ``"ASSIGNMENT=DATE"`` for one) as
    the ``duedates`` of :func:`grade_class`: ``{"*" or assignment: date}``.

    Raises:
        ValueError: a date nbgrader cannot read.
    """
    from nbgrader.utils import parse_utc

    out = {}
    for item in items:
        name, sep, date = item.partition("=")
        out[name.strip() if sep else "*"] = date.strip() if sep else item.strip()
    for date in out.values():
        try:
            parse_utc(date)
        except (ValueError, OverflowError):
            raise ValueError(f"cannot read {date!r} as a date (e.g. '2026-11-21 09:00 UTC')") from None
    return out


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


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





def prepare(b: Batch) -> None:
    """Refuse bad input and an untrustworthy gradebook before anything is touched; grade the
    instructor's solutions (:mod:`grader.canary`, stops the run when they do not score full); back
    the gradebook up; start over (``fresh``) if asked, carefully (:func:`start_over`)."""
    tree = b.tree
    parse_duedates([f"{k}={v}" for k, v in b.duedates.items()])  # each date readable
    unknown = sorted(set(b.duedates) - set(b.run.assignments) - {"*"})
    if unknown:
        raise ValueError(f"due date for unknown assignment {', '.join(unknown)} "
                         f"(assignments: {', '.join(b.run.assignments)})")
    if b.submissions is not None:
        check_input(tree, b.submissions, b.run.assignments)
    if b.lms_gradebook is not None and not Path(b.lms_gradebook).is_file():
        raise FileNotFoundError(f"no LMS gradebook export at {b.lms_gradebook}")
    demo_state = (tree.root / DEMO_MARKER).exists()
    if b.submissions is None and state.has_grading_state(tree) and not demo_state:
        raise state.CourseStateError(
            f"{tree.root} holds a real class: the demo class is graded in a course folder of its own "
            "(`python -m grader` with no --submissions uses build/demo-course/); nothing was written")
    if b.fresh is None:
        b.fresh = b.submissions is None
    if not b.fresh and demo_state:
        b.fresh = True
        b.log("the grading state here was the demo class's: removed before grading your submissions")
    if not b.fresh:
        state.check_gradebook(tree)
    canary.stage(b)  # the instructor's solutions first (grader/canary.py): nothing is written before
    if b.fresh:
        start_over(tree, yes=b.yes, tag=b.run_id, log=b.log)
    else:
        state.backup_gradebook(tree, f"{b.run_id}-before", log=b.log)


def generate(b: Batch) -> None:
    """``nbgrader generate_assignment`` for each assignment (this also records its cells in the
    gradebook, which autograde needs); says which ``release/`` folders were stale.

    Raises:
        GradingError: nbgrader failed (its log is quoted).
    """
    b.log(f"generate: {', '.join(b.run.assignments)}")
    b.course = Course(b.tree)
    for a in b.run.assignments:
        rel = b.tree.release(a)
        before = _digest(rel) if rel.is_dir() else ""
        try:
            skipped = b.course.generate_unless_unchanged(a)
        except AppError as e:
            raise GradingError(str(e)) from e
        if skipped:
            b.log(f"generate: {a} skipped: {skipped}")
        elif _digest(rel) != before:
            b.log(f"generate: release/{a} was stale and has been regenerated from source/{a}")


def collect_submissions(b: Batch) -> None:
    """This batch into ``submitted/`` (the demo class when no submissions are given); due dates.

    Which submissions this run grades: those it brought in new or changed (graded in place from
    ``submitted/``: changed since last graded, :mod:`grader.inplace`), and those an earlier
    run left ungraded (stopped, failed, or rolled back by a restore). The ``collect:`` line names
    the latter that this batch did not bring (``...; 3 carried over from the interrupted run
    <id>, graded in this run too: a (rmsnorm), ...``), and one handed in again unchanged but not
    graded yet is said to be finished here, not called "not a resubmission". The run that received
    each submission is kept in ``logs/collected_by.json``.

    Raises:
        GradingError: an nbgrader app failed (its log is quoted).
        ValueError: the submissions are not a recognised kind of input."""
    tree, run, log = b.tree, b.run, b.log
    try:
        if b.submissions is None:
            from .demo import apply_due_dates, write_demo_submissions

            students = write_demo_submissions(tree.root, tree.submitted(), b.demo_students)
            b.collected = Collected(source="embedded demo class", students=sorted(students),
                                    _pairs=tree.pairs(run.assignments))
            apply_due_dates(tree.root, b.course.set_due_date)
            (tree.root / DEMO_MARKER).write_text("the grading state here is the embedded demo class\n")
        else:
            _keep_as_received(b)
            b.collected = collect(b.course, b.submissions, run.assignments)
        for a, date in b.duedates.items():
            for name in run.assignments if a == "*" else [a]:
                b.course.set_due_date(name, date)
    except AppError as e:
        raise GradingError(str(e)) from e
    got = b.collected
    run.batch, run.students = got.students, tree.students()
    # a batch grades what it brought in new or changed, and whatever an earlier run left ungraded
    graded, lost = _graded(tree, run.assignments), set()
    if not b.fresh:  # recorded as graded, yet not in the gradebook (an older backup restored): again
        lost = graded - state.gradebook_pairs(tree) - set(got.pairs)
        graded -= lost
    # left ungraded by an earlier run (interrupted, failed, or rolled back by a restore): this
    # run finishes them, and says whose they are
    left = set() if b.fresh else set(tree.pairs(run.assignments)) - graded - set(got.pairs) - lost
    origins = _origins(tree)
    carried = sorted(left - set(got._pairs))
    log(f"collect: {len(run.batch)} students from {got.source} -> {tree.submitted()}"
        + (f" ({len(run.students)} there in all)" if len(run.students) != len(run.batch) else "")
        + "".join(f"; {len({st for _, st in prs})} carried over from {origin}, graded in this run too: "
                  f"{_named(prs)}" for origin, prs in _by_origin(carried, origins).items()))
    for name, why in got.skipped.items():
        log(f"collect: skipped {name}: {why}")
    for note in got.notes:  # in place: what changed since graded, what is new (grader/inplace.py)
        log(f"collect: {note}")
    for a, st in [] if got.in_place else got.replaced:
        log(f"collect: {st} ({a}) replaces that student's earlier submission")
    if got.in_place and (same := [pr for pr in got.unchanged if pr not in left]):
        log(f"collect: {len(same)} unchanged since last graded: not graded again (grades and feedback kept)")
    for a, st in got.unchanged:
        if (a, st) not in left:
            if not got.in_place:
                log(f"collect: {st} ({a}) is unchanged since it was last received: not a resubmission")
            continue
        origin, finished = origins.get(f"{st}/{a}", (_EARLIER, False))
        log(f"collect: {st} ({a}) is unchanged since it was last received, by {origin}"
            + (": this run grades it again" if finished
               else ", which did not finish grading it: this run finishes grading it"))
    for st, notes in sorted(got.flags.items()):
        for note in notes:
            log(f"collect: {st}: {note}")
    for a, st in sorted(lost):
        log(f"collect: {st} ({a}) has no gradebook row (an older gradebook was restored?): graded again")
    _remember_collected(tree, got.pairs, b.run_id)
    b.to_grade = None if b.fresh else sorted(set(got.pairs) | (set(tree.pairs(run.assignments)) - graded))
    # as collected (before repair): recorded with the graded hash once graded (grader/inplace.py)
    got.as_collected = inplace.hashes_now(tree, tree.pairs(run.assignments) if b.to_grade is None else b.to_grade)
    # until their autograde finishes, the submissions to grade count as ungraded (a killed run's
    # rerun grades them again)
    _write_graded(tree, set() if b.to_grade is None else graded - set(b.to_grade))


GRADED = state.GRADED


def _graded(tree: CourseTree, assignments: list[str]) -> set[tuple[str, str]]:
    path = tree.logs / GRADED
    if not path.is_file():  # a course graded before this record existed
        return set(tree.pairs(assignments, "autograded"))
    return {tuple(pr) for pr in json.loads(path.read_text())}


def _write_graded(tree: CourseTree, done: set[tuple[str, str]]) -> None:
    tree.logs.mkdir(parents=True, exist_ok=True)
    part = tree.logs / (GRADED + ".part")
    part.write_text(json.dumps(sorted(done)))
    os.replace(part, tree.logs / GRADED)


def _remember_graded(tree: CourseTree, assignments: list[str], out: AutogradeOutcome) -> None:
    _write_graded(tree, (_graded(tree, assignments) | set(out.graded)) - set(out.failed))


#: ``logs/collected_by.json``: ``{"<student>/<assignment>": run id}``, the run that received each
#: submission now in ``submitted/`` (a later run that finishes grading it names that run).
COLLECTED_BY = "collected_by.json"
#: How a submission whose receiving run is unknown is named (collected before the record existed).
_EARLIER = "an earlier run that did not finish"


def _remember_collected(tree: CourseTree, pairs, run_id: str) -> None:
    """Record ``run_id`` as the run that received ``pairs`` (``logs/collected_by.json``)."""
    known = _collected_by(tree)
    known.update({f"{st}/{a}": run_id for a, st in pairs})
    tree.logs.mkdir(parents=True, exist_ok=True)
    part = tree.logs / (COLLECTED_BY + ".part")
    part.write_text(json.dumps(known, indent=1, sort_keys=True))
    os.replace(part, tree.logs / COLLECTED_BY)


def _collected_by(tree: CourseTree) -> dict[str, str]:
    """``logs/collected_by.json`` as ``{"<student>/<assignment>": run id}``; a damaged or
    hand-edited file (not JSON, not a dict, odd values) gives what can be read of it: it only
    names runs in messages, no grade depends on it."""
    path = tree.logs / COLLECTED_BY
    try:
        by = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in by.items() if isinstance(v, (str, int))} if isinstance(by, dict) else {}


def _origins(tree: CourseTree) -> dict[str, tuple[str, bool]]:
    """``{"<student>/<assignment>": (the run that received it, in words; whether that run
    ended ok)}`` from ``logs/collected_by.json`` and the run log: "the interrupted run <id>",
    "the failed run <id>", "the run <id> (killed: it left no record)", or for a run
    that ended ok (its grading was rolled back by a restore, or its autograde failed)
    "run <id>, whose grading is not recorded as done"."""
    by = _collected_by(tree)
    runs = {r.get("run_id"): r for r in read_runs(tree.root)}
    out = {}
    for key, rid in by.items():
        status = (runs.get(rid) or {}).get("status")
        if status == "ok":
            out[key] = (f"run {rid}, whose grading is not recorded as done (an older gradebook "
                        "restored, or its autograde failed)", True)
        elif status in ("interrupted", "failed"):
            out[key] = (f"the {status} run {rid}", False)
        else:
            out[key] = (f"the run {rid} (killed: it left no record)", False)
    return out


def _by_origin(pairs, origins: dict[str, tuple[str, bool]]) -> dict[str, list[tuple[str, str]]]:
    """``pairs`` grouped by the run that received them (:func:`_origins`), in words."""
    out: dict[str, list[tuple[str, str]]] = {}
    for a, st in pairs:
        out.setdefault(origins.get(f"{st}/{a}", (_EARLIER, False))[0], []).append((a, st))
    return out


def _named(pairs) -> str:
    """``ada (rmsnorm), bo (practice, rmsnorm)``: students, each with their assignments."""
    per: dict[str, list[str]] = {}
    for a, st in pairs:
        per.setdefault(st, []).append(a)
    return ", ".join(f"{st} ({', '.join(per[st])})" for st in sorted(per))


def _keep_as_received(b: Batch) -> None:
    """The batch's input, byte for byte, under ``logs/batches/<run id>/received/`` (never
    overwritten: every run has its own folder)."""
    dest = b.tree.logs / "batches" / b.run_id / "received"
    part = dest.with_name("received.part")
    part.mkdir(parents=True, exist_ok=True)
    src = Path(b.submissions)
    try:
        if src.is_file():
            shutil.copy2(src, part / src.name)
        else:
            shutil.copytree(src, part / src.name, dirs_exist_ok=True)
        os.replace(part, dest)
    finally:  # a full disk leaves no half copy
        shutil.rmtree(part, ignore_errors=True)


def repair(b: Batch) -> None:
    """Structural repair and the tamper scan of the submissions to grade (:mod:`grader.repair`);
    the files as they were before repair go to ``logs/batches/<run id>/originals/``. A file that
    cannot be read as a notebook is recorded in ``logs/unreadable.json`` before autograde
    (:func:`grader.repair.remember_unreadable`), and a submission graded again whose record holds
    (its stand-in, the released notebook, reads fine) keeps that reason.

    Raises:
        OSError: ``submitted/`` or ``logs/`` cannot be written."""
    damaged = set_aside_damaged_unreadable(b.tree)
    if damaged:
        b.log(f"repair: {damaged}")
    keep = b.tree.logs / "batches" / b.run_id / "originals"
    if b.to_grade is None:
        b.run.repairs = repair_all(b.tree, b.run.assignments, keep=keep)
    else:  # only what is graded: a notebook left alone keeps its bytes (grader/inplace.py compares them)
        reps = {(a, st): repair_submission(b.tree, st, a, keep) for a, st in b.to_grade
                if b.tree.submitted(st, a).is_dir()}
        b.run.repairs = {k: r for k, r in reps.items() if r.notes or r.flags or r.unrecoverable}
    remember_unreadable(b.tree, b.run.repairs)  # before autograde: a stopped run's rerun reports it too
    # graded again, an unreadable file's stand-in (the released notebook) reads fine: say what it is
    for (a, st), why in unreadable(b.tree).items():
        if b.to_grade is None or (a, st) in set(b.to_grade):
            rep = b.run.repairs.setdefault((a, st), Repair(st, a))
            if not rep.unrecoverable:
                rep.unrecoverable = why
                rep.notes.append(unreadable_note(why))
    for (a, st), rep in sorted(b.run.repairs.items()):
        for line in rep.notes + rep.flags:
            b.log(f"repair: {st} ({a}): {line}")


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
                from . import cluster

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
    _carry_hand_grades(b)


def trusted_scoring(b: Batch) -> None:
    """:func:`grader.scores.scoring_stage`; only then are the submissions recorded as graded
    (``logs/graded.json``): a run stopped between autograde and scoring leaves them to the
    rerun, which grades them again (a red-team instructor's Ctrl-C there once left a correct
    submission at the kernel's 0 for good)."""
    from .handgrades import forget

    scores.scoring_stage(b)
    if b.run.autograde is not None:
        done = set(b.run.autograde.graded) - set(b.run.autograde.failed)
        inplace.remember_graded(b.tree, sorted(done), b.collected.as_collected, b.run_id, log=b.log)
        _remember_graded(b.tree, b.run.assignments, b.run.autograde)
        forget(b.tree, b.hand_grades_done)  # applied (or named as to redo): the record may go


def _carry_hand_grades(b: Batch) -> None:
    """Hand grades and formgrader comments of replaced submissions (``logs/handgrades.json``,
    written when they were captured, so an earlier run stopped before this point left them
    there) go back where the answer is unchanged, for the submissions autograded in this run;
    the others are named (log and report) as to redo. They leave the record once the submission
    is recorded as graded (:func:`trusted_scoring`)."""
    from .handgrades import carry_over, pending

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


def feedback(b: Batch) -> None:
    """``nbgrader generate_feedback`` for every assignment with an autograded notebook."""
    graded = [a for a in b.run.assignments if any(b.tree.autograded().glob(f"*/{a}/*.ipynb"))]
    try:
        generate_feedback_parallel(b.course, graded, b.jobs)
    except AppError as e:
        raise GradingError(str(e)) from e
    b.run.feedback_dir = b.tree.feedback()


def export(b: Batch) -> None:
    """``nbgrader export``: ``grades.csv``, one row per (assignment, student), with a ``late``
    column (after the due date, or marked late by the LMS); ``roster.csv`` beside it
    (``student_id,lms_id,name``); the LMS's gradebook filled in when given; the feedback HTML zipped
    for the LMS's bulk feedback upload (``feedback-<lms>-<assignment>.zip``, :mod:`grader.lms`)."""
    try:
        b.run.grades_csv = b.course.export_csv(b.tree.grades_csv)
    except AppError as e:
        raise GradingError(str(e)) from e
    _add_late_column(b.run.grades_csv, lms_late(b.tree))
    write_roster(b.tree, b.tree.root / ROSTER_CSV)
    if b.lms_gradebook is not None:
        from .lms import fill_lms_gradebook

        got = fill_lms_gradebook(b.tree, b.lms_gradebook, b.run.assignments)
        b.run.lms_import = got.path
        b.log(f"export: {got.path} is {b.lms_gradebook.name} with the points of {len(got.filled)} students "
              f"filled in: import it into {got.lms.capitalize()}")
        if got.kept is not None:
            b.log(f"export: the earlier, different {got.path.name} was kept as {got.kept}")
        if got.blank:
            b.log(f"export: left blank (no submission here): {', '.join(got.blank)}")
        if got.missing:
            b.log(f"export: graded here but not in {b.lms_gradebook.name} (their points are not in "
                  f"{got.path.name}; enter them by hand or export the LMS's gradebook again): {', '.join(got.missing)}")
    from .lms import feedback_zips

    kept: dict[Path, Path] = {}
    b.run.feedback_zips = feedback_zips(b.tree, b.run.assignments, kept)
    for path, students in b.run.feedback_zips.items():
        b.log(f"export: {path}: the feedback of {len(students)} students, named for the LMS's bulk "
              "feedback upload")
    for path, earlier in kept.items():
        b.log(f"export: the earlier, different {Path(path).name} was kept as {earlier}")


def _add_late_column(path: Path, lms_marked: set[tuple[str, str]]) -> None:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    for r in rows:
        after_due = bool(r.get("timestamp") and r.get("duedate") and r["timestamp"] > r["duedate"])
        r["late"] = "yes" if after_due or (r["assignment"], r["student_id"]) in lms_marked else ""
    part = path.with_suffix(".part")
    with part.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    os.replace(part, path)


def score(b: Batch) -> None:
    """Per-question points from the gradebook, and ``grades_by_question.csv``."""
    run = b.run
    run.scores, run.max_points = read_gradebook(b.tree, run.assignments)
    run.questions_csv = b.tree.questions_csv
    with run.questions_csv.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["assignment", "student_id", "grade_id", "score", "max_score"])
        for (a, s), row in sorted(run.scores.items()):
            for gid, pts in row.items():
                w.writerow([a, s, gid, f"{pts:g}", f"{run.max_points[a].get(gid, 0):g}"])


def report(b: Batch) -> None:
    """The class report (:mod:`grader.report`): what could not be graded, and every flag. A
    submission whose file could not be read as a notebook is reported as could not be graded,
    with the reason, by every run until another file is received for it (``logs/unreadable.json``,
    not only by the run that repaired it)."""
    run, got = b.run, b.collected
    ungraded = {f"{s} ({a})": why for (a, s), why in run.autograde.failed.items()}
    ungraded.update({f"file {name}": why for name, why in got.skipped.items()})
    this_run: dict[str, dict[str, list[str]]] = {st: {"": list(notes)} for st, notes in got.flags.items()}
    for (a, st), rep in sorted(run.repairs.items()):
        this_run.setdefault(st, {}).setdefault(a, []).extend(rep.notes + rep.flags)
        if rep.unrecoverable:
            ungraded[f"{st} ({a})"] = rep.unrecoverable + " (scored 0)"
    for (a, st), why in unreadable(b.tree).items():  # an earlier batch's, until a readable one replaces it
        ungraded[f"{st} ({a})"] = why + " (scored 0)"
    flags = {st: [f"{a}: {n}" if a else n for a, notes in sorted(per.items()) for n in notes]
             for st, per in sorted(_flag_history(b, this_run).items())}
    flags = {st: notes for st, notes in flags.items() if notes}
    run.report = build_report(b.tree.root, run.assignments, run.scores, run.max_points,
                              ungraded=ungraded, flags=flags, gradebook_url=b.tree.gradebook_url,
                              groups=b.groups)
    # the batch history includes this run (its line in logs/runs.jsonl is written when it ends)
    record = _run_record(b, b.command, "ok")
    record["seconds"] = round(sum(run.stage_seconds.values()), 3)  # so far: the report is the last stage
    run.report.runs.append(record)
    if not run.sandboxed:
        run.report.flags.setdefault("(all)", []).append("graded WITHOUT the sandbox")
    run.report_html = write_report(run.report, b.tree.reports)


def _flag_history(b: Batch, this_run: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
    """Every student's flags across batches, ``{student: {assignment or "": [note]}}``
    (``""``: notes on the student's files as collected, which accumulate), kept in
    ``logs/flags.json``: a submission graded in this run replaces its earlier flags, the rest are
    kept, so the class report of a later batch still shows an earlier batch's flags."""
    store = b.tree.root / "logs" / "flags.json"
    try:
        history = json.loads(store.read_text()) if store.is_file() else {}
    except ValueError:
        history = {}
    graded = set(b.run.autograde.graded) | set(b.run.autograde.failed) | set(b.run.repairs)
    for a, st in graded:
        history.get(st, {}).pop(a, None)
    for st, per in this_run.items():
        for a, notes in per.items():
            if a == "":  # notes on files as collected (a late mark, a skipped file): kept, added to
                kept = history.setdefault(st, {}).setdefault("", [])
                kept += [n for n in notes if n not in kept]
            elif notes:
                history.setdefault(st, {})[a] = list(notes)
    history = {st: per for st, per in history.items() if per}
    store.parent.mkdir(parents=True, exist_ok=True)
    tmp = store.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(history, indent=1, sort_keys=True))
    tmp.replace(store)
    return history


#: How autograde runs when no Dask scheduler is given (``grade_class(engine=...)``, ``--engine``).
DEFAULT_ENGINE = "dask"

#: The stages of a run, in order; ``GradeRun.stage_seconds`` has one entry per stage.
STAGES = (("prepare", prepare), ("generate", generate), ("collect", collect_submissions),
          ("repair", repair), ("inputs", scoring.inputs_stage), ("autograde", autograde_stage),
          ("scoring", trusted_scoring), ("feedback", feedback),
          ("export", export), ("score", score), ("report", report))


def grade_class(*, course_root: Path = REPO_ROOT, submissions: Path | None = None,
                jobs: int | None = None, fresh: bool | None = None, progress: bool = False,
                use_sandbox: bool | None = None, cell_timeout: int | None = None,
                duedates: dict[str, str] | None = None, yes: bool = False, command: str | None = None,
                demo_students: int | None = None, scheduler: str | None = None, db_url: str | None = None,
                engine: str | None = None, lms_gradebook: Path | None = None, groups: bool = True,
                log=print) -> GradeRun:
    """Grade a class end to end with nbgrader: the :data:`STAGES` in order, holding the course's
    run lock, with one record per run appended to ``logs/runs.jsonl``.

    Args:
        course_root: the nbgrader course root (holds ``nbgrader_config.py`` and ``source/``).
        submissions: an nbgrader ``submitted/`` tree, a folder or ``.zip`` of LMS-named
            notebooks, or None for the embedded demo class.
        jobs: concurrent autograde processes (default: all cores).
        fresh: remove earlier grading state first (default: True for the demo class, False
            otherwise, so a real class can be graded in several batches: a batch adds to the
            gradebook, replaces a student's earlier submission of the same assignment, and
            autogrades only its own students). Grading state left by the demo class is
            always removed before real submissions.
        duedates: ``{assignment: date}`` due dates to record in the gradebook (``"*"`` for
            every assignment), e.g. ``{"*": "2026-11-21 09:00 UTC"}``; a submission's
            ``timestamp.txt`` after it is marked late.
        progress: show a progress bar with an ETA on stderr.
        use_sandbox: run every kernel in the bubblewrap sandbox (default: when bwrap works
            here; True makes its absence an error).
        cell_timeout: seconds a cell may run before it is interrupted (default: the
            ``Execute.timeout`` of ``nbgrader_config.py``).
        yes: consent to remove real students' grading state when ``fresh`` (a backup is written
            first); without it a terminal is asked, and no terminal means no.
        command: how this run was started, for the lock and the run log (default: this
            process's command line).
        demo_students: with no ``submissions``, grade only the first N students of the demo
            class (a quick look; default: all 30).
        lms_gradebook: the LMS's own gradebook export (Canvas) or grading worksheet (Moodle):
            written back filled in as ``lms-import-<lms>.csv`` (:mod:`grader.lms`).
        groups: the groups of wrong answers in the class report (:mod:`grader.groups`: read
            from the outputs the scoring stage recorded; no student code runs again). On by
            default; False (``--no-groups``) leaves them out.
        scheduler: the address of a Dask scheduler (``tcp://HOST:8786``) whose workers run the
            autograde tasks (default: ``$DASK_SCHEDULER_ADDRESS``); see :mod:`grader.cluster`.
        db_url: the gradebook's SQLAlchemy URL, e.g. ``postgresql://USER@HOST:5432/DBNAME``
            (nbgrader's ``CourseDirectory.db_url``; default: ``gradebook.db`` here, SQLite).
        engine: how autograde runs without a ``scheduler``: ``"dask"`` (an embedded local
            Dask cluster of ``jobs`` workers) or ``"processes"`` (``jobs`` ``nbgrader
            autograde`` processes); default :data:`DEFAULT_ENGINE`.
        log: where progress lines go.

    Returns:
        :class:`GradeRun` with the paths to ``grades.csv``, the per-question CSV, the
        feedback and the class report.

    Raises:
        GradingError: an nbgrader step failed for a reason other than a student's code.
        FileNotFoundError: ``submissions`` does not exist.
        ValueError: ``submissions`` is not a recognised kind of input or holds no submission
            of any assignment; a due date nbgrader cannot read; ``db_url`` cannot be opened
            (one line, before anything is touched).
        GradingError: also when the ``scheduler`` does not answer or has no workers (before
            anything is touched).
        CourseStateError: another run holds the course; the gradebook is missing, empty or
            corrupt; real students would be removed without a yes; the demo class was asked
            for in a real course. Nothing was written.
    """
    t0 = time.perf_counter()
    engine = engine or DEFAULT_ENGINE
    if engine not in ("dask", "processes"):
        raise ValueError(f"engine must be 'dask' or 'processes', not {engine!r}")
    if db_url:
        database.check_url(db_url)  # a wrong URL: one line, in seconds, nothing touched
    tree = CourseTree(course_root, db_url=db_url or None)
    run = GradeRun(course_root=tree.root, assignments=list_assignments(tree.root))
    command = command or " ".join(sys.argv)
    b = Batch(tree=tree, run=run, submissions=None if submissions is None else Path(submissions),
              jobs=jobs or default_jobs(), fresh=fresh, progress=progress, use_sandbox=use_sandbox,
              cell_timeout=cell_timeout, duedates=dict(duedates or {}), log=log, yes=yes,
              run_id=state.run_id(), demo_students=demo_students,
              lms_gradebook=None if lms_gradebook is None else Path(lms_gradebook), groups=groups,
              command=command)
    from .cluster import ClusterError, DaskCluster, scheduler_address

    try:  # a wrong scheduler address fails here, before anything is touched
        if scheduler_address(scheduler) is not None or engine == "dask":
            b.dask = DaskCluster(scheduler, b.jobs, log=log)
    except ClusterError as e:
        raise GradingError(str(e)) from None
    with (b.dask or contextlib.nullcontext()), state.run_lock(tree, command, log=log):
        status, error = "failed", None
        try:
            for name, stage in STAGES:
                t = time.perf_counter()
                try:
                    stage(b)
                except ClusterError as e:
                    raise GradingError(str(e)) from None
                run.stage_seconds[name] = time.perf_counter() - t
            if tree.is_sqlite:  # the gradebook as this run left it: what a plain `restore` puts back
                state.backup_gradebook(tree, f"{b.run_id}-after", log=log)
            status = "ok"
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP through grader.__main__
            status, error = "interrupted", str(e) or "SIGINT"
            raise
        except BaseException as e:
            error = error_line(e)
            raise
        finally:
            run.seconds = time.perf_counter() - t0
            if status == "ok" or "prepare" in run.stage_seconds or str(error).startswith(canary.FAILED):
                state.record_run(tree, _run_record(b, command, status, error))
    return run


def error_line(e: BaseException) -> str:
    """An exception as one line for the run log: its type and the first line of its message
    (an nbgrader failure quotes nbgrader's whole log below that line), at most 300 characters."""
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {first}"[:300] if first else type(e).__name__


def _run_record(b: Batch, command: str, status: str, error: str | None = None) -> dict:
    """The ``logs/runs.jsonl`` line of one run: ``status`` is ``"ok"``, ``"failed"`` (``error``:
    the exception's type and first line) or ``"interrupted"`` (``error``: the signal)."""
    got = b.collected
    return {"run_id": b.run_id, "time": state.now_utc(), "command": command, "status": status,
            **({"error": error} if error else {}),
            "inputs": _input_hashes(b.submissions), "batch": b.run.batch,
            "students_in_course": b.run.students,
            "skipped": dict(got.skipped) if got else {}, "replaced": [list(p) for p in got.replaced] if got else [],
            "flags": {"jobs": b.jobs, "fresh": b.fresh, "sandbox": b.run.sandboxed,
                      "cell_timeout": b.cell_timeout, "duedates": b.duedates},
            "stage_seconds": {k: round(v, 3) for k, v in b.run.stage_seconds.items()},
            "seconds": round(b.run.seconds, 3)}


def _input_hashes(path: Path | None) -> dict[str, str]:
    """``{file: sha256}`` of what was handed in (the embedded demo class: ``{}``)."""
    if path is None or not Path(path).exists():
        return {}
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


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


def format_table(run: GradeRun) -> str:
    """The grades as a plain-text table from grades.csv: one row per student, one column per
    assignment (``-`` = no submission, ``*`` = late: after the due date or marked late by the LMS),
    and the total."""
    with run.grades_csv.open() as f:
        rows = list(csv.DictReader(f))
    assignments = sorted({r["assignment"] for r in rows})
    maxes = {r["assignment"]: float(r["max_score"]) for r in rows}
    cell: dict[tuple[str, str], str] = {}
    totals: dict[str, float] = {}
    for r in rows:
        late = r.get("late") == "yes" or bool(r.get("timestamp") and r.get("duedate")
                                               and r["timestamp"] > r["duedate"])
        submitted = CourseTree(run.course_root).has_notebook("submitted", r["student_id"], r["assignment"])
        cell[(r["student_id"], r["assignment"])] = (f"{float(r['score']):.2f}{'*' if late else ''}"
                                                    if submitted else "-")
        totals[r["student_id"]] = totals.get(r["student_id"], 0.0) + float(r["score"])
    width = max([len(a) for a in assignments] + [7])
    first = max([len(st) + 1 for st in totals] + [12])  # a long id (an LMS's full name) keeps the columns
    head = f"{'student':<{first}}" + "".join(f"{a:>{width + 1}}" for a in assignments) + f"{'total':>9}"
    sub = f"{'(max)':<{first}}" + "".join(f"{maxes[a]:>{width + 1}g}" for a in assignments) + \
        f"{sum(maxes.values()):>9g}"
    lines = [head, sub, "-" * len(head)]
    for st in sorted(totals):
        lines.append(f"{st:<{first}}" + "".join(f"{cell.get((st, a), '-'):>{width + 1}}" for a in assignments)
                     + f"{totals[st]:>9.2f}")
    lines.append("(* = late: submitted after the due date, or marked late by the LMS; - = no submission)")
    return "\n".join(lines)


__all__ = ["grade_class", "GradeRun", "GradingError", "STAGES", "parse_duedates", "format_table",
           "summary_text", "clean", "read_gradebook", "list_assignments", "REPO_ROOT"]
