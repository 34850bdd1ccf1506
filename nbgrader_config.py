"""nbgrader configuration for the Lesson 16 course (normalization in the transformer block).

The course root is the folder this file lives in, so `nbgrader` commands and
`python -m normref.grading` work from any working directory inside a clone, and a copy of
the course (tests, the demo class) is its own root.
"""
import os

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
