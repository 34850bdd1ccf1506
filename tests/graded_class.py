"""The demo class, graded once for the whole test session, for the tests that read grades.

``make grade`` on a fresh clone grades the embedded demo class: 30 students, every variant of
every assignment's answer bank (:mod:`grader.demo.answer_bank`) at least once, two of them late,
one assignment missing. :func:`grade_demo_class` grades it as that command does
(:func:`grader.grade_class` with no submissions: the embedded class, its due dates, the Dask
engine with two workers), with the bubblewrap sandbox required, and test_grading's and
test_assignments' assertions read the one result (:class:`GradedClass`): each variant's points
per cell, the manual-grading flags, the autograded notebooks, the feedback pages, the class
report. One change to the class: ``ada`` (correct everywhere) hands in notebooks that claim a
kernel this machine does not have (:data:`FOREIGN_KERNEL`); the course's configuration must run
them in ``python3`` regardless.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
#: What ada's submissions claim to have been run with; nbgrader_config.py overrides it.
FOREIGN_KERNEL = {"display_name": "Julia 1.10", "language": "julia", "name": "no-such-kernel"}
FOREIGN_STUDENT = "ada"


@dataclass
class GradedClass:
    """The graded demo class: the :class:`grader.GradeRun`, its course root, its log lines."""

    run: object
    root: Path
    lines: list[str] = field(default_factory=list)

    @property
    def roster(self):
        from grader.demo import demo_class

        return demo_class(self.run.assignments)

    def students(self, assignment: str, variant: str) -> list[str]:
        """The students who handed in ``variant`` of ``assignment`` (at least one each)."""
        who = [st.student_id for st in self.roster if st.variants.get(assignment) == variant]
        assert who, f"no demo student hands in {assignment}'s {variant}"
        return who

    def student(self, assignment: str, variant: str) -> str:
        """One student who handed in ``variant`` (``ada`` for ``correct``: the foreign kernel)."""
        who = self.students(assignment, variant)
        return FOREIGN_STUDENT if FOREIGN_STUDENT in who else who[0]

    def variant(self, assignment: str, student: str) -> str:
        return next(st.variants[assignment] for st in self.roster if st.student_id == student)

    def notebook(self, kind: str, assignment: str, student: str) -> Path:
        """The one notebook of ``student`` under ``kind`` (``submitted``, ``autograded``)."""
        nbs = sorted((self.root / kind / student / assignment).glob("*.ipynb"))
        assert len(nbs) == 1, f"expected one notebook in {kind}/{student}/{assignment}, found {nbs}"
        return nbs[0]

    def feedback(self, assignment: str, student: str) -> Path:
        pages = sorted((self.root / "feedback" / student / assignment).glob("*.html"))
        assert len(pages) == 1, f"expected one feedback page for {student}/{assignment}: {pages}"
        return pages[0]

    def grades(self, assignment: str) -> dict[str, dict[str, tuple[float, bool]]]:
        """``{student: {grade_id: (score, needs_manual_grade)}}`` from nbgrader's gradebook."""
        from nbgrader.api import Gradebook

        out: dict[str, dict[str, tuple[float, bool]]] = {}
        with Gradebook(f"sqlite:///{self.root / 'gradebook.db'}") as gb:
            for sub in gb.assignment_submissions(assignment):
                out[sub.student.id] = {g.name: (float(g.score), bool(g.needs_manual_grade))
                                       for nb in sub.notebooks for g in nb.grades}
        return out

    def diagnoses(self, assignment: str, student: str, want: dict, got: dict) -> str:
        """What the autograded notebook says in each cell whose score is not the expected one."""
        nb = nbformat.read(self.notebook("autograded", assignment, student), as_version=4)
        texts = []
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if gid in want and abs(got.get(gid, -1.0) - want[gid]) > 1e-9:
                shown = [o.get("text") or o.get("data", {}).get("text/plain") or o.get("evalue")
                         for o in cell.get("outputs", [])]
                texts.append(f"--- {gid}:\n" + "\n".join(str(t) for t in shown))
        return "\n".join(texts)


def grade_demo_class(base: Path) -> GradedClass:
    """Grade the embedded demo class in a course copy under ``base`` (see the module docstring).

    Raises:
        AssertionError: the sandbox was not used.
    """
    from unittest import mock

    import grader.demo as demo
    from grader import grade_class
    from normref.handback_files import HANDBACK_ENV as ENV

    root = base / "course"
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    shutil.copytree(REPO / "source", root / "source")
    shutil.copytree(REPO / "release", root / "release")
    write = demo.write_demo_submissions

    def with_a_foreign_kernel(course_root, dest, limit=None):
        students = write(course_root, dest, limit)
        for path in sorted((Path(dest) / FOREIGN_STUDENT).glob("*/*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            nb.metadata["kernelspec"] = FOREIGN_KERNEL
            nbformat.write(nb, path)
        return students

    lines: list[str] = []
    saved = os.environ.get(ENV)
    try:
        with mock.patch.object(demo, "write_demo_submissions", with_a_foreign_kernel):
            run = grade_class(course_root=root, jobs=2, use_sandbox=True, log=lines.append)
    finally:  # the run points this process at its graded inputs: not for the tests after it
        if saved is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = saved
    assert run.sandboxed
    return GradedClass(run, root, lines)
