"""The ``layernorm_backward`` assignment's grading (numpy): the backward's visible check (the
seed token and ``[2, 3, 8]``) and its gradient check, drawn anew for every grading run, judged
against the analytic backward of :mod:`.reference` (the assignment's answer: never in ``normref``;
the student's self-check measures its expected gradients through the forward instead)."""
import numpy as np

from grader.scoring.batteries import draw_token, pick
from grader.scoring.questions import Assignment, Question, visible
from normref.rules import BACKWARD_REFERENCE

from .reference import layer_norm_backward  # also registers the backward's search grammar


def draw_backward_battery(g) -> list:
    """A drawn LayerNorm-backward battery (float64 numpy): a token with a one-hot ``dy``,
    ``[B, T, D]`` with a trained gamma, ``B = T = D``, tiny values with eps = 1e-4."""
    import torch

    from normref.checks.backward import _BackwardCase
    from normref.functional import LAYER_NORM_EPS

    def rnd(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift).numpy()

    tok = np.sort(draw_token(g).double().numpy())  # dy = (1, 0, 0) on the smallest: every term shows
    dy = np.array([1.0, 0.0, 0.0])
    b_, t_, d, n, d2 = pick(g, [2, 3]), pick(g, [3, 4]), pick(g, [6, 8]), pick(g, [3, 4, 5]), pick(g, [4, 5, 6])
    return [
        _BackwardCase(f"token {tuple(int(v) for v in tok)} with dy = (1, 0, 0)", dy, tok, np.ones(3), LAYER_NORM_EPS),
        _BackwardCase(f"[{b_}, {t_}, {d}] with a trained gamma", rnd(b_, t_, d), rnd(b_, t_, d, shift=0.5),
                      1 + 0.5 * rnd(d), LAYER_NORM_EPS),
        _BackwardCase(f"B = T = D [{n}, {n}, {n}] (a wrong axis still broadcasts)", rnd(n, n, n),
                      rnd(n, n, n, scale=2.0, shift=1.0), 1 + 0.5 * rnd(n), LAYER_NORM_EPS),
        _BackwardCase(f"tiny values 1e-3 [2, {d2}] with eps=1e-4 (where eps sits matters)", rnd(2, d2),
                      rnd(2, d2, scale=1e-3), 1 + 0.5 * rnd(d2), 1e-4),
    ]


def _check(fn, cases=None):
    """The backward's checker, its expected gradients from :func:`.reference.layer_norm_backward`."""
    from normref.checks import check_layer_norm_backward

    return check_layer_norm_backward(fn, reference=layer_norm_backward, cases=cases)


GRADCHECK = Question("layer_norm_backward_gradcheck", _check, draw_backward_battery, dict(BACKWARD_REFERENCE),
                     "numpy")

ASSIGNMENT = Assignment("layernorm_backward", (
    visible("layer_norm_backward_seed", GRADCHECK, "check_layer_norm_backward", head=2),
    GRADCHECK,
))
