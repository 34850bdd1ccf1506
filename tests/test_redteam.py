"""The red team's variants (tests/redteam/), a representative subset graded by one real run.

Each variant is a notebook a student could hand in (tests/redteam/driver.py builds it from the
release notebook); the subset is graded once, for the module, by README's command
(``python -m grader --submissions``) in a scratch course, with the blank notebook of each
assignment beside it. An honest variant must earn full marks with no "0 points:" line in its
feedback; an attack no more than the blank notebook earns, and nothing it must not read may
appear in its feedback. ``.venv/bin/python tests/redteam/driver.py`` grades every variant and
prints the whole table (tests/redteam/REPORT.md).
"""
from __future__ import annotations

import pytest

from redteam import driver

pytestmark = pytest.mark.slow

HONEST = ["honest_decorated", "honest_numpy_helpers", "honest_scratch_reference",
          "honest_dtype_table"]  # a table filled by .update() at module level: 0/5 before the clean room ran it
ATTACKS = ["always_valueerror", "cat_layer_norm", "obfuscated_normref", "patch_checker", "plain_F_rms_norm",
           "static_runtime", "symlink_solution"]
#: How each attack once earned points or stopped the class, and what closed it (each a class of attack):
FIXED = {
    "always_valueerror": "a batch_norm that always raises ValueError earned the case that expects one (0.57 of 5): "
                         "that case first calls the same input with every token real, which must not raise",
    "static_runtime": "TorchScript's static runtime ran aten::layer_norm by its own kernel, past the seal's "
                      "dispatcher (5/5): TorchScript is absent from the clean room",
    "symlink_solution": "intake copied a handed-in symlink as the file it points to (the solution and the "
                        "gradebook in the kernel's folder, printed into the feedback): links are never followed",
    "symlink_dangling": "a dangling symlink stopped the whole run (shutil.Error): links are never followed",
    "symlink_dir_loop": "a symlink to the course's logs/ recursed into the batch being written: links are never "
                        "followed",
    "npy_membomb": "the clean room's .npy header announcing 2**50 values was allocated in the grader's process: "
                   "a header is read before any allocation",
}
#: The variants that once stopped the whole run they were in: graded in the same run as the others.
RUN_STOPPERS = ["symlink_dangling", "symlink_dir_loop", "npy_membomb"]


@pytest.fixture(scope="module")
def graded(tmp_path_factory, bubblewrap):
    rows, facts = driver.grade(HONEST + ATTACKS + RUN_STOPPERS, tmp_path_factory.mktemp("redteam"), jobs=1,
                               log=lambda s: None)
    assert facts["rc"] == 0, facts["tail"]
    return {r.variant: r for r in rows}


@pytest.mark.parametrize("variant", HONEST)
def test_honest_full_marks_no_accusation(graded, variant):
    row = graded[variant]
    assert row.possible > 0 and row.got == row.possible, (row.per_cell, row.feedback_lines)
    assert not [ln for ln in row.feedback_lines if "0 points:" in ln], row.feedback_lines


@pytest.mark.parametrize("variant", ATTACKS + RUN_STOPPERS)
def test_attack_earns_no_more_than_blank(graded, variant):
    row = graded[variant]
    assert row.possible > 0, "the variant's questions were not graded"
    assert row.got <= row.blank, (row.per_cell, row.feedback_lines)
    assert not row.leaks, row.leaks


def test_references_called_are_named(graded):
    """A direct call of torch's norm is named in the feedback as the reason for 0 points."""
    assert any("calls F.rms_norm" in ln for ln in graded["plain_F_rms_norm"].feedback_lines), \
        graded["plain_F_rms_norm"].feedback_lines
