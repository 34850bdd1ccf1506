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

#: Where the instructor grades the questions marked for manual grading.
FORMGRADER_HINT = ("open formgrader (JupyterLab > Nbgrader > Manage Assignments) or run "
                   "`nbgrader formgrader`")


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
                f"{FORMGRADER_HINT}; until then {'they count' if n != 1 else 'it counts'} 0.")

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
                 flags: dict[str, list[str]] | None = None) -> ClassReport:
    """Assemble a :class:`ClassReport` from the gradebook scores, the autograded notebooks and
    the manually graded questions in ``course_root/gradebook.db``.

    Args:
        scores: ``{(assignment, student): {grade_id: points}}`` (see ``read_gradebook``).
        max_points: ``{assignment: {grade_id: max points}}``.
        ungraded: ``{"<student> (<assignment>)" or "file <name>": reason}``; such a submission
            keeps its (zero) score but is left out of the mistake counts, since its notebook
            was not the student's work that ran.
    """
    course_root = Path(course_root)
    rep = ClassReport(ungraded=dict(ungraded or {}), flags={k: list(v) for k, v in (flags or {}).items()})
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
    if db.is_file():
        rep.manual = read_manual_grading(db, assignments)
    return rep


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


_CSS = ("body{font-family:sans-serif;max-width:960px;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;vertical-align:top}"
        "th{background:#eee}img{max-width:100%}pre{white-space:pre-wrap;overflow-wrap:anywhere}"
        ".manual{border:2px solid #E69F00;background:#fff6e0;padding:.4em 1em;margin:.6em 0}"
        ".manual.done{border-color:#ccc;background:#f6f6f6}")


def write_report(rep: ClassReport, out_dir: Path) -> Path:
    """Write ``index.html``, the PNG figures and ``report.json`` into ``out_dir``; return the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figs = _plot_scores(rep, out_dir)
    e = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>Class report</title>",
             f"<style>{_CSS}</style></head><body><h1>Class report</h1>"]
    for a, mg in rep.manual.items():
        if not (mg.submissions_waiting or mg.graded):
            continue
        cls = "manual" if mg.submissions_waiting else "manual done"
        who = ""
        if mg.submissions_waiting:
            who = f"<br><small>waiting: {e(', '.join(mg.submissions_waiting))}</small>"
        parts.append(f"<div class='{cls}'><b>{e(a)}: graded by hand.</b> {e(mg.message())}{who}</div>")
    parts.append(f"<pre>{e(summary_text(rep))}</pre>")
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
    parts.append("</body></html>")
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
        "ungraded": rep.ungraded, "flags": rep.flags}, indent=2, sort_keys=True))
    return path
