"""The class report's figures (:func:`grader.outputs.report.write_report`): per assignment, the histogram
of total scores and the mean score per question; for the class, the diagnosed mistakes. PNGs,
drawn with matplotlib's Agg backend.
"""
from __future__ import annotations

import textwrap
from collections import Counter, defaultdict
from pathlib import Path

# Okabe-Ito: readable for colour-blind readers.
_BLUE, _ORANGE, _GREEN, _VERMILION, _GREY = "#0072B2", "#E69F00", "#009E73", "#D55E00", "#999999"


def _wrap(text: str, width: int = 34) -> str:
    return "\n".join(textwrap.wrap(text, width)) or text


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _assignment_figure(rep, a: str, out: Path) -> tuple[str, str]:
    """``scores_<a>.png``: total scores per student, and the mean score of each question
    (hatched: graded by hand and not graded yet). Returns ``(file name, alt text)``."""
    plt = _pyplot()
    totals = rep.totals[a]
    n = len(totals)
    qs = list(rep.max_points[a])
    manual = rep.manual.get(a)
    fig, axes = plt.subplots(1, 2, figsize=(10, max(3.6, 0.42 * len(qs) + 1.6)),
                             layout="constrained")
    fig.suptitle(a, fontweight="bold")
    ax = axes[0]
    bins = [i * rep.max_total[a] / 10 for i in range(11)]
    ax.hist(list(totals.values()), bins=bins, color=_BLUE, edgecolor="white")
    ax.set_title(f"total score per student (n = {n})")
    xlabel = f"points (of {rep.max_total[a]:g})"
    if manual is not None and manual.submissions_waiting:
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
    by_hand = manual.questions if manual is not None else {}
    labels = [f"{q} (by hand)" if q in by_hand else q for q in qs]
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
    return name, alt


def _faults_figure(rep, out: Path, label) -> tuple[str, str] | None:
    """``faults.png``: how many students made each diagnosed mistake, over all assignments (each
    counted once); None when no mistake was diagnosed."""
    who: dict[str, set[str]] = defaultdict(set)
    for (_, kind), students in rep.students_with_mistake.items():
        who[kind].update(students)
    counts = Counter({k: len(v) for k, v in who.items()})
    if not counts:
        return None
    plt = _pyplot()
    kinds = [k for k, _ in counts.most_common()]
    labels = [_wrap(label(k), 44) for k in kinds]
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
    return "faults.png", "Number of students with each diagnosed mistake."


def plot_scores(rep, out: Path, label) -> list[tuple[str, str]]:
    """Draw the report's figures into ``out``.

    Args:
        rep: the :class:`grader.outputs.report.ClassReport`.
        out: the report's folder.
        label: a fault kind's short phrase (:func:`grader.outputs.report.fault_label`).

    Returns:
        ``[(file name, alt text)]``, in the order the page shows them.
    """
    figs = [_assignment_figure(rep, a, out) for a, totals in rep.totals.items() if totals]
    faults = _faults_figure(rep, out, label)
    return figs + ([faults] if faults else [])
