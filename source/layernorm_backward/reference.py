"""The analytic LayerNorm and RMSNorm backward passes: the grader's, never the student's.

The backward challenge asks for these by hand, so they are not in the student package
(``normref``); ``normref.backward`` measures the self-check's expected gradients numerically
through the forward pass instead (the complex step), and ``tests/test_backward.py`` checks the
two agree. Importing this module also gives :mod:`normref.diagnosis` the backward grammar (the
search that names a gradient's unlisted mistake), in the grader's process only.

With ``xhat`` the normalised input, ``r = 1 / sqrt(var + eps)`` (LayerNorm) or
``r = 1 / sqrt(mean(x**2) + eps)`` (RMSNorm), ``g = dy * weight`` and means over the last axis
(the d features of one token):

* LayerNorm: ``dx = r * (g - mean(g) - xhat * mean(g * xhat))``
* RMSNorm:   ``dx = r * (g - xhat * mean(g * xhat))``
* both:      ``dweight = sum(dy * xhat)`` and (LayerNorm) ``dbias = sum(dy)`` over every axis
  but the last.

The ``- mean(g)`` term is the gradient through the mean, the ``- xhat * mean(g * xhat)`` term
the gradient through the variance (or mean square).

Sources: Ba, Kiros and Hinton 2016, "Layer Normalization", eq. (3)-(4) differentiated;
Zhang and Sennrich 2019, "Root Mean Square Layer Normalization", eq. (4) and their Sec. 3
(RMSNorm's gradient is invariant to re-scaling the input).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from normref.diagnosis import BackwardCase, register_grammar
from normref.diagnosis.search import Choice, Grammar
from normref.functional import LAYER_NORM_EPS, RMS_NORM_EPS

__all__ = ["layer_norm_backward", "rms_norm_backward", "bwd_model", "backward_grammar", "evaluate_backward"]


def _f64(a, name: str) -> np.ndarray:
    from normref._torch import is_tensor

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


def bwd_model(dy, x, w, eps, *, axis=-1, ddof=0, eps_out=False, centered=True,
              mean_term=True, var_term=True, use_weight=True):
    """(dx, dweight, dbias) of ``y = w * xc * f(ms) + b`` with one fault, in numpy float64.

    ``xc = x - mean(x)`` (if ``centered``) and ``ms = sum(xc**2) / (n - ddof)`` along ``axis``;
    ``f(ms) = 1/sqrt(ms + eps)``, or ``1/(sqrt(ms) + eps)`` with ``eps_out``. By the chain rule
    ``dxc = g f + (sum(g xc) f'(ms)) 2 xc / (n - ddof)`` with ``g = dy * w``, and
    ``dx = dxc - mean(dxc)`` when centred. ``mean_term``/``var_term``/``use_weight`` drop the
    corresponding piece, as a student might. The defaults give :func:`layer_norm_backward`.
    """
    n = x.shape[axis]
    if n - ddof <= 0:
        return None
    xc = x - x.mean(axis, keepdims=True) if centered else x
    ms = (xc**2).sum(axis, keepdims=True) / (n - ddof)
    with np.errstate(all="ignore"):
        if eps_out:
            f = 1 / (np.sqrt(ms) + eps)
            df = -(f**2) / (2 * np.sqrt(ms))
        else:
            f = 1 / np.sqrt(ms + eps)
            df = -0.5 * f**3
        g = dy * w if use_weight else dy
        dxc = g * f
        if var_term:
            dxc = dxc + (g * xc).sum(axis, keepdims=True) * df * 2 * xc / (n - ddof)
    dx = dxc - dxc.mean(axis, keepdims=True) if centered and mean_term else dxc
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xc * f).sum(lead), dy.sum(lead)


# ------------------------------------------------------------ the grammar of the search
# Its phrases say what the student's gradient does, never a term of the answer (the question's
# formula is its answer: normref.diagnosis says a found variant without the grammar's reference).
def evaluate_backward(ch: dict, c: BackwardCase) -> np.ndarray | None:
    """``(dx, dweight, dbias)`` of variant ``ch``, flattened into one float64 vector."""
    dy, x, w = c.dy, c.x, c.weight
    axis = ch.get("axis", -1)
    if axis != -1 and axis >= x.ndim - 1:
        return None
    n = x.shape[axis]
    ddof = ch.get("ddof", 0)
    if n - ddof <= 0:
        return None
    center = ch.get("center", True)
    eps = 0.0 if ch.get("eps_place") == "none" else ch.get("eps_value", c.eps)
    xc = x - x.mean(axis, keepdims=True) if center else x
    var = (xc**2).sum(axis, keepdims=True) / (n - ddof)
    if ch.get("eps_place") == "outside":
        f = 1 / (np.sqrt(var) + eps)
        df = -(f**2) / (2 * np.sqrt(var))
    else:
        f = 1 / np.sqrt(var + eps)
        df = -0.5 * f**3
    k_var = {None: 1.0, "dropped": 0.0, "doubled": 2.0, "halved": 0.5,
             "n-1": n / (n - 1) if n > 1 else np.nan}[ch.get("var_term")]
    k_mean = {None: 1.0, "dropped": 0.0, "doubled": 2.0}[ch.get("mean_term")]
    g = dy if ch.get("g") == "dy" else dy * w
    dxc = g * f + k_var * (g * xc).sum(axis, keepdims=True) * df * 2 * xc / (n - ddof)
    dx = dxc - k_mean * dxc.mean(axis, keepdims=True) if center else dxc
    if ch.get("dx_scale") == "no_f":
        dx = dx / f
    xhat = xc * f
    lead = tuple(range(x.ndim - 1))
    red = (lambda a: a.mean(lead)) if ch.get("reduce") == "mean" else (lambda a: a.sum(lead))
    dw = red({None: dy * xhat, "x": dy * x, "xc": dy * xc, "g": dy * w * xhat}[ch.get("dweight")])
    db = red(dy * w if ch.get("dbias") == "g" else dy)
    if ch.get("swap"):
        dw, db = db, dw
    if dw.shape != w.shape or db.shape != w.shape or dx.shape != x.shape:
        return None
    return np.concatenate([dx.ravel(), dw.ravel(), db.ravel()])


_DIMS = [
    ("mean_term", "dropped", "left out the gradient through the mean", "bwd_no_mean_term"),
    ("mean_term", "doubled", "subtracted the mean term twice", None),
    ("var_term", "dropped", "left out the gradient through the variance", "bwd_no_variance_term"),
    ("var_term", "doubled", "doubled the variance term (the factor 2 of d(xc**2) taken twice)", None),
    ("var_term", "halved", "halved the variance term (the factor 2 of d(xc**2) forgotten)", None),
    ("var_term", "n-1", "scaled the variance term by 1/(n-1) instead of 1/n", None),
    ("ddof", 1, "differentiated the n-1 (unbiased) variance", "unbiased_variance"),
    ("eps_place", "outside", "differentiated sqrt(var) + eps (eps outside the root)", "eps_outside_sqrt"),
    ("eps_place", "none", "left eps out", "no_eps"),
    ("eps_value", 1e-5, "used eps = 1e-05 instead of the eps you were given", None),
    ("eps_value", 1e-8, "used eps = 1e-08 instead of the eps you were given", None),
    ("center", False, "differentiated a LayerNorm that does not subtract the mean", "not_centered"),
    ("axis", 0, "took the statistics over axis 0 instead of the last axis", "wrong_axis"),
    ("axis", 1, "took the statistics over axis 1 instead of the last axis", "wrong_axis"),
    ("dx_scale", "no_f", "forgot the factor 1/sqrt(var + eps) on dx", None),
    ("g", "dy", "used dy where the chain rule through gamma gives g = dy * weight", "ignores_weight"),
    ("dweight", "x", "summed dy * x for dweight: x is the raw input, and the weight multiplies the "
     "normalized input", None),
    ("dweight", "xc", "summed dy * (x - mean) for dweight: centred, but not divided by sqrt(var + eps)", None),
    ("dweight", "g", "summed dy * weight * xhat for dweight: the weight does not enter its own gradient", None),
    ("dbias", "g", "summed dy * weight for dbias: the bias is added after the weight, so the weight does not "
     "enter its gradient", None),
    ("reduce", "mean", "averaged dweight and dbias over the batch and sequence instead of summing",
     None),
    ("swap", True, "swapped dweight and dbias", "bwd_dweight_dbias_swapped"),
]


def _compatible(a: Choice, b: Choice) -> bool:
    pair = {a.dim: a.value, b.dim: b.value}
    if "swap" in pair and ("dweight" in pair or "dbias" in pair):
        return False
    if "eps_value" in pair and pair.get("eps_place") == "none":
        return False
    if pair.get("center") is False and "mean_term" in pair:
        return False
    return True


def backward_grammar() -> Grammar:
    """The grammar of ``check_layer_norm_backward``."""

    def dims(cases: Sequence[BackwardCase]) -> list[list[Choice]]:
        nd = max((c.x.ndim for c in cases), default=1)
        out: dict[str, list[Choice]] = {}
        for d, v, phrase, known in _DIMS:
            if d == "axis" and v >= nd - 1:
                continue
            out.setdefault(d, []).append(Choice(d, v, phrase, known))
        return list(out.values())

    return Grammar("layer_norm_backward", "dx = (g - mean(g) - xhat * mean(g * xhat)) / "
                   "sqrt(var + eps) with g = dy * weight, dweight = sum(dy * xhat), dbias = sum(dy)",
                   dims, evaluate_backward, _compatible)


register_grammar("layer_norm_backward", backward_grammar)
