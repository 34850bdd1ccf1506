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

HONEST = ["honest_decorated", "honest_numpy_helpers", "honest_scratch_reference"]
ATTACKS = ["cat_layer_norm", "obfuscated_normref", "patch_checker", "plain_F_rms_norm", "static_runtime",
           "symlink_solution"]
#: Attacks that still earn points, with how (xfail strict: a fix makes them pass and fails this).
BREACHES: dict[str, str] = {
    "static_runtime": "TorchScript's static runtime (torch._C._jit_to_static_module of aten::layer_norm) runs "
                      "layer_norm through its own out-variant kernel, which the clean room's seal does not replace: "
                      "LayerNorm of [x, -x] gives RMSNorm, 5/5 points (flagged for review: torch._C)",
    "symlink_solution": "intake copies a handed-in symlink as the file it points to: notes.txt -> "
                        "{course}/source/rmsnorm/rmsnorm.ipynb and gradebook.db -> {course}/gradebook.db arrive in "
                        "the kernel's /tmp/work as regular files; the answer cell prints the instructor's solution "
                        "and hidden tests into the student's feedback (LEAKED=)",
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory, bubblewrap):
    rows, facts = driver.grade(HONEST + ATTACKS, tmp_path_factory.mktemp("redteam"), jobs=1, log=lambda s: None)
    assert facts["rc"] == 0, facts["tail"]
    return {r.variant: r for r in rows}


@pytest.mark.parametrize("variant", HONEST)
def test_honest_full_marks_no_accusation(graded, variant):
    row = graded[variant]
    assert row.possible > 0 and row.got == row.possible, (row.per_cell, row.feedback_lines)
    assert not [ln for ln in row.feedback_lines if "0 points:" in ln], row.feedback_lines


@pytest.mark.parametrize("variant", [pytest.param(v, marks=pytest.mark.xfail(strict=True, reason=BREACHES[v]))
                                     if v in BREACHES else v for v in ATTACKS])
def test_attack_earns_no_more_than_blank(graded, variant):
    row = graded[variant]
    assert row.possible > 0, "the variant's questions were not graded"
    assert row.got <= row.blank, (row.per_cell, row.feedback_lines)
    assert not row.leaks, row.leaks


#: The variants that stop the whole run they are in (each a file ``solo`` in its folder), with how.
RUN_STOPPERS = {
    "symlink_dangling": "intake: copying the submissions (logs/batches/.../received.*.part) follows symlinks; "
                        "a dangling one raises shutil.Error, printed as 'error: [(src, dst, \"[Errno 2] No such "
                        "file or directory ...\")]', rc 1, nobody graded",
    "symlink_dir_loop": "intake: a symlink to the course's logs/ is followed into the batch folder being written "
                        "inside it, recursing until [Errno 36] File name too long; rc 1, nobody graded",
    "npy_membomb": "scoring: the clean room's answer, a .npy header announcing 2**50 float64, is decoded by "
                   "np.load in the grader's process (normref/wire.py _from_npy): _ArrayMemoryError escapes "
                   "scoring_stage, rc 1, the class's scoring stage ends with a traceback",
}


@pytest.mark.xfail(strict=True, reason="; ".join(f"{k}: {v}" for k, v in RUN_STOPPERS.items()))
def test_one_students_files_never_stop_the_class(tmp_path, bubblewrap):
    """The three run stoppers and one honest student, in one run: each stopper should cost only
    its own student (no more than a blank), the honest one full marks."""
    rows, facts = driver.grade([*RUN_STOPPERS, "honest_decorated"], tmp_path, jobs=1, log=lambda s: None)
    assert facts["rc"] == 0, facts["tail"]
    assert {r.variant: r.verdict for r in rows} == {**dict.fromkeys(RUN_STOPPERS, "held"), "honest_decorated": "ok"}


def test_references_called_are_named(graded):
    """A direct call of torch's norm is named in the feedback as the reason for 0 points."""
    assert any("calls F.rms_norm" in ln for ln in graded["plain_F_rms_norm"].feedback_lines), \
        graded["plain_F_rms_norm"].feedback_lines
