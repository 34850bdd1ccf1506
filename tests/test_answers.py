"""normref.answers: the short-answer checkers accept every honest form of the seed's answers,
name each known mistake, and never print the solution.

Expected values are the seed's "Check solutions" worked by hand:
mean(2,2,4,4) = 12/4 = 3; var = (1+1+1+1)/4 = 1; LN(2,2,4,4) = (x-3)/1 = (-1,-1,1,1);
RMS(3,4) = sqrt((9+16)/2) = sqrt(12.5) = 3.5355; RMSNorm does not subtract the mean;
Pre-LN: Y = X + Attention(Norm(X)); the shape does not change; rms of [2,3,8] with keepdim is
[2,3,1]; the statistics come from the feature (last) axis.
"""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from normref import answers
from normref.answers import (
    AnswerFormatError,
    check_layer_norm_2244,
    check_mean_var,
    check_norm_changes_shape,
    check_pre_ln_formula,
    check_rms_34,
    check_rms_shape,
    check_rms_subtracts_mean,
    check_stats_axis,
    parse_formula,
    parse_number,
    parse_shape,
    parse_vector,
)

# Strings that would give a solution away if a failure message printed them.
SOLUTION_TEXT = ["3.536", "3.54", "3.5355", "(2, 3, 1)", "[2, 3, 1]", "(-1, -1, 1, 1)",
                 "X + Attention(Norm(X))", "X+A(N(X))", "Attention(Norm(X))"]


def assert_fault(result, fault, score=0.0):
    assert result.faults and result.faults[0] == fault, result.report()
    assert fault in answers.ANSWER_FAULTS or fault in answers.FAULT_KINDS  # a sentence exists
    assert result.score == pytest.approx(score)
    shown, meta = result._repr_mimebundle_()  # what display(result) shows, and its metadata
    assert meta == {"normref": {"faults": result.faults}}
    assert "[fault:" not in shown["text/plain"] and f" {fault} " not in shown["text/plain"]
    for m in result.messages:
        for s in SOLUTION_TEXT:
            assert s not in m, (s, m)


# ----------------------------------------------------------------- parsing


@pytest.mark.parametrize("text, want", [
    ("3", 3.0), ("3.0", 3.0), ("2/3", 2 / 3), ("sqrt(12.5)", math.sqrt(12.5)),
    ("12.5**0.5", math.sqrt(12.5)), ("≈ 3.536", 3.536), ("√12.5", math.sqrt(12.5)),
    ("about 3.5", 3.5), ("-1.225", -1.225), ("12.5^0.5", math.sqrt(12.5)),
])
def test_parse_number_reads_arithmetic_text(text, want):
    assert parse_number(text) == pytest.approx(want, rel=1e-12)


def test_parse_number_reads_numpy_and_torch_scalars():
    assert parse_number(np.float32(1.5)) == 1.5
    assert parse_number(torch.tensor(2.5)) == 2.5
    assert parse_number(torch.tensor([4.0])) == 4.0


@pytest.mark.parametrize("bad", [None, ..., True, "three", "__import__('os')", "1e999", "2/0",
                                 [1.0, 2.0], "9**999"])
def test_parse_number_rejects_with_a_message(bad):
    with pytest.raises(AnswerFormatError):
        parse_number(bad)


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
@settings(max_examples=50, deadline=None)
def test_parse_number_round_trips_repr(v):
    assert parse_number(repr(v)) == v


@given(st.lists(st.floats(min_value=-100, max_value=100, allow_nan=False), min_size=1, max_size=6))
@settings(max_examples=50, deadline=None)
def test_parse_vector_reads_tuples_and_their_text(vals):
    np.testing.assert_array_equal(parse_vector(tuple(vals)), vals)
    np.testing.assert_array_equal(parse_vector(str(tuple(vals))), vals)
    np.testing.assert_array_equal(parse_vector(str(list(vals))), vals)


def test_parse_shape_forms():
    for form in [(2, 3, 1), [2, 3, 1], torch.Size([2, 3, 1]), torch.zeros(2, 3, 1), "[2, 3, 1]",
                 "2x3x1", "(2,3,1)", np.array([2, 3, 1])]:
        assert parse_shape(form) == (2, 3, 1), form
    with pytest.raises(AnswerFormatError):
        parse_shape("2.5, 3")


def test_parse_formula_canonical_forms():
    assert parse_formula("Y = X + Attention(Norm(X))") == "X+A(N(X))"
    assert parse_formula(r"$Y=X+\operatorname{Attention}(\operatorname{Norm}(X))$") == "X+A(N(X))"
    assert parse_formula("x_{l+1} = attn(LayerNorm(x)) + x") == "A(N(X))+X"
    assert parse_formula("Norm(X + F(X))") == "N(X+A(X))"
    with pytest.raises(AnswerFormatError):
        parse_formula(42)


# ----------------------------------------------------------------- Practice studio


@pytest.mark.parametrize("mean, var", [(3, 1), (3.0, 1.0), ("3", "1"), (np.float64(3), 1),
                                       (torch.tensor(3.0), torch.tensor(1.0))])
def test_mean_var_correct_forms(mean, var):
    r = check_mean_var(mean, var)
    assert r.passed and r.score == 1.0


def test_mean_var_faults_and_half_credit():
    # var with n-1: 4 squared deviations of 1 each / 3 = 4/3
    r = check_mean_var(3, 4 / 3)
    assert_fault(r, "unbiased_variance", 0.5)
    assert "4/3" in r.messages[0]
    assert_fault(check_mean_var(3, 4), "sum_of_squares", 0.5)  # 1+1+1+1, not divided by d
    assert_fault(check_mean_var(3, 10), "uncentered_variance", 0.5)  # (4+4+16+16)/4
    assert_fault(check_mean_var(12, 1), "sum_not_mean", 0.5)  # 2+2+4+4
    assert_fault(check_mean_var(None, None), "not_answered", 0.0)
    assert_fault(check_mean_var(2.5, 1), "wrong_values", 0.5)


@pytest.mark.parametrize("y", [(-1, -1, 1, 1), [-1.0, -1.0, 1.0, 1.0], "(-1, -1, 1, 1)",
                               np.array([-1, -1, 1, 1]), torch.tensor([-1.0, -1.0, 1.0, 1.0]),
                               (-0.999, -0.999, 0.999, 0.999)])
def test_layer_norm_2244_correct_forms(y):
    assert check_layer_norm_2244(y).score == 1.0


def test_layer_norm_2244_faults():
    s = math.sqrt(3 / 4)  # n-1: sigma = sqrt(4/3), so every value shrinks by sqrt(3/4)
    r = check_layer_norm_2244((-s, -s, s, s))
    assert_fault(r, "unbiased_variance")
    assert "0.866 = sqrt(3/4)" in r.messages[0]
    assert_fault(check_layer_norm_2244((2, 2, 4, 4)), "not_centered")  # x / sigma, sigma = 1
    r_rms = 1 / math.sqrt(10)  # RMSNorm: RMS(2,2,4,4) = sqrt(40/4) = sqrt(10)
    r = check_layer_norm_2244((2 * r_rms, 2 * r_rms, 4 * r_rms, 4 * r_rms))
    assert_fault(r, "not_centered")
    assert "RMSNorm" in r.messages[0]
    assert_fault(check_layer_norm_2244((-0.75, -0.75, 0.75, 0.75)), "divided_by_variance")
    assert_fault(check_layer_norm_2244((-1, 1)), "wrong_shape")
    assert_fault(check_layer_norm_2244((1, 1, 3, 3)), "not_centered")  # mean 2, not 0
    assert_fault(check_layer_norm_2244("minus one"), "bad_format")


@pytest.mark.parametrize("r", [math.sqrt(12.5), 3.536, "3.54", "sqrt(12.5)", "sqrt(25/2)",
                               "5/sqrt(2)", np.float32(3.5355)])
def test_rms_34_correct_forms(r):
    assert check_rms_34(r).score == 1.0


@pytest.mark.parametrize("r, fault", [
    (5, "l2_norm_not_rms"),  # sqrt(9+16)
    (12.5, "missing_sqrt"),  # (9+16)/2
    (3.5, "mean_abs_not_rms"),  # (3+4)/2
    (2.5, "divided_outside_sqrt"),  # sqrt(25)/2
    (25, "sum_of_squares"),  # 9+16
    (3.6, "wrong_values"),
    (..., "not_answered"),
])
def test_rms_34_faults(r, fault):
    assert_fault(check_rms_34(r), fault)


def test_rms_subtracts_mean():
    for ok in (False, "no", "No.", "false"):
        assert check_rms_subtracts_mean(ok).score == 1.0
    assert_fault(check_rms_subtracts_mean(True), "subtracts_mean")
    assert_fault(check_rms_subtracts_mean("yes"), "subtracts_mean")
    assert_fault(check_rms_subtracts_mean(0), "bad_format")


@pytest.mark.parametrize("f", ["Y = X + Attention(Norm(X))", "X + attn(ln(x))",
                               "Y = Attention(RMSNorm(X)) + X", "y = x + F(Norm(x))",
                               r"Y = X + \operatorname{Attention}(\operatorname{Norm}(X))"])
def test_pre_ln_formula_correct_forms(f):
    assert check_pre_ln_formula(f).score == 1.0


@pytest.mark.parametrize("f, fault", [
    ("Y = Norm(X + Attention(X))", "pre_post_swapped"),
    ("Y = X + Norm(Attention(X))", "norm_on_sublayer_output"),
    ("Y = Attention(Norm(X))", "missing_residual"),
    ("Y = Norm(X) + Attention(Norm(X))", "residual_from_normed"),
    ("Y = X + Attention(X)", "missing_norm"),
    ("Y = X + Attention(Norm(X)", "bad_format"),
    ("Y = softmax(X)", "bad_format"),
    ("Y = Norm(Norm(X))", "wrong_values"),
])
def test_pre_ln_formula_faults(f, fault):
    assert_fault(check_pre_ln_formula(f), fault)


def test_norm_changes_shape():
    assert check_norm_changes_shape(False).score == 1.0
    assert_fault(check_norm_changes_shape(True), "says_shape_changes")


@pytest.mark.parametrize("s, fault", [
    ((2, 3), "missing_keepdim"),
    ((2, 3, 8), "output_shape_not_statistic"),
    ((1, 3, 8), "wrong_axis"),
    ((2, 1, 8), "wrong_axis"),
    ((8,), "wrong_values"),
    ("two by three", "bad_format"),
])
def test_rms_shape_faults(s, fault):
    assert_fault(check_rms_shape(s), fault)


def test_rms_shape_correct_forms():
    x = torch.randn(2, 3, 8)
    rms = x.float().pow(2).mean(dim=-1, keepdim=True)
    for form in [(2, 3, 1), rms.shape, rms, "[2, 3, 1]"]:
        assert check_rms_shape(form).score == 1.0


@pytest.mark.parametrize("a", [-1, 2, "last", "the last axis", "features", "D", "dim=-1",
                               "the feature axis of one token", "d_model"])
def test_stats_axis_correct_forms(a):
    assert check_stats_axis(a).score == 1.0


@pytest.mark.parametrize("a, fault", [(0, "batch_axis"), ("batch", "batch_axis"),
                                      (1, "sequence_axis"),
                                      ("across the sequence", "sequence_axis"),
                                      ("T", "sequence_axis"), ("banana", "bad_format"),
                                      (5, "bad_format")])
def test_stats_axis_faults(a, fault):
    assert_fault(check_stats_axis(a), fault)



# ----------------------------------------------------------------- other numbers, same diagnoses
# A graded assignment may ask the lesson's questions about other numbers (worked by hand):
# (1, 3, 5, 7): mean 4, var (9 + 1 + 1 + 9) / 4 = 5, with n-1 20/3; LN = (x - 4) / sqrt(5);
# RMS(5, 12) = sqrt((25 + 144) / 2) = sqrt(84.5) = 9.192, L2 norm 13, mean 8.5;
# x of shape [4, 5, 6]: rms with keepdim has shape [4, 5, 1].


def test_mean_var_on_other_numbers():
    x = (1, 3, 5, 7)
    assert check_mean_var(4, 5, x=x).score == 1.0
    r = check_mean_var(4, 20 / 3, x=x)
    assert_fault(r, "unbiased_variance", 0.5)
    assert "20/3" in r.messages[0] and r.name == "mean_var (1, 3, 5, 7)"
    assert_fault(check_mean_var(16, 5, x=x), "sum_not_mean", 0.5)


def test_layer_norm_and_rms_on_other_numbers():
    s5 = math.sqrt(5)
    x = (1, 3, 5, 7)
    assert check_layer_norm_2244(tuple((v - 4) / s5 for v in x), x=x).score == 1.0
    assert_fault(check_layer_norm_2244((-3, -1, 1, 3), x=x), "not_scaled")
    assert check_rms_34(9.192, x=(5, 12)).score == 1.0
    assert_fault(check_rms_34(13, x=(5, 12)), "l2_norm_not_rms")
    r = check_rms_34(8.5, x=(5, 12))
    assert_fault(r, "mean_abs_not_rms")
    assert "(5 + 12) / 2" in r.messages[0]


def test_rms_shape_on_another_shape():
    assert check_rms_shape((4, 5, 1), x_shape=(4, 5, 6)).score == 1.0
    assert_fault(check_rms_shape((4, 5), x_shape=(4, 5, 6)), "missing_keepdim")
    assert_fault(check_rms_shape((4, 5, 6), x_shape=(4, 5, 6)), "output_shape_not_statistic")
    assert_fault(check_rms_shape((4, 1, 6), x_shape=(4, 5, 6)), "wrong_axis")


def test_an_author_mistake_in_the_question_numbers_raises():
    with pytest.raises(ValueError):
        check_mean_var(1, 1, x=(3,))


def test_an_unanswered_question_names_the_variable_of_its_numbers():
    assert "ln_2244 is not answered" in check_layer_norm_2244(None).messages[0]
    assert "ln_1357 is not answered" in check_layer_norm_2244(None, x=(1, 3, 5, 7)).messages[0]
    assert "rms_34 is not answered" in check_rms_34(None).messages[0]
    assert "rms_5_12 is not answered" in check_rms_34(None, x=(5, 12)).messages[0]


# ----------------------------------------------------------------- other settings, same faults
# The graded practice asks the non-numeric questions in settings the lesson does not answer:
# adding 5 to every feature of (1, -1, 2) changes RMSNorm's output (no centering removes the
# shift): yes; the Pre-LN feed-forward half is Y = H + FFN(Norm(H)); a norm keeps x's shape: yes;
# in a [B, D, T] tensor the features are axis 1 (= -2), and axis -1 is the sequence axis.


@pytest.mark.parametrize("answer", [True, "yes", "Yes."])
def test_a_shift_changes_rms_norms_output(answer):
    assert check_rms_subtracts_mean(answer, ask="shift_changes_output").score == 1.0


def test_saying_a_shift_leaves_rms_norm_unchanged_is_the_subtracts_mean_fault():
    r = check_rms_subtracts_mean("no", ask="shift_changes_output")
    assert_fault(r, "subtracts_mean")
    # the principle to reason from (what RMSNorm computes), not the verdict
    assert "x / RMS(x)" in r.messages[0] and "x + 5" in r.messages[0]
    assert check_rms_subtracts_mean("no").score == 1.0  # the seed's question is unchanged


@pytest.mark.parametrize("formula", ["Y = H + FFN(Norm(H))", "MLP(LN(x)) + x",
                                     "h + mlp(post_attention_layernorm(h))", "X + F(Norm(X))"])
def test_pre_ln_formula_of_the_feed_forward_half(formula):
    assert check_pre_ln_formula(formula, sublayer="ffn").score == 1.0


def test_naming_the_other_sublayer_is_wrong_and_said_so():
    r = check_pre_ln_formula("Y = X + Attention(Norm(X))", sublayer="ffn")
    assert_fault(r, "wrong_values")
    assert "feed-forward" in r.messages[0]
    r = check_pre_ln_formula("Y = Norm(X + Attention(X))", sublayer="ffn")
    assert "Post-LN" in r.messages[0]  # the placement mistake is named too
    assert_fault(check_pre_ln_formula("Y = Norm(H + FFN(H))", sublayer="ffn"), "pre_post_swapped")
    assert_fault(check_pre_ln_formula("X + MLP(Norm(X))"), "wrong_values")  # seed: attention
    with pytest.raises(ValueError):
        check_pre_ln_formula("X", sublayer="conv")


def test_norm_keeps_shape_is_the_seed_question_turned_round():
    assert check_norm_changes_shape(True, ask="keeps").score == 1.0
    assert_fault(check_norm_changes_shape("no", ask="keeps"), "says_shape_changes")
    assert check_norm_changes_shape(False).score == 1.0
    with pytest.raises(ValueError):
        check_norm_changes_shape(True, ask="grows")


@pytest.mark.parametrize("axis", [1, -2, "1", "dim=1", "axis = -2"])
def test_stats_axis_number_in_another_layout(axis):
    assert check_stats_axis(axis, layout="BDT").score == 1.0


@pytest.mark.parametrize("axis, fault", [(-1, "sequence_axis"), ("dim=-1", "sequence_axis"),
                                         ("the last axis", "sequence_axis"), (0, "batch_axis"),
                                         ("feature", "bad_format"), (5, "bad_format"),
                                         (None, "not_answered"), (True, "bad_format")])
def test_stats_axis_in_another_layout_names_the_axis_given(axis, fault):
    r = check_stats_axis(axis, layout="BDT")
    assert_fault(r, fault)
    if fault == "sequence_axis":
        assert "[B, D, T] is the sequence axis T" in r.messages[0]


@pytest.mark.parametrize("formula, score", [
    ("Y = Norm(H + FFN(H)) or Y = H + FFN(Norm(H))", 0.0),  # hedged: Post-LN or Pre-LN (red team)
    ("Post-LN: Y = Norm(H + FFN(H)), Pre-LN: Y = H + FFN(Norm(H))", 0.0),  # both placements named
    ("Y = H + FFN(Norm(H)) = H + MLP(LN(H))", 1.0),  # one formula written twice is one answer
])
def test_a_formula_answer_that_hedges_between_two_formulas_earns_nothing(formula, score):
    r = answers.check_pre_ln_formula(formula, sublayer="ffn")
    assert r.score == score, r.cases[0].message
    if not score:
        assert "more than one formula" in r.cases[0].message
