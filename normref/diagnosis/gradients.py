"""The grammar of the LayerNorm backward pass, ``(dx, dweight, dbias)``.

With ``xc = x - mean(x)``, ``var = sum(xc**2) / (n - ddof)``, ``f = 1 / sqrt(var + eps)``,
``xhat = xc f`` and ``g = dy * weight``, the chain rule gives
``dxc = g f + k_var * sum(g xc) f'(var) 2 xc / (n - ddof)`` and
``dx = dxc - k_mean * mean(dxc)``: the reference has ``k_var = k_mean = 1``, which is
``dx = f (g - mean(g) - xhat mean(g xhat))`` (Ba et al. 2016, eq. (3)-(4) differentiated).

Dimensions: which terms are kept and how each is scaled (``mean_term``: dropped or doubled;
``var_term``: dropped, doubled, halved, or divided by n-1); the forward the gradient belongs to
(``ddof``, ``eps_place``, ``center``, ``axis``); the factor ``f`` forgotten on ``dx``
(``dx_scale``); ``g = dy`` without the weight; what ``dweight`` and ``dbias`` sum (``dweight``:
``dy * x``, ``dy * xc``, ``dy * weight * xhat``; ``dbias``: ``dy * weight``), averaged instead of
summed (``reduce``), or swapped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .search import Choice, Grammar

__all__ = ["BackwardCase", "backward_grammar", "evaluate_backward"]


@dataclass
class BackwardCase:
    """``dy, x [..., D]`` float64, ``weight [D]``, ``eps``."""

    dy: np.ndarray
    x: np.ndarray
    weight: np.ndarray
    eps: float


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
    ("mean_term", "dropped", "left out the gradient through the mean (subtract mean(dxhat))",
     "bwd_no_mean_term"),
    ("mean_term", "doubled", "subtracted the mean term twice", None),
    ("var_term", "dropped", "left out the gradient through the variance "
     "(the xhat * mean(g * xhat) term)", "bwd_no_variance_term"),
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
    ("dweight", "x", "summed dy * x for dweight instead of dy * xhat", None),
    ("dweight", "xc", "summed dy * (x - mean) for dweight instead of dy * xhat", None),
    ("dweight", "g", "summed dy * weight * xhat for dweight instead of dy * xhat", None),
    ("dbias", "g", "summed dy * weight for dbias instead of dy", None),
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
