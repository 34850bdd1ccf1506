"""nbgrader configuration for the Lesson 16 course (normalization in the transformer block).

The course root is the folder this file lives in, so `nbgrader` commands and
`python -m grader` work from any working directory inside a clone, and a copy of
the course (tests, the demo class) is its own root.
"""
import os

import nbformat
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor, TagRemovePreprocessor
from nbgrader.converters import GenerateAssignment
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import ClearHiddenTests, GetGrades, NbGraderPreprocessor

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


c = get_config()  # noqa: F821 - injected by traitlets when nbgrader loads this file

c.CourseDirectory.course_id = "lesson16-normalization"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))

# The slowest honest cell is a cold `import torch` plus a full checker battery (~3 s here);
# 60 s leaves a wide margin on a loaded 2-core machine.
c.Execute.timeout = 60
# Every submission runs in the course's kernel, whatever its own metadata says.
c.Execute.kernel_name = "python3"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.OverwriteCells.add_missing_cells = True

# Feedback shows what the hidden tests print (the diagnosis), never their source. nbgrader 0.9
# copies grade cells into the feedback HTML whole (jupyter/nbgrader#917), so the hidden-test
# regions are cleared first, and a traceback in a grade cell prints only its failing line
# (IPython's Plain mode), not the lines around it, which could be hidden tests.
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, StandardAnswers, CSSHTMLHeaderPreprocessor]
# The standard answers live in source/ only: release/ is generated without the tagged cells
# (nbconvert's TagRemovePreprocessor, first, before nbgrader records or checks any cell).
c.GenerateAssignment.preprocessors = [TagRemovePreprocessor,
                                      *GenerateAssignment.class_traits()["preprocessors"].default()]
c.TagRemovePreprocessor.enabled = True
c.TagRemovePreprocessor.remove_cell_tags = {STANDARD_ANSWER_TAG}
c.Execute.extra_arguments = ["--HistoryManager.hist_file=:memory:", "--InteractiveShell.xmode=Plain"]
