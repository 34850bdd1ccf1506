"""normref.practice: the seed's self-check questions grade right answers right, diagnose the
usual mistakes, and keep the answer hidden until a real attempt."""
import math

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
    q = P.quiz("ps_rms_3_4")
    assert q.reveal_button.disabled
    q.check_button.click()  # empty box: no attempt
    assert "no answer yet" in q.feedback.value and q.reveal_button.disabled
    q.answer.value = "5"
    q.check_button.click()
    assert "L2 norm" in q.feedback.value
    assert not q.reveal_button.disabled
    q.reveal_button.click()
    assert "3.536" in q.feedback.value


def test_quiz_widget_for_a_choice_question():
    q = P.quiz("retrieval_axis")
    q.answer.value = q.answer.options[2]
    q.check_button.click()
    assert "correct" in q.feedback.value and "dim=-1" in q.feedback.value
    q.answer.value = q.answer.options[0]
    q.check_button.click()
    assert "BatchNorm" in q.feedback.value


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
        if not r.passed:
            assert fb.message == " ".join(r.messages), (qid, answer)


def test_rms_3_4_truncated_to_two_decimals_is_right_in_both():
    # 3.5355... truncated is 3.53: both accept it; 3.5 is the mean (3 + 4) / 2 and both say so
    assert P.check("ps_rms_3_4", "3.53").correct and A.check_rms_34("3.53").passed
    fb = P.check("ps_rms_3_4", 3.5)
    assert fb.faults == ("mean_abs_not_rms",)
    assert "you gave 3.5: that is the mean of the values, (3 + 4) / 2" in fb.message
