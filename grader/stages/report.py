"""The ``report`` stage: the class report (:mod:`grader.outputs.report`), with the flags of every batch."""
from __future__ import annotations

from ..ledger import store
from ..batch import Batch, run_record
from ..intake.repair import unreadable
from ..outputs.report import build_report, write_report
from .export import taken


def report(b: Batch) -> None:
    """The class report (:mod:`grader.outputs.report`): what could not be graded, and every flag. A
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
