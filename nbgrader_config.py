"""nbgrader configuration for the Lesson 16 course (normalization in the transformer block).

The course root is the folder this file lives in, so `nbgrader` commands and
`python -m grader` work from any working directory inside a clone, and a copy of
the course (tests, the demo class) is its own root.
"""
import os

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import ClearHiddenTests, GetGrades

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
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
c.Execute.extra_arguments = ["--HistoryManager.hist_file=:memory:", "--InteractiveShell.xmode=Plain"]
