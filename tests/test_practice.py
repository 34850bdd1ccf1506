"""normref.practice: the seed's self-check questions grade right answers right, diagnose the
usual mistakes, and keep the answer hidden until a real attempt."""
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from normref import answers as A
from normref import practice as P

# The seed's "Check solutions", typed here from the seed (the module computes its own).
SEED_ANSWERS = {
    "ps_mean_var": (3, 1),
    "ps_layernorm": (-1, -1, 1, 1),
    "ps_rms_3_4": 3.536,
    "ps_rms_subtracts_mean": "No",
    "ps_pre_ln_formula": "Y = X + Attention(Norm(X))",
    "ps_shape_change": 0,
    "retrieval_axis": "the feature axis D: the d features of that one token",
    "trace_rms_shape": (2, 3, 1),
}


@pytest.fixture(autouse=True)
def fresh():
    P.reset()
    yield
    P.reset()


def test_every_seed_question_is_asked():
    assert set(P.QUESTIONS) == set(SEED_ANSWERS)
    sections = {q.section for q in P.QUESTIONS.values()}
    assert sections == {"Practice studio", "Retrieval check", "Trace it"}
    assert sum(q.section == "Practice studio" for q in P.QUESTIONS.values()) == 6


@pytest.mark.parametrize("qid", sorted(SEED_ANSWERS))
def test_the_seed_solution_is_graded_correct(qid):
    fb = P.check(qid, SEED_ANSWERS[qid])
    assert fb.correct is True, fb


@pytest.mark.parametrize("answer", ["3, 1", (3.0, 1.0), [3, 1], torch.tensor([3.0, 1.0]), "(3; 1)", "3 1"])
def test_numbers_are_read_in_many_forms(answer):
    assert P.check("ps_mean_var", answer).correct is True


@pytest.mark.parametrize("answer", ["sqrt(12.5)", "√12.5", "sqrt(25/2)", 3.5355, "3.54"])
def test_rms_of_3_4_accepts_root_forms(answer):
    assert P.check("ps_rms_3_4", answer).correct is True


@pytest.mark.parametrize("qid, answer, fault", [
    ("ps_mean_var", (3, 4 / 3), "unbiased_variance"),
    ("ps_mean_var", (3, 4), "sum_of_squares"),
    ("ps_mean_var", (3, 10), "uncentered_variance"),
    ("ps_mean_var", (12, 1), "sum_not_mean"),
    ("ps_layernorm", [-math.sqrt(3 / 4)] * 2 + [math.sqrt(3 / 4)] * 2, "unbiased_variance"),
    ("ps_rms_3_4", 5, "l2_norm_not_rms"),
    ("ps_rms_3_4", 12.5, "missing_sqrt"),
    ("ps_rms_3_4", 3.5, "mean_abs_not_rms"),
    ("ps_rms_subtracts_mean", "Yes", "subtracts_mean"),
    ("ps_pre_ln_formula", "Norm(X + Attention(X))", "pre_post_swapped"),
    ("ps_pre_ln_formula", "Attention(Norm(X))", "missing_residual"),
    ("ps_pre_ln_formula", "Norm(X) + Attention(Norm(X))", "residual_from_normed"),
    ("ps_shape_change", 1, "says_shape_changes"),
    ("retrieval_axis", 0, "batch_axis"),
    ("retrieval_axis", "the sequence axis T: every position of the sequence", "sequence_axis"),
    ("trace_rms_shape", (2, 3), "missing_keepdim"),
    ("trace_rms_shape", "2, 3, 8", "output_shape_not_statistic"),
])
def test_a_typical_mistake_gets_the_assignment_checkers_diagnosis(qid, answer, fault):
    fb = P.check(qid, answer)
    assert fb.correct is False
    assert fb.faults == (fault,), fb
    assert "[fault:" not in fb.message and len(fb.message) > 20  # a sentence, without the tag
    assert P.attempted(qid)


def test_lesson_and_assignment_agree_on_every_answer():
    """The lesson's self-check and the graded practice assignment use one checker."""
    from normref import answers

    assert P.check("ps_rms_3_4", 5).message.endswith(answers.ANSWER_FAULTS["l2_norm_not_rms"])
    assert answers.check_rms_34(3.536).passed and P.check("ps_rms_3_4", 3.536).correct


def test_formula_order_of_the_sum_does_not_matter():
    assert P.check("ps_pre_ln_formula", "Attention(LN(X)) + X").correct is True
    assert P.check("ps_pre_ln_formula", r"\operatorname{Attention}(\operatorname{Norm}(X)) + X").correct is True


@pytest.mark.parametrize("answer", ["feature", "the last axis", -1, 2, "D"])
def test_the_axis_can_be_named_instead_of_picked(answer):
    assert P.check("retrieval_axis", answer).correct is True


@pytest.mark.parametrize("qid, answer", [
    ("ps_mean_var", "three, four"), ("ps_mean_var", "3"), ("ps_rms_3_4", "abc"),
    ("retrieval_axis", 7), ("retrieval_axis", "hmm"), ("trace_rms_shape", "a shape"),
])
def test_unreadable_answers_get_a_message_and_do_not_unlock(qid, answer):
    fb = P.check(qid, answer)
    assert fb.correct is False and fb.message
    assert not P.attempted(qid)


def test_answer_hidden_until_a_real_attempt():
    locked = P.reveal("ps_mean_var")
    assert "Answer first" in locked and "variance = 1" not in locked
    assert P.check("ps_mean_var", ...).correct is None  # the notebook's unanswered placeholder
    assert "Answer first" in P.reveal("ps_mean_var")
    assert P.check("ps_mean_var", (2, 2)).correct is False
    assert P.reveal("ps_mean_var") == "Standard answer: mean = 3, variance = 1"


def test_revealed_answers_match_the_seed_check_solutions():
    for qid, ans in SEED_ANSWERS.items():
        P.check(qid, ans)
    assert P.reveal("ps_layernorm") == "Standard answer: (-1, -1, 1, 1)"
    assert P.reveal("ps_rms_3_4").endswith("≈ 3.536")
    assert P.reveal("ps_rms_subtracts_mean") == "Standard answer: No"
    assert P.reveal("trace_rms_shape") == "Standard answer: [2, 3, 1]"
    assert "X + Attention(Norm(X))" in P.reveal("ps_pre_ln_formula")


def test_unknown_question_names_the_known_ones():
    with pytest.raises(KeyError, match="ps_mean_var"):
        P.check("nope", 1)


def test_quiz_widget_checks_and_unlocks_show_answer():
    P.reset()
    q = P.quiz("ps_rms_3_4")
    assert not q.answer.revealable
    q.answer.reveal()  # disabled: nothing happens
    assert q.feedback.value == ""
    q.answer.check("")  # empty box: no attempt, told in the form's own words
    assert "no answer yet" in q.feedback.value and not q.answer.revealable
    assert "type your answer in the box (one number (3 decimals), or sqrt(...)), then press Check or Enter." \
        in q.feedback.value and "..." not in q.feedback.value.replace("sqrt(...)", "")
    q.answer.check("5")
    assert "L2 norm" in q.feedback.value
    assert q.answer.revealable
    q.answer.reveal()
    assert "3.536" in q.feedback.value


def test_quiz_widget_judges_the_answer_sent_with_check_not_the_one_the_kernel_had():
    """The browser sends the box's text with the request (normref/answer_form.py): an answer the
    kernel still held from before is not what is judged."""
    P.reset()
    q = P.quiz("ps_rms_3_4")
    q.answer.value = "5"  # what a state update had brought earlier
    q.answer._message(q.answer, {"event": "check", "value": "3.536"}, [])  # Check (or Enter) with the new text
    assert "✔ correct" in q.feedback.value and "<code>3.536</code>" in q.feedback.value
    assert q.answer.value == "3.536"
    q.answer._message(q.answer, {"event": "check", "value": None}, [])  # a message without text: an empty box
    assert "no answer yet" in q.feedback.value


def test_quiz_widget_for_a_choice_question():
    P.reset()
    q = P.quiz("retrieval_axis")
    q.answer.check(None)  # nothing picked
    assert "pick one of the options, then press Check." in q.feedback.value
    q.answer.check(q.answer.options[2])
    assert "correct" in q.feedback.value and "dim=-1" in q.feedback.value
    q.answer.check(q.answer.options[0])
    assert "BatchNorm" in q.feedback.value
    q.answer._message(q.answer, {"event": "check", "value": "not an option"}, [])
    assert "pick one of the options" in q.feedback.value


def test_each_view_says_how_to_answer_in_its_own_terms():
    """The code cell's check says to replace the ... and run the cell; the widget, to type in the
    box and press Check or Enter; reveal before an attempt, how to attempt there."""
    P.reset()
    assert P.check("ps_rms_3_4", ...).message == (
        "replace the ... with your answer (one number (3 decimals), or sqrt(...)), then run the cell again.")
    assert P.reveal("ps_rms_3_4").startswith("Answer first: run check('ps_rms_3_4', your_answer)")
    q = P.quiz("ps_rms_3_4")
    assert q._on_reveal().startswith("Answer first: press Check with your answer;")


# (lesson question, the graded assignment's checker called on the same answer, answers)
_SAME_CHECKER = [
    ("ps_mean_var", lambda a: A.check_mean_var(*a), [(3, 1), (3, 4 / 3), (12, 1), (2.5, 1)]),
    ("ps_layernorm", A.check_layer_norm_2244, [(-1, -1, 1, 1), (2, 2, 4, 4), (-1, 1)]),
    ("ps_rms_3_4", A.check_rms_34, [3.53, 3.535, 3.54, 3.5, 5, 12.5, 3.6]),
    ("ps_pre_ln_formula", A.check_pre_ln_formula,
     ["X + Attention(Norm(X))", "Norm(X + F(X))", "X + Norm(F(X))", "F(Norm(X))"]),
    ("trace_rms_shape", A.check_rms_shape, [(2, 3, 1), (2, 3), (2, 3, 8), (1, 3, 8)]),
]


@pytest.mark.parametrize("qid, graded, given", _SAME_CHECKER, ids=[q for q, _, _ in _SAME_CHECKER])
def test_the_lesson_says_what_the_assignment_says_for_the_same_answer(qid, graded, given):
    for answer in given:
        fb, r = P.check(qid, answer), graded(answer)
        assert fb.correct is r.passed, (qid, answer)
        assert fb.faults == tuple(r.faults), (qid, answer)
        if not r.passed:  # the same diagnosis; a one-answer question's label ("rms (3, 4): ") is
            # the lesson's box, which has no name (a two-number answer keeps "mean: "/"variance: ")
            said = " ".join(r.messages)
            assert fb.message == (said if qid == "ps_mean_var" else said.split(": ", 1)[1]), (qid, answer)


def test_rms_3_4_truncated_to_two_decimals_is_right_in_both():
    # 3.5355... truncated is 3.53: both accept it; 3.5 is the mean (3 + 4) / 2 and both say so
    assert P.check("ps_rms_3_4", "3.53").correct and A.check_rms_34("3.53").passed
    fb = P.check("ps_rms_3_4", 3.5)
    assert fb.faults == ("mean_abs_not_rms",)
    assert "you gave 3.5: that is the mean of the values, (3 + 4) / 2" in fb.message


# ------------------------------------------------ lessons teach, the graded practice assesses
# Issue 16, item 5: no lesson's "Show answer" may answer a graded `practice` cell. The graded
# answers are derived here by hand from each question's own numbers and setting; the lessons'
# revealed answers are read from what their quiz cells reveal after an attempt.

_REPO = Path(__file__).resolve().parents[1]
_PRACTICE_SOURCE = _REPO / "source" / "practice" / "practice.ipynb"

#: grade_id -> {answer variable: the graded answer, derived by hand}
_GRADED = {
    # (1 + 3 + 5 + 7) / 4 = 4; ((-3)^2 + (-1)^2 + 1^2 + 3^2) / 4 = 20 / 4 = 5
    "practice_mean_var": {"mean_1357": 4.0, "var_1357": 5.0},
    # (x - 4) / sqrt(5) = (-1.342, -0.447, 0.447, 1.342)
    "practice_layer_norm": {"ln_1357": tuple((v - 4) / math.sqrt(5) for v in (1, 3, 5, 7))},
    # sqrt((25 + 144) / 2) = sqrt(84.5) = 9.192
    "practice_rms": {"rms_5_12": math.sqrt(84.5)},
    # (1, -1, 2) / sqrt(6/3) has a negative entry; (6, 4, 7) / sqrt(101/3) has none: it changes
    "practice_subtracts_mean": {"rms_shift_changes": True},
    "practice_pre_ln_formula": {"pre_ln_formula": "Y = H + FFN(Norm(H))"},
    "practice_shape": {"norm_keeps_shape": True},  # [3, 7, 16] -> [3, 7, 16]
    "trace_rms_shape": {"rms_shape": (4, 5, 1)},  # [4, 5, 6] reduced over the last axis, kept
    "retrieval_stats_axis": {"stats_axis": 1},  # [B, D, T]: D is axis 1
}

#: lesson question -> the graded cell that once asked the same question with the same numbers
_ONCE_REVEALED = {
    "trace_rms_shape": "trace_rms_shape", "retrieval_axis": "retrieval_stats_axis",
    "ps_mean_var": "practice_mean_var", "ps_layernorm": "practice_layer_norm",
    "ps_rms_3_4": "practice_rms", "ps_rms_subtracts_mean": "practice_subtracts_mean",
    "ps_pre_ln_formula": "practice_pre_ln_formula", "ps_shape_change": "practice_shape",
}


def _lesson_questions() -> set[str]:
    """Every self-check question a lesson (notebooks/*.md) asks, by id."""
    ids = set()
    for md in sorted((_REPO / "notebooks").glob("*.md")):
        ids |= set(re.findall(r"practice\.(?:quiz|check)\(\s*[\"'](\w+)[\"']", md.read_text()))
    return ids


def _graded_cells():
    """(imports source, {grade_id: hidden-test expression}) of the source practice notebook."""
    import nbformat

    nb = nbformat.read(_PRACTICE_SOURCE, as_version=4)
    imports = next(c.source for c in nb.cells
                   if c.metadata.get("nbgrader", {}).get("grade_id") == "practice_imports")
    hidden = {}
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if meta.get("grade") and c.cell_type == "code":
            body = c.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
            hidden[meta["grade_id"]] = body.strip()
    return imports, hidden


def _score(imports: str, expr: str, answers: dict) -> float:
    """What grading gives: the hidden test hands the values back (``hand_back(gid, *values)``)
    and the grader scores them with the checker and setting the practice assignment declares."""
    from grader.scoring.inputs import short_answers
    from normref import answers as checkers

    ns: dict = {}
    exec(imports, ns)
    ns.update(answers)
    practice = short_answers()
    ns["hand_back"] = lambda gid, *values: getattr(checkers, practice[gid][0])(*values, **practice[gid][1]).score
    return float(eval(expr, ns))


def _revealed_forms(qid: str) -> list[dict]:
    """What a student copying the lesson's revealed answer could type into the graded cell:
    the revealed text, its pieces (``a = b ≈ c``), the meaning of a revealed option, and for
    the axis question the lesson's ``dim=-1``; one dict of answer variables per form."""
    P.check(qid, SEED_ANSWERS[qid])  # an attempt unlocks the answer, as the Show-answer button
    text = P.reveal(qid)
    assert text.startswith("Standard answer: "), text
    text = text.removeprefix("Standard answer: ")
    names = list(_GRADED[_ONCE_REVEALED[qid]])
    if len(names) == 2:  # mean and variance: the two numbers the lesson prints
        nums = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", text)]
        return [dict(zip(names, nums))]
    q = P.QUESTIONS[qid]
    forms = {text, *(p.strip() for p in re.split(r"\s=\s|≈", text))}
    if q.kind == "choice":
        forms.add(q._values[q.options.index(text)])
    if qid == "retrieval_axis":
        forms |= {-1, "dim=-1", "the last axis"}
    return [{names[0]: f} for f in forms]


def test_every_lesson_question_is_mapped_and_every_graded_answer_is_derived():
    _, hidden = _graded_cells()
    assert _lesson_questions() == set(_ONCE_REVEALED) == set(SEED_ANSWERS)
    assert set(hidden) == set(_GRADED)  # the hand-graded explanation has no hidden test


@pytest.mark.parametrize("grade_id", sorted(_GRADED))
def test_the_hand_derived_answer_earns_the_graded_point(grade_id):
    imports, hidden = _graded_cells()
    assert _score(imports, hidden[grade_id], _GRADED[grade_id]) == 1.0


def _same(a, b) -> bool:
    """Whether two answers are the same value (numbers to 3 decimals, words case-blind)."""
    try:
        return bool(np.allclose(np.asarray(a, float), np.asarray(b, float), atol=5e-3)) \
            and np.shape(a) == np.shape(b)
    except (TypeError, ValueError):
        pass
    if isinstance(a, (bool, str)) and isinstance(b, (bool, str)):
        try:
            return A.parse_yes_no(a) == A.parse_yes_no(b)
        except A.AnswerFormatError:
            return str(a).strip().lower() == str(b).strip().lower()
    return False


@pytest.mark.parametrize("qid", sorted(_ONCE_REVEALED))
def test_no_lesson_reveals_a_graded_answer(qid):
    imports, hidden = _graded_cells()
    grade_id = _ONCE_REVEALED[qid]
    for form in _revealed_forms(qid):
        for name, value in form.items():
            assert not _same(value, _GRADED[grade_id][name]), (qid, grade_id, name, value)
        # copied into the graded cell, the lesson's answer earns nothing
        assert _score(imports, hidden[grade_id], form) == 0.0, (qid, form)


def test_no_lesson_text_states_the_graded_explanation():
    """The hand-graded `practice_shape_why` asks about x of shape [3, 7, 16]; no lesson question,
    answer or feedback names its statistic's shape [3, 7, 1]."""
    for qid, q in P.QUESTIONS.items():
        P.check(qid, SEED_ANSWERS[qid])
        said = " ".join([q.prompt, q.right, P.reveal(qid), *q.options])
        assert "3, 7" not in said, qid
    for md in sorted((_REPO / "notebooks").glob("*.md")):
        assert "3, 7, 1" not in md.read_text() and "3, 7, 16" not in md.read_text(), md.name
