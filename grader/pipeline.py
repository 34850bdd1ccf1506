"""``grade_class``: generate -> collect -> autograde (parallel) -> feedback -> grades.csv -> report.

Every grading step is one of nbgrader's own apps run in the course root; this module arranges
the submissions, runs the apps, and reads nbgrader's gradebook.
"""
from __future__ import annotations

import contextlib
import csv
import hashlib
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from . import sandbox
from .apps import AppError, Course, generate_feedback_parallel
from .collect import check_input, collect
from .parallel import AutogradeOutcome, autograde, default_jobs, submissions_in
from .repair import Repair, repair_all
from .report import ClassReport, build_report, summary_text, write_report

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Written when the grading state is the embedded demo class's (removed before real work).
DEMO_MARKER = ".demo-class"
#: What a fresh run removes (nbgrader's grading state; never source/ or release/).
GRADING_STATE = ("submitted", "autograded", "feedback", "downloaded", "reports", "logs", "gradebook.db",
                 "grades.csv", "grades_by_question.csv", DEMO_MARKER)


class GradingError(RuntimeError):
    """The pipeline itself failed (not a student's code): an nbgrader step exited non-zero."""


@dataclass
class GradeRun:
    """What one ``grade_class`` call produced.

    Attributes:
        course_root: the nbgrader course root graded in.
        assignments: assignment names graded.
        students: student ids found in ``submitted/`` (this batch and earlier ones).
        batch: the students this run collected (and graded).
        grades_csv: nbgrader's export, one row per (assignment, student).
        questions_csv: one row per (assignment, student, grade cell) with the points earned.
        feedback_dir: where nbgrader wrote the per-student feedback HTML.
        report_html: the class report page.
        scores: ``{(assignment, student): {grade_id: points}}`` read from the gradebook.
        max_points: ``{assignment: {grade_id: max points}}``.
        report: the :class:`~grader.report.ClassReport`.
        autograde: timing and failures of the autograde stage.
        repairs: ``{(assignment, student): Repair}`` for every submission repair touched.
        sandboxed: whether kernels ran in the bubblewrap sandbox.
        seconds: wall time of the whole run.
        stage_seconds: ``{stage: seconds}`` for generate, collect, repair, autograde,
            feedback+export and report.
    """

    course_root: Path
    assignments: list[str] = field(default_factory=list)
    students: list[str] = field(default_factory=list)
    batch: list[str] = field(default_factory=list)
    grades_csv: Path | None = None
    questions_csv: Path | None = None
    feedback_dir: Path | None = None
    report_html: Path | None = None
    scores: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    max_points: dict[str, dict[str, float]] = field(default_factory=dict)
    report: ClassReport | None = None
    autograde: AutogradeOutcome | None = None
    repairs: dict[tuple[str, str], Repair] = field(default_factory=dict)
    sandboxed: bool = False
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)


def nbgrader_env() -> dict[str, str]:
    """The environment for nbgrader subprocesses: this interpreter's bin/ first on PATH
    (nbgrader runs `alembic` from PATH when it creates a gradebook)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def list_assignments(course_root: Path) -> list[str]:
    """Assignment names: the folders of ``source/`` that hold a notebook."""
    src = course_root / "source"
    if not src.is_dir():
        raise GradingError(f"{course_root} has no source/ folder: is it the course root?")
    return sorted(p.name for p in src.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def generate(course: Course, assignments: list[str], log=print) -> list[str]:
    """``nbgrader generate_assignment`` for each assignment (this also records its cells in the
    gradebook, which autograde needs). Returns the assignments whose ``release/`` was stale.

    Raises:
        GradingError: nbgrader failed (its log is quoted).
    """
    stale = []
    for a in assignments:
        rel = course.root / "release" / a
        before = _digest(rel) if rel.is_dir() else ""
        try:
            course.generate_assignment(a)
        except AppError as e:
            raise GradingError(str(e)) from e
        if _digest(rel) != before:
            stale.append(a)
            log(f"generate: release/{a} was stale and has been regenerated from source/{a}")
    return stale


def read_gradebook(course_root: Path, assignments: list[str]):
    """Per-question points and max points from nbgrader's gradebook.

    Returns:
        ``(scores, max_points)``: ``{(assignment, student): {grade_id: points}}`` and
        ``{assignment: {grade_id: max points}}`` (manually graded cells count 0 until graded).
    """
    from nbgrader.api import Gradebook

    scores: dict[tuple[str, str], dict[str, float]] = {}
    max_points: dict[str, dict[str, float]] = {}
    with Gradebook(f"sqlite:///{course_root / 'gradebook.db'}") as gb:
        for a in assignments:
            asg = gb.find_assignment(a)
            max_points[a] = {gc.name: float(gc.max_score) for nb in asg.notebooks for gc in nb.grade_cells}
            for sub in gb.assignment_submissions(a):
                row: dict[str, float] = {}
                for nb in sub.notebooks:
                    for g in nb.grades:
                        row[g.name] = float(g.score)
                scores[(a, sub.student.id)] = row
    return scores, max_points


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


def clean(course_root: Path) -> None:
    """Remove nbgrader's grading state (``GRADING_STATE``) from a course root."""
    for name in GRADING_STATE:
        p = course_root / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    (course_root / "autograded").mkdir(exist_ok=True)
    (course_root / "autograded" / ".gitkeep").touch()


def grade_class(*, course_root: Path = REPO_ROOT, submissions: Path | None = None,
                jobs: int | None = None, fresh: bool | None = None, progress: bool = False,
                use_sandbox: bool | None = None, cell_timeout: int | None = None,
                duedates: dict[str, str] | None = None, log=print) -> GradeRun:
    """Grade a class end to end with nbgrader.

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
        log: where progress lines go.

    Returns:
        :class:`GradeRun` with the paths to ``grades.csv``, the per-question CSV, the
        feedback and the class report.

    Raises:
        GradingError: an nbgrader step failed for a reason other than a student's code.
        FileNotFoundError: ``submissions`` does not exist.
        ValueError: ``submissions`` is not a recognised kind of input or holds no submission
            of any assignment; a due date nbgrader cannot read.
    """
    t0 = time.perf_counter()
    course_root = Path(course_root).resolve()
    run = GradeRun(course_root=course_root, assignments=list_assignments(course_root))
    # bad input is refused before anything here is touched
    unknown = sorted(set(duedates or {}) - set(run.assignments) - {"*"})
    if unknown:
        raise ValueError(f"due date for unknown assignment {', '.join(unknown)} "
                         f"(assignments: {', '.join(run.assignments)})")
    if submissions is not None:
        check_input(course_root, submissions, run.assignments)
    if fresh is None:
        fresh = submissions is None
    if not fresh and (course_root / DEMO_MARKER).exists():
        fresh = True
        log("the grading state here was the demo class's: removed before grading your submissions")
    if fresh:
        clean(course_root)
    log(f"generate: {', '.join(run.assignments)}")
    course = Course(course_root)
    generate(course, run.assignments, log=log)
    stages = {"generate": time.perf_counter() - t0}

    try:
        collected = collect(course, submissions, run.assignments)
    except AppError as e:
        raise GradingError(str(e)) from e
    run.batch = collected.students
    sub = course_root / "submitted"
    run.students = sorted(p.name for p in sub.iterdir() if p.is_dir()) if sub.is_dir() else []
    log(f"collect: {len(run.batch)} students from {collected.source} -> {course_root / 'submitted'}"
        + (f" ({len(run.students)} there in all)" if len(run.students) != len(run.batch) else ""))
    for name, why in collected.skipped.items():
        log(f"collect: skipped {name}: {why}")
    for a, st in collected.replaced:
        log(f"collect: {st} ({a}) replaces that student's earlier submission")
    for st, notes in sorted(collected.flags.items()):
        for note in notes:
            log(f"collect: {st}: {note}")
    if submissions is None:
        from .demo import apply_due_dates

        apply_due_dates(course_root, course.set_due_date)
        (course_root / DEMO_MARKER).write_text("the grading state here is the embedded demo class\n")
    for a, date in (duedates or {}).items():
        for name in run.assignments if a == "*" else [a]:
            course.set_due_date(name, date)

    stages["collect"] = time.perf_counter() - t0 - sum(stages.values())
    run.repairs = repair_all(course_root, run.assignments)
    for (a, st), rep in sorted(run.repairs.items()):
        for line in rep.notes + rep.flags:
            log(f"repair: {st} ({a}): {line}")

    jobs = jobs or default_jobs()
    stages["repair"] = time.perf_counter() - t0 - sum(stages.values())
    ok = sandbox.available()
    if use_sandbox and not ok:
        raise GradingError("the grading sandbox needs bubblewrap (`apt-get install bubblewrap`), "
                           "and it cannot start here")
    run.sandboxed = ok if use_sandbox is None else use_sandbox
    if not run.sandboxed:
        log("WARNING: grading WITHOUT the sandbox (bubblewrap not available): student code runs "
            "with your rights and can read source/ and gradebook.db")
    extra = [f"--Execute.timeout={cell_timeout}"] if cell_timeout else []
    log(f"autograde: {jobs} parallel nbgrader process{'es' if jobs > 1 else ''}"
        f"{', sandboxed' if run.sandboxed else ''}")
    session = sandbox.SandboxSession(course_root) if run.sandboxed else contextlib.nullcontext()
    with session as sb:
        setup = sb.worker if run.sandboxed else None
        try:
            graded_before = {s for _, s in submissions_in(course_root, run.assignments)
                             if any((course_root / "autograded" / s).glob("*/*.ipynb"))}
            # a batch grades its own students, and anyone an earlier run left ungraded
            only = None if fresh else sorted(set(run.batch) | (set(run.students) - graded_before))
            run.autograde = autograde(course_root, run.assignments, jobs=jobs,
                                      progress=_progress_bar() if progress else None, log=log,
                                      extra_args=extra, worker_setup=setup, only=only)
            _regrade_dead_kernels(course_root, run, extra, setup, log)
        except RuntimeError as e:
            raise GradingError(str(e)) from e
    log(f"autograde: {len(run.autograde.graded)} notebooks in {run.autograde.seconds:.1f} s")
    stages["autograde"] = time.perf_counter() - t0 - sum(stages.values())

    graded = [a for a in run.assignments if any((course_root / "autograded").glob(f"*/{a}/*.ipynb"))]
    try:
        generate_feedback_parallel(course, graded, jobs)
        run.feedback_dir = course_root / "feedback"
        run.grades_csv = course.export_csv(course_root / "grades.csv")
    except AppError as e:
        raise GradingError(str(e)) from e
    stages["feedback+export"] = time.perf_counter() - t0 - sum(stages.values())

    run.scores, run.max_points = read_gradebook(course_root, run.assignments)
    run.questions_csv = course_root / "grades_by_question.csv"
    with run.questions_csv.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["assignment", "student_id", "grade_id", "score", "max_score"])
        for (a, s), row in sorted(run.scores.items()):
            for gid, score in row.items():
                w.writerow([a, s, gid, f"{score:g}", f"{run.max_points[a].get(gid, 0):g}"])

    ungraded = {f"{s} ({a})": why for (a, s), why in run.autograde.failed.items()}
    ungraded.update({f"file {name}": why for name, why in collected.skipped.items()})
    flags: dict[str, list[str]] = {st: list(notes) for st, notes in collected.flags.items()}
    for (a, st), rep in sorted(run.repairs.items()):
        flags.setdefault(st, []).extend(f"{a}: {n}" for n in rep.notes + rep.flags)
        if rep.unrecoverable:
            ungraded[f"{st} ({a})"] = rep.unrecoverable + " (scored 0)"
    run.report = build_report(course_root, run.assignments, run.scores, run.max_points,
                              ungraded=ungraded, flags=flags)
    if not run.sandboxed:
        run.report.flags.setdefault("(all)", []).append("graded WITHOUT the sandbox")
    run.report_html = write_report(run.report, course_root / "reports")
    stages["report"] = time.perf_counter() - t0 - sum(stages.values())
    run.stage_seconds = stages
    run.seconds = time.perf_counter() - t0
    return run


def _answer_ids(nb) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution")]


def _regrade_dead_kernels(course_root: Path, run: GradeRun, extra, setup, log) -> None:
    """A submission nbgrader could not finish (its kernel died or stopped answering) is graded
    again: first unchanged (a kernel can fail to start on a loaded machine), then with one
    answer cell at a time replaced by a stub that raises, until it finishes: that question
    scores 0 with the reason, and every other question keeps its points."""
    out = run.autograde
    for (a, st), reason in sorted(out.failed.items()):
        sub = course_root / "submitted" / st / a
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
            again = autograde(course_root, [a], jobs=1, log=lambda *_: None, extra_args=extra,
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
    assignment (``-`` = no submission, ``*`` = submitted after the due date), and the total."""
    with run.grades_csv.open() as f:
        rows = list(csv.DictReader(f))
    assignments = sorted({r["assignment"] for r in rows})
    maxes = {r["assignment"]: float(r["max_score"]) for r in rows}
    cell: dict[tuple[str, str], str] = {}
    totals: dict[str, float] = {}
    for r in rows:
        late = bool(r.get("timestamp") and r.get("duedate") and r["timestamp"] > r["duedate"])
        submitted = any((run.course_root / "submitted" / r["student_id"] / r["assignment"]).glob("*.ipynb"))
        cell[(r["student_id"], r["assignment"])] = (f"{float(r['score']):.2f}{'*' if late else ''}"
                                                    if submitted else "-")
        totals[r["student_id"]] = totals.get(r["student_id"], 0.0) + float(r["score"])
    width = max([len(a) for a in assignments] + [7])
    head = f"{'student':<12}" + "".join(f"{a:>{width + 1}}" for a in assignments) + f"{'total':>9}"
    sub = f"{'(max)':<12}" + "".join(f"{maxes[a]:>{width + 1}g}" for a in assignments) + \
        f"{sum(maxes.values()):>9g}"
    lines = [head, sub, "-" * len(head)]
    for st in sorted(totals):
        lines.append(f"{st:<12}" + "".join(f"{cell.get((st, a), '-'):>{width + 1}}" for a in assignments)
                     + f"{totals[st]:>9.2f}")
    lines.append("(* = submitted after the due date, - = no submission)")
    return "\n".join(lines)


__all__ = ["grade_class", "GradeRun", "GradingError", "format_table", "summary_text", "clean",
           "read_gradebook", "list_assignments", "REPO_ROOT"]
