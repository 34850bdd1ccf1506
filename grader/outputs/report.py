"""The class report: score distributions, which mistakes were common, and what still waits for
a human grader.

Scores come from nbgrader's gradebook; the mistakes come from the fault kinds that
``normref.check_*`` puts in the output metadata of the test cells of each autograded notebook
(``{"normref": {"faults": [...]}}``, never shown to the student; read by
``normref.faults.parse_tags``, which also reads the ``[fault: <kind>]`` text tags of notebooks
graded before). Questions graded by
hand (nbgrader "manually graded answer" cells) are read from the gradebook too: until someone
grades them in formgrader they count 0, and the report says so instead of showing them as
failed. Written as an HTML page with PNG figures (``reports/``) and printed as a short text
summary.
"""
from __future__ import annotations

import html
import json
import os
import re
import textwrap
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from normref.faults import ALIASES, FAULTS, parse_tags

from ..ledger import store
from ..ledger.course import GRADEBOOK, GRADES_CSV, QUESTIONS_CSV, CourseTree
from .report_plots import plot_scores
from .review import for_review, review_summary

#: Every fault kind the checkers name, with its description (normref.faults is the registry).
KNOWN_FAULTS = {k: f.message for k, f in FAULTS.items()}

#: Earlier names of a fault kind (notebooks graded before the checkers used one name for one
#: mistake): the report shows them under the kind on the right and counts a student once.
FAULT_ALIASES: dict[str, str] = dict(ALIASES)

#: A short phrase per fault kind, for bar labels and the text summary ("3 of 20 <phrase>"),
#: from the registry. Kinds missing here get a phrase cut from their ``KNOWN_FAULTS`` description.
FAULT_LABELS: dict[str, str] = {k: f.label for k, f in FAULTS.items()}

#: Where the instructor grades the questions marked for manual grading (on a laptop).
FORMGRADER_HINT = ("grade them in formgrader: run `make lab-instructor`, then Nbgrader > Formgrader > "
                   "Manual Grading (nbgrader 0.9.6 has no `nbgrader formgrader` command)")


def formgrader_hint(environ=os.environ) -> str:
    """:data:`FORMGRADER_HINT`, or on a JupyterHub (``make grade`` run in a terminal of the
    instructor's own server, which sets ``JUPYTERHUB_SERVICE_PREFIX`` to ``/user/<name>/``)
    formgrader's address there: formgrader inside JupyterLab is blank on a hub (its pages refuse
    to be framed), and ``make lab-instructor`` does not apply."""
    prefix = environ.get("JUPYTERHUB_SERVICE_PREFIX")
    if not prefix:  # a laptop, or an SSH shell on the hub's machine (which sets no JUPYTERHUB_* variable)
        user = environ.get("USER") or environ.get("LOGNAME") or "<you>"
        return (FORMGRADER_HINT + f"; on this course's JupyterHub: Nbgrader > Formgrader in your own server, "
                f"or https://<hub>/user/{user}/formgrader")
    return (f"grade them in formgrader: open {prefix.rstrip('/')}/formgrader on your JupyterHub "
            "(its own browser tab), then Manual Grading")


def canonical_fault(kind: str) -> str:
    """The kind the report shows ``kind`` under (itself unless it is in :data:`FAULT_ALIASES`)."""
    return FAULT_ALIASES.get(kind, kind)


def fault_label(kind: str) -> str:
    """A short human phrase for a fault kind (or one of its aliases)."""
    kind = canonical_fault(kind)
    if kind in FAULT_LABELS:
        return FAULT_LABELS[kind]
    text = KNOWN_FAULTS.get(kind, "")
    text = re.split(r"[:;.(]", text)[0].strip()
    if not text:
        return kind.replace("_", " ")
    return textwrap.shorten(text, 48, placeholder="...")


def fault_description(kind: str) -> str:
    """The full description of a fault kind: of every kind merged into it, without repeats."""
    kind = canonical_fault(kind)
    members = [kind] + [k for k, c in FAULT_ALIASES.items() if c == kind]
    texts: list[str] = []
    for k in members:
        t = KNOWN_FAULTS.get(k)
        if t and t not in texts:
            texts.append(t)
    return " / ".join(texts)


def merge_faults(found: dict[str, list[str]]) -> tuple[Counter, dict[str, list[str]]]:
    """Merge the fault kinds of one assignment under :func:`canonical_fault`.

    Args:
        found: ``{student: [fault kinds tagged in their notebooks]}``.

    Returns:
        ``(Counter(kind -> number of students), {kind: sorted students})``, each student
        counted once per merged kind however many of its aliases they were tagged with.
    """
    who: dict[str, set[str]] = defaultdict(set)
    for student, kinds in found.items():
        for k in kinds:
            who[canonical_fault(k)].add(student)
    return Counter({k: len(v) for k, v in who.items()}), {k: sorted(v) for k, v in who.items()}


@dataclass
class ManualGrading:
    """The questions of one assignment that are graded by hand, and who waits for a grader.

    Attributes:
        questions: ``{grade_id: max points}`` of the manually graded cells.
        waiting: ``{grade_id: [students]}`` whose answer nbgrader flagged "needs manual grade"
            and nobody has graded yet (they count 0 until then).
        graded: ``{grade_id: [students]}`` already graded by hand.
    """

    questions: dict[str, float] = field(default_factory=dict)
    waiting: dict[str, list[str]] = field(default_factory=dict)
    graded: dict[str, list[str]] = field(default_factory=dict)

    @property
    def points(self) -> float:
        """Points per submission that are graded by hand."""
        return sum(self.questions.values())

    @property
    def submissions_waiting(self) -> list[str]:
        """Students with at least one answer waiting for a grader."""
        return sorted({s for v in self.waiting.values() for s in v})

    def message(self) -> str:
        """One sentence for the instructor: what is graded by hand and what still waits."""
        nq = len(self.questions)
        ids = ", ".join(self.questions)
        head = (f"{self.points:g} point{'s' if self.points != 1 else ''} in {nq} "
                f"question{'s' if nq != 1 else ''} ({ids}) {'are' if self.points != 1 else 'is'} "
                "graded by hand")
        n = len(self.submissions_waiting)
        if not n:
            return head + ": none waits for a grader."
        return (f"{head}: {n} submission{'s' if n != 1 else ''} wait{'s' if n == 1 else ''} for it; "
                f"{formgrader_hint()}; until then {'they count' if n != 1 else 'it counts'} 0.")

    def to_json(self) -> dict:
        return {"questions": self.questions, "points": self.points,
                "submissions_waiting": len(self.submissions_waiting),
                "waiting": self.waiting, "graded": self.graded, "message": self.message()}


def read_manual_grading(gradebook, assignments: list[str]) -> dict[str, ManualGrading]:
    """The manually graded questions of each assignment, from nbgrader's gradebook.

    A grade cell is graded by hand when it is a markdown cell or also a solution cell (nbgrader's
    "manually graded answer"); nbgrader then leaves its ``auto_score`` empty and flags the
    grade ``needs_manual_grade`` once a student answered it (an unanswered one scores 0).

    Args:
        gradebook: an open :class:`nbgrader.api.Gradebook`, or the path of ``gradebook.db``.

    Returns:
        ``{assignment: ManualGrading}`` for the assignments with a manually graded question.
    """
    from nbgrader.api import Gradebook, MissingEntry

    if not isinstance(gradebook, Gradebook):
        with Gradebook(f"sqlite:///{Path(gradebook)}") as gb:
            return read_manual_grading(gb, assignments)
    out: dict[str, ManualGrading] = {}
    for a in assignments:
        try:
            asg = gradebook.find_assignment(a)
        except MissingEntry:
            continue
        mg = ManualGrading()
        for nb in asg.notebooks:
            solutions = {sc.name for sc in nb.solution_cells}
            for gc in nb.grade_cells:
                if gc.cell_type == "markdown" or gc.name in solutions:
                    mg.questions[gc.name] = float(gc.max_score)
        if not mg.questions:
            continue
        for sub in gradebook.assignment_submissions(a):
            for snb in sub.notebooks:
                for g in snb.grades:
                    if g.name not in mg.questions:
                        continue
                    if g.manual_score is not None:
                        mg.graded.setdefault(g.name, []).append(sub.student.id)
                    elif g.needs_manual_grade:
                        mg.waiting.setdefault(g.name, []).append(sub.student.id)
        mg.waiting = {k: sorted(v) for k, v in mg.waiting.items()}
        mg.graded = {k: sorted(v) for k, v in mg.graded.items()}
        out[a] = mg
    return out


@dataclass
class ClassReport:
    """Everything the report shows.

    Attributes:
        totals: ``{assignment: {student: total points}}``.
        max_total: ``{assignment: max points}``.
        questions: ``{assignment: {grade_id: {student: points}}}``.
        max_points: ``{assignment: {grade_id: max points}}``.
        faults: ``{assignment: Counter(fault kind -> number of students)}``, kinds merged
            under :func:`canonical_fault` (a student counts once per mistake).
        students_with_mistake: ``{(assignment, fault kind): [students]}``, merged likewise.
        students_with_fault: ``{(assignment, fault kind): [students]}`` per kind as tagged in
            the notebooks, before merging.
        not_diagnosed: ``{assignment: [students]}`` whose submission could not be graded (see
            ``ungraded``): scored 0 and left out of the mistake counts.
        manual: ``{assignment: ManualGrading}`` for assignments with questions graded by hand.
        ungraded: ``{student or file: reason}`` for work that could not be graded.
        flags: ``{student: [notes]}`` from earlier stages (repairs, lateness).
        groups: ``{assignment: [grader.outputs.groups.Group]}``, wrong answers that agree on a checker's
            battery, largest first (named or not).
        groups_missing: ``{what: why}`` not in the groups: questions scored in the kernel, a
            question graded on several runs' inputs, notebooks without records.
        similar: ``{assignment: [grader.outputs.similarity.Pair]}``, near-identical answer code.
        late: ``{(assignment, student): seconds late}`` from the gradebook (late ones only).
        lms_late: ``(assignment, student)`` whose graded download the LMS marked late (Canvas's
            ``_LATE_``, ``logs/lms_late.json``), as ``grades.csv``'s ``late`` column counts them.
        course_root: where the links of the HTML report point (feedback, autograded, CSVs).
        runs: the batch history, ``logs/runs.jsonl`` (one dict per grading run).
        names: ``{student: name as the LMS wrote it}`` where the gradebook knows one (students
            collected from LMS downloads: its first and last name, as in ``roster.csv``).
    """

    totals: dict[str, dict[str, float]] = field(default_factory=dict)
    max_total: dict[str, float] = field(default_factory=dict)
    questions: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    max_points: dict[str, dict[str, float]] = field(default_factory=dict)
    faults: dict[str, Counter] = field(default_factory=dict)
    students_with_mistake: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    students_with_fault: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    not_diagnosed: dict[str, list[str]] = field(default_factory=dict)
    manual: dict[str, ManualGrading] = field(default_factory=dict)
    ungraded: dict[str, str] = field(default_factory=dict)
    flags: dict[str, list[str]] = field(default_factory=dict)
    groups: dict[str, list] = field(default_factory=dict)
    groups_missing: dict[str, str] = field(default_factory=dict)
    similar: dict[str, list] = field(default_factory=dict)
    late: dict[tuple[str, str], float] = field(default_factory=dict)
    lms_late: set[tuple[str, str]] = field(default_factory=set)
    course_root: Path | None = None
    runs: list[dict] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)

    @property
    def students(self) -> list[str]:
        """Every student with a score in any assignment, sorted."""
        return sorted({s for t in self.totals.values() for s in t})

    def missing(self, student: str) -> list[str]:
        """Assignments ``student`` has no graded submission of."""
        return [a for a, t in self.totals.items() if student not in t]

    def diagnosed(self, assignment: str) -> int:
        """How many submissions of ``assignment`` the mistake counts are out of."""
        return len(self.totals.get(assignment, {})) - len(self.not_diagnosed.get(assignment, []))

    def waiting_questions(self, assignment: str) -> set[str]:
        """Grade ids of ``assignment`` with answers still waiting for a grader."""
        mg = self.manual.get(assignment)
        return {q for q, who in mg.waiting.items() if who} if mg else set()


def faults_in_notebook(path: Path) -> list[str]:
    """Fault kinds named in the outputs of the graded cells of one autograded notebook."""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # noqa: BLE001 - an unreadable notebook has no diagnosis to count
        return []
    found: list[str] = []
    for cell in nb.cells:
        if not cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            continue
        for kind in parse_tags(cell):  # output metadata, or [fault: kind] in older outputs
            if kind not in found:
                found.append(kind)
    return found


def _ungraded_key(student: str, assignment: str) -> str:
    # the key grade_class uses in ``ungraded`` for one submission
    return f"{student} ({assignment})"


def build_report(course_root: Path, assignments: list[str], scores, max_points,
                 ungraded: dict[str, str] | None = None,
                 flags: dict[str, list[str]] | None = None, *,
                 groups: bool = True, similarity: bool = True, jobs: int | None = None,
                 gradebook_url: str | None = None) -> ClassReport:
    """Assemble a :class:`ClassReport` from the gradebook scores, the autograded notebooks and
    the manually graded questions in the gradebook (``gradebook_url``, default
    ``course_root/gradebook.db``).

    Args:
        scores: ``{(assignment, student): {grade_id: points}}`` (see ``read_gradebook``).
        max_points: ``{assignment: {grade_id: max points}}``.
        ungraded: ``{"<student> (<assignment>)" or "file <name>": reason}``; such a submission
            keeps its (zero) score but is left out of the mistake counts, since its notebook
            was not the student's work that ran.
        groups: find the groups of wrong answers (:func:`grader.outputs.groups.mistake_groups`: from
            the outputs the scoring stage recorded in the autograded notebooks; no code runs).
        similarity: find near-identical answer code (:func:`grader.outputs.similarity.similar_pairs`).
        jobs: unused (the groups start no kernel); kept for callers that pass it.
        gradebook_url: the gradebook's SQLAlchemy URL (``--db``), when it is not the course
            root's ``gradebook.db``.
    """
    course_root = Path(course_root)
    rep = ClassReport(ungraded=dict(ungraded or {}), flags={k: list(v) for k, v in (flags or {}).items()},
                      course_root=course_root)
    _add_scores(rep, course_root, assignments, scores, max_points)
    _add_gradebook(rep, course_root, assignments, gradebook_url)
    graded = {a: sorted(s for s in rep.totals[a] if s not in rep.not_diagnosed.get(a, [])) for a in assignments}
    if groups:
        from .groups import mistake_groups

        students = sorted({s for v in graded.values() for s in v})
        rep.groups, rep.groups_missing = mistake_groups(course_root, assignments, students)
    if similarity:
        from .similarity import similar_pairs

        for a in assignments:
            pairs = similar_pairs(course_root, a, graded[a])
            if pairs:
                rep.similar[a] = pairs
    return rep


def _add_scores(rep: ClassReport, course_root: Path, assignments: list[str], scores, max_points) -> None:
    """``rep``'s points, totals, and the fault kinds named in each graded submission's notebooks."""
    found: dict[str, dict[str, list[str]]] = {}
    for a in assignments:
        rep.max_points[a] = dict(max_points.get(a, {}))
        rep.max_total[a] = sum(rep.max_points[a].values())
        rep.totals[a] = {}
        rep.questions[a] = defaultdict(dict)
        found[a] = {}
    for (a, s), row in scores.items():
        if a not in rep.totals:
            continue
        rep.totals[a][s] = sum(row.values())
        for gid, pts in row.items():
            rep.questions[a][gid][s] = pts
        if _ungraded_key(s, a) in rep.ungraded:
            rep.not_diagnosed.setdefault(a, []).append(s)
            continue
        kinds: list[str] = []
        for nb_path in sorted((course_root / "autograded" / s / a).glob("*.ipynb")):
            for kind in faults_in_notebook(nb_path):
                if kind not in kinds:
                    kinds.append(kind)
                    rep.students_with_fault.setdefault((a, kind), []).append(s)
        found[a][s] = kinds
    for a in assignments:
        rep.faults[a], who = merge_faults(found[a])
        for kind, students in who.items():
            rep.students_with_mistake[(a, kind)] = students
    rep.not_diagnosed = {a: sorted(v) for a, v in rep.not_diagnosed.items()}
    rep.questions = {a: dict(q) for a, q in rep.questions.items()}


def _add_gradebook(rep: ClassReport, course_root: Path, assignments: list[str], gradebook_url: str | None) -> None:
    """``rep``'s manual grading, lateness and names (the gradebook), LMS lateness, run log."""
    db = course_root / GRADEBOOK
    url = gradebook_url or (f"sqlite:///{db}" if db.is_file() else None)
    if url:
        from nbgrader.api import Gradebook

        with Gradebook(url) as gb:
            rep.manual = read_manual_grading(gb, assignments)
            rep.late = read_lateness(gb, assignments)
            rep.names = {st.id: name for st in gb.students
                         if (name := " ".join(x for x in (st.first_name, st.last_name) if x))}
    from ..intake.lms_names import lms_late

    rep.lms_late = {k for k in lms_late(CourseTree(course_root)) if k[1] in rep.totals.get(k[0], {})}
    rep.runs = read_runs(course_root)


def read_lateness(gradebook, assignments: list[str]) -> dict[tuple[str, str], float]:
    """``{(assignment, student): seconds late}`` of every late submission, from nbgrader's
    gradebook (its ``total_seconds_late``: the timestamp after the due date)."""
    from nbgrader.api import Gradebook, MissingEntry

    if not isinstance(gradebook, Gradebook):
        with Gradebook(f"sqlite:///{Path(gradebook)}") as gb:
            return read_lateness(gb, assignments)
    out: dict[tuple[str, str], float] = {}
    for a in assignments:
        try:
            subs = gradebook.assignment_submissions(a)
        except MissingEntry:
            continue
        for sub in subs:
            late = float(sub.total_seconds_late or 0.0)
            if late > 0:
                out[(a, sub.student.id)] = late
    return out


def read_runs(course_root: Path) -> list[dict]:
    """The batch history: ``logs/runs.jsonl``, one dict per grading run (unreadable lines skipped;
    :func:`grader.ledger.store.read_runs`)."""
    return store.read_runs(CourseTree(course_root))


def summary_text(rep: ClassReport) -> str:
    """The short text summary printed at the end of ``make grade``."""
    lines = ["Class report"]
    for a, totals in rep.totals.items():
        n = len(totals)
        if not n:
            lines.append(f"  {a}: no graded submissions")
            continue
        vals = sorted(totals.values())
        mean = sum(vals) / n
        pending = rep.waiting_questions(a)
        if pending:
            auto_qs = [q for q in rep.max_points[a] if q not in rep.manual[a].questions]
            auto_max = sum(rep.max_points[a][q] for q in auto_qs)
            full = sum(sum(rep.questions[a].get(q, {}).get(s, 0.0) for q in auto_qs) >= auto_max - 1e-9
                       for s in totals)
            full_text = f"{full} with full marks on the autograded part"
        else:
            full = sum(v >= rep.max_total[a] - 1e-9 for v in vals)
            full_text = f"{full} with full marks"
        lines.append(f"  {a}: {n} graded, mean {mean:.2f} / {rep.max_total[a]:g}, "
                     f"median {vals[n // 2]:.2f}, {full_text}")
        if a in rep.manual and (pending or rep.manual[a].graded):
            lines.append(f"    {rep.manual[a].message()}")
        m = rep.diagnosed(a)
        if rep.not_diagnosed.get(a):
            lines.append(f"    mistakes below are out of {m}: not counted, could not be graded: "
                         f"{', '.join(rep.not_diagnosed[a])}")
        for kind, count in rep.faults[a].most_common():
            lines.append(f"    {count} of {m} {fault_label(kind)}")
        gs = rep.groups.get(a, [])
        if gs:
            top = gs[0]
            lines.append(f"    {len(gs)} group{'s' if len(gs) != 1 else ''} of wrong answers (largest: "
                         f"{top.size} student{'s' if top.size != 1 else ''}, {top.checker}): "
                         f"{textwrap.shorten(top.diagnosis, 70)}")
        if rep.similar.get(a):
            lines.append(f"    {len(rep.similar[a])} pair{'s' if len(rep.similar[a]) != 1 else ''} of "
                         "near-identical answer code (see the report)")
    lines += review_summary(for_review(rep.flags))
    if rep.ungraded:
        lines.append(f"  could not be graded ({len(rep.ungraded)}):")
        for who, why in sorted(rep.ungraded.items()):
            lines.append(f"    {who}: {why}")
    return "\n".join(lines)


#: The report page's template, with its style and script beside it (``report.css``, ``report.js``).
TEMPLATES = Path(__file__).with_name("templates")


def _escaped(value):
    """Jinja's ``finalize``: every value is written as :func:`html.escape` writes it, unless it is
    HTML already (``|safe``)."""
    from markupsafe import Markup

    return value if hasattr(value, "__html__") else Markup(html.escape(str(value)))


def _joined(items, sep: str = "") -> str:
    """The template's ``join``: plain text, which :func:`_escaped` then escapes as a whole."""
    return sep.join(map(str, items))


def _template():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, trim_blocks=True,
                             lstrip_blocks=True, finalize=_escaped, undefined=jinja2.StrictUndefined)
    env.filters["join"] = _joined
    return env.get_template("report.html.j2")


def _rel(target: Path, out_dir: Path) -> str:
    return Path(os.path.relpath(target, out_dir)).as_posix()


def _links(rep: ClassReport, out_dir: Path, student: str, assignment: str) -> list[tuple[str, str]]:
    """``[(kind, href)]``: the student's feedback (HTML) and autograded notebook of one assignment."""
    if rep.course_root is None:
        return []
    return ([("feedback", _rel(p, out_dir))
             for p in sorted((rep.course_root / "feedback" / student / assignment).glob("*.html"))]
            + [("notebook", _rel(p, out_dir))
               for p in sorted((rep.course_root / "autograded" / student / assignment).glob("*.ipynb"))])


def late_note(rep: ClassReport, assignment: str, student: str) -> str:
    """The student table's ``late`` entry for one submission: ``"rmsnorm (2.5 h)"`` after the due
    date (the gradebook), ``"rmsnorm (marked late by the LMS)"`` for a download the LMS marked late
    with no due date here to measure it by, ``""`` when it is not late."""
    if (assignment, student) in rep.late:
        return f"{assignment} ({rep.late[(assignment, student)] / 3600:.1f} h)"
    if (assignment, student) in rep.lms_late:
        return f"{assignment} (marked late by the LMS)"
    return ""


def _student_table(rep: ClassReport, out_dir: Path) -> dict:
    """What the student table shows: its group filter's options, its header, one row per student."""
    member: dict[str, list[str]] = defaultdict(list)
    chip: dict[str, tuple[str, str]] = {}
    options = []
    for a, gs in rep.groups.items():
        for g in gs:
            chip[g.group_id] = (f"{a}: {g.diagnosis}", f"{g.checker} #{g.group_id.rsplit('-', 1)[-1]}")
            options.append((g.group_id, f"{a} / {g.checker}: {g.size} student{'s' if g.size != 1 else ''}: "
                                        f"{textwrap.shorten(g.diagnosis, 60)}"))
            for s in g.students:
                member[s].append(g.group_id)
    assignments = list(rep.totals)
    head = [("text", "student"), ("num", f"total (of {sum(rep.max_total.values()):g})")]
    head += [("num", f"{a} (of {rep.max_total[a]:g})") for a in assignments]
    head += [("text", "late"), ("text", "missing"), ("num", "flags"), ("", "mistake groups"), ("", "links")]
    rows = []
    for s in rep.students:
        points = [sum(rep.totals[a].get(s, 0.0) for a in assignments)] + [rep.totals[a].get(s) for a in assignments]
        links = [(a, _links(rep, out_dir, s, a)) for a in assignments]
        rows.append({
            "student": s, "name": rep.names.get(s), "groups": " ".join(member.get(s, [])),
            "scores": [("", "—") if v is None else (f"{v:.4f}", f"{v:.2f}") for v in points],
            "late": ", ".join(late_note(rep, a, s) for a in assignments if late_note(rep, a, s)),
            "missing": ", ".join(rep.missing(s)), "flags": rep.flags.get(s, []),
            "chips": [chip[g] for g in member.get(s, [])], "links": [(a, ls) for a, ls in links if ls]})
    return {"options": options, "n": len(rep.students), "head": head, "rows": rows}


def _similar(rep: ClassReport) -> dict:
    from .similarity import MIN_OVERLAP, THRESHOLD, side_by_side

    return {"threshold": f"{THRESHOLD:.0%}", "min_overlap": MIN_OVERLAP,
            "pairs": [(a, [(p, side_by_side(p)) for p in pairs]) for a, pairs in rep.similar.items()]}


def _history(rep: ClassReport, out_dir: Path) -> dict:
    """The CSV files beside the report, and the batch history, newest first."""
    files = [(name, _rel(rep.course_root / name, out_dir)) for name in (GRADES_CSV, QUESTIONS_CSV)
             if rep.course_root is not None and (rep.course_root / name).is_file()]
    runs = [{"time": r.get("time", ""), "status": r.get("status", ""), "error": r.get("error", ""),
             "batch": r.get("batch") or [], "skipped": len(r.get("skipped") or {}),
             "replaced": len(r.get("replaced") or []), "seconds": r.get("seconds", ""), "command": r.get("command", "")}
            for r in reversed(rep.runs)]
    return {"files": files, "runs": runs}


def render_html(rep: ClassReport, out_dir: Path, figures: list[tuple[str, str]]) -> str:
    """The report page (``grader/outputs/templates/report.html.j2``), its links relative to ``out_dir``."""
    return _template().render(
        rep=rep, css="".join((TEMPLATES / "report.css").read_text(encoding="utf-8").splitlines()),
        js=(TEMPLATES / "report.js").read_text(encoding="utf-8"), summary=summary_text(rep),
        manual=[(a, mg) for a, mg in rep.manual.items() if mg.submissions_waiting or mg.graded],
        table=_student_table(rep, out_dir), figures=figures, similar=_similar(rep), review=for_review(rep.flags),
        groups_missing="; ".join(f"{s}: {w}" for s, w in sorted(rep.groups_missing.items())),
        fault_label=fault_label, fault_description=fault_description, **_history(rep, out_dir))


def write_report(rep: ClassReport, out_dir: Path) -> Path:
    """Write ``index.html`` (one self-contained page: its style and table script are inline), the
    PNG figures and ``report.json`` into ``out_dir``; return the HTML path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figs = plot_scores(rep, out_dir, fault_label)
    path = out_dir / "index.html"
    path.write_text(render_html(rep, out_dir, figs), encoding="utf-8")
    kinds = sorted({k for c in rep.faults.values() for k in c})
    (out_dir / "report.json").write_text(json.dumps({
        "totals": rep.totals, "max_total": rep.max_total,
        "faults": {a: dict(c) for a, c in rep.faults.items()},
        "fault_labels": {k: fault_label(k) for k in kinds},
        "fault_descriptions": {k: fault_description(k) for k in kinds},
        "fault_aliases": FAULT_ALIASES,
        "faults_as_tagged": {a: {k: len(v) for (a2, k), v in rep.students_with_fault.items() if a2 == a}
                             for a in rep.faults},
        "not_diagnosed": rep.not_diagnosed,
        "manual_grading": {a: mg.to_json() for a, mg in rep.manual.items()},
        "groups": {a: [g.to_json() for g in gs] for a, gs in rep.groups.items()},
        "groups_missing": rep.groups_missing,
        "similar": {a: [p.to_json() for p in ps] for a, ps in rep.similar.items()},
        "late_seconds": {f"{s} ({a})": v for (a, s), v in sorted(rep.late.items())},
        "lms_late": [f"{s} ({a})" for a, s in sorted(rep.lms_late)],
        "ungraded": rep.ungraded, "flags": rep.flags, "names": rep.names}, indent=2, sort_keys=True))
    return path
