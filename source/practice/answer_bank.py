"""The ``practice`` assignment's answer bank: the demo class's answers and the points each must get.

``ANSWERS[variant]`` maps an answer cell's grade_id to what a synthetic student typed there
(a grade_id left out keeps the release stub); ``EXPECTED[variant]`` gives every grade cell's
points, each derived by hand (the comment beside it), never by running the grader
(``tests/test_assignments.py`` asserts them; ``grader/demo`` builds the demo class from them).
"""
from __future__ import annotations

# The graded questions' numbers and settings (not the lessons' worked ones): mean/variance and
# LayerNorm of (1, 3, 5, 7); RMS(5, 12); does adding 5 to every feature of (1, -1, 2) change
# RMSNorm's output; the Pre-LN block's feed-forward half in H; does Norm(x) keep x's shape
# [3, 7, 16]; rms's shape for x of shape [4, 5, 6]; the statistics' axis number of [B, D, T].

_SHAPE_WHY = ("Yes: the statistic is one number per token, [3, 7, 1], broadcast back over the "
              "16 features, so only the values change and Norm(x) stays [3, 7, 16] like x.")

_PRACTICE_CORRECT = {
    "practice_mean_var_answer": "mean_1357 = 4\nvar_1357 = 5",
    "practice_layer_norm_answer": "ln_1357 = (-1.342, -0.447, 0.447, 1.342)",
    "practice_rms_answer": 'rms_5_12 = "sqrt(84.5)"',
    "practice_subtracts_mean_answer": 'rms_shift_changes = "yes"',
    "practice_pre_ln_answer": 'pre_ln_formula = "Y = H + MLP(LayerNorm(H))"',
    "practice_shape_answer": "norm_keeps_shape = True",
    "practice_shape_why": _SHAPE_WHY,
    "trace_rms_shape_answer": "rms_shape = [4, 5, 1]",
    "retrieval_stats_axis_answer": "stats_axis = -2",
}


def _practice(**changes: str) -> dict[str, str]:
    return {**_PRACTICE_CORRECT, **changes}


_PRACTICE_ANSWERS = {
    "correct": dict(_PRACTICE_CORRECT),
    "blank": {},
    "partial": {
        "practice_mean_var_answer": "mean_1357 = 4\nvar_1357 = 20/3",
        "practice_layer_norm_answer": "ln_1357 = [-1.342, -0.447, 0.447, 1.342]",
        "practice_rms_answer": "rms_5_12 = 13.0",
        "practice_subtracts_mean_answer": "rms_shift_changes = True",
        "practice_pre_ln_answer": 'pre_ln_formula = "Y = Norm(H + FFN(H))"',
        "practice_shape_answer": "norm_keeps_shape = True",
        "trace_rms_shape_answer": "rms_shape = (4, 5)",
        "retrieval_stats_axis_answer": 'stats_axis = "dim=1"',
    },
    "unbiased_variance": _practice(
        practice_mean_var_answer="import numpy as np\nx = np.array([1, 3, 5, 7])\n"
                                 "mean_1357 = x.mean()\nvar_1357 = x.var(ddof=1)",
        practice_layer_norm_answer="ln_1357 = tuple((x - x.mean()) / x.std(ddof=1))",
    ),
    "not_centered": _practice(practice_layer_norm_answer="ln_1357 = (0.218, 0.655, 1.091, 1.528)"),
    "l2_norm_not_rms": _practice(practice_rms_answer="rms_5_12 = (5**2 + 12**2) ** 0.5"),
    "subtracts_mean": _practice(practice_subtracts_mean_answer="rms_shift_changes = False"),
    "pre_post_swapped": _practice(practice_pre_ln_answer='pre_ln_formula = "Y = Norm(H + F(H))"'),
    "residual_from_normed": _practice(
        practice_pre_ln_answer='pre_ln_formula = "Y = Norm(H) + FFN(Norm(H))"'),
    "says_shape_changes": _practice(
        practice_shape_answer="norm_keeps_shape = False",
        practice_shape_why="No, the features are squashed to mean 0 and variance 1."),
    "missing_keepdim": _practice(trace_rms_shape_answer="rms_shape = [4, 5]"),
    "batch_axis": _practice(retrieval_stats_axis_answer="stats_axis = 0"),
    "bad_format": _practice(practice_rms_answer='rms_5_12 = "about nine"'),
}

# Every practice test cell is worth 1 point and awards 1 x check.score; practice_shape_why (1)
# is graded by hand.
_P_FULL = {"practice_mean_var": 1.0, "practice_layer_norm": 1.0, "practice_rms": 1.0,
           "practice_subtracts_mean": 1.0, "practice_pre_ln_formula": 1.0, "practice_shape": 1.0,
           "practice_shape_why": 0.0,  # answered: needs manual grade, 0 until graded
           "trace_rms_shape": 1.0, "retrieval_stats_axis": 1.0}


def _p(**points: float) -> dict[str, float]:
    return {**_P_FULL, **points}


_PRACTICE_EXPECTED = {
    # every answer right, in a different accepted form from the solution's where there is one:
    # (x - 4)/sqrt(5) = (-1.3416, -0.4472, 0.4472, 1.3416) to 3 decimals (tolerance 5e-3);
    # sqrt((25 + 144) / 2) = sqrt(84.5); H and MLP/LayerNorm are read as the input, the FFN and a
    # norm; axis -2 of [B, D, T] is D
    "correct": _p(),
    # release stub: each answer cell raises NotImplementedError, so each test cell's first
    # visible line raises NameError -> 0; the unchanged written cell scores 0 automatically
    "blank": {k: 0.0 for k in _P_FULL},
    "partial": _p(
        practice_mean_var=0.5,  # mean 4 right, variance 20/3 = 20/(4-1): n-1 -> 1 of 2 parts
        practice_rms=0.0,  # 13 = sqrt(25 + 144), the L2 norm
        practice_pre_ln_formula=0.0,  # Norm(H + FFN(H)) is Post-LN
        trace_rms_shape=0.0,  # (4, 5): keepdim dropped
        # "dim=1" is axis 1 of [B, D, T], D: right; the list LN answer and True/True are right
        # practice_shape_why left as released -> 0, no manual grade needed
    ),
    # var(ddof=1) = 20/3 -> 0.5 (mean 4 right); LN with std(ddof=1) = sqrt(20/3) -> the right
    # values times sqrt(3/4): the n-1 fault model -> 0
    "unbiased_variance": _p(practice_mean_var=0.5, practice_layer_norm=0.0),
    # (1, 3, 5, 7)/RMS = (1, 3, 5, 7)/sqrt(21) = (0.2182, 0.6547, 1.0911, 1.5275): RMSNorm's
    # answer, no centering
    "not_centered": _p(practice_layer_norm=0.0),
    "l2_norm_not_rms": _p(practice_rms=0.0),  # sqrt(169) = 13
    "subtracts_mean": _p(practice_subtracts_mean=0.0),  # False: "the shift is removed"
    "pre_post_swapped": _p(practice_pre_ln_formula=0.0),  # Norm(H + F(H)): Post-LN
    "residual_from_normed": _p(practice_pre_ln_formula=0.0),  # Norm(H) + FFN(Norm(H))
    "says_shape_changes": _p(practice_shape=0.0),  # False; the (wrong) explanation awaits a grader
    "missing_keepdim": _p(trace_rms_shape=0.0),  # [4, 5]
    "batch_axis": _p(retrieval_stats_axis=0.0),  # axis 0 of [B, D, T] is B
    "bad_format": _p(practice_rms=0.0),  # "about nine" is not arithmetic
}

ANSWERS = _PRACTICE_ANSWERS
EXPECTED = _PRACTICE_EXPECTED
