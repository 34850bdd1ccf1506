"""Analytic backward passes of LayerNorm and RMSNorm (numpy, float64).

With ``xhat`` the normalised input, ``r = 1 / sqrt(var + eps)`` (LayerNorm) or
``r = 1 / sqrt(mean(x**2) + eps)`` (RMSNorm), ``g = dy * weight`` and means over the last axis
(the d features of one token):

* LayerNorm: ``dx = r * (g - mean(g) - xhat * mean(g * xhat))``
* RMSNorm:   ``dx = r * (g - xhat * mean(g * xhat))``
* both:      ``dweight = sum(dy * xhat)`` and (LayerNorm) ``dbias = sum(dy)`` over every axis
  but the last.

The ``- mean(g)`` term is the gradient through the mean, the ``- xhat * mean(g * xhat)`` term
the gradient through the variance (or mean square). ``tests/test_backward.py`` checks both
against torch autograd and a centred finite difference.

Sources: Ba, Kiros and Hinton 2016, "Layer Normalization", eq. (3)-(4) differentiated;
Zhang and Sennrich 2019, "Root Mean Square Layer Normalization", eq. (4) and their Sec. 3
(RMSNorm's gradient is invariant to re-scaling the input).
"""
from __future__ import annotations

import numpy as np

from .functional import LAYER_NORM_EPS, RMS_NORM_EPS

__all__ = ["layer_norm_backward", "rms_norm_backward"]


def _f64(a, name: str) -> np.ndarray:
    from ._torch import is_tensor

    if is_tensor(a):
        import torch

        a = a.detach().to("cpu", torch.float64).numpy()
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(a).__name__}")
    return a.astype(np.float64, copy=False)


def _prepare(dy, x, weight, eps, name):
    x = _f64(x, "x")
    dy = _f64(dy, "dy")
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"{name}: x must be [..., D] with D >= 1, got shape {list(x.shape)}")
    if dy.shape != x.shape:
        raise ValueError(f"{name}: dy must have x's shape {list(x.shape)}, got {list(dy.shape)}")
    d = x.shape[-1]
    w = np.ones(d) if weight is None else _f64(weight, "weight")
    if w.shape != (d,):
        raise ValueError(f"{name}: weight must have shape [{d}], got {list(w.shape)}")
    if not eps >= 0:
        raise ValueError(f"{name}: eps must be >= 0, got {eps}")
    return dy, x, w


def layer_norm_backward(dy, x, weight=None, eps: float = LAYER_NORM_EPS):
    """Gradients of ``y = weight * (x - mean) / sqrt(var + eps) + bias`` (last axis, biased var).

    Args:
        dy: upstream gradient dL/dy, ``[..., D]`` (e.g. ``[B, T, D]``), same shape as ``x``.
        x: the forward input, ``[..., D]``.
        weight: gamma, ``[D]``, or None (ones).
        eps: the forward's eps (inside the square root).

    Returns:
        ``(dx, dweight, dbias)``, float64 numpy arrays of shapes ``[..., D]``, ``[D]``, ``[D]``.
        ``dx = r * (g - mean(g) - xhat * mean(g * xhat))`` with ``g = dy * weight``,
        ``r = 1/sqrt(var + eps)``; ``dweight = sum(dy * xhat)``, ``dbias = sum(dy)`` over all
        axes but the last.

    Raises:
        TypeError: an input is not a numpy array or torch tensor.
        ValueError: shapes disagree (dy vs x, weight vs D) or ``eps < 0``.

    Source: Ba et al. 2016, eq. (3)-(4), differentiated by the chain rule.
    """
    dy, x, w = _prepare(dy, x, weight, eps, "layer_norm_backward")
    mean = x.mean(axis=-1, keepdims=True)  # [..., 1]
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # [..., 1], biased
    r = 1.0 / np.sqrt(var + eps)  # [..., 1]
    xhat = (x - mean) * r  # [..., D]
    g = dy * w  # [..., D]
    dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)


def rms_norm_backward(dy, x, weight=None, eps: float = RMS_NORM_EPS):
    """Gradients of ``y = weight * x / sqrt(mean(x**2) + eps)`` (last axis).

    Args:
        dy: upstream gradient dL/dy, ``[..., D]``, same shape as ``x``.
        x: the forward input, ``[..., D]``.
        weight: gamma, ``[D]``, or None (ones).
        eps: the forward's eps (inside the square root).

    Returns:
        ``(dx, dweight)``, float64 numpy arrays of shapes ``[..., D]`` and ``[D]``.
        ``dx = r * (g - xhat * mean(g * xhat))`` with ``g = dy * weight``,
        ``r = 1/sqrt(mean(x**2) + eps)``; ``dweight = sum(dy * xhat)`` over all axes but the last.

    Raises:
        TypeError: an input is not a numpy array or torch tensor.
        ValueError: shapes disagree or ``eps < 0``.

    Source: Zhang and Sennrich 2019, eq. (4), differentiated by the chain rule.
    """
    dy, x, w = _prepare(dy, x, weight, eps, "rms_norm_backward")
    r = 1.0 / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)  # [..., 1]
    xhat = x * r  # [..., D]
    g = dy * w  # [..., D]
    dx = r * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(axis=lead)
