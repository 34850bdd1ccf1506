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

HONEST = ["honest_decorated", "honest_numpy_helpers", "honest_scratch_reference"]
ATTACKS = ["cat_layer_norm", "obfuscated_normref", "patch_checker", "plain_F_rms_norm", "symlink_solution"]
#: Attacks that still earn points, with how (xfail strict: a fix makes them pass and fails this).
BREACHES: dict[str, str] = {}


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


def test_references_called_are_named(graded):
    """A direct call of torch's norm is named in the feedback as the reason for 0 points."""
    assert any("calls F.rms_norm" in ln for ln in graded["plain_F_rms_norm"].feedback_lines), \
        graded["plain_F_rms_norm"].feedback_lines
