"""The stages after scoring: ``feedback`` (nbgrader's HTML per student), ``export`` (``grades.csv``,
``roster.csv``, the LMS's files), ``score`` (the per-question CSV) and ``report`` (the class report)."""
from __future__ import annotations

import csv
from pathlib import Path

from .. import store
from ..apps import AppError, generate_feedback_parallel
from ..batch import Batch, GradingError, read_gradebook, run_record
from ..course import ROSTER_CSV
from ..lms_names import lms_late, write_roster
from ..repair import unreadable
from ..report import build_report, write_report


def feedback(b: Batch) -> None:
    """``nbgrader generate_feedback`` for every assignment with an autograded notebook."""
    graded = [a for a in b.run.assignments if any(b.services.tree.autograded().glob(f"*/{a}/*.ipynb"))]
    try:
        generate_feedback_parallel(b.services.course, graded, b.services.jobs)
    except AppError as e:
        raise GradingError(str(e)) from e
    b.run.feedback_dir = b.services.tree.feedback()


def taken(b: Batch) -> list[str]:
    """The assignments of the run a student could have done: handed in by at least one student
    (this batch or an earlier one), or released to students through nbgrader's exchange (its
    ``outbound/<assignment>``, where this course's nbgrader config puts the exchange). An
    assignment still only in ``source/`` gets no ``grades.csv`` row and no report column: no
    0.0 a student could not have earned, no "missing" for work nobody was given."""
    from nbgrader.api import Gradebook

    config = b.services.course.config
    exchange = Path(config.Exchange.root if "root" in config.Exchange else "/srv/nbgrader/exchange")
    course_id = config.CourseDirectory.course_id if "course_id" in config.CourseDirectory else ""
    with Gradebook(b.services.tree.gradebook_url) as gb:
        handed_in = {a.name for a in gb.assignments if a.submissions}
    return [a for a in b.run.assignments
            if a in handed_in or (course_id and (exchange / course_id / "outbound" / a).is_dir())]


def export(b: Batch) -> None:
    """``nbgrader export``: ``grades.csv``, one row per (assignment, student) of the assignments
    students could have done (:func:`taken`), with a ``late`` column (after the due date, or marked
    late by the LMS); ``roster.csv`` beside it (``student_id,lms_id,name``); the LMS's gradebook
    filled in when given; the feedback HTML zipped for the LMS's bulk feedback upload
    (``feedback-<lms>-<assignment>.zip``, :mod:`grader.lms`)."""
    tree, log, lms_gradebook = b.services.tree, b.services.log, b.options.lms_gradebook
    try:
        b.run.grades_csv = b.services.course.export_csv(tree.grades_csv, taken(b))
    except AppError as e:
        raise GradingError(str(e)) from e
    _add_late_column(b.run.grades_csv, lms_late(tree))
    write_roster(tree, tree.root / ROSTER_CSV)
    if lms_gradebook is not None:
        from ..lms import fill_lms_gradebook

        got = fill_lms_gradebook(tree, lms_gradebook, b.run.assignments)
        b.run.lms_import = got.path
        n = len(got.filled)
        log(f"export: {got.path} is {lms_gradebook.name} with the points of {n} student{'s' * (n != 1)} "
            f"filled in: import it into {got.lms.capitalize()}")
        if got.kept is not None:
            log(f"export: the earlier, different {got.path.name} was kept as {got.kept}")
        if got.blank:
            log(f"export: left blank (no submission here): {', '.join(got.blank)}")
        if got.missing:
            log(f"export: graded here but not in {lms_gradebook.name} (their points are not in "
                f"{got.path.name}; enter them by hand or export the LMS's gradebook again): {', '.join(got.missing)}")
    from ..lms import feedback_zips

    kept: dict[Path, Path] = {}
    b.run.feedback_zips = feedback_zips(tree, b.run.assignments, kept)
    for path, students in b.run.feedback_zips.items():
        n = len(students)
        log(f"export: {path}: the feedback of {n} student{'s' * (n != 1)}, named for the LMS's bulk "
            "feedback upload")
    for path, earlier in kept.items():
        log(f"export: the earlier, different {Path(path).name} was kept as {earlier}")


def _add_late_column(path: Path, lms_marked: set[tuple[str, str]]) -> None:
    """``grades.csv``'s ``late`` column: ``yes`` after the due date or where the LMS marked it late."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    for r in rows:
        after_due = bool(r.get("timestamp") and r.get("duedate") and r["timestamp"] > r["duedate"])
        r["late"] = "yes" if after_due or (r["assignment"], r["student_id"]) in lms_marked else ""
    with store.atomic_path(path) as part, part.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def score(b: Batch) -> None:
    """Per-question points from the gradebook, and ``grades_by_question.csv``."""
    run = b.run
    run.scores, run.max_points = read_gradebook(b.services.tree, run.assignments)
    run.questions_csv = b.services.tree.questions_csv
    with store.atomic_path(run.questions_csv) as part, part.open("w", newline="") as f:
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
    run, got = b.run, b.found.collected
    ungraded = {f"{s} ({a})": why for (a, s), why in run.autograde.failed.items()}
    ungraded.update({f"file {name}": why for name, why in got.skipped.items()})
    this_run: dict[str, dict[str, list[str]]] = {st: {"": list(notes)} for st, notes in got.flags.items()}
    for (a, st), rep in sorted(run.repairs.items()):
        this_run.setdefault(st, {}).setdefault(a, []).extend(rep.notes + rep.flags)
        if rep.unrecoverable:
            ungraded[f"{st} ({a})"] = rep.unrecoverable + " (scored 0)"
    for (a, st), why in unreadable(b.services.tree).items():  # an earlier batch's, until a readable one replaces it
        ungraded[f"{st} ({a})"] = why + " (scored 0)"
    flags = {st: [f"{a}: {n}" if a else n for a, notes in sorted(per.items()) for n in notes]
             for st, per in sorted(_flag_history(b, this_run).items())}
    flags = {st: notes for st, notes in flags.items() if notes}
    run.report = build_report(b.services.tree.root, taken(b), run.scores, run.max_points,
                              ungraded=ungraded, flags=flags, gradebook_url=b.services.tree.gradebook_url,
                              groups=b.options.groups)
    # the batch history includes this run (its line in logs/runs.jsonl is written when it ends)
    record = run_record(b, "ok")
    record["seconds"] = round(sum(run.stage_seconds.values()), 3)  # so far: the report is the last stage
    run.report.runs.append(record)
    if not run.sandboxed:
        run.report.flags.setdefault("(all)", []).append("graded WITHOUT the sandbox")
    run.report_html = write_report(run.report, b.services.tree.reports)


def _flag_history(b: Batch, this_run: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
    """Every student's flags across batches, ``{student: {assignment or "": [note]}}``
    (``""``: notes on the student's files as collected, which accumulate), kept in
    ``logs/flags.json``: a submission graded in this run replaces its earlier flags, the rest are
    kept, so the class report of a later batch still shows an earlier batch's flags."""
    history = store.flags(b.services.tree)
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
    store.write_flags(b.services.tree, history, log=b.services.log)
    return history
