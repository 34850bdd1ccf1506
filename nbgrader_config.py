"""nbgrader configuration for the Lesson 16 course (normalization in the transformer block).

The course root is the folder this file lives in, so `nbgrader` commands and
`python -m grader` work from any working directory inside a clone, and a copy of
the course (tests, the demo class) is its own root.
"""
import json
import os
import re
import secrets
import string
import sys

import nbformat
from nbconvert.exporters import NotebookExporter
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor, TagRemovePreprocessor
from nbgrader.converters import Autograde, GenerateAssignment, NbGraderException
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange.default import ExchangeReleaseFeedback
from nbgrader.preprocessors import ClearHiddenTests, Execute, GetGrades, NbGraderPreprocessor
from traitlets import Unicode

from normref.handback_files import HANDBACK_ENV

# nbgrader runs `alembic` from PATH when it creates a gradebook (`nbgrader collect` in a new
# course, `/opt/normref-env/bin/nbgrader ...` from a shell whose PATH lacks that folder): the
# folder of the interpreter running nbgrader first, so its own alembic is found.
if os.path.dirname(sys.executable) not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])

#: The tag of a source notebook's "Standard answer" cell (a markdown cell directly after the
#: answer cell it answers): removed from release/, shown in the feedback.
STANDARD_ANSWER_TAG = "standard-answer"


class StandardAnswers(NbGraderPreprocessor):
    """Feedback only: after each answer cell, the standard answer that the source notebook
    gives for it (the seed's "Standard answer · compare after your attempt" of each build
    challenge).

    Reads ``source/<assignment>/<notebook>.ipynb``: every markdown cell tagged
    ``standard-answer`` answers the nearest solution cell above it (its nbgrader
    ``grade_id``). In the feedback notebook a copy, untagged, goes directly after the cell with
    that ``grade_id`` (at the end if the submission lost it). A notebook without such cells,
    or without a source notebook, is left as it is.
    """

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        coursedir = CourseDirectory(parent=self)
        path = os.path.join(coursedir.format_path(coursedir.source_directory, ".", info.get("assignment", "")),
                            f"{info.get('notebook', '')}.ipynb")
        if not os.path.isfile(path):
            return nb, resources
        answers, answered = {}, None
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("solution"):
                answered = meta.get("grade_id")
            elif STANDARD_ANSWER_TAG in cell.metadata.get("tags", []) and answered:
                answers.setdefault(answered, []).append(
                    nbformat.v4.new_markdown_cell(cell.source, id=cell.get("id") or None))
        if not answers:
            return nb, resources
        cells = []
        for cell in nb.cells:
            cells.append(cell)
            cells.extend(answers.pop(cell.metadata.get("nbgrader", {}).get("grade_id"), []))
        nb.cells = cells + [c for found in answers.values() for c in found]
        return nb, resources


_RESOURCE = "normref_handback"


def _inputs_file(configured: str | None = None) -> str | None:
    """This run's graded inputs (``logs/scoring/handback-inputs.json``, written by
    ``grader.scoring.inputs.prepare_inputs``): ``configured`` (``--HandbackInputs.inputs_file``, as
    ``make grade`` passes it), else ``$NORMREF_HANDBACK_INPUTS`` (an ``nbgrader autograde`` run by
    hand); None outside ``make grade``."""
    path = configured or os.environ.get(HANDBACK_ENV)
    return path if path and os.path.isfile(path) else None


def _hand_back_call(grade_id: str) -> re.Pattern:
    """A hidden test's ``hand_back("<grade_id>"`` (either quote)."""
    return re.compile(r"\bhand_back\(\s*([\"'])" + re.escape(grade_id) + r"\1")


def handed_back(path: str) -> list[str]:
    """The grade ids of the test cells of notebook ``path`` that hand their outputs back to
    the grader (``hand_back("<grade_id>", ...)``): graded only by ``make grade``."""
    out = []
    for cell in nbformat.read(path, as_version=4).cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type == "code" and gid and _hand_back_call(gid).search(cell.source):
            out.append(gid)
    return out


#: What an ``nbgrader autograde`` without the run's inputs says (formgrader's Autograde button shows it
#: in its log).
WITHOUT_INPUTS = (
    "nbgrader autograde cannot grade {what}: {questions} graded by `make grade` (python -m grader), "
    "which draws each run's inputs, runs the students' code in its sandbox and scores what "
    "it hands back; nbgrader autograde on its own (formgrader's Autograde button included) would run "
    "that code unsandboxed and score it 0. Nothing was run, graded or changed: grade with "
    "`make grade SUBMISSIONS=submitted` (nbgrader's submitted/, in place) or SUBMISSIONS=<an LMS download>.")


def _few(names: list[str], most: int = 5) -> str:
    return ", ".join(names) if len(names) <= most else f"{', '.join(names[:most])} and {len(names) - most} more"


class GradedByMakeGrade(NotebookExporter):
    """Autograde's exporter (``Autograde.exporter_class``): refuses, before anything is
    touched, an ``nbgrader autograde`` without this run's inputs (formgrader's Autograde button,
    a bare ``nbgrader autograde``) of an assignment whose hidden tests hand back to the grader.

    Such a run would execute the students' code unsandboxed, as the instructor, and save 0 for
    every handed-back test over the grader's scores. nbgrader builds the exporter once per
    ``Autograde.start()``, after finding the submissions and before it removes an earlier
    autograded copy (``--force``, which formgrader always passes) or writes to the gradebook:
    the one configurable point where refusing leaves everything as it was.

    Raises:
        NbGraderException: the run's inputs missing for such an assignment (the message,
            :data:`WITHOUT_INPUTS`, is logged first: ``nbgrader autograde`` exits 1 and
            formgrader shows the log).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        converter = kwargs.get("parent")
        if not isinstance(converter, Autograde) or \
                _inputs_file(converter.config.get("HandbackInputs", {}).get("inputs_file")):
            return
        cd = converter.coursedir
        pattern = converter._format_source("(?P<assignment_id>.*)", "(?P<student_id>.*)", escape=True)
        who: dict[str, list[str]] = {}
        for folder in converter.assignments:
            m = re.match(pattern, folder)
            if m:
                who.setdefault(m["assignment_id"], []).append(m["student_id"])
        questions = []
        for a in sorted(who):
            source = cd.format_path(cd.source_directory, ".", a)
            found = [g for nb in sorted(os.listdir(source)) if nb.endswith(".ipynb")
                     for g in handed_back(os.path.join(source, nb))] if os.path.isdir(source) else []
            if found:
                questions.append((a, found))
        if questions:
            what = "; ".join(f"{a} ({_few(sorted(who[a]))})" for a, _ in questions)
            n = sum(len(gs) for _, gs in questions)
            msg = WITHOUT_INPUTS.format(what=what, questions=f"{'its' if len(questions) == 1 else 'their'} {n} "
                                                            f"hidden test{'s are' if n != 1 else ' is'}")
            converter.log.error(msg)
            raise NbGraderException(msg)


def with_inputs(source: str, grade_id: str, name: str, text: str) -> str:
    """``source`` (a hidden test) with each line that calls ``hand_back("<grade_id>", ...)`` made
    a call of the sealed hand-back ``name``, preceded by a line that gives it the question's
    inputs ``text`` (at the same indentation): ``<name>.inputs("<grade_id>", "<text>")``. The
    inputs have a line of their own, so that no traceback of the call (a timeout's) shows them."""
    call = _hand_back_call(grade_id)
    out = []
    for line in source.split("\n"):
        if call.search(line):
            indent = line[:len(line) - len(line.lstrip())]
            out.append(f'{indent}{name}.inputs("{grade_id}", "{text}")')
            line = call.sub(lambda m: f'{name}("{grade_id}"', line)
        out.append(line)
    return "\n".join(out)


def kernel_hands_back(text: str) -> bool:
    """Is this question's hand-back the grading kernel's? Only a short answer's (its values are
    what the student's cells computed); a code question's calls run in the grader's clean room
    (``grader/kernel/cleanroom.py``), after the kernel, with these inputs (a pickle of ``{"kind":
    "values"}`` for a short answer; a torch question's are a ``torch.save`` archive)."""
    import base64
    import pickle

    if text.startswith("UEsDB"):  # base64 of a zip archive: torch.save's
        return False
    try:
        return pickle.loads(base64.b64decode(text)).get("kind") == "values"
    except Exception:  # noqa: BLE001 - not the grader's inputs: nothing for the kernel
        return False


def without_inputs(source: str, grade_id: str) -> str:
    """``source`` (a code question's hidden test) with its ``hand_back("<grade_id>", ...)`` line
    made a no-op: the kernel gets no graded input; the question is graded in the clean room."""
    call = _hand_back_call(grade_id)
    return "\n".join(f"{line[:len(line) - len(line.lstrip())]}pass  # graded apart, in the grader's clean room"
                     if call.search(line) else line for line in source.split("\n"))


class HandbackInputs(NbGraderPreprocessor):
    """Autograde only, just before ``Execute``: give each short answer's hidden test its
    question's inputs and the hand-back it is to use; take every code question's hand-back out
    (:func:`without_inputs`: its graded calls run in the grader's clean room, after the kernel).

    ``make grade`` draws every question's inputs, new every run, into a file no kernel can read
    (``grader.scoring.inputs.prepare_inputs``). For a short answer (:func:`kernel_hands_back`) this puts,
    as the notebook's first cell, ``<name> = normref.handback.seal()`` (``<name>`` random, new
    per notebook: the hand-back as it is before any student cell runs; ``seal(torch=False)`` where
    no question it hands back needs torch to read its inputs, :func:`normref.wire.needs_torch`),
    and rewrites its hidden test's ``hand_back("<grade_id>", ...)`` into the question's inputs
    given to ``<name>`` and a call of it (:func:`with_inputs`). So an answer cell, which runs
    before, cannot read a question's inputs: they are in no file of the kernel's and in no cell
    that ran; and patching ``normref.handback`` afterwards changes no hand-back unnoticed.
    :class:`HandbackInputsRemoved` undoes both right after ``Execute``: neither the inputs nor
    the name reach the autograded notebook or the feedback. Without the inputs file (no
    ``make grade`` run) the notebook is left as it is.
    """

    inputs_file = Unicode(None, allow_none=True, help="This run's graded inputs (logs/scoring/handback-inputs.json, "
                          "grader.scoring.inputs.prepare_inputs); make grade passes it").tag(config=True)

    def preprocess(self, nb, resources):
        path = _inputs_file(self.inputs_file)
        if path is None:
            return nb, resources
        with open(path) as f:
            inputs = json.load(f)
        name = "_" + "".join(secrets.choice(string.ascii_letters) for _ in range(16))
        from normref.wire import needs_torch

        originals, sealed, torch_needed = {}, False, False
        for i, cell in enumerate(nb.cells):
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if cell.cell_type != "code" or gid not in inputs:
                continue
            kernels = kernel_hands_back(inputs[gid])
            new = with_inputs(cell.source, gid, name, inputs[gid]) if kernels else without_inputs(cell.source, gid)
            if new != cell.source:
                originals[cell.get("id") or str(i)] = cell.source
                cell.source = new
                sealed = sealed or kernels
                torch_needed = torch_needed or (kernels and needs_torch(inputs[gid]))
        if originals:
            resources[_RESOURCE] = originals
        if sealed:
            torch = "" if torch_needed else "torch=False"
            prologue = nbformat.v4.new_code_cell(
                f"{name} = __import__('normref.handback', fromlist=['seal']).seal({torch})")
            prologue.metadata[_RESOURCE] = True
            nb.cells.insert(0, prologue)
        return nb, resources


class HandbackInputsRemoved(NbGraderPreprocessor):
    """Autograde only, right after ``Execute``: the hidden tests' sources as they were, and the
    sealing cell gone (see :class:`HandbackInputs`)."""

    def preprocess(self, nb, resources):
        originals = resources.pop(_RESOURCE, None)
        if originals is None:
            return nb, resources
        nb.cells = [cell for cell in nb.cells if not cell.metadata.get(_RESOURCE)]
        for i, cell in enumerate(nb.cells):
            key = cell.get("id") or str(i)
            if key in originals:
                cell.source = originals[key]
        return nb, resources


#: The ``ename`` of the error a cell is charged with when the kernel stopped answering while it ran
#: (:class:`GradingExecute`); ``grader.kernel.sandbox.limit_flags`` names such a cell in the report.
KERNEL_STOPPED = "KernelStoppedAnswering"


class _KernelHung(Exception):
    """Raised out of a notebook's run when the kernel did not answer the time limit's interrupt."""

    def __init__(self, index: int, note: str):
        super().__init__(note)
        self.index, self.note = index, note


class GradingExecute(Execute):
    """nbgrader's ``Execute``, where a kernel that stops answering is killed at its limit, the cell
    it hung in is charged with it, and the rest of the notebook is still graded.

    A cell that runs past ``timeout`` is interrupted (nbclient's ``interrupt_on_timeout``, which
    nbgrader turns on); a kernel that answers ends the cell with ``KeyboardInterrupt`` and goes
    on. One that does not answer within ``iopub_timeout`` (stopped with SIGSTOP, or hung where
    the interrupt cannot reach it) made nbclient raise ``CellTimeoutError`` and nbgrader give up
    the whole notebook. Here that kernel is killed (nbclient's shutdown as the run ends, with
    ``shutdown_kernel = "immediate"``: SIGKILL, which a stopped process obeys), and the notebook
    is run again from the top in a new kernel with that cell not run: it gets one error output,
    :data:`KERNEL_STOPPED`, saying so, as a cell stopped by the time limit does (what it defines
    is missing below it). Each cell is skipped at most once, so a notebook runs at most once per
    code cell more, each time ``timeout`` + ``iopub_timeout`` later.
    """

    def preprocess(self, nb, resources=None, km=None):
        import copy

        original = copy.deepcopy(nb)
        self._hung: dict[int, str] = {}
        while True:
            try:
                return super().preprocess(nb, resources, km)
            except _KernelHung as e:
                self.log.warning("cell %d: %s", e.index, e.note)
                self._hung[e.index] = e.note
                nb = copy.deepcopy(original)

    async def _async_handle_timeout(self, timeout, cell=None):
        self._timed_out = True  # the time limit's interrupt was sent
        return await super()._async_handle_timeout(timeout, cell)

    def preprocess_cell(self, cell, resources, index):
        from nbclient.exceptions import CellTimeoutError

        if index in getattr(self, "_hung", {}):
            cell.outputs = [nbformat.v4.new_output("error", ename=KERNEL_STOPPED, evalue=self._hung[index],
                                                   traceback=[f"{KERNEL_STOPPED}: {self._hung[index]}"])]
            cell.execution_count = None
            return cell, self.resources
        self._timed_out = False
        try:
            return super().preprocess_cell(cell, resources, index)
        except CellTimeoutError:
            if not self._timed_out:  # no interrupt was sent: output merely slow, as nbgrader treats it
                raise
            raise _KernelHung(index, (
                f"the grading kernel stopped answering while this cell ran: it did not answer the interrupt "
                f"sent at the time limit per cell ({self.timeout} s, nbgrader's Execute.timeout) within "
                f"{self.iopub_timeout} s (a kernel stopped, e.g. with SIGSTOP, or hung where interrupts do not "
                "reach). It was killed, and the notebook was run again in a new kernel without this cell: "
                "what it defines is missing for the cells below it, which may score 0")) from None


def waiting_for_hand_grading(db_url: str, assignment: str, student: str | None = None,
                             notebook: str | None = None) -> list[tuple[str, str, str]]:
    """``[(student, notebook, grade_id)]`` of the answers in the gradebook that wait for a hand
    grade (nbgrader's ``needs_manual_grade``: answered, not graded by hand yet)."""
    from nbgrader.api import Gradebook, MissingEntry

    out = []
    with Gradebook(db_url) as gb:
        try:
            submissions = gb.assignment_submissions(assignment)
        except MissingEntry:
            return []
        for sub in submissions:
            if student is not None and sub.student.id != student:
                continue
            for nb in sub.notebooks:
                if notebook is None or nb.name == notebook:
                    out += [(sub.student.id, nb.name, g.name) for g in nb.grades if g.needs_manual_grade]
    return sorted(out)


class NotGradedYet(NbGraderPreprocessor):
    """Feedback only: an answer that waits for its hand grade says so, at the top of the feedback
    and above the answer, instead of showing only nbgrader's "Score: 0.0" as if graded 0."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        waiting = {gid for _, _, gid in waiting_for_hand_grading(info["db_url"], info["assignment"],
                                                                 info["student"], info["notebook"])}
        if not waiting:
            return nb, resources
        note = ("**Not graded yet:** your instructor grades {what} by hand. Until then {it} count{s} 0 in "
                "the score above: that 0 is not a grade.")
        n = len(waiting)
        cells = []
        for cell in nb.cells:
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") in waiting:
                cells.append(nbformat.v4.new_markdown_cell(note.format(what="the answer below", it="it", s="s")))
            cells.append(cell)
        what = "this written answer" if n == 1 else f"these {n} written answers"
        top = note.format(what=what + " (marked below)", it="it" if n == 1 else "they", s="s" if n == 1 else "")
        nb.cells = [nbformat.v4.new_markdown_cell(top), *cells]
        return nb, resources


class MathAsMathML(NbGraderPreprocessor):
    """Feedback only: the markdown cells' LaTeX (``$...$``, ``$$...$$``) as MathML, which browsers
    draw without a script. nbconvert's page loads MathJax from a CDN to typeset it, which a
    feedback page opened in JupyterLab (its HTML viewer runs no script), offline or on a hub
    without internet never does: students saw raw LaTeX. Code (fenced or inline) is left as it
    is, and so is anything latex2mathml cannot convert."""

    _CODE = re.compile(r"(```.*?```|~~~.*?~~~|`[^`\n]*`)", re.S)
    _MATH = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$(?!\s)([^$\n]+?)(?<!\s)\$(?!\d)", re.S)

    @classmethod
    def convert(cls, text: str) -> str:
        from latex2mathml.converter import convert

        def math(m):
            tex, block = (m[1], True) if m[1] is not None else (m[2], False)
            try:
                return convert(tex.strip(), display="block" if block else "inline")
            except Exception:  # noqa: BLE001 - left as written
                return m[0]

        parts = cls._CODE.split(text)
        return "".join(p if i % 2 else cls._MATH.sub(math, p) for i, p in enumerate(parts))

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            if cell.cell_type == "markdown" and "$" in cell.source:
                cell.source = self.convert(cell.source)
        return nb, resources


class ReleaseFeedbackWarned(ExchangeReleaseFeedback):
    """``nbgrader release_feedback``, which first warns of each answer that still waits for a hand
    grade (its feedback says "Not graded yet": :class:`NotGradedYet`), then releases as nbgrader does."""

    def copy_files(self):
        waiting = waiting_for_hand_grading(self.coursedir.db_url, self.coursedir.assignment_id)
        if waiting:
            students = sorted({st for st, _, _ in waiting})
            self.log.warning(
                "%d answer(s) of %s wait for a hand grade (formgrader's Manual Grading), so %d student(s)' "
                "feedback says 'Not graded yet' and counts them 0: %s. Grade them, run `make grade "
                "SUBMISSIONS=submitted`, then release the feedback again.", len(waiting),
                self.coursedir.assignment_id, len(students),
                ", ".join(f"{st} ({gid})" for st, _, gid in waiting[:10]) + (" ..." if len(waiting) > 10 else ""))
        super().copy_files()


c = get_config()  # noqa: F821 - injected by traitlets when nbgrader loads this file

c.CourseDirectory.course_id = "lesson16-normalization"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
# An assignment folder's grading knowledge (grader/scoring/questions.py: its questions, batteries and answer
# bank) is the grader's: never copied into release/ nor into a student's autograded folder.
c.CourseDirectory.ignore = [*CourseDirectory.class_traits()["ignore"].default(), "grading.py", "answer_bank.py",
                            "reference.py"]

# The slowest honest cell is a cold `import torch` plus a full checker battery (~3 s here);
# 60 s leaves a wide margin on a loaded 2-core machine.
c.Execute.timeout = 60
# How long a kernel has to answer the interrupt sent at that limit (and to send a cell's last
# output) before it counts as stopped or hung, is killed, and the cell is skipped (GradingExecute):
# nbclient's 4 s default, widened for a loaded 2-core machine.
c.Execute.iopub_timeout = 10
# Every submission runs in the course's kernel, whatever its own metadata says.
c.Execute.kernel_name = "python3"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.OverwriteCells.add_missing_cells = True

# Feedback shows what the hidden tests print (the diagnosis), never their source. nbgrader 0.9
# copies grade cells into the feedback HTML whole (jupyter/nbgrader#917), so the hidden-test
# regions are cleared first, and a traceback in a grade cell prints only its failing line
# (IPython's Plain mode), not the lines around it, which could be hidden tests.
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, StandardAnswers, NotGradedYet, MathAsMathML,
                                    CSSHTMLHeaderPreprocessor]
c.ExchangeFactory.release_feedback = ReleaseFeedbackWarned
# The standard answers live in source/ only: release/ is generated without the tagged cells
# (nbconvert's TagRemovePreprocessor, first, before nbgrader records or checks any cell).
c.GenerateAssignment.preprocessors = [TagRemovePreprocessor,
                                      *GenerateAssignment.class_traits()["preprocessors"].default()]
c.TagRemovePreprocessor.enabled = True
c.TagRemovePreprocessor.remove_cell_tags = {STANDARD_ANSWER_TAG}
_autograde = list(Autograde.class_traits()["autograde_preprocessors"].default())
_at = _autograde.index(Execute)
c.Autograde.autograde_preprocessors = [*_autograde[:_at], HandbackInputs, GradingExecute, HandbackInputsRemoved,
                                       *_autograde[_at + 1:]]
# Without this run's inputs (formgrader's Autograde, a bare `nbgrader autograde`) nothing is run:
# those hidden tests are graded by `make grade` only (GradedByMakeGrade).
c.Autograde.exporter_class = GradedByMakeGrade
c.Execute.extra_arguments = ["--HistoryManager.hist_file=:memory:", "--InteractiveShell.xmode=Plain"]
# After its last cell a kernel is killed at once (jupyter_client's shutdown_kernel(now=True)), not
# asked to shut down and waited for: a graceful exit (torch's teardown, the sandbox's) was 27-33%
# of a graded notebook's time. Nothing is lost: the outputs are in by then, and what the grader
# reads afterwards (the kernel's record.json and cgroup pids.events, grader/kernel/sandbox.py) is
# written outside the kernel. Code a notebook leaves to run at exit (atexit) does not run.
c.Execute.shutdown_kernel = "immediate"
