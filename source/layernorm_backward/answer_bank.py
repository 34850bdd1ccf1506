"""The ``layernorm_backward`` assignment's answer bank: the demo class's answers and the points each must get.

``ANSWERS[variant]`` maps an answer cell's grade_id to what a synthetic student typed there
(a grade_id left out keeps the release stub); ``EXPECTED[variant]`` gives every grade cell's
points, each derived by hand (the comment beside it), never by running the grader
(``tests/test_assignments.py`` asserts them; ``grader/demo`` builds the demo class from them).
"""
from __future__ import annotations


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

ANSWERS = _BACKWARD_ANSWERS
EXPECTED = _BACKWARD_EXPECTED
