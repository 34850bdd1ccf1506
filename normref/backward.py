"""The self-check's expected LayerNorm gradients, measured numerically through a forward pass.

The backward challenge asks a student to derive the gradients of LayerNorm by hand, so this
package holds no analytic backward: the grader keeps that (``grader/backward.py``). What the
self-check compares with is measured instead, by the *complex step* (Squire and Trapp 1998,
"Using complex variables to estimate derivatives of real functions", SIAM Review 40(1)): for a
forward ``F`` built of numpy operations that accept complex numbers,
``dF/dx_i = Im(F(x + i h e_i)) / h`` with ``h = 1e-20``. Unlike a finite difference there is
no subtraction, so the result is exact to float64 rounding (about 1e-15 relative), whatever
the size of ``x``.

:func:`forward_variant` is LayerNorm's forward ``y = weight * (x - mean) / sqrt(var + eps) +
bias`` and the faulty forwards a student's gradient may belong to (another axis, ``n - 1``,
eps outside the root, no centring), or with the statistics held at their values for the
unperturbed input (what a gradient that forgets a term differentiates). :func:`vjp` measures
``(dx, dweight, dbias)`` of any of them; :func:`layer_norm_grads` is the correct one.
"""
from __future__ import annotations

import numpy as np

from .functional import LAYER_NORM_EPS

__all__ = ["forward_variant", "vjp", "layer_norm_grads"]

_H = 1e-20


def _f64(a, name: str) -> np.ndarray:
    from ._torch import is_tensor

    if is_tensor(a):
        import torch

        a = a.detach().to("cpu", torch.float64).numpy()
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(a).__name__}")
    return a.astype(np.float64, copy=False)


def forward_variant(x, weight, bias, eps: float, *, axis: int = -1, ddof: int = 0, eps_out: bool = False,
                    centered: bool = True, x0: np.ndarray | None = None, hold_mean: bool = False,
                    hold_scale: bool = False) -> np.ndarray:
    """LayerNorm's forward, or one faulty variant of it, on real or complex arrays.

    Args:
        x: ``[..., D]`` (more leading axes allowed: the caller may stack perturbed copies).
        weight, bias: ``[D]``.
        eps: inside the root (``eps_out``: added to the root).
        axis: the axis of the statistics, counted from the end (``-1`` is the feature axis).
        ddof: the variance's divisor is ``n - ddof``.
        centered: subtract the mean (``False``: an RMS of ``x``).
        x0: the unperturbed input, where ``hold_mean`` / ``hold_scale`` take the statistics.
        hold_mean, hold_scale: take the mean / the ``1/sqrt(var + eps)`` from ``x0``.

    Returns:
        ``weight * (x - mean) * f + bias``, ``x``'s shape and kind (real or complex).
    """
    n = x.shape[axis]
    src = x0 if hold_mean else x
    m = src.mean(axis, keepdims=True) if centered else 0.0
    xc = x - m
    if hold_scale:
        xs = x0 - (x0.mean(axis, keepdims=True) if centered else 0.0)
    else:
        xs = xc
    ms = (xs * xs).sum(axis, keepdims=True) / (n - ddof)
    f = 1 / (np.sqrt(ms) + eps) if eps_out else 1 / np.sqrt(ms + eps)
    return weight * xc * f + bias


def _jvp_rows(fn, a: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """``sum(dy * dfn/da_i)`` for every entry ``i`` of ``a``, by the complex step."""
    n = a.size
    eye = np.eye(n).reshape((n,) + a.shape)  # [n, *a.shape]: one perturbed entry per copy
    out = fn(a[None] + 1j * _H * eye)  # [n, *y.shape]
    return (dy[None] * out.imag / _H).reshape(n, -1).sum(axis=1).reshape(a.shape)


def vjp(dy, x, weight, eps: float, **variant):
    """``(dx, dweight, dbias)`` of ``sum(dy * y)`` for ``y = forward_variant(x, weight, 0, eps,
    **variant)``, measured by the complex step (float64, exact to rounding).

    Args:
        dy: ``[..., D]``; x: ``[..., D]``; weight: ``[D]``; eps: the forward's eps.
        **variant: :func:`forward_variant`'s options; ``axis`` is counted from the end, and
            ``hold_mean`` / ``hold_scale`` hold at ``x``. ``plain_weight=True`` measures dx of
            the forward without the weight (a gradient that forgot ``g = dy * weight``).

    Returns:
        float64 arrays ``dx [..., D]``, ``dweight [D]``, ``dbias [D]``; or None when the
        variant is undefined (``n - ddof <= 0``).
    """
    dy, x, w = _f64(dy, "dy"), _f64(x, "x"), _f64(weight, "weight")
    axis = variant.pop("axis", -1)
    axis = axis - x.ndim if axis >= 0 else axis
    if x.shape[axis] - variant.get("ddof", 0) <= 0:
        return None
    plain = variant.pop("plain_weight", False)
    b = np.zeros_like(w)
    kw = dict(variant, axis=axis, x0=x)
    with np.errstate(all="ignore"):
        w_dx = np.ones_like(w) if plain else w
        dx = _jvp_rows(lambda a: forward_variant(a, w_dx, b, eps, **kw), x, dy)
        lead = (1,) * (x.ndim - 1)  # a stacked [n, D] parameter broadcasts as [n, 1, ..., 1, D]

        def stacked(a):
            return a.reshape((a.shape[0],) + lead + a.shape[-1:])

        dw = _jvp_rows(lambda a: forward_variant(x, stacked(a), b, eps, **kw), w, dy)
        db = _jvp_rows(lambda a: forward_variant(x, w, stacked(a), eps, **kw), b, dy)
    return dx, dw, db


def layer_norm_grads(dy, x, weight=None, eps: float = LAYER_NORM_EPS):
    """The gradients of ``y = weight * (x - mean) / sqrt(var + eps) + bias`` (last axis, biased
    variance) that the backward self-check expects, measured through the forward pass by the
    complex step (not derived: that is the assignment).

    Args:
        dy: upstream gradient dL/dy, ``[..., D]``, ``x``'s shape.
        x: the forward input, ``[..., D]``.
        weight: gamma, ``[D]``, or None (ones).
        eps: the forward's eps (inside the square root).

    Returns:
        ``(dx, dweight, dbias)``: float64 numpy arrays ``[..., D]``, ``[D]``, ``[D]``.

    Raises:
        TypeError: an input is not a numpy array or torch tensor.
        ValueError: shapes disagree (dy vs x, weight vs D) or ``eps < 0``.
    """
    x, dy = _f64(x, "x"), _f64(dy, "dy")
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"layer_norm_grads: x must be [..., D] with D >= 1, got shape {list(x.shape)}")
    if dy.shape != x.shape:
        raise ValueError(f"layer_norm_grads: dy must have x's shape {list(x.shape)}, got {list(dy.shape)}")
    d = x.shape[-1]
    w = np.ones(d) if weight is None else _f64(weight, "weight")
    if w.shape != (d,):
        raise ValueError(f"layer_norm_grads: weight must have shape [{d}], got {list(w.shape)}")
    if not eps >= 0:
        raise ValueError(f"layer_norm_grads: eps must be >= 0, got {eps}")
    return vjp(dy, x, w, eps)
