"""The ``collect`` stage: this batch into ``submitted/``, and which submissions this run grades."""
from __future__ import annotations

import shutil
from pathlib import Path

from ..intake import inplace
from ..ledger import files, state, store
from ..ledger.apps import AppError
from ..batch import Batch, GradingError
from ..intake.collect import Collected, collect
from ..ledger.course import CourseTree
from ..ledger.reset import DEMO_MARKER

#: How a submission whose receiving run is unknown is named (collected before the record existed).
_EARLIER = "an earlier run that did not finish"


def collect_submissions(b: Batch) -> None:
    """This batch into ``submitted/`` (the demo class when no submissions are given); due dates.

    Which submissions this run grades: those it brought in new or changed (graded in place from
    ``submitted/``: changed since last graded, :mod:`grader.intake.inplace`), and those an earlier
    run left ungraded (stopped, failed, or rolled back by a restore). The ``collect:`` line names
    the latter that this batch did not bring (``...; 3 carried over from the interrupted run
    <id>, graded in this run too: a (rmsnorm), ...``), and one handed in again unchanged but not
    graded yet is said to be finished here, not called "not a resubmission". The run that received
    each submission is kept in ``logs/collected_by.json``.

    Raises:
        GradingError: an nbgrader app failed (its log is quoted).
        ValueError: the submissions are not a recognised kind of input."""
    tree, run = b.services.tree, b.run
    _bring_in(b)
    got = b.found.collected
    run.batch, run.students = got.students, tree.students()
    # a batch grades what it brought in new or changed, and whatever an earlier run left ungraded
    graded, lost = graded_pairs(tree, run.assignments), set()
    if not b.found.fresh:  # recorded as graded, yet not in the gradebook (an older backup restored): again
        lost = graded - state.gradebook_pairs(tree) - set(got.pairs)
        graded -= lost
    # left ungraded by an earlier run (interrupted, failed, or rolled back by a restore): this
    # run finishes them, and says whose they are
    left = set() if b.found.fresh else set(tree.pairs(run.assignments)) - graded - set(got.pairs) - lost
    _say_collected(b, left, lost)
    store.add_collected_by(tree, got.pairs, b.services.run_id, log=b.services.log)
    to_grade = None if b.found.fresh else sorted(set(got.pairs) | (set(tree.pairs(run.assignments)) - graded))
    b.found.to_grade = to_grade
    # as collected (before repair): recorded with the graded hash once graded (grader/intake/inplace.py)
    got.as_collected = inplace.hashes_now(tree, tree.pairs(run.assignments) if to_grade is None else to_grade)
    # until their autograde finishes, the submissions to grade count as ungraded (a killed run's
    # rerun grades them again)
    store.write_graded(tree, set() if b.found.to_grade is None else graded - set(b.found.to_grade), log=b.services.log)


def _bring_in(b: Batch) -> None:
    """The demo class written, or the batch kept as received and collected (``b.found.collected``);
    the due dates set."""
    tree, run = b.services.tree, b.run
    try:
        if b.options.submissions is None:
            from ..demo import apply_due_dates, write_demo_submissions

            students = write_demo_submissions(tree.root, tree.submitted(), b.options.demo_students)
            b.found.collected = Collected(source="embedded demo class", students=sorted(students),
                                    _pairs=tree.pairs(run.assignments))
            apply_due_dates(tree.root, b.services.course.set_due_date)
            (tree.root / DEMO_MARKER).write_text("the grading state here is the embedded demo class\n")
        else:
            _keep_as_received(b)
            b.found.collected = collect(b.services.course, b.options.submissions, run.assignments)
        for a, date in b.options.duedates.items():
            for name in run.assignments if a == "*" else [a]:
                b.services.course.set_due_date(name, date)
    except AppError as e:
        raise GradingError(str(e)) from e


def _say_collected(b: Batch, left: set, lost: set) -> None:
    """The ``collect:`` lines: who came from where, what was skipped, replaced, unchanged, carried
    over from an earlier run (``left``), or has no gradebook row (``lost``)."""
    tree, run, got, log = b.services.tree, b.run, b.found.collected, b.services.log
    origins = _origins(tree)
    carried = sorted(left - set(got._pairs))
    log(f"collect: {len(run.batch)} students from {got.source} -> {tree.submitted()}"
        + (f" ({len(run.students)} there in all)" if len(run.students) != len(run.batch) else "")
        + "".join(f"; {len({st for _, st in prs})} carried over from {origin}, graded in this run too: "
                  f"{_named(prs)}" for origin, prs in _by_origin(carried, origins).items()))
    for name, why in got.skipped.items():
        log(f"collect: skipped {name}: {why}")
    for note in got.notes:  # in place: what changed since graded, what is new (grader/intake/inplace.py)
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
        origin, finished = origins.get(store.key(a, st), (_EARLIER, False))
        log(f"collect: {st} ({a}) is unchanged since it was last received, by {origin}"
            + (": this run grades it again" if finished
               else ", which did not finish grading it: this run finishes grading it"))
    for st, notes in sorted(got.flags.items()):
        for note in notes:
            log(f"collect: {st}: {note}")
    for a, st in sorted(lost):
        log(f"collect: {st} ({a}) has no gradebook row (an older gradebook was restored?): graded again")


def graded_pairs(tree: CourseTree, assignments: list[str]) -> set[tuple[str, str]]:
    """The submissions recorded as graded (``logs/graded.json``); for a course graded before that
    record was kept (or whose record was damaged), those with an autograded notebook."""
    done = store.graded(tree)
    return set(tree.pairs(assignments, "autograded")) if done is None else done


def _origins(tree: CourseTree) -> dict[str, tuple[str, bool]]:
    """``{"<student>/<assignment>": (the run that received it, in words; whether that run
    ended ok)}`` from ``logs/collected_by.json`` and the run log: "the interrupted run <id>",
    "the failed run <id>", "the run <id> (killed: it left no record)", or for a run
    that ended ok (its grading was rolled back by a restore, or its autograde failed)
    "run <id>, whose grading is not recorded as done"."""
    runs = {r.get("run_id"): r for r in store.read_runs(tree)}
    out = {}
    for key, rid in store.collected_by(tree).items():
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
        out.setdefault(origins.get(store.key(a, st), (_EARLIER, False))[0], []).append((a, st))
    return out


def _named(pairs) -> str:
    """``ada (rmsnorm), bo (practice, rmsnorm)``: students, each with their assignments."""
    per: dict[str, list[str]] = {}
    for a, st in pairs:
        per.setdefault(st, []).append(a)
    return ", ".join(f"{st} ({', '.join(per[st])})" for st in sorted(per))


def _keep_as_received(b: Batch) -> None:
    """The batch's input, byte for byte, under ``logs/batches/<run id>/received/`` (never
    overwritten: every run has its own folder; a full disk leaves no half copy)."""
    src = Path(b.options.submissions)
    with store.atomic_dir(store.batch(b.services.tree, b.services.run_id, "received")) as part:
        if src.is_file():
            shutil.copy2(src, part / src.name)
        else:  # as collect copies it: a symbolic link in it is not followed
            files.copy_plain_tree(src, part / src.name)
