"""The grader's analytic backward passes (grader/backward.py): a hand-derived case, torch autograd,
and a centred finite difference; and the student package's measured gradients (normref.backward,
the complex step) against them, on the self-check's battery and on drawn graded batteries."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from grader.scoring.questions import assignment_module
from normref import layer_norm, rms_norm

_reference = assignment_module("layernorm_backward", "reference")  # the assignment's analytic backward
layer_norm_backward, rms_norm_backward = _reference.layer_norm_backward, _reference.rms_norm_backward


def test_layer_norm_backward_by_hand_on_1_2_3():
    # x = (1, 2, 3), eps = 0: r = 1/sqrt(2/3) = s = sqrt(3/2), xhat = (-s, 0, s). With dy = (1, 0, 0):
    # mean(g) = 1/3, mean(g xhat) = -s/3, so dx = s((1,0,0) - 1/3 + (3/2)(-1, 0, 1)/3) = s(1/6, -1/3, 1/6).
    s = math.sqrt(1.5)
    dx, dw, db = layer_norm_backward(np.array([1.0, 0, 0]), np.array([1.0, 2, 3]), eps=0.0)
    np.testing.assert_allclose(dx, [s / 6, -s / 3, s / 6], rtol=1e-12)
    np.testing.assert_allclose(dw, [-s, 0, 0], atol=1e-12)  # dy * xhat
    np.testing.assert_allclose(db, [1, 0, 0])


def test_rms_norm_backward_by_hand_on_3_4():
    # x = (3, 4), eps = 0: RMS = sqrt(12.5), xhat = (3, 4)/sqrt(12.5). With dy = (1, 0):
    # mean(g xhat) = 3/(2 sqrt(12.5)), dx = (1/sqrt(12.5)) ((1, 0) - (3, 4) * 3/(2 * 12.5)) = (0.64, -0.48)/sqrt(12.5).
    dx, dw = rms_norm_backward(np.array([1.0, 0]), np.array([3.0, 4]), eps=0.0)
    np.testing.assert_allclose(dx, np.array([0.64, -0.48]) / math.sqrt(12.5), rtol=1e-12)
    np.testing.assert_allclose(dw, [3 / math.sqrt(12.5), 0], rtol=1e-12)


@pytest.mark.parametrize("shape", [(5,), (2, 3, 8), (4, 4, 4)])
@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_layer_norm_backward_matches_torch_autograd(shape, eps):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(*shape, generator=g, dtype=torch.float64) * 2 + 1).requires_grad_()
    w = torch.randn(shape[-1], generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(shape[-1], generator=g, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(*shape, generator=g, dtype=torch.float64)
    F.layer_norm(x, (shape[-1],), w, b, eps).backward(dy)
    dx, dw, db = layer_norm_backward(dy.numpy(), x.detach().numpy(), w.detach().numpy(), eps)
    for got, want in ((dx, x.grad), (dw, w.grad), (db, b.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", [(5,), (2, 3, 8), (4, 4, 4)])
@pytest.mark.parametrize("eps", [1e-6, 0.1])
def test_rms_norm_backward_matches_torch_autograd(shape, eps):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(shape[-1], generator=g, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(*shape, generator=g, dtype=torch.float64)
    F.rms_norm(x, (shape[-1],), w, eps).backward(dy)
    dx, dw = rms_norm_backward(dy, x, w, eps)  # torch tensors are accepted too
    np.testing.assert_allclose(dx, x.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dw, w.grad.numpy(), rtol=1e-10, atol=1e-12)


def _centred_difference(f, a, h=1e-6):
    """d(sum(f(a)))/da by (f(a + h) - f(a - h)) / 2h, one entry at a time (float64)."""
    out = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        up, down = a.copy(), a.copy()
        up[i] += h
        down[i] -= h
        out[i] = (f(up).sum() - f(down).sum()) / (2 * h)
    return out


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_backward_matches_a_centred_finite_difference(kind):
    rng = np.random.default_rng(2)
    x, dy, w, b = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4)), rng.normal(size=4), rng.normal(size=4)
    eps = 1e-3
    if kind == "layer":
        grads = layer_norm_backward(dy, x, w, eps)
        wants = [_centred_difference(lambda a: dy * layer_norm(a, w, b, eps), x),
                 _centred_difference(lambda a: dy * layer_norm(x, a, b, eps), w),
                 _centred_difference(lambda a: dy * layer_norm(x, w, a, eps), b)]
    else:
        grads = rms_norm_backward(dy, x, w, eps)
        wants = [_centred_difference(lambda a: dy * rms_norm(a, w, eps), x),
                 _centred_difference(lambda a: dy * rms_norm(x, a, eps), w)]
    for got, want in zip(grads, wants):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_layer_norm_dx_sums_to_zero_and_is_orthogonal_to_xhat():
    # LN(x + c) = LN(x) and (eps = 0) LN(a x) = LN(x): so dx is orthogonal to 1 and to xhat.
    rng = np.random.default_rng(3)
    x, dy, w = rng.normal(size=(3, 8)), rng.normal(size=(3, 8)), rng.normal(size=8)
    dx, _, _ = layer_norm_backward(dy, x, w, eps=0.0)
    xhat = layer_norm(x, eps=0.0)
    np.testing.assert_allclose(dx.sum(-1), 0, atol=1e-12)
    np.testing.assert_allclose((dx * xhat).sum(-1), 0, atol=1e-12)


def test_rms_norm_dx_scales_inversely_with_the_input():
    # Zhang and Sennrich 2019, Sec. 3: RMSNorm(a x) = RMSNorm(x), so dx(a x) = dx(x) / a (eps = 0).
    rng = np.random.default_rng(4)
    x, dy = rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 3, 8))
    dx1, dw1 = rms_norm_backward(dy, x, eps=0.0)
    dx10, dw10 = rms_norm_backward(dy, 10 * x, eps=0.0)
    np.testing.assert_allclose(dx10, dx1 / 10, rtol=1e-12)
    np.testing.assert_allclose(dw10, dw1, rtol=1e-12)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match=r"dy must have x's shape \[2, 3\]"):
        layer_norm_backward(np.ones((3, 2)), np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"weight must have shape \[3\]"):
        rms_norm_backward(np.ones((2, 3)), np.ones((2, 3)), np.ones(2))
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        rms_norm_backward([1.0, 2.0], np.ones(2))
    from normref.backward import layer_norm_grads

    with pytest.raises(ValueError, match=r"dy must have x's shape \[2, 3\]"):
        layer_norm_grads(np.ones((3, 2)), np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"weight must have shape \[3\]"):
        layer_norm_grads(np.ones((2, 3)), np.ones((2, 3)), np.ones(2))


def test_the_self_checks_measured_gradients_are_the_analytic_ones():
    """normref.backward measures through the forward what grader/backward.py derives: on the
    self-check's own battery, on drawn graded batteries (three seeds) and at eps = 0."""
    draw_backward_battery = assignment_module("layernorm_backward").draw_backward_battery
    from grader.scoring.batteries import question_generator as _gen
    from normref.backward import layer_norm_grads
    from normref.checks.backward import _backward_battery

    cases = list(_backward_battery())
    for seed in (1, 2, 3):
        cases += draw_backward_battery(_gen(seed, "layer_norm_backward_gradcheck"))
    for c in cases:
        measured = layer_norm_grads(c.dy, c.x, c.weight, c.eps)
        derived = layer_norm_backward(c.dy, c.x, c.weight, c.eps)
        for got, want in zip(measured, derived):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13 * np.abs(want).max())
    s = math.sqrt(1.5)  # the hand-derived case above
    dx, dw, db = layer_norm_grads(np.array([1.0, 0, 0]), np.array([1.0, 2, 3]), eps=0.0)
    np.testing.assert_allclose(dx, [s / 6, -s / 3, s / 6], rtol=1e-12)
    np.testing.assert_allclose(dw, [-s, 0, 0], atol=1e-12)
    np.testing.assert_allclose(db, [1, 0, 0], atol=1e-15)


def test_the_graded_battery_is_scored_against_the_analytic_backward(monkeypatch):
    """Grading hands the grader's analytic backward to the checker as its reference (a wrong
    reference there fails a correct answer), and the student package has no analytic one."""
    import normref
    from grader.scoring import inputs as scoring
    from normref.checks import check_layer_norm_backward

    grading = assignment_module("layernorm_backward")  # the assignment's grading.py: the reference it hands in

    right = check_layer_norm_backward(layer_norm_backward)  # the self-check: measured reference
    assert all(c.passed for c in right.cases) and right.score == 1.0, right.report()
    assert scoring.run_check("layer_norm_backward_gradcheck", 7, layer_norm_backward).score == 1.0
    def wrong(dy, x, w, eps):
        return rms_norm_backward(dy, x, w, eps) + (dy.sum(0),)

    monkeypatch.setattr(grading, "layer_norm_backward", wrong)
    assert scoring.run_check("layer_norm_backward_gradcheck", 7, layer_norm_backward).score == 0.0
    for name in ("layer_norm_backward", "rms_norm_backward"):
        assert not hasattr(normref, name) and name not in normref.__all__ and name not in normref._LAZY
