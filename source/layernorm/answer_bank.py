"""The ``layernorm`` assignment's answer bank: the demo class's answers and the points each must get.

``ANSWERS[variant]`` maps an answer cell's grade_id to what a synthetic student typed there
(a grade_id left out keeps the release stub); ``EXPECTED[variant]`` gives every grade cell's
points, each derived by hand (the comment beside it), never by running the grader
(``tests/test_assignments.py`` asserts them; ``grader/demo`` builds the demo class from them).

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

ANSWERS = _LAYERNORM_ANSWERS
EXPECTED = _LAYERNORM_EXPECTED
