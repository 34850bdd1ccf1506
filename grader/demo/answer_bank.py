"""The answer bank: synthetic submissions for every assignment, and the points each must get.

``ANSWERS[assignment][variant]`` maps the grade_id of an answer cell to the source a synthetic
student typed there; a grade_id left out keeps the release stub (an unanswered cell). Variants
are ``"correct"``, ``"blank"`` (the release notebook unchanged), ``"partial"`` (some questions
or cases right, some wrong) and one per fault kind that the assignment's checkers diagnose,
named by that fault kind (the registry :data:`normref.faults.FAULTS`).

``EXPECTED[assignment][variant]`` gives, for every grade cell, the points nbgrader must award.
Each number is derived by hand from what the variant gets wrong and from the cases of the
checker that grades the cell (the derivation is the comment beside it), never by running the
grader. ``tests/test_assignments.py`` autogrades every variant with nbgrader and asserts these
numbers exactly; the demo class (``make grade``) draws its students from here.

Manually graded cells (:data:`MANUAL_CELLS`) get no autograde score: nbgrader records 0 and
flags the cell "needs manual grade" when it was answered, and scores it 0 without flagging it
when it was left as released. ``EXPECTED`` holds that 0.

Battery cases the derivations refer to (``normref.checks.norms.battery``, seeded):

- LayerNorm, numpy (6 cases, 0.5 point each in ``layer_norm_battery``): 1 the seed (1, 2, 3);
  2 ``[2, 3, 8]`` float32 with weight and bias (one row has variance 0.089); 3 ``[4, 4, 4]``
  with weight and bias (smallest row variance 0.25); 4 tiny values ~1e-3 with eps = 1e-4;
  5 float16 rows [300, -300, 300, -300] and [1900, 1900, 1901, 1902] (mean 1900.75, variance
  0.6875: the one-pass variance E[x**2] - E[x]**2 is 0.75 in float32), weight 1, bias 0; 6 a
  constant row [5, 5, 5, 5] and [1, 0, -1, 2], weight 1, bias [0.5, -0.5, 0, 1].
  Case 5's second row moves no variant's points: each variant that passes case 5 (correct,
  eps outside the root or left out, weight or bias ignored) computes its statistics in float32
  two-pass, where that row is exact, with weight 1 and bias 0, and eps = 1e-5 is 1.5e-5 of its
  variance (tolerance 2e-3); each that fails it still fails on the first row or on both.
- RMSNorm, torch (6 cases, 4/6 point each in ``rms_norm_battery``, rounded to 2 decimals):
  1 the seed (1, 2, 3); 2 ``[2, 3, 8]`` float32 with weight; 3 ``[4, 4, 4]`` with weight;
  4 tiny values with eps = 1e-4; 5 the float16 overflow rows; 6 bfloat16 ``[2, 3, 8]`` with weight.
- Float32 tolerance is ``atol = rtol = 1e-5``. With LayerNorm's eps = 1e-5, a misplaced eps
  moves case 2's variance-0.089 row past it (eps outside the root: by 1.1e-5 beyond the
  tolerance; eps left out: by 6.8e-5) and, with eps left out, case 3 too (by 3.9e-6): margins
  10-100x float32 rounding. RMSNorm's eps = 1e-6 against mean squares >= 0.46 stays inside it.

The quick visible checks (``layer_norm_seed``, ``rms_norm_shape``) give their point only when
the seed's cases 1 and 2 both pass and the shape assertion holds.
"""
from __future__ import annotations

from .answer_bank_block import BLOCK_ANSWERS, BLOCK_EXPECTED
from .answer_bank_modern import MODERN_ANSWERS, MODERN_EXPECTED, MODERN_MANUAL

__all__ = ["ANSWERS", "EXPECTED", "MANUAL_CELLS"]

#: Grade cells that are graded by hand (markdown answers with a mark scheme in the source).
MANUAL_CELLS: dict[str, tuple[str, ...]] = {
    "practice": ("practice_shape_why",),
    "block": ("block_warmup_why",),
    "modern": MODERN_MANUAL,
}

# --------------------------------------------------------------------------- practice
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

# --------------------------------------------------------------------------- layernorm

_LN_HEAD = "def layer_norm(x, weight, bias, eps=1e-5):\n"
_LN_CORRECT = _LN_HEAD + '''\
    h = x.astype(np.float32)
    mean = h.mean(axis=-1, keepdims=True)  # [..., 1]
    var = h.var(axis=-1, keepdims=True)  # [..., 1], ddof=0
    return ((h - mean) / np.sqrt(var + eps) * weight + bias).astype(x.dtype)
'''


def _ln(body: str) -> str:
    return _LN_HEAD + body


_LAYERNORM_ANSWERS = {
    "correct": {"layer_norm_impl": _LN_CORRECT},
    "blank": {},
    "partial": {"layer_norm_impl": _ln('''\
    mean = x.mean(axis=-1, keepdims=True)  # in x's dtype
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return ((x - mean) / (np.sqrt(var) + eps) * weight + bias).astype(x.dtype)
''')},
    "unbiased_variance": {"layer_norm_impl": _ln('''\
    h = x.astype(np.float32)
    mean = h.mean(axis=-1, keepdims=True)
    var = h.var(axis=-1, ddof=1, keepdims=True)
    return ((h - mean) / np.sqrt(var + eps) * weight + bias).astype(x.dtype)
''')},
    "eps_outside_sqrt": {"layer_norm_impl": _ln('''\
    h = x.astype(np.float32)
    mean = h.mean(axis=-1, keepdims=True)
    std = h.std(axis=-1, keepdims=True)
    return ((h - mean) / (std + eps) * weight + bias).astype(x.dtype)
''')},
    "wrong_axis": {"layer_norm_impl": _ln('''\
    h = x.astype(np.float32)
    mean = h.mean(axis=0, keepdims=True)
    var = h.var(axis=0, keepdims=True)
    return ((h - mean) / np.sqrt(var + eps) * weight + bias).astype(x.dtype)
''')},
    "missing_keepdim": {"layer_norm_impl": _ln('''\
    h = x.astype(np.float32)
    mean = h.mean(axis=-1)
    var = h.var(axis=-1)
    return ((h - mean) / np.sqrt(var + eps) * weight + bias).astype(x.dtype)
''')},
    "low_precision_stats": {"layer_norm_impl": _ln('''\
    mean = x.mean(axis=-1, keepdims=True)  # in x's dtype: float16 stays float16
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return ((x - mean) / np.sqrt(var + eps) * weight + bias).astype(x.dtype)
''')},
    "no_eps": {"layer_norm_impl": _ln('''\
    h = x.astype(np.float32)
    mean = h.mean(axis=-1, keepdims=True)
    var = h.var(axis=-1, keepdims=True)
    return ((h - mean) / np.sqrt(var) * weight + bias).astype(x.dtype)  # no eps
''')},
    "not_centered": {"layer_norm_impl": _ln('''\
    h = x.astype(np.float32)
    ms = (h ** 2).mean(axis=-1, keepdims=True)  # no mean subtracted: this is RMSNorm
    return (h / np.sqrt(ms + eps) * weight + bias).astype(x.dtype)
''')},
    "ignores_weight": {"layer_norm_impl": _ln('''\
    h = x.astype(np.float32)
    mean = h.mean(axis=-1, keepdims=True)
    var = h.var(axis=-1, keepdims=True)
    return ((h - mean) / np.sqrt(var + eps) + bias).astype(x.dtype)
''')},
    "ignores_bias": {"layer_norm_impl": _ln('''\
    h = x.astype(np.float32)
    mean = h.mean(axis=-1, keepdims=True)
    var = h.var(axis=-1, keepdims=True)
    return ((h - mean) / np.sqrt(var + eps) * weight).astype(x.dtype)
''')},
    "wrong_dtype": {"layer_norm_impl": _ln('''\
    h = x.astype(np.float32)
    mean = h.mean(axis=-1, keepdims=True)
    var = h.var(axis=-1, keepdims=True)
    return (h - mean) / np.sqrt(var + eps) * weight + bias  # stays float32
''')},
    "mutates_input": {"layer_norm_impl": _ln('''\
    x -= x.mean(axis=-1, keepdims=True)  # in place: the caller's array changes
    h = x.astype(np.float32)
    var = (h ** 2).mean(axis=-1, keepdims=True)
    return (h / np.sqrt(var + eps) * weight + bias).astype(x.dtype)
''')},
}

_LAYERNORM_EXPECTED = {
    "correct": {"layer_norm_seed": 1.0, "layer_norm_battery": 3.0},
    # stub raises NotImplementedError: the visible call raises -> 0; every case raises -> 0
    "blank": {"layer_norm_seed": 0.0, "layer_norm_battery": 0.0},
    # eps outside the root fails 2 (variance-0.089 row) and 4 (tiny); float16 statistics
    # overflow on 5 (300**2 > 65504); passes 1, 3, 6 (constant row: 0/(0 + eps) = 0, + beta)
    "partial": {"layer_norm_seed": 0.0, "layer_norm_battery": 1.5},
    # n-1 changes every non-constant row, and every case has one: 0 of 6
    "unbiased_variance": {"layer_norm_seed": 0.0, "layer_norm_battery": 0.0},
    # fails 2 (variance-0.089 row) and 4 (tiny values, eps = 1e-4): 4 of 6
    "eps_outside_sqrt": {"layer_norm_seed": 0.0, "layer_norm_battery": 2.0},
    # axis 0 is the last axis only for the 1-D seed: 1 of 6
    "wrong_axis": {"layer_norm_seed": 0.0, "layer_norm_battery": 0.5},
    # a [2, 3] mean against [2, 3, 8] does not broadcast (raises): the visible check names keepdims;
    # right only for 1-D input (a scalar mean); [4, 4] against [4, 4, 4] broadcasts wrongly: 1 of 6
    "missing_keepdim": {"layer_norm_seed": 0.0, "layer_norm_battery": 0.5},
    # only the float16 case overflows: 5 of 6; the seed cases pass
    "low_precision_stats": {"layer_norm_seed": 1.0, "layer_norm_battery": 2.5},
    # no eps: NaN on the constant row (6), wrong on tiny (4), past tolerance on 2 and 3: 2 of 6
    "no_eps": {"layer_norm_seed": 0.0, "layer_norm_battery": 1.0},
    # RMSNorm instead: every case has a row with a nonzero mean (the float16 case's second
    # row, [1900, 1900, 1901, 1902]; the constant row gives 1 + beta instead of beta): 0 of 6
    "not_centered": {"layer_norm_seed": 0.0, "layer_norm_battery": 0.0},
    # weight is all ones in 1, 4, 5, 6, random in 2 and 3: 4 of 6
    "ignores_weight": {"layer_norm_seed": 0.0, "layer_norm_battery": 2.0},
    # bias is zero in 1, 4, 5, nonzero in 2, 3, 6: 3 of 6
    "ignores_bias": {"layer_norm_seed": 0.0, "layer_norm_battery": 1.5},
    # float32 out is wrong only for the float16 input (5): 5 of 6
    "wrong_dtype": {"layer_norm_seed": 1.0, "layer_norm_battery": 2.5},
    # every case has a row with a nonzero mean, so x changes in place in every case: 0 of 6
    "mutates_input": {"layer_norm_seed": 0.0, "layer_norm_battery": 0.0},
}

# --------------------------------------------------------------------------- rmsnorm

_RMS_HEAD = "def rms_norm(x, weight, eps=1e-6):\n"
_RMS_CORRECT = _RMS_HEAD + '''\
    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()  # [..., 1]
    return (x.float() * rms * weight).to(x.dtype)
'''


def _rms(body: str) -> str:
    return _RMS_HEAD + body


_RMSNORM_ANSWERS = {
    "correct": {"rms_norm_impl": _RMS_CORRECT},
    "blank": {},
    "partial": {"rms_norm_impl": _rms('''\
    ms = x.pow(2).mean(dim=-1, keepdim=True)  # in x's dtype
    return (x / (ms.sqrt() + eps) * weight).to(x.dtype)
''')},
    "unbiased_variance": {"rms_norm_impl": _rms('''\
    ms = x.float().pow(2).sum(dim=-1, keepdim=True) / (x.shape[-1] - 1)
    return (x.float() * (ms + eps).rsqrt() * weight).to(x.dtype)
''')},
    "eps_outside_sqrt": {"rms_norm_impl": _rms('''\
    rms = x.float().pow(2).mean(dim=-1, keepdim=True).sqrt() + eps
    return (x.float() / rms * weight).to(x.dtype)
''')},
    "no_eps": {"rms_norm_impl": _rms('''\
    rms = x.float().pow(2).mean(dim=-1, keepdim=True).rsqrt()  # eps forgotten
    return (x.float() * rms * weight).to(x.dtype)
''')},
    "wrong_axis": {"rms_norm_impl": _rms('''\
    rms = x.float().pow(2).mean(dim=0, keepdim=True).add(eps).rsqrt()
    return (x.float() * rms * weight).to(x.dtype)
''')},
    "missing_keepdim": {"rms_norm_impl": _rms('''\
    rms = x.float().pow(2).mean(dim=-1).add(eps).rsqrt()
    return (x.float() * rms * weight).to(x.dtype)
''')},
    "low_precision_stats": {"rms_norm_impl": _rms('''\
    rms = x.pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()  # in x's dtype
    return (x * rms * weight).to(x.dtype)
''')},
    "subtracts_mean": {"rms_norm_impl": _rms('''\
    h = x.float() - x.float().mean(dim=-1, keepdim=True)
    rms = h.pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    return (h * rms * weight).to(x.dtype)
''')},
    "ignores_weight": {"rms_norm_impl": _rms('''\
    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    return (x.float() * rms).to(x.dtype)
''')},
    "wrong_dtype": {"rms_norm_impl": _rms('''\
    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    return x.float() * rms * weight  # stays float32
''')},
    "mutates_input": {"rms_norm_impl": _rms('''\
    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    x.mul_(rms.to(x.dtype))  # in place: the caller's tensor changes
    return (x.float() * weight).to(x.dtype)
''')},
}

# rms_norm_shape: 1 point iff shape [2, 3, 8] kept and seed cases 1-2 pass;
# rms_norm_battery: round(4 x passed / 6, 2): 6 -> 4.0, 5 -> 3.33, 4 -> 2.67, 3 -> 2.0, 1 -> 0.67.
_RMSNORM_EXPECTED = {
    "correct": {"rms_norm_shape": 1.0, "rms_norm_battery": 4.0},
    "blank": {"rms_norm_shape": 0.0, "rms_norm_battery": 0.0},  # stub raises everywhere
    # float16 statistics overflow on 5; eps = 1e-6 outside the root shows only on 4 (eps=1e-4);
    # bfloat16 statistics stay inside bfloat16's 1.6e-2 tolerance on 6: 4 of 6
    "partial": {"rms_norm_shape": 1.0, "rms_norm_battery": 2.67},
    "unbiased_variance": {"rms_norm_shape": 0.0, "rms_norm_battery": 0.0},  # d >= 3 everywhere
    "eps_outside_sqrt": {"rms_norm_shape": 1.0, "rms_norm_battery": 3.33},  # only case 4: 5 of 6
    # eps = 1e-6 against mean squares >= 0.46 is inside tolerance; only case 4 (eps=1e-4): 5 of 6
    "no_eps": {"rms_norm_shape": 1.0, "rms_norm_battery": 3.33},
    "wrong_axis": {"rms_norm_shape": 0.0, "rms_norm_battery": 0.67},  # dim=0 right for 1-D only
    # [2, 3] rms against [2, 3, 8] raises: the visible check names keepdim; right for 1-D only: 1 of 6
    "missing_keepdim": {"rms_norm_shape": 0.0, "rms_norm_battery": 0.67},
    "low_precision_stats": {"rms_norm_shape": 1.0, "rms_norm_battery": 3.33},  # f16 row only
    "subtracts_mean": {"rms_norm_shape": 0.0, "rms_norm_battery": 0.0},  # no zero-mean row
    # weight is ones in 1, 4, 5, random in 2, 3, 6: 3 of 6; the seed's case 2 fails
    "ignores_weight": {"rms_norm_shape": 0.0, "rms_norm_battery": 2.0},
    # float32 out is wrong for the float16 (5) and bfloat16 (6) inputs: 4 of 6
    "wrong_dtype": {"rms_norm_shape": 1.0, "rms_norm_battery": 2.67},
    # every case changes x in place: 0 of 6 (the visible check fails on it)
    "mutates_input": {"rms_norm_shape": 0.0, "rms_norm_battery": 0.0},
}

# --------------------------------------------------------------------------- layernorm_backward

_BWD_HEAD = "def layer_norm_backward(dy, x, weight, eps=1e-5):\n"
_BWD_STATS = """    mean = x.mean(axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mean) * r
    g = dy * weight
    lead = tuple(range(x.ndim - 1))
"""
_BWD_DX = ("    dx = r * (g - g.mean(-1, keepdims=True)"
           " - xhat * (g * xhat).mean(-1, keepdims=True))\n")
_BWD_RETURN = "    return dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)\n"


def _bwd(stats: str = _BWD_STATS, dx: str = _BWD_DX, ret: str = _BWD_RETURN) -> dict[str, str]:
    return {"layer_norm_backward_impl": _BWD_HEAD + stats + dx + ret}


_BACKWARD_ANSWERS = {
    "correct": _bwd(),
    "blank": {},
    "partial": _bwd(stats=_BWD_STATS.replace("+ eps)", "+ 1e-5)  # the eps argument is ignored")),
    "bwd_no_mean_term": _bwd(dx="    dx = r * (g - xhat * (g * xhat).mean(-1, keepdims=True))\n"),
    "bwd_no_variance_term": _bwd(dx="    dx = r * (g - g.mean(-1, keepdims=True))\n"),
    "bwd_constant_stats": _bwd(dx="    dx = r * g  # mean and variance treated as constants\n"),
    "bwd_dweight_dbias_swapped": _bwd(
        ret="    return dx, dy.sum(axis=lead), (dy * xhat).sum(axis=lead)\n"),
    "bwd_not_summed": _bwd(
        ret="    return dx, dy * xhat, dy  # not summed over batch and sequence\n"),
    "ignores_weight": _bwd(
        stats=_BWD_STATS.replace("g = dy * weight", "g = dy  # gamma forgotten")),
}

# Cases (1 point each in layer_norm_backward_gradcheck): 0 the seed token (1, 2, 3) with
# dy = (1, 0, 0) and gamma = 1; 1 [2, 3, 8] with a trained gamma; 2 [4, 4, 4]; 3 [2, 5] tiny
# values with eps = 1e-4, trained gamma. layer_norm_backward_seed needs cases 0 and 1.
_BACKWARD_EXPECTED = {
    "correct": {"layer_norm_backward_seed": 1.0, "layer_norm_backward_gradcheck": 4.0},
    "blank": {"layer_norm_backward_seed": 0.0, "layer_norm_backward_gradcheck": 0.0},
    # eps fixed at 1e-5 is right wherever eps = 1e-5 (0-2); case 3 uses eps = 1e-4 on values
    # ~1e-3 (variance ~1e-6), where r changes about 3x: 3 of 4
    "partial": {"layer_norm_backward_seed": 1.0, "layer_norm_backward_gradcheck": 3.0},
    # seed: mean(g) = 1/3 != 0, and random dy elsewhere: 0 of 4
    "bwd_no_mean_term": {"layer_norm_backward_seed": 0.0, "layer_norm_backward_gradcheck": 0.0},
    # seed: mean(g * xhat) = -1.2247 / 3 != 0: 0 of 4
    "bwd_no_variance_term": {"layer_norm_backward_seed": 0.0, "layer_norm_backward_gradcheck": 0.0},
    "bwd_constant_stats": {"layer_norm_backward_seed": 0.0, "layer_norm_backward_gradcheck": 0.0},
    # seed: dweight = (-1.2247, 0, 0), dbias = (1, 0, 0): swapped is wrong everywhere: 0 of 4
    "bwd_dweight_dbias_swapped": {"layer_norm_backward_seed": 0.0,
                                  "layer_norm_backward_gradcheck": 0.0},
    # a 1-D input has no batch axes to sum, so the unsummed [3] is right on case 0 only: 1 of 4
    "bwd_not_summed": {"layer_norm_backward_seed": 0.0, "layer_norm_backward_gradcheck": 1.0},
    # gamma is ones on case 0 only: 1 of 4
    "ignores_weight": {"layer_norm_backward_seed": 0.0, "layer_norm_backward_gradcheck": 1.0},
}

# --------------------------------------------------------------------------- the bank

ANSWERS: dict[str, dict[str, dict[str, str]]] = {
    "block": BLOCK_ANSWERS,
    "layernorm_backward": _BACKWARD_ANSWERS,
    "practice": _PRACTICE_ANSWERS,
    "layernorm": _LAYERNORM_ANSWERS,
    "rmsnorm": _RMSNORM_ANSWERS,
    "modern": MODERN_ANSWERS,
}

EXPECTED: dict[str, dict[str, dict[str, float]]] = {
    "block": BLOCK_EXPECTED,
    "layernorm_backward": _BACKWARD_EXPECTED,
    "practice": _PRACTICE_EXPECTED,
    "layernorm": _LAYERNORM_EXPECTED,
    "rmsnorm": _RMSNORM_EXPECTED,
    "modern": MODERN_EXPECTED,
}
