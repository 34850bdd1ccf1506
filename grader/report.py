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

#: Every fault kind the checkers name, with its description (normref.faults is the registry).
KNOWN_FAULTS = {k: f.message for k, f in FAULTS.items()}

# Okabe-Ito: readable for colour-blind readers.
_BLUE, _ORANGE, _GREEN, _VERMILION, _GREY = "#0072B2", "#E69F00", "#009E73", "#D55E00", "#999999"

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
    if not prefix:
        return FORMGRADER_HINT
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
        groups: ``{assignment: [grader.groups.Group]}``, wrong answers that agree on a checker's
            battery, largest first (named or not).
        groups_missing: ``{what: why}`` not in the groups: questions scored in the kernel, a
            question graded on several runs' inputs, notebooks without records.
        similar: ``{assignment: [grader.similarity.Pair]}``, near-identical answer code.
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
        groups: find the groups of wrong answers (:func:`grader.groups.mistake_groups`: from
            the outputs the scoring stage recorded in the autograded notebooks; no code runs).
        similarity: find near-identical answer code (:func:`grader.similarity.similar_pairs`).
        jobs: unused (the groups start no kernel); kept for callers that pass it.
        gradebook_url: the gradebook's SQLAlchemy URL (``--db``), when it is not the course
            root's ``gradebook.db``.
    """
    course_root = Path(course_root)
    rep = ClassReport(ungraded=dict(ungraded or {}), flags={k: list(v) for k, v in (flags or {}).items()},
                      course_root=course_root)
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
    db = course_root / "gradebook.db"
    url = gradebook_url or (f"sqlite:///{db}" if db.is_file() else None)
    if url:
        from nbgrader.api import Gradebook

        with Gradebook(url) as gb:
            rep.manual = read_manual_grading(gb, assignments)
            rep.late = read_lateness(gb, assignments)
            rep.names = {st.id: name for st in gb.students
                         if (name := " ".join(x for x in (st.first_name, st.last_name) if x))}
    from .collect import lms_late
    from .course import CourseTree

    rep.lms_late = {k for k in lms_late(CourseTree(course_root)) if k[1] in rep.totals.get(k[0], {})}
    rep.runs = read_runs(course_root)
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
    """The batch history: ``logs/runs.jsonl``, one dict per grading run (unreadable lines skipped)."""
    path = Path(course_root) / "logs" / "runs.jsonl"
    if not path.is_file():
        return []
    runs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            runs.append(json.loads(line))
        except ValueError:
            continue
    return runs


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
    if rep.ungraded:
        lines.append(f"  could not be graded ({len(rep.ungraded)}):")
        for who, why in sorted(rep.ungraded.items()):
            lines.append(f"    {who}: {why}")
    return "\n".join(lines)


def _wrap(text: str, width: int = 34) -> str:
    return "\n".join(textwrap.wrap(text, width)) or text


def _plot_scores(rep: ClassReport, out: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs: list[tuple[str, str]] = []
    for a, totals in rep.totals.items():
        if not totals:
            continue
        n = len(totals)
        qs = list(rep.max_points[a])
        manual = rep.manual.get(a, ManualGrading())
        fig, axes = plt.subplots(1, 2, figsize=(10, max(3.6, 0.42 * len(qs) + 1.6)),
                                 layout="constrained")
        fig.suptitle(a, fontweight="bold")
        ax = axes[0]
        bins = [i * rep.max_total[a] / 10 for i in range(11)]
        ax.hist(list(totals.values()), bins=bins, color=_BLUE, edgecolor="white")
        ax.set_title(f"total score per student (n = {n})")
        xlabel = f"points (of {rep.max_total[a]:g})"
        if manual.submissions_waiting:
            one = manual.points == 1
            xlabel += (f"; the {manual.points:g} point{'' if one else 's'} graded by hand "
                       f"{'is' if one else 'are'} 0 until graded")
        ax.set_xlabel(_wrap(xlabel, 60))
        ax.set_ylabel("students")
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax = axes[1]
        means = [
            (sum(rep.questions[a].get(q, {}).values()) / n) / rep.max_points[a][q]
            if rep.max_points[a][q] else 0.0
            for q in qs
        ]
        waiting = rep.waiting_questions(a)
        labels = [f"{q} (by hand)" if q in manual.questions else q for q in qs]
        ys = list(range(len(qs)))
        ax.barh(ys, [0.0 if q in waiting else 100 * m for q, m in zip(qs, means)], color=_GREEN)
        for y, q in zip(ys, qs):
            if q in waiting:
                k = len(manual.waiting[q])
                ax.barh(y, 100, color="none", edgecolor=_GREY, hatch="//", linewidth=0.8)
                ax.text(50, y, f"graded by hand: {k} of {n} not graded yet",
                        ha="center", va="center", fontsize=9, style="italic",
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5})
        ax.set_yticks(ys, labels)
        ax.set_xlim(0, 100)
        ax.set_xlabel("mean score (% of the question's points)")
        ax.set_title("per question")
        ax.invert_yaxis()
        name = f"scores_{a}.png"
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        alt = f"Histogram of total scores and mean score per question for {a}."
        if waiting:
            alt += (f" Hatched: graded by hand, not graded yet ({', '.join(sorted(waiting))}),"
                    " not a score.")
        figs.append((name, alt))
    who: dict[str, set[str]] = defaultdict(set)
    for (_, kind), students in rep.students_with_mistake.items():
        who[kind].update(students)
    counts = Counter({k: len(v) for k, v in who.items()})
    if counts:
        kinds = [k for k, _ in counts.most_common()]
        labels = [_wrap(fault_label(k), 44) for k in kinds]
        lines = sum(lab.count("\n") + 1 for lab in labels)
        fig, ax = plt.subplots(figsize=(8, 0.22 * lines + 0.12 * len(kinds) + 1.2), layout="constrained")
        ax.barh(range(len(kinds)), [counts[k] for k in kinds], color=_VERMILION)
        ax.set_yticks(range(len(kinds)), labels)
        ax.invert_yaxis()
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("students (each counted once, over all assignments)")
        ax.set_title("Diagnosed mistakes, whole class")
        fig.savefig(out / "faults.png", dpi=110)
        plt.close(fig)
        figs.append(("faults.png", "Number of students with each diagnosed mistake."))
    return figs


_CSS = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;vertical-align:top}"
        "th{background:#eee}img{max-width:100%}pre{white-space:pre-wrap;overflow-wrap:anywhere}"
        ".manual{border:2px solid #E69F00;background:#fff6e0;padding:.4em 1em;margin:.6em 0}"
        ".manual.done{border-color:#ccc;background:#f6f6f6}"
        "nav a{margin-right:1em}"
        "#students th[data-col]{cursor:pointer;user-select:none}"
        "#students th[aria-sort=ascending]::after{content:' \\25B2'}"
        "#students th[aria-sort=descending]::after{content:' \\25BC'}"
        "#students td.num{text-align:right}.late{color:#D55E00;font-weight:bold}"
        ".chip{display:inline-block;background:#eef;border-radius:3px;padding:0 4px;margin:1px;font-size:85%}"
        ".controls{margin:.5em 0}.controls input,.controls select{margin-right:1em}"
        "table.sbs td{width:50%}mark{background:#ffe08a}details pre{background:#f6f8fa;padding:.5em}")

#: The student table's script: click a header to sort, type to filter, pick a group of wrong
#: answers to show only its students. Hand-written, no library, works from file://.
_TABLE_JS = """
(function () {
  var table = document.getElementById('students');
  if (!table) return;
  var body = table.tBodies[0], text = document.getElementById('filter'),
      group = document.getElementById('group'), shown = document.getElementById('shown');
  function key(row, i, numeric) {
    var c = row.cells[i], v = c.getAttribute('data-v');
    if (v === null) v = c.textContent.trim();
    if (!numeric) return v.toLowerCase();
    var x = parseFloat(v);
    return isNaN(x) ? -Infinity : x;
  }
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
    if (!th.hasAttribute('data-col')) return;
    th.addEventListener('click', function () {
      var i = th.cellIndex, numeric = th.getAttribute('data-type') === 'num',
          dir = th.getAttribute('aria-sort') === 'ascending' ? -1 : 1;
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = key(a, i, numeric), y = key(b, i, numeric);
        return x < y ? -dir : x > y ? dir : 0;
      });
      rows.forEach(function (r) { body.appendChild(r); });
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', dir === 1 ? 'ascending' : 'descending');
    });
  });
  function apply() {
    var q = text.value.trim().toLowerCase(), g = group.value, n = 0;
    Array.prototype.forEach.call(body.rows, function (r) {
      var ok = (!q || r.textContent.toLowerCase().indexOf(q) >= 0) &&
               (!g || (' ' + r.getAttribute('data-groups') + ' ').indexOf(' ' + g + ' ') >= 0);
      r.hidden = !ok;
      if (ok) n++;
    });
    shown.textContent = n;
  }
  text.addEventListener('input', apply);
  group.addEventListener('change', apply);
  document.getElementById('clear').addEventListener('click', function () {
    text.value = ''; group.value = ''; apply();
  });
  Array.prototype.forEach.call(document.querySelectorAll('[data-show-group]'), function (b) {
    b.addEventListener('click', function () {
      group.value = b.getAttribute('data-show-group'); apply(); table.scrollIntoView();
    });
  });
  apply();
})();
"""


def _rel(target: Path, out_dir: Path) -> str:
    return Path(os.path.relpath(target, out_dir)).as_posix()


def _links(rep: ClassReport, out_dir: Path, student: str, assignment: str) -> str:
    """Links to the student's feedback (HTML) and autograded notebook of one assignment."""
    if rep.course_root is None:
        return ""
    e, out = html.escape, []
    for p in sorted((rep.course_root / "feedback" / student / assignment).glob("*.html")):
        out.append(f"<a class='feedback' href='{e(_rel(p, out_dir))}'>feedback</a>")
    for p in sorted((rep.course_root / "autograded" / student / assignment).glob("*.ipynb")):
        out.append(f"<a class='notebook' href='{e(_rel(p, out_dir))}'>notebook</a>")
    return " ".join(out)


def late_note(rep: ClassReport, assignment: str, student: str) -> str:
    """The student table's ``late`` entry for one submission: ``"rmsnorm (2.5 h)"`` after the due
    date (the gradebook), ``"rmsnorm (marked late by the LMS)"`` for a download the LMS marked late
    with no due date here to measure it by, ``""`` when it is not late."""
    if (assignment, student) in rep.late:
        return f"{assignment} ({rep.late[(assignment, student)] / 3600:.1f} h)"
    if (assignment, student) in rep.lms_late:
        return f"{assignment} (marked late by the LMS)"
    return ""


def _student_table(rep: ClassReport, out_dir: Path) -> list[str]:
    e = html.escape
    member: dict[str, list[str]] = defaultdict(list)
    chip: dict[str, str] = {}
    for a, gs in rep.groups.items():
        for g in gs:
            n = g.group_id.rsplit("-", 1)[-1]
            chip[g.group_id] = (f"<span class='chip' title='{e(a)}: {e(g.diagnosis)}'>"
                                f"{e(g.checker)} #{e(n)}</span>")
            for s in g.students:
                member[s].append(g.group_id)
    assignments = list(rep.totals)
    max_all = sum(rep.max_total.values())
    parts = ["<h2 id='student-table'>Students</h2>",
             "<div class='controls'><label>filter <input id='filter' type='search' "
             "placeholder='name, flag, assignment...'></label>"
             "<label>mistake group <select id='group'><option value=''>(any)</option>"]
    for a, gs in rep.groups.items():
        for g in gs:
            parts.append(f"<option value='{e(g.group_id)}'>{e(a)} / {e(g.checker)}: {g.size} "
                         f"student{'s' if g.size != 1 else ''}: {e(textwrap.shorten(g.diagnosis, 60))}</option>")
    parts.append("</select></label><button id='clear' type='button'>clear</button> "
                 f"<span><span id='shown'>{len(rep.students)}</span> of {len(rep.students)} shown</span></div>")
    head = ["<th data-col data-type='text'>student</th>",
            f"<th data-col data-type='num'>total (of {max_all:g})</th>"]
    head += [f"<th data-col data-type='num'>{e(a)} (of {rep.max_total[a]:g})</th>" for a in assignments]
    head += ["<th data-col data-type='text'>late</th>", "<th data-col data-type='text'>missing</th>",
             "<th data-col data-type='num'>flags</th>", "<th>mistake groups</th>", "<th>links</th>"]
    parts.append("<table id='students'><thead><tr>" + "".join(head) + "</tr></thead><tbody>")
    for s in rep.students:
        total = sum(rep.totals[a].get(s, 0.0) for a in assignments)
        name = f" <small class='lms-name'>({e(rep.names[s])})</small>" if rep.names.get(s) else ""
        cells = [f"<td>{e(s)}{name}</td>", f"<td class='num' data-v='{total:.4f}'>{total:.2f}</td>"]
        for a in assignments:
            v = rep.totals[a].get(s)
            cells.append(f"<td class='num' data-v='{'' if v is None else f'{v:.4f}'}'>"
                         f"{'—' if v is None else f'{v:.2f}'}</td>")
        late_text = ", ".join(late_note(rep, a, s) for a in assignments if late_note(rep, a, s))
        cells.append(f"<td class='late'>{e(late_text)}</td>")
        cells.append(f"<td>{e(', '.join(rep.missing(s)))}</td>")
        notes = rep.flags.get(s, [])
        cells.append(f"<td class='num' data-v='{len(notes)}' title='{e(' | '.join(notes))}'>"
                     f"{len(notes) or ''}</td>")
        chips = "".join(chip[g] for g in member.get(s, []))
        cells.append(f"<td>{chips}</td>")
        links = "<br>".join(f"{e(a)}: {_links(rep, out_dir, s, a)}" for a in assignments if _links(rep, out_dir, s, a))
        cells.append(f"<td>{links}</td>")
        parts.append(f"<tr data-student='{e(s)}' data-groups='{e(' '.join(member.get(s, [])))}'>"
                     + "".join(cells) + "</tr>")
    parts.append("</tbody></table>")
    return parts


def _groups_html(rep: ClassReport) -> list[str]:
    e = html.escape
    if not rep.groups and not rep.groups_missing:
        return []
    parts = ["<h2 id='groups'>Groups of wrong answers</h2>",
             "<p>Submissions whose wrong outputs agree on every case of a graded battery (the outputs "
             "handed back on the run's drawn inputs, within twice the checker's tolerance; no code is "
             "run again) form a group, whether or not a fault kind names the mistake: one "
             "comment per group reaches all of its students. Largest first.</p>"]
    if rep.groups_missing:
        parts.append("<p>Not in the groups: "
                     + e("; ".join(f"{s}: {w}" for s, w in sorted(rep.groups_missing.items()))) + "</p>")
    for a, gs in rep.groups.items():
        parts.append(f"<h3>{e(a)}</h3><table class='groups'><tr><th>students</th><th>checker</th>"
                     "<th>diagnosis (or what was measured)</th><th>who</th><th>a representative answer</th></tr>")
        for g in gs:
            kinds = ", ".join(g.faults) + (f"; variant {g.variant}" if g.variant else "")
            parts.append(
                f"<tr id='{e(g.group_id)}' data-group='{e(g.group_id)}'><td>{g.size}</td>"
                f"<td>{e(g.checker)} #{e(g.group_id.rsplit('-', 1)[-1])}<br>"
                f"<small>{g.failed} of {g.cases} cases fail</small></td>"
                f"<td>{e(g.diagnosis)}<br><small><code>{e(kinds)}</code></small></td>"
                f"<td>{e(', '.join(g.students))}<br><button type='button' data-show-group='{e(g.group_id)}'>"
                "show in the table</button></td>"
                f"<td><details><summary>{e(g.representative)}'s answer</summary><pre>{e(g.cell)}</pre>"
                "</details></td></tr>")
        parts.append("</table>")
    return parts


def _similar_html(rep: ClassReport) -> list[str]:
    from .similarity import MIN_OVERLAP, THRESHOLD, side_by_side

    e = html.escape
    parts = ["<h2 id='similar'>Similar submissions</h2>",
             f"<p>Pairs whose answer code is near-identical after names, whitespace and comments are "
             f"normalised and the starter code, the reference solution and code common to many "
             f"submissions are removed (copydetect's winnowing): score = the share of each one's own "
             f"code found in the other, the smaller of the two; listed from {THRESHOLD:.0%} with at least "
             f"{MIN_OVERLAP} characters of normalised code in common. A flag to look at, not a verdict.</p>"]
    if not rep.similar:
        return parts + ["<p>None above the threshold.</p>"]
    for a, pairs in rep.similar.items():
        parts.append(f"<h3>{e(a)}</h3><table class='pairs'><tr><th>pair</th><th>score</th>"
                     "<th>in common</th><th>side by side</th></tr>")
        for p in pairs:
            parts.append(f"<tr><td>{e(p.a)} &amp; {e(p.b)}</td><td>{100 * p.score:.0f}%</td>"
                         f"<td>{p.overlap} chars</td><td><details><summary>compare</summary>"
                         f"{side_by_side(p)}</details></td></tr>")
        parts.append("</table>")
    return parts


def _history_html(rep: ClassReport, out_dir: Path) -> list[str]:
    e = html.escape
    parts = ["<h2 id='history'>Batches and files</h2>"]
    files = []
    if rep.course_root is not None:
        for name in ("grades.csv", "grades_by_question.csv"):
            if (rep.course_root / name).is_file():
                files.append(f"<a class='csv' href='{e(_rel(rep.course_root / name, out_dir))}'>{e(name)}</a>")
    files.append("<a href='report.json'>report.json</a>")
    parts.append("<p>" + " · ".join(files) + "</p>")
    if not rep.runs:
        return parts + ["<p>No earlier grading run recorded (logs/runs.jsonl).</p>"]
    parts.append("<table class='runs'><tr><th>when (UTC)</th><th>status</th><th>students in the batch</th>"
                 "<th>skipped</th><th>replaced</th><th>seconds</th><th>command</th></tr>")
    for r in reversed(rep.runs):
        batch = r.get("batch") or []
        why = e(str(r.get("error", "")))  # a failed or interrupted run: its error, on hover
        parts.append(f"<tr><td>{e(str(r.get('time', '')))}</td><td title='{why}'>{e(str(r.get('status', '')))}</td>"
                     f"<td title='{e(', '.join(map(str, batch)))}'>{len(batch)}</td>"
                     f"<td>{len(r.get('skipped') or {})}</td><td>{len(r.get('replaced') or [])}</td>"
                     f"<td>{r.get('seconds', '')}</td><td><code>{e(str(r.get('command', '')))}</code></td></tr>")
    parts.append("</table>")
    return parts


def write_report(rep: ClassReport, out_dir: Path) -> Path:
    """Write ``index.html`` (one self-contained page: its table script is inline), the PNG
    figures and ``report.json`` into ``out_dir``; return the HTML path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figs = _plot_scores(rep, out_dir)
    e = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>Class report</title>",
             f"<style>{_CSS}</style></head><body><h1>Class report</h1>",
             "<nav><a href='#student-table'>students</a><a href='#groups'>groups of wrong answers</a>"
             "<a href='#similar'>similar submissions</a><a href='#history'>batches and files</a></nav>"]
    for a, mg in rep.manual.items():
        if not (mg.submissions_waiting or mg.graded):
            continue
        cls = "manual" if mg.submissions_waiting else "manual done"
        who = ""
        if mg.submissions_waiting:
            who = f"<br><small>waiting: {e(', '.join(mg.submissions_waiting))}</small>"
        parts.append(f"<div class='{cls}'><b>{e(a)}: graded by hand.</b> {e(mg.message())}{who}</div>")
    parts.append(f"<pre>{e(summary_text(rep))}</pre>")
    parts += _student_table(rep, out_dir)
    parts += _groups_html(rep)
    for name, alt in figs:
        parts.append(f"<figure><img src='{e(name)}' alt='{e(alt)}'><figcaption>{e(alt)}</figcaption></figure>")
    for a, counter in rep.faults.items():
        if not counter:
            continue
        m = rep.diagnosed(a)
        parts.append(f"<h2>{e(a)}: diagnosed mistakes</h2>")
        if rep.not_diagnosed.get(a):
            parts.append(f"<p>Out of {m} submissions; not counted (could not be graded): "
                         f"{e(', '.join(rep.not_diagnosed[a]))}.</p>")
        parts.append("<table><tr><th>mistake</th><th>students</th><th>what it means</th><th>who</th></tr>")
        for kind, count in counter.most_common():
            who = ", ".join(rep.students_with_mistake.get((a, kind), []))
            parts.append(f"<tr><td>{e(fault_label(kind))}<br><small><code>{e(kind)}</code></small></td>"
                         f"<td>{count} of {m}</td><td>{e(fault_description(kind))}</td><td>{e(who)}</td></tr>")
        parts.append("</table>")
    parts += _similar_html(rep)
    if rep.ungraded:
        parts.append("<h2>Could not be graded</h2><table><tr><th>who</th><th>why</th></tr>")
        for who, why in sorted(rep.ungraded.items()):
            parts.append(f"<tr><td>{e(who)}</td><td>{e(why)}</td></tr>")
        parts.append("</table>")
    if rep.flags:
        parts.append("<h2>Flags</h2><table><tr><th>student</th><th>notes</th></tr>")
        for who, notes in sorted(rep.flags.items()):
            parts.append(f"<tr><td>{e(who)}</td><td>{'<br>'.join(e(n) for n in notes)}</td></tr>")
        parts.append("</table>")
    parts += _history_html(rep, out_dir)
    parts.append(f"<script>{_TABLE_JS}</script></body></html>")
    path = out_dir / "index.html"
    path.write_text("\n".join(parts), encoding="utf-8")
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
