"""The embedded demo class: 30 synthetic students built from the mistakes normref diagnoses.

Every student is the released notebooks with answer cells filled in from the answer bank
(:mod:`grader.demo.answer_bank`): for each assignment, one *variant* per student —
``correct``, ``blank``, ``partial``, or a fault kind (n-1 variance, eps outside the square
root, wrong axis, ...). Two students submit late, one skips an assignment. ``make grade`` on a
fresh clone grades this class; the tests take every expected score from the answer bank's
hand-derived ``EXPECTED``, not from the grader.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..ledger.course import CONFIG
from .answer_bank import ANSWERS, EXPECTED

#: Due date of every demo assignment; a demo student submitted after it is late.
DUE_DATE = "2026-11-21 09:00:00 UTC"
ON_TIME = "2026-11-20 09:00:00.000000 UTC"
LATE = "2026-11-22 18:30:00.000000 UTC"

NAMES = ["ada", "bruno", "chen", "dana", "emeka", "farah", "gus", "hana", "ivan", "jun",
         "kofi", "lena", "mateo", "nia", "omar", "priya", "quinn", "rosa", "sami", "tara",
         "uma", "viktor", "wen", "xenia", "yusuf", "zoe", "amir", "beatriz", "chidi", "dmitri"]
LATE_STUDENTS = ("farah", "sami")
#: (student, assignment) pairs with no submission at all.
MISSING = (("zoe", "layernorm"),)


@dataclass(frozen=True)
class DemoStudent:
    """One synthetic student: id, the variant per assignment, and whether they were late."""

    student_id: str
    variants: dict[str, str] = field(default_factory=dict)  # assignment -> answer-bank variant
    late: bool = False


def _variants(assignment: str) -> list[str]:
    vs = list(ANSWERS[assignment])
    return ["correct"] + [v for v in vs if v != "correct"]


def demo_class(assignments: list[str] | None = None) -> list[DemoStudent]:
    """The roster: student ``i`` takes variant ``(i + 3k) mod n`` of the ``k``-th assignment, so
    every variant of every assignment appears and each student mixes several mistakes.
    ``ada`` and ``farah`` (late) are correct everywhere.

    Args:
        assignments: restrict to these (default: every assignment in the answer bank).
    """
    names = sorted(ANSWERS) if assignments is None else [a for a in sorted(ANSWERS) if a in assignments]
    roster = []
    for i, sid in enumerate(NAMES):
        variants = {}
        for k, a in enumerate(names):
            if (sid, a) in MISSING:
                continue
            vs = _variants(a)
            variants[a] = "correct" if sid in ("ada", "farah") else vs[(i + 3 * k) % len(vs)]
        roster.append(DemoStudent(sid, variants, late=sid in LATE_STUDENTS))
    return roster


def expected_points(student: DemoStudent, assignment: str) -> dict[str, float]:
    """The points each grade cell must get (the answer bank's hand-derived ``EXPECTED``)."""
    return dict(EXPECTED[assignment][student.variants[assignment]])


def fill_answers(release_nb: Path, answers: dict[str, str]) -> nbformat.NotebookNode:
    """The released notebook with the given answer cells replaced (by nbgrader grade_id);
    grade_ids this notebook does not have are ignored (they belong to another notebook)."""
    nb = nbformat.read(release_nb, as_version=4)
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            c.source = answers[gid].rstrip("\n")
    return nb


#: The demo student whose notebooks were saved with a kernel the grading machine does not have
#: (as a notebook downloaded from another course's hub is): graded in the course's kernel regardless.
FOREIGN_STUDENT = "ada"
FOREIGN_KERNEL = {"display_name": "Julia 1.10", "language": "julia", "name": "no-such-kernel"}


def write_demo_submissions(course_root: Path, dest: Path, limit: int | None = None) -> list[str]:
    """Write the demo class as an nbgrader ``submitted/`` tree under ``dest`` for every
    assignment that has a ``release/`` folder here (the first ``limit`` students only, if
    given); :data:`FOREIGN_STUDENT`'s notebooks claim :data:`FOREIGN_KERNEL`. Returns the student
    ids written."""
    present = [a for a in sorted(ANSWERS) if (course_root / "release" / a).is_dir()]
    students = []
    for st in demo_class(present)[:limit]:
        for a, variant in st.variants.items():
            out_dir = dest / st.student_id / a
            out_dir.mkdir(parents=True, exist_ok=True)
            for nb_path in sorted((course_root / "release" / a).glob("*.ipynb")):
                nb = fill_answers(nb_path, ANSWERS[a][variant])
                if st.student_id == FOREIGN_STUDENT:
                    nb.metadata["kernelspec"] = dict(FOREIGN_KERNEL)
                nbformat.write(nb, out_dir / nb_path.name)
            (out_dir / "timestamp.txt").write_text((LATE if st.late else ON_TIME) + "\n")
        students.append(st.student_id)
    return students


def apply_due_dates(course_root: Path, set_due_date) -> None:
    """Record the demo due date in the gradebook for every demo assignment in the course.

    Args:
        set_due_date: ``set_due_date(assignment, duedate)``, e.g.
            :meth:`grader.ledger.apps.Course.set_due_date`.
    """
    for a in sorted(ANSWERS):
        if (course_root / "source" / a).is_dir():
            set_due_date(a, DUE_DATE)


#: Where ``python -m grader`` with no submissions grades the demo class, under the course root.
DEMO_COURSE = Path("build") / "demo-course"


def demo_course(course_root: Path) -> Path:
    """A course folder of its own for the demo class, ``<course_root>/build/demo-course/``: the
    course's ``nbgrader_config.py`` and ``source/`` copied fresh each time, so the demo never
    reads or writes the real course's grading state. Its ``release/`` is what the run's generate
    stage makes from that ``source/``, never a copy of the course's own ``release/``, which may
    hold a student's answers (the README has students work there): the demo class is built from
    nbgrader's stubs, and nothing in the course's ``release/`` is read or written.

    Returns:
        The demo course root.
    """
    import shutil

    root = Path(course_root) / DEMO_COURSE
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy2(Path(course_root) / CONFIG, root / CONFIG)
    for name in ("source", "release"):  # build output: the demo's own release/ is generated again
        shutil.rmtree(root / name, ignore_errors=True)
    shutil.copytree(Path(course_root) / "source", root / "source")
    return root
