"""The class report: score distributions and which mistakes were common.

Scores come from nbgrader's gradebook; the mistakes come from the ``[fault: <kind>]`` tags that
``normref.check_*`` prints into the test cells of each autograded notebook. Written as an HTML
page with PNG figures (``reports/``) and printed as a short text summary.
"""
from __future__ import annotations

import html
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..answers import ANSWER_FAULTS
from ..checks import FAULT_KINDS

KNOWN_FAULTS = {**FAULT_KINDS, **ANSWER_FAULTS}

_TAG = re.compile(r"\[fault: ([a-z0-9_]+)\]")

# Okabe-Ito: readable for colour-blind readers.
_BLUE, _ORANGE, _GREEN, _VERMILION = "#0072B2", "#E69F00", "#009E73", "#D55E00"


@dataclass
class ClassReport:
    """Everything the report shows.

    Attributes:
        totals: ``{assignment: {student: total points}}``.
        max_total: ``{assignment: max points}``.
        questions: ``{assignment: {grade_id: {student: points}}}``.
        max_points: ``{assignment: {grade_id: max points}}``.
        faults: ``{assignment: Counter(fault kind -> number of students)}``.
        students_with_fault: ``{(assignment, fault): [students]}``.
        ungraded: ``{student or file: reason}`` for work that could not be graded.
        flags: ``{student: [notes]}`` from earlier stages (repairs, lateness).
    """

    totals: dict[str, dict[str, float]] = field(default_factory=dict)
    max_total: dict[str, float] = field(default_factory=dict)
    questions: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    max_points: dict[str, dict[str, float]] = field(default_factory=dict)
    faults: dict[str, Counter] = field(default_factory=dict)
    students_with_fault: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    ungraded: dict[str, str] = field(default_factory=dict)
    flags: dict[str, list[str]] = field(default_factory=dict)


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
        for out in cell.get("outputs", []):
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            if out.get("output_type") in ("execute_result", "display_data"):
                text = out.get("data", {}).get("text/plain", "")
            if isinstance(text, list):
                text = "".join(text)
            for kind in _TAG.findall(text):
                if kind in KNOWN_FAULTS and kind not in found:
                    found.append(kind)
    return found


def build_report(course_root: Path, assignments: list[str], scores, max_points,
                 ungraded: dict[str, str] | None = None,
                 flags: dict[str, list[str]] | None = None) -> ClassReport:
    """Assemble a :class:`ClassReport` from the gradebook scores and the autograded notebooks.

    Args:
        scores: ``{(assignment, student): {grade_id: points}}`` (see ``read_gradebook``).
        max_points: ``{assignment: {grade_id: max points}}``.
    """
    rep = ClassReport(ungraded=dict(ungraded or {}), flags={k: list(v) for k, v in (flags or {}).items()})
    for a in assignments:
        rep.max_points[a] = dict(max_points.get(a, {}))
        rep.max_total[a] = sum(rep.max_points[a].values())
        rep.totals[a] = {}
        rep.questions[a] = defaultdict(dict)
        rep.faults[a] = Counter()
    for (a, s), row in scores.items():
        if a not in rep.totals:
            continue
        rep.totals[a][s] = sum(row.values())
        for gid, pts in row.items():
            rep.questions[a][gid][s] = pts
        for nb_path in sorted((course_root / "autograded" / s / a).glob("*.ipynb")):
            for kind in faults_in_notebook(nb_path):
                rep.faults[a][kind] += 1
                rep.students_with_fault.setdefault((a, kind), []).append(s)
    rep.questions = {a: dict(q) for a, q in rep.questions.items()}
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
        full = sum(v >= rep.max_total[a] - 1e-9 for v in vals)
        lines.append(f"  {a}: {n} graded, mean {mean:.2f} / {rep.max_total[a]:g}, "
                     f"median {vals[n // 2]:.2f}, {full} with full marks")
        for kind, count in rep.faults[a].most_common():
            lines.append(f"    {count} of {n} {_fault_phrase(kind)}")
    if rep.ungraded:
        lines.append(f"  could not be graded ({len(rep.ungraded)}):")
        for who, why in sorted(rep.ungraded.items()):
            lines.append(f"    {who}: {why}")
    return "\n".join(lines)


_PHRASES = {
    "unbiased_variance": "used the n-1 (unbiased) variance",
    "eps_outside_sqrt": "put eps outside the square root",
    "wrong_axis": "reduced over the wrong axis",
    "missing_keepdim": "dropped keepdim",
    "low_precision_stats": "computed statistics in float16/bfloat16",
    "wrong_dtype": "returned the wrong dtype",
    "subtracts_mean": "subtracted the mean in RMSNorm",
    "nan_on_constant_row": "produced NaN on a constant row",
    "mutates_input": "modified the input in place",
    "raises": "had code that raised (often: not implemented)",
    "timeout": "had code that did not finish",
}


def _fault_phrase(kind: str) -> str:
    if kind in _PHRASES:
        return _PHRASES[kind]
    text = KNOWN_FAULTS.get(kind, kind).split(":")[0].split(";")[0].rstrip(".")
    return f"{kind.replace('_', ' ')} ({text})" if len(text) < 70 else kind.replace("_", " ")


def _plot_scores(rep: ClassReport, out: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs: list[tuple[str, str]] = []
    for a, totals in rep.totals.items():
        if not totals:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        ax = axes[0]
        bins = [i * rep.max_total[a] / 10 for i in range(11)]
        ax.hist(list(totals.values()), bins=bins, color=_BLUE, edgecolor="white")
        ax.set_title(f"{a}: total score per student (n = {len(totals)})")
        ax.set_xlabel(f"points (of {rep.max_total[a]:g})")
        ax.set_ylabel("students")
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax = axes[1]
        qs = list(rep.max_points[a])
        means = [
            (sum(rep.questions[a].get(q, {}).values()) / max(1, len(totals))) / rep.max_points[a][q]
            if rep.max_points[a][q] else 0.0
            for q in qs
        ]
        ax.barh(qs, [100 * m for m in means], color=_GREEN)
        ax.set_xlim(0, 100)
        ax.set_xlabel("mean score (% of the question's points)")
        ax.set_title("per question")
        ax.invert_yaxis()
        fig.tight_layout()
        name = f"scores_{a}.png"
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        figs.append((name, f"Histogram of total scores and mean score per question for {a}."))
    counts = Counter()
    for c in rep.faults.values():
        counts.update(c)
    if counts:
        fig, ax = plt.subplots(figsize=(8, 0.45 * len(counts) + 1.4))
        kinds = [k for k, _ in counts.most_common()]
        ax.barh([_fault_phrase(k) for k in kinds], [counts[k] for k in kinds], color=_VERMILION)
        ax.invert_yaxis()
        ax.set_xlabel("students (summed over assignments)")
        ax.set_title("Diagnosed mistakes across the class")
        fig.tight_layout()
        fig.savefig(out / "faults.png", dpi=110)
        plt.close(fig)
        figs.append(("faults.png", "Number of students with each diagnosed mistake."))
    return figs


def write_report(rep: ClassReport, out_dir: Path) -> Path:
    """Write ``index.html``, the PNG figures and ``report.json`` into ``out_dir``; return the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figs = _plot_scores(rep, out_dir)
    e = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>Class report</title>",
             "<style>body{font-family:sans-serif;max-width:960px;margin:2em auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}"
             "th{background:#eee}img{max-width:100%}</style></head><body><h1>Class report</h1>",
             f"<pre>{e(summary_text(rep))}</pre>"]
    for name, alt in figs:
        parts.append(f"<figure><img src='{e(name)}' alt='{e(alt)}'><figcaption>{e(alt)}</figcaption></figure>")
    for a, counter in rep.faults.items():
        if not counter:
            continue
        parts.append(f"<h2>{e(a)}: diagnosed mistakes</h2><table><tr><th>mistake</th><th>students</th><th>who</th></tr>")
        for kind, n in counter.most_common():
            who = ", ".join(sorted(rep.students_with_fault.get((a, kind), [])))
            parts.append(f"<tr><td>{e(_fault_phrase(kind))}<br><small>{e(KNOWN_FAULTS.get(kind, ''))}</small></td>"
                         f"<td>{n} of {len(rep.totals[a])}</td><td>{e(who)}</td></tr>")
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
    (out_dir / "report.json").write_text(json.dumps({
        "totals": rep.totals, "max_total": rep.max_total,
        "faults": {a: dict(c) for a, c in rep.faults.items()},
        "ungraded": rep.ungraded, "flags": rep.flags}, indent=2, sort_keys=True))
    return path
