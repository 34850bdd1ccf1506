"""Validate's message is never cut mid-sentence (issue 30, item 5 / Why 8).

The toolbar's Validate showed "the seed token: q = and 2 more cases": a case's name cut at its
first " (" (``"the seed token: q = ((1, 2, 3), ...)"``). A case is now named by its label, its head
phrase cut only where a phrase ends (:func:`normref.checks.core.case_label`), and a message is
shortened by whole cases ("and 2 more cases"). Checked on every case name of every public
battery and a drawn one, and on the real messages ``as_graded`` raises for wrong answers, passed
through nbgrader's own Validator, which cuts any line over its width with "...".
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import normref
from normref.checks import backward, block, modern, module, norms, placement
from normref.checks.core import case_label
from normref.handback import PointsLost, as_graded

_SIGNS = ("=", "+", "-", "*", "/", "<", ">", ":", ",", "(")


def _names() -> list[str]:
    from grader.scoring.batteries import draw_norm_battery, question_generator

    batteries = [norms.battery("rms", "torch"), norms.battery("layer", "numpy"), module._module_battery(),
                 placement._placement_battery(), block._block_battery(), backward._backward_battery(),
                 modern._peri_battery(), modern._qk_battery(), modern._dyt_battery(),
                 draw_norm_battery("rms", "torch", question_generator(1234, "rms_norm_battery"))]
    return [c.name for cases in batteries for c in cases]


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth < 0:
            return False
    return depth == 0


def test_every_case_label_is_a_whole_phrase_of_its_name():
    names = _names()
    assert len(names) > 40
    for name in names:
        label = case_label(name)
        assert label and name.startswith(label), (name, label)
        assert _balanced(label) and not label.endswith(_SIGNS), (name, label)
        rest = name[len(label):]
        assert rest == "" or rest.startswith((": ", ", ", " (")), (name, label)
    qk = modern._qk_battery()[0].name
    assert qk.startswith("the seed token: q = ((1, 2, 3)") and case_label(qk) == "the seed token"


@pytest.mark.parametrize("name, label", [
    ("B = T = D [4, 4, 4] (a wrong axis still broadcasts)", "B = T = D [4, 4, 4]"),
    ("float16 [2, 5, 8] of RMS 30 (plain logits reach thousands), RMSNorms", "float16 [2, 5, 8] of RMS 30"),
    ("x = (1, 2), eps 0", "x = (1, 2)"),  # not "x =": the parenthesis is the value
    ("values scaled by (3, 4)", "values scaled by (3, 4)"),  # "by" opens a phrase: no cut before its value
    ("q = ((1, 2), (3, 4))", "q = ((1, 2), (3, 4))"),
])
def test_case_label_cuts_only_where_a_phrase_ends(name, label):
    assert case_label(name) == label


def _validate_lines(message: str) -> list[str]:
    """The lines nbgrader's Validator shows for an error whose traceback is ``message``
    (``PointsLost`` renders as "AssertionError: <message>"), as ``nbgrader validate`` prints them."""
    from nbgrader.validator import Validator

    return Validator()._indent(f"AssertionError: {message}").split("\n")


def _raised(result, grade_id: str, points: float, monkeypatch) -> str:
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    with pytest.raises(PointsLost) as e:
        as_graded(result, grade_id, points)
    return str(e.value)


def _qk_float32(q, k, q_norm, k_norm):  # the answer: float32 logits for float16 inputs
    return (q_norm(q).float() @ k_norm(k).float().transpose(-2, -1)) / math.sqrt(q.shape[-1])


def _qk_swapped(q, k, q_norm, k_norm):  # each norm on the other side
    return (k_norm(q) @ q_norm(k).transpose(-2, -1)) / math.sqrt(q.shape[-1])


def _qk_unscaled(q, k, q_norm, k_norm):  # every case: one cause
    return q_norm(q) @ k_norm(k).transpose(-2, -1)


def _layer_norm_unbiased(x, weight, bias, eps=1e-5):  # n-1 variance: most cases fail
    h = x.astype(np.float64)
    m = h.mean(-1, keepdims=True)
    return ((h - m) / np.sqrt(h.var(-1, ddof=1, keepdims=True) + eps) * weight + bias).astype(x.dtype)


@pytest.mark.parametrize("check, fn, grade_id, points", [
    (normref.check_qk_norm_logits, _qk_float32, "qk_logits_battery", 2.5),
    (normref.check_qk_norm_logits, _qk_swapped, "qk_logits_battery", 2.5),
    (normref.check_qk_norm_logits, _qk_unscaled, "qk_logits_battery", 2.5),
    (lambda f: normref.check_layer_norm(f, "numpy"), _layer_norm_unbiased, "layer_norm_battery", 3),
], ids=["qk_float32", "qk_swapped", "qk_unscaled", "layer_norm_unbiased"])
def test_validates_message_names_whole_cases_and_fits_nbgraders_lines(check, fn, grade_id, points, monkeypatch):
    result = check(fn)
    assert not result.passed
    message = _raised(result, grade_id, points, monkeypatch)
    shown = _validate_lines(message)
    assert not any(line.endswith("...") for line in shown), shown  # nbgrader cut none of them
    flat = " ".join(message.split())
    assert not re.search(r"[=(,:]\s+and \d+ more cases", flat), message  # no name cut before "and N more"
    for c in result.cases:
        if not c.passed and case_label(c.name) != c.name:  # a label, not its name cut anywhere else
            assert c.name.split(" (", 1)[0] in flat or case_label(c.name) in flat or "more cases" in flat, message
    assert not re.search(r"\bq =\s+(and|-|$)", flat), message


def test_a_cause_of_many_cases_names_the_first_and_counts_the_rest(monkeypatch):
    result = normref.check_qk_norm_logits(_qk_unscaled)
    failing = [c for c in result.cases if not c.passed]
    assert len(failing) >= 3
    message = _raised(result, "qk_logits_battery", 2.5, monkeypatch)
    flat = " ".join(message.split())
    assert f"- {case_label(failing[0].name)} and {len(failing) - 1} more cases: " in flat, message
    assert "the seed token" in flat and "the seed token: q" not in flat, message


def test_a_quick_checks_problem_fits_validates_first_line():
    """``assert quick.passed, quick.problem`` shows the problem after "AssertionError: ": wrapped so
    that nbgrader's Validator cuts no line."""
    torch.manual_seed(0)
    result = normref.check_qk_norm_logits(_qk_float32)
    assert result.problem
    assert not any(line.endswith("...") for line in _validate_lines(result.problem)), result.problem
