"""The demo class, graded once for the whole test session, for the tests that read grades.

``make grade`` on a fresh clone grades the embedded demo class: 30 students, every variant of
every assignment's answer bank (:mod:`grader.demo.answer_bank`) at least once, two of them late,
one assignment missing, and ``ada`` (correct everywhere) handing in notebooks that claim a kernel
this machine does not have (:data:`grader.demo.FOREIGN_KERNEL`; the course's configuration runs
them in ``python3`` regardless). :func:`grade_demo_class` runs README.md's ``make grade`` as
written (tests/docrun.py), as a normal user made for the session (:func:`instructor_course`:
not root, warm kernels, the bubblewrap sandbox required), in their copy of this course, and reads
the run back (``NORMREF_RUN_PICKLE``); test_grading's and test_assignments' assertions read the
one result (:class:`GradedClass`): each variant's points per cell, the manual-grading flags, the
autograded notebooks, the feedback pages, the class report.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import pwd
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import docrun
import nbformat

from grader.demo import FOREIGN_KERNEL, FOREIGN_STUDENT  # noqa: F401 - test_assignments reads them here

REPO = Path(__file__).resolve().parents[1]
#: The session's instructor, a normal unix user (one per pytest-xdist worker).
INSTRUCTOR = "nrgrade-" + os.environ.get("PYTEST_XDIST_WORKER", "main")
COURSE = "lesson16-normalization"


@contextlib.contextmanager
def instructor_course(user: str = INSTRUCTOR):
    """A normal unix user (made here, removed afterwards with every process they run) and their
    course folder ``~/lesson16-normalization`` (mode 700): this working tree's files, ``.venv``
    linked (:func:`docrun.link_venv`). Yields ``(user, course folder)``."""
    from hubkit import unix_users

    with unix_users([user]), docrun.reachable(user, [REPO / ".venv" / "bin" / "python"]):
        course = Path(pwd.getpwnam(user).pw_dir) / COURSE
        files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                               capture_output=True, check=True).stdout.decode().split("\0")
        for rel in filter(None, files):
            if (REPO / rel).is_file():
                (course / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / rel, course / rel)
        subprocess.run(["chown", "-R", f"{user}:{user}", str(course)], check=True)
        course.chmod(0o700)
        docrun.link_venv(course)
        yield user, course


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


def grade_demo_class(user: str, course: Path) -> GradedClass:
    """README.md's ``make grade``, as written, by ``user`` in ``course`` (see the module docstring).

    Raises:
        AssertionError: the sandbox was not used, or the run left a process of ``user`` running.
    """
    (cmd,) = [c for c in docrun.section_commands("README.md", "For instructors")
              if c.text.split("#")[0].strip() == "make grade"]
    kept = course / "build" / "demo-run.pickle"
    out = docrun.run(cmd, user, course, {}, extra_env={"NORMREF_RUN_PICKLE": str(kept)}, timeout=3600)
    run = pickle.loads(kept.read_bytes())
    assert run.sandboxed
    left = docrun.processes_of(user)
    assert not left, f"make grade left processes of {user} running: {left}"
    return GradedClass(run, run.course_root, out.stdout.splitlines())
