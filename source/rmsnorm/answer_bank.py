"""The ``rmsnorm`` assignment's answer bank: the demo class's answers and the points each must get.

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

ANSWERS = _RMSNORM_ANSWERS
EXPECTED = _RMSNORM_EXPECTED
